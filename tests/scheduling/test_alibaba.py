"""The Alibaba-DP generator follows the published description (DPack EuroSys'25 §6 and the
authors' alibaba-dp-workload): five mechanisms by machine type, ε affine in memory × runtime
into [0.1, 1000], the best-order normalised-demand filter [0.001, 1], blocks from bytes read cut
at 100, ~100 tasks per online block. Each property is checked on a seeded generated workload."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blockbudget.budget import ALPHAS, RdpCurve
from blockbudget.errors import InvalidRequestError
from blockbudget.scheduling.alibaba import (
    CPU_MECHANISMS,
    GPU_MECHANISMS,
    TRACE,
    AlibabaTask,
    Arrivals,
    GenerationStats,
    Mechanism,
    alibaba_dp,
    alibaba_dp_tasks,
    open_variant,
    synthetic_machine_trace,
)
from blockbudget.scheduling.base import TaskShape
from blockbudget.scheduling.mechanism_rdp import best_normalized_demand, rdp_to_epsilon

EPS_G, DELTA_G = 10.0, 1e-7


@pytest.fixture(scope="module")
def generated() -> tuple[list[AlibabaTask], GenerationStats]:
    return alibaba_dp_tasks(500, epsilon_g=EPS_G, delta_g=DELTA_G, seed=11)


def _by_hand_normalized(curve: RdpCurve) -> float:
    best = math.inf
    for alpha, value in zip(ALPHAS, curve.as_floats(), strict=True):
        cap = EPS_G - math.log(1 / DELTA_G) / (alpha - 1)
        if cap > 0:
            best = min(best, value / cap)
    return best


def test_five_mechanisms_by_machine_type(
    generated: tuple[list[AlibabaTask], GenerationStats],
) -> None:
    tasks, stats = generated
    assert {t.mechanism for t in tasks} == set(Mechanism)
    for t in tasks:
        assert t.mechanism in (CPU_MECHANISMS if t.cpu_based else GPU_MECHANISMS)
    assert sum(stats.by_mechanism.values()) == len(tasks) == stats.kept == 500


def test_epsilon_is_affine_in_memory_times_runtime(
    generated: tuple[list[AlibabaTask], GenerationStats],
) -> None:
    tasks, _ = generated
    rt = TRACE["runtime_hours"]
    for t in tasks:
        mem = TRACE["cpu_memory_gb" if t.cpu_based else "gpu_memory_gb"]
        lo, hi = mem.low * rt.low, mem.high * rt.high
        assert t.epsilon == pytest.approx(0.1 + (t.usage - lo) / (hi - lo) * 999.9, rel=1e-12)
        assert 0.1 <= t.epsilon <= 1000.0
    # affine, not logarithmic: twice the usage above the minimum is twice the ε above 0.1
    cpu = sorted((t for t in tasks if t.cpu_based), key=lambda t: t.usage)
    a, b = cpu[0], cpu[-1]
    lo = TRACE["cpu_memory_gb"].low * rt.low
    assert (b.epsilon - 0.1) / (a.epsilon - 0.1) == pytest.approx((b.usage - lo) / (a.usage - lo))


def test_filter_keeps_best_order_normalized_demand_in_range(
    generated: tuple[list[AlibabaTask], GenerationStats],
) -> None:
    tasks, stats = generated
    for t in tasks:
        by_hand = _by_hand_normalized(t.curve)
        assert t.normalized == pytest.approx(by_hand, rel=1e-12)
        assert 1e-3 <= by_hand <= 1.0
    # the filter really drops tasks on each side, and the counts add up
    assert stats.too_small > 0 and stats.too_large > 0 and stats.too_many_blocks > 0
    dropped = stats.too_small + stats.too_large + stats.too_many_blocks
    assert stats.records == stats.kept + dropped


def test_blocks_from_bytes_read_cut_at_100(
    generated: tuple[list[AlibabaTask], GenerationStats],
) -> None:
    tasks, _ = generated
    read = TRACE["read_bytes"]
    for t in tasks:
        mapped = int(1 + (t.read_bytes - read.low) / (read.high - read.low) * 99_999)
        assert t.n_blocks == max(1, mapped)
        assert 1 <= t.n_blocks <= 100
    counts = np.array([t.n_blocks for t in tasks])
    assert np.mean(counts == 1) > 0.5 and counts.max() > 10  # most few, a heavy tail


def test_noise_calibrated_to_epsilon(generated: tuple[list[AlibabaTask], GenerationStats]) -> None:
    tasks, _ = generated
    for t in tasks:
        curve = np.array(t.curve.as_floats())
        if t.mechanism is Mechanism.LAPLACE:
            assert t.curve == RdpCurve.laplace(scale=1 / t.epsilon)
        elif t.mechanism in (Mechanism.GAUSSIAN, Mechanism.DP_FTRL):
            sigma = math.sqrt(2 * math.log(1.25 / t.delta)) / t.epsilon  # per release
            assert t.noise == pytest.approx(sigma)
            releases = curve / (np.array(ALPHAS) / (2 * sigma**2))
            if t.mechanism is Mechanism.GAUSSIAN:
                assert releases == pytest.approx(t.epochs, rel=1e-9)
            else:  # epochs trees of depth ⌈log2(leaves + 1)⌉
                depth = math.ceil(math.log2(round(1 / t.delta) // t.batch_size + 1))
                assert releases == pytest.approx(t.epochs * depth, rel=1e-9)
        else:
            got = rdp_to_epsilon(curve, delta=t.delta)
            assert got <= t.epsilon * (1 + 1e-9)
            assert got >= 0.9 * t.epsilon or t.noise == pytest.approx(1e3)
        assert t.delta == pytest.approx(1 / (1000 * t.n_blocks))


def test_online_arrivals_about_100_tasks_per_block() -> None:
    w = alibaba_dp(n_blocks=104, initial_blocks=100, tasks_per_block=100, seed=3)
    assert len(w.blocks) == 104 and len(w.tasks) == 400
    arrivals = np.array([t.arrival for t in w.tasks])
    assert np.all(np.diff(arrivals) >= 0) and arrivals[0] == 0 and arrivals[-1] < 4
    per_block = np.bincount(arrivals.astype(int), minlength=4)
    assert per_block.sum() == 400 and per_block.min() > 50  # ~100 each (Poisson arrivals)
    times = np.array([b.arrival for b in w.blocks])
    assert np.all(times[:100] == 0) and list(times[100:]) == [0.0, 1.0, 2.0, 3.0]
    kept, _ = alibaba_dp_tasks(400, seed=3)
    for task, src in zip(w.tasks, kept, strict=True):
        present = int(np.sum(times <= task.arrival))
        assert task.blocks is not None and len(task.blocks) == src.n_blocks
        assert task.blocks[-1] == f"b{present - 1}"  # the latest blocks
        assert task.demand == src.curve and task.profit == 1.0


def test_offline_is_one_batch() -> None:
    w = alibaba_dp(n_blocks=20, arrivals=Arrivals.OFFLINE, tasks_per_block=5, seed=4)
    assert len(w.tasks) == 100 and w.name == "alibaba-dp-offline"
    assert all(t.arrival == 0 for t in w.tasks) and all(b.arrival == 0 for b in w.blocks)
    assert all(t.blocks is not None and t.blocks[-1] == "b19" for t in w.tasks)


def test_seeded_and_deterministic() -> None:
    a = alibaba_dp(n_blocks=102, tasks_per_block=30, seed=5)
    b = alibaba_dp(n_blocks=102, tasks_per_block=30, seed=5)
    c = alibaba_dp(n_blocks=102, tasks_per_block=30, seed=6)
    assert a == b
    assert [t.demand for t in a.tasks] != [t.demand for t in c.tasks]
    r1, r2 = synthetic_machine_trace(50, seed=1), synthetic_machine_trace(50, seed=1)
    assert np.array_equal(r1.read_bytes, r2.read_bytes)
    for name, dist in TRACE.items():
        x = getattr(r1, name)
        if name == "gpu_plan_percent":
            x = x[x > 0]
        assert np.all((x >= dist.low) & (x <= dist.high))


def test_open_variant_for_alg2() -> None:
    w = alibaba_dp(n_blocks=102, tasks_per_block=20, seed=7)
    o = open_variant(w)
    assert o.upper is not None and o.lower is not None and 0 < o.lower <= o.upper
    for named, t in zip(w.tasks, o.tasks, strict=True):
        assert named.blocks is not None
        k = len(named.blocks)
        assert t.shape is TaskShape.OPEN and t.max_blocks == k and t.min_blocks == k
        assert t.demand == named.demand and t.arrival == named.arrival
        assert t.significance_of("b0") == pytest.approx(1 / k)
        assert isinstance(t.demand, RdpCurve)
        share = best_normalized_demand(t.demand, epsilon_g=EPS_G, delta_g=DELTA_G)
        assert o.lower <= (1 / k) / (share * EPS_G) <= o.upper


def test_bad_arguments() -> None:
    with pytest.raises(InvalidRequestError, match="online"):
        alibaba_dp(n_blocks=10, initial_blocks=10)
    with pytest.raises(InvalidRequestError, match="no task"):
        alibaba_dp(n_blocks=101, tasks_per_block=0.1)
    with pytest.raises(InvalidRequestError, match="Arrivals"):
        alibaba_dp(arrivals="online")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="at least one task"):
        alibaba_dp_tasks(0)
    with pytest.raises(InvalidRequestError):
        alibaba_dp_tasks(5, delta_g=0.0)

"""Seed 000 Alg. 1–3: the threshold function, zero-noise decisions, noise scales, ε0 charged."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.integrate import quad

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import FloatArray
from blockbudget.scheduling import BlockSpec, DecisionKind, Pool, TaskSpec, TaskStatus
from blockbudget.scheduling.threshold import (
    MixedThreshold,
    OnlineThreshold,
    competitive_ratio,
    threshold,
    z_zero,
)

from .fakes import ZeroNoise

U, L = 50.0, 2.0


def test_threshold_function_matches_eq_9_and_eq_14() -> None:
    z0 = z_zero(upper=U, lower=L)
    assert z0 == pytest.approx(1 / (1 + math.log(U / L)))
    assert threshold(0.0, upper=U, lower=L) == L
    assert threshold(z0, upper=U, lower=L) == L
    assert threshold(z0 + 1e-9, upper=U, lower=L) == pytest.approx(L, rel=1e-6)  # continuous
    assert threshold(1.0, upper=U, lower=L) == pytest.approx(U)
    zs = np.linspace(z0 + 1e-6, 1, 50)
    ts = [threshold(float(z), upper=U, lower=L) for z in zs]
    assert all(b > a for a, b in itertools.pairwise(ts))
    # Eq. (14): ∫_0^Z T = T(Z) / (1 + ln(U/L)) for every Z ≥ z0 — the heart of Thm. 4
    for z in (z0, 0.5, 0.8, 1.0):
        integral = quad(lambda t: threshold(t, upper=U, lower=L), 0, z, points=[z0])[0]
        assert integral == pytest.approx(
            threshold(z, upper=U, lower=L) / competitive_ratio(upper=U, lower=L), rel=1e-6
        )
    with pytest.raises(InvalidRequestError):
        z_zero(upper=1.0, lower=2.0)


def _pool(used: float) -> Pool:
    pool = Pool(Accounting.BASIC)
    pool.add_block(BlockSpec("b0", 0.0, Budget(epsilon=1.0)))
    if used:
        pool.submit(TaskSpec("filler", 0.0, Budget(epsilon=used), max_blocks=1))
        assert pool.grant("filler", {"b0": Budget(epsilon=used)})
    return pool


def test_alg1_takes_anything_below_z0_without_a_comparison() -> None:
    noise = ZeroNoise()
    sched = OnlineThreshold(upper=U, lower=L, comparison_epsilon=0.01, noise=noise)
    pool = _pool(0.0)
    task = TaskSpec("q", 0.0, Budget(epsilon=0.05), significance={"b0": 1e-6})
    pool.submit(task)
    sched.on_task(pool, task)
    assert pool.status["q"] is TaskStatus.GRANTED
    assert noise.scales == [] and sched.comparisons == 0
    assert not [d for d in pool.decisions if d.kind is DecisionKind.OVERHEAD]


@pytest.mark.parametrize(("significance", "granted"), [(0.5, False), (40.0, True)])
def test_alg1_above_z0_opens_a_run_paying_epsilon0_once(significance: float, granted: bool) -> None:
    eps0 = 0.01
    noise = ZeroNoise()
    sched = OnlineThreshold(upper=U, lower=L, comparison_epsilon=eps0, noise=noise)
    pool = _pool(0.6)  # z = 0.6 > z0 ≈ 0.24
    task = TaskSpec("q", 1.0, Budget(epsilon=0.05), significance={"b0": significance})
    ratio = significance / (0.05 + eps0)
    bar = threshold(0.6 + eps0, upper=U, lower=L)  # T(z) after the run's ε0
    assert (ratio >= bar) is granted  # the zero-noise decision is the exact comparison
    pool.submit(task)
    sched.on_task(pool, task)
    assert (pool.status["q"] is TaskStatus.GRANTED) is granted
    over = [d for d in pool.decisions if d.kind is DecisionKind.OVERHEAD]
    assert len(over) == 1 and over[0].cost == Budget(epsilon=eps0)
    # the run's threshold noise Lap(2/ε0), then the comparison's Lap(4/ε0) (sensitivity 1)
    assert noise.scales == [pytest.approx(2 / eps0), pytest.approx(4 / eps0)]
    assert sched.has_open_run(pool, "b0") is not granted  # a pass halts the run
    used = float(pool.used_fraction()[0])
    assert used == pytest.approx(0.6 + eps0 + (0.05 if granted else 0.0), rel=1e-6)


class _ScriptedNoise(ZeroNoise):
    """Returns scripted Laplace draws in order (tests only); records scales like ZeroNoise."""

    def __init__(self, draws: list[float]) -> None:
        super().__init__()
        self.draws = list(draws)

    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        self.scales.append(scale)
        out: FloatArray = values + np.array([self.draws.pop(0) for _ in values])
        return out


def test_refused_comparisons_share_one_run_its_threshold_noise_and_its_epsilon0() -> None:
    """Dwork & Roth Alg. 1 per block: one threshold noise ρ until the first pass, ε0 paid once
    when the run starts, nothing per refused comparison; a pass halts the run and the next
    comparison opens a new one (new ε0, new ρ)."""
    eps0 = 0.01
    # run 1: ρ = +5 kept for every comparison; run 2: ρ = 0
    noise = _ScriptedNoise([5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    sched = OnlineThreshold(upper=U, lower=L, comparison_epsilon=eps0, noise=noise)
    pool = _pool(0.6)
    bar = threshold(0.6 + eps0, upper=U, lower=L)
    # excess over T(z): +1, +3 (refused only because of ρ = 5), +10 (passes), then +1 again
    for j, excess in enumerate((1.0, 3.0, 10.0, 1.0)):
        task = TaskSpec(
            f"q{j}", 1.0, Budget(epsilon=0.001), significance={"b0": (bar + excess) * 0.011}
        )
        pool.submit(task)
        sched.on_task(pool, task)
    status = [pool.status[f"q{j}"] for j in range(4)]
    granted, rejected = TaskStatus.GRANTED, TaskStatus.REJECTED
    assert status == [rejected, rejected, granted, granted]
    over = [d.task_id for d in pool.decisions if d.kind is DecisionKind.OVERHEAD]
    assert over == ["q0", "q3"]  # run 1 opened by q0 (covers q0–q2), run 2 by q3
    two, four = pytest.approx(2 / eps0), pytest.approx(4 / eps0)
    assert noise.scales == [two, four, four, four, two, four]
    assert sched.runs_started == 2 and sched.comparisons == 4


def test_a_run_that_never_passes_is_paid_once_before_its_noise() -> None:
    """An unfinished run released its refusals: its ε0 was charged when it started."""
    eps0 = 0.01
    noise = ZeroNoise()
    sched = OnlineThreshold(upper=U, lower=L, comparison_epsilon=eps0, noise=noise)
    pool = _pool(0.6)
    for j in range(300):  # 300 × ε0 = 3 blocks' worth under per-comparison charging
        task = TaskSpec(f"q{j}", 1.0, Budget(epsilon=0.001), significance={"b0": 1e-4})
        pool.submit(task)
        sched.on_task(pool, task)
        assert pool.status[f"q{j}"] is TaskStatus.REJECTED
    over = [d for d in pool.decisions if d.kind is DecisionKind.OVERHEAD]
    assert len(over) == 1 and sched.comparisons == 300 and sched.has_open_run(pool, "b0")
    assert float(pool.used_fraction()[0]) == pytest.approx(0.6 + eps0, rel=1e-6)


def test_alg2_stops_at_the_access_limit_and_at_the_validation_flag() -> None:
    pool = Pool(Accounting.BASIC)
    for i in range(6):
        pool.add_block(BlockSpec(f"b{i}", 0.0, Budget(epsilon=1.0)))
    sched = OnlineThreshold(upper=U, lower=L, noise=ZeroNoise())
    limited = TaskSpec("a", 0.0, Budget(epsilon=0.1), max_blocks=3)
    pool.submit(limited)
    sched.on_task(pool, limited)
    assert len(pool.charged_blocks["a"]) == 3
    seen: list[int] = []

    def flag(blocks: tuple[str, ...]) -> bool:
        seen.append(len(blocks))
        return len(blocks) == 2

    flagged = TaskSpec("b", 0.0, Budget(epsilon=0.1), validator=flag)
    pool.submit(flagged)
    sched.on_task(pool, flagged)
    assert len(pool.charged_blocks["b"]) == 2 and seen == [1, 2]


def test_alg3_grants_the_partial_amount_of_eq_18() -> None:
    eps0, eta = 0.01, 0.2
    sched = MixedThreshold(upper=U, lower=L, comparison_epsilon=eps0, eta=eta, noise=ZeroNoise())
    pool = _pool(0.0)
    constant = U / (1 + math.log(U / L))
    # ε* = p/T − κ with κ = 2ε0 (run + release) = 0.1 while ε_j = 0.4 → a partial grant of 0.1
    p = (0.1 + 2 * eps0) * constant
    task = TaskSpec("q", 0.0, Budget(epsilon=0.4), significance={"b0": p})
    pool.submit(task)
    sched.on_task(pool, task)
    charge = [d for d in pool.decisions if d.kind is DecisionKind.CHARGE]
    assert len(charge) == 1
    assert charge[0].cost is not None
    assert float(charge[0].cost.epsilon) == pytest.approx(0.1, rel=1e-6)  # type: ignore[union-attr]
    # ε0 for the run (opened, passed, halted) and ε0 for releasing ε*
    over = [d for d in pool.decisions if d.kind is DecisionKind.OVERHEAD]
    assert [d.cost for d in over] == [Budget(epsilon=eps0)] * 2
    assert [d.note for d in over] == ["above-threshold run", "release ε*"]
    # every admission is worth T per unit of budget it consumed (Thm. 5's Eq. (20))
    assert p == pytest.approx(constant * float(pool.used_fraction()[0]), rel=1e-6)
    # below η ε_j: refused; the new run's ε0 is paid once, the next refusal costs nothing
    for name in ("r", "s"):
        low = TaskSpec(name, 0.0, Budget(epsilon=0.4), significance={"b0": 0.05 * constant})
        pool.submit(low)
        sched.on_task(pool, low)
        assert pool.status[name] is TaskStatus.REJECTED
        assert len([d for d in pool.decisions if d.kind is DecisionKind.OVERHEAD]) == 3


def test_adaptive_composition_variant_runs_on_strong_accounting() -> None:
    pool = Pool(Accounting.STRONG)
    pool.add_block(BlockSpec("b0", 0.0, Budget(epsilon=1.0, delta=1e-6)))
    sched = OnlineThreshold(upper=U, lower=L, noise=ZeroNoise())
    served = 0
    for j in range(400):
        task = TaskSpec(f"q{j}", 0.0, Budget(epsilon=0.01), significance={"b0": 1.0})
        pool.submit(task)
        sched.on_task(pool, task)
        served += pool.status[f"q{j}"] is TaskStatus.GRANTED
    # strong composition fits more than the 100 charges of 0.01 that basic composition allows
    assert served > 100


class _OrderNoise(ZeroNoise):
    """Zero noise that records, at every draw, its scale and how many ε0 the pool had charged."""

    def __init__(self, pool: Pool) -> None:
        super().__init__()
        self.pool = pool
        self.overheads_at_draw: list[tuple[float, int]] = []

    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        n = sum(d.kind is DecisionKind.OVERHEAD for d in self.pool.decisions)
        self.overheads_at_draw.append((scale, n))
        return super()._laplace(values, scale)


@pytest.mark.parametrize("cls", [OnlineThreshold, MixedThreshold])
def test_epsilon0_is_charged_before_every_paid_noise_draw(cls: type[OnlineThreshold]) -> None:
    """A run's threshold draw Lap(2/ε0) and Alg. 3's release draw Lap(1/ε0) each follow their
    own ε0; the comparisons' Lap(4/ε0) draws inside a run are covered by the run's ε0."""
    eps0 = 0.01
    pool = _pool(0.6)  # above z0: Alg. 2 compares too
    noise = _OrderNoise(pool)
    sched = cls(upper=U, lower=L, comparison_epsilon=eps0, noise=noise)
    for j, sig in enumerate((0.5, 0.7, 40.0, 3.0, 0.2)):
        task = TaskSpec(f"q{j}", 1.0, Budget(epsilon=0.05), significance={"b0": sig})
        pool.submit(task)
        sched.on_task(pool, task)
    draws = noise.overheads_at_draw
    paid = [n for scale, n in draws if scale != pytest.approx(4 / eps0)]
    assert len(paid) >= 2, "the stream should open two runs"
    assert paid == list(range(1, len(paid) + 1))  # the k-th paid draw follows the k-th ε0
    total_over = sum(d.kind is DecisionKind.OVERHEAD for d in pool.decisions)
    assert total_over == len(paid)
    assert sched.comparisons == len(draws) - len(paid)  # one Lap(4/ε0) per comparison


@pytest.mark.parametrize(
    "kwargs",
    [
        {"comparison_epsilon": "0.1"},
        {"comparison_epsilon": float("nan")},
        {"comparison_epsilon": 0.0},
        {"sensitivity": -1.0},
        {"upper": 1.0, "lower": 2.0},
        {"upper": float("inf")},
        {"lower": True},
    ],
)
def test_bad_parameters_are_refused_with_the_rule(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidRequestError):
        OnlineThreshold(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="η"):
        MixedThreshold(eta=1.5)


@pytest.mark.parametrize("cls", [OnlineThreshold, MixedThreshold])
def test_a_task_needing_k_eligible_blocks_is_served_all_or_nothing(
    cls: type[OnlineThreshold] | type[MixedThreshold],
) -> None:
    """A selector's k blocks (eligible = k blocks, min = max = k): the blocks that pass are
    reserved until all k have, then charged together; a task that gets fewer is charged
    nothing (only the comparisons' ε0), and no block outside its k is touched."""
    pool = Pool(Accounting.BASIC)
    for i in range(4):
        pool.add_block(BlockSpec(f"b{i}", 0.0, Budget(epsilon=1.0)))
    pool.submit(TaskSpec("full", 0.0, Budget(epsilon=0.999), max_blocks=1))
    assert pool.grant("full", {"b2": Budget(epsilon=0.999)})  # b2 can take nothing more
    sched = cls(upper=U, lower=L, comparison_epsilon=1e-3, noise=ZeroNoise(), seed=0)
    sig = {f"b{i}": 0.3 * U for i in range(4)}  # density U: passes wherever it fits
    k2 = frozenset({"b0", "b1"})
    k3 = frozenset({"b1", "b2", "b3"})
    for tid, blocks in (("two", k2), ("three", k3)):
        task = TaskSpec(
            tid,
            0.0,
            Budget(epsilon=0.3),
            significance=sig,
            eligible=blocks,
            min_blocks=len(blocks),
            max_blocks=len(blocks),
        )
        pool.submit(task)
        sched.on_task(pool, task)
    assert pool.status["two"] is TaskStatus.GRANTED
    assert set(pool.charged_blocks["two"]) == k2
    assert pool.status["three"] is TaskStatus.REJECTED
    mine = [d for d in pool.decisions if d.task_id in ("two", "three")]
    assert all(d.block_id is None or d.block_id in (k2 | k3) for d in mine)
    assert not [d for d in mine if d.task_id == "three" and d.kind is DecisionKind.CHARGE]
    assert pool.held("three") == {} and float(pool.reserved.sum()) == 0.0
    # what "three" left on b3 (which only it could use): at most the ε0 of its comparisons
    assert float(pool.charged[3, 0]) <= 2 * 1e-3 * (1 + 1e-6)

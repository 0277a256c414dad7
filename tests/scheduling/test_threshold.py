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
def test_alg1_compares_above_z0_and_always_charges_epsilon0(
    significance: float, granted: bool
) -> None:
    eps0 = 0.01
    noise = ZeroNoise()
    sched = OnlineThreshold(upper=U, lower=L, comparison_epsilon=eps0, noise=noise)
    pool = _pool(0.6)  # z = 0.6 > z0 ≈ 0.24
    bar = threshold(0.6, upper=U, lower=L)
    task = TaskSpec("q", 1.0, Budget(epsilon=0.05), significance={"b0": significance})
    ratio = significance / (0.05 + eps0)
    assert (ratio > bar) is granted  # the zero-noise decision is the exact comparison
    pool.submit(task)
    sched.on_task(pool, task)
    assert (pool.status["q"] is TaskStatus.GRANTED) is granted
    over = [d for d in pool.decisions if d.kind is DecisionKind.OVERHEAD]
    assert len(over) == 1 and over[0].cost == Budget(epsilon=eps0)
    # Lap(4/ε0) on the value and Lap(2/ε0) on the threshold (sensitivity 1)
    assert noise.scales == [pytest.approx(4 / eps0), pytest.approx(2 / eps0)]
    used = float(pool.used_fraction()[0])
    assert used == pytest.approx(0.6 + eps0 + (0.05 if granted else 0.0), rel=1e-6)


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
    # ε* = p/T − ε0 = 0.1 while ε_j = 0.4 → a partial grant of 0.1 (ε* ≥ η ε_j = 0.08)
    p = (0.1 + eps0) * constant
    task = TaskSpec("q", 0.0, Budget(epsilon=0.4), significance={"b0": p})
    pool.submit(task)
    sched.on_task(pool, task)
    charge = [d for d in pool.decisions if d.kind is DecisionKind.CHARGE]
    assert len(charge) == 1
    assert charge[0].cost is not None
    assert float(charge[0].cost.epsilon) == pytest.approx(0.1, rel=1e-6)  # type: ignore[union-attr]
    # ε0 for the comparison and ε0 for releasing ε*
    over = [d for d in pool.decisions if d.kind is DecisionKind.OVERHEAD]
    assert [d.cost for d in over] == [Budget(epsilon=eps0)] * 2
    # below η ε_j: refused, only the comparison is paid
    low = TaskSpec("r", 0.0, Budget(epsilon=0.4), significance={"b0": 0.05 * constant})
    pool.submit(low)
    sched.on_task(pool, low)
    assert pool.status["r"] is TaskStatus.REJECTED
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
    """Zero noise that records, at every draw, how many ε0 charges the pool had logged."""

    def __init__(self, pool: Pool) -> None:
        super().__init__()
        self.pool = pool
        self.overheads_at_draw: list[int] = []

    def _laplace(self, values: np.ndarray, scale: float) -> np.ndarray:  # type: ignore[type-arg]
        n = sum(d.kind is DecisionKind.OVERHEAD for d in self.pool.decisions)
        self.overheads_at_draw.append(n)
        return super()._laplace(values, scale)


@pytest.mark.parametrize("cls", [OnlineThreshold, MixedThreshold])
def test_epsilon0_is_charged_before_every_noise_draw(cls: type[OnlineThreshold]) -> None:
    pool = _pool(0.6)  # above z0: Alg. 2 compares too
    noise = _OrderNoise(pool)
    sched = cls(upper=U, lower=L, comparison_epsilon=0.01, noise=noise)
    for j, sig in enumerate((0.5, 40.0, 3.0)):
        task = TaskSpec(f"q{j}", 1.0, Budget(epsilon=0.05), significance={"b0": sig})
        pool.submit(task)
        sched.on_task(pool, task)
    draws = noise.overheads_at_draw
    assert draws, "no comparison was made"
    # Alg. 1/3's two comparison draws come after their ε0; Alg. 3's release of ε* after a
    # second ε0: the k-th paid ε0 always precedes the draws it pays for.
    paid = 0
    k = 0
    while k < len(draws):
        assert draws[k] > paid, f"draw {k} happened before its ε0 was charged"
        paid = draws[k]
        k += 2 if k + 1 < len(draws) and draws[k + 1] == draws[k] else 1
    total_over = sum(d.kind is DecisionKind.OVERHEAD for d in pool.decisions)
    assert total_over == paid


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

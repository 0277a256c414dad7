"""The offline optimum of seed 000 Eq. (5): HiGHS MILP, the Lagrangian branch and bound and
brute force agree; the advanced-composition variant stays exact; the scheduler form is optimal."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from blockbudget.accounting import Accounting, make_filter
from blockbudget.budget import Budget
from blockbudget.scheduling import BlockSpec, TaskSpec
from blockbudget.scheduling.offline import (
    OfflineOptimum,
    greedy_assignment,
    solve_branch_and_bound,
    solve_milp,
    strong_relaxation,
)
from blockbudget.scheduling.simulator import simulate


def brute_force(p, eps, budgets, limits, fits=None):  # type: ignore[no-untyped-def]
    m, n = p.shape
    best = 0.0
    for bits in itertools.product((0, 1), repeat=m * n):
        x = np.array(bits).reshape(m, n)
        if np.any(x.sum(axis=0) > limits):
            continue
        if fits is None:
            if np.any((x * eps).sum(axis=1) > budgets + 1e-12):
                continue
        elif not all(fits(i, list(np.flatnonzero(x[i]))) for i in range(m)):
            continue
        best = max(best, float((p * x).sum()))
    return best


def instance(seed: int, m: int, n: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 10, (m, n)) * (rng.random((m, n)) < 0.8)
    eps = np.broadcast_to(rng.uniform(0.1, 0.6, n), (m, n)).copy()
    budgets = np.full(m, 1.0)
    limits = rng.integers(1, m + 1, n)
    return p, eps, budgets, limits


@pytest.mark.parametrize("seed", range(6))
def test_milp_and_branch_and_bound_equal_brute_force(seed: int) -> None:
    p, eps, budgets, limits = instance(seed, 3, 4)
    exact = brute_force(p, eps, budgets, limits)
    milp = solve_milp(p, eps, budgets, limits)
    bnb = solve_branch_and_bound(p, eps, budgets, limits)
    assert milp.optimal and bnb.optimal
    assert milp.value == pytest.approx(exact, abs=1e-7)
    assert bnb.value == pytest.approx(exact, abs=1e-7)
    # both solutions are feasible
    for sol in (milp.x, bnb.x):
        assert np.all(sol.sum(axis=0) <= limits)
        assert np.all((sol * eps).sum(axis=1) <= budgets + 1e-9)
    assert greedy_assignment(p, eps, budgets, limits).value <= exact + 1e-9


@pytest.mark.parametrize("seed", [0, 2])
def test_milp_equals_branch_and_bound_on_paper_sized_instances(seed: int) -> None:
    # Tab. II's size: 8 blocks and 12 queries
    p, eps, budgets, limits = instance(100 + seed, 8, 12)
    milp = solve_milp(p, eps, budgets, limits)
    bnb = solve_branch_and_bound(p, eps, budgets, limits)
    assert milp.optimal and bnb.optimal
    assert bnb.value == pytest.approx(milp.value, rel=1e-9)
    assert bnb.value >= greedy_assignment(p, eps, budgets, limits).value - 1e-9


def test_advanced_composition_offline_is_exact() -> None:
    """Strong composition as the per-block rule (seed 000 §V, advanced composition): at
    ε_j = 0.05 a block (1, 1e-6) takes 5 such queries under strong composition."""
    capacity = Budget(epsilon=1.0, delta=1e-6)
    filt = make_filter(Accounting.STRONG, capacity=capacity)
    m, n = 2, 6
    rng = np.random.default_rng(7)
    p = rng.uniform(1, 2, (m, n))
    eps_j = np.array([0.05, 0.05, 0.05, 0.02, 0.08, 0.05])
    costs = [Budget(epsilon=float(e)) for e in eps_j]

    def fits(i: int, js: list[int]) -> bool:
        return filt.fits(filt.total([costs[j] for j in js]))

    w, cap = strong_relaxation(eps_j, epsilon_g=1.0, slack_delta=filt.slack_delta)  # type: ignore[attr-defined]
    limits = np.full(n, 2)
    adv = solve_branch_and_bound(
        p, np.broadcast_to(w, (m, n)), np.full(m, cap), limits, block_fits=fits
    )
    assert adv.optimal
    assert adv.value == pytest.approx(brute_force(p, None, None, limits, fits=fits), abs=1e-9)
    for i in range(m):
        assert fits(i, list(np.flatnonzero(adv.x[i])))
    # the linear relaxation is necessary: every feasible set satisfies it
    for js in itertools.combinations(range(n), 4):
        if fits(0, list(js)):
            assert w[list(js)].sum() <= cap


def test_offline_scheduler_is_the_optimum_of_its_run() -> None:
    blocks = [BlockSpec(f"b{i}", float(i), Budget(epsilon=1.0)) for i in range(3)]
    rng = np.random.default_rng(3)
    tasks = [
        TaskSpec(
            f"t{j}",
            float(rng.uniform(0, 3)),
            Budget(epsilon=float(rng.choice([0.2, 0.5]))),
            max_blocks=2,
            significance={f"b{i}": float(rng.uniform(0, 5)) for i in range(3)},
        )
        for j in range(6)
    ]
    result = simulate(OfflineOptimum(), blocks, tasks, accounting=Accounting.BASIC)
    p = np.array([[t.significance_of(f"b{i}") for t in tasks] for i in range(3)])
    eps = np.broadcast_to([float(t.demand.epsilon) for t in tasks], (3, 6))  # type: ignore[union-attr]
    best = solve_milp(p, eps, np.ones(3) * (1 - 1e-4), np.full(6, 2))  # as the scheduler
    assert result.significance == pytest.approx(best.value, rel=1e-9)

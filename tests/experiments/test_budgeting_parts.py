"""The budgeting experiments' parts at small sizes: the DP models exact at infinite ε, the
significances against their formula, the grants never past a block's capacity, and the
competitive ratio exactly 1 where the online algorithm can take everything."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from blockbudget.errors import InternalError
from blockbudget.experiments.budgeting_ratio import _ratio, _tasks
from blockbudget.experiments.budgeting_setup import (
    Digits,
    _digit_significance,
    balanced_accuracy,
    digit_significance,
    dp_centroid_accuracy,
    dp_regression_errors,
    flight_significance,
    granted_epsilons,
    load_digit_blocks,
    load_flight_blocks,
)
from blockbudget.experiments.budgeting_tables import EPSILON_G, _demand, _validated_run
from blockbudget.scheduling.base import TaskStatus

HUGE = 1e15  # Laplace scale Δ/ε ≈ 1e-14: the noisy statistics are the exact ones to 1e-12


def test_balanced_accuracy_by_hand() -> None:
    pred = np.array([True, True, False, False])
    truth = np.array([True, False, False, False])
    assert balanced_accuracy(pred, truth) == pytest.approx((1.0 + 2 / 3) / 2)
    # a class that never occurs counts 0.5
    assert balanced_accuracy(np.array([False, True]), np.array([False, False])) == 0.5 * (0.5 + 0.5)
    assert balanced_accuracy(np.array([False, False]), np.array([False, False])) == 0.75
    assert balanced_accuracy(~truth, truth) == 0.0


def test_centroid_classifier_at_infinite_epsilon_is_the_exact_one() -> None:
    data = load_digit_blocks(4, seed=0)
    digit, chosen = 3, ("d0", "d2")
    sums, counts = np.zeros((2, 10)), np.zeros(2)
    for b in chosen:
        xb, yb = data.blocks[b]
        for c in (0, 1):
            rows = xb[(yb == digit) == bool(c)]
            sums[c] += rows.sum(axis=0)
            counts[c] += len(rows)
    centroids = sums / counts[:, None]
    dist = ((data.x_test[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    want = balanced_accuracy(dist.argmin(axis=1) == 1, data.y_test == digit)
    rng = np.random.default_rng(0)
    got = dp_centroid_accuracy(data, digit, {"d0": HUGE, "d2": HUGE, "d1": 0.0}, rng)
    assert got == want and 0.5 < want <= 1.0
    # no block granted (or only ε = 0): no statistics, the constant classifier's 0.5
    assert dp_centroid_accuracy(data, digit, {"d1": 0.0}, rng) == 0.5


def test_a_block_perturbed_at_one_epsilon_is_not_reused_at_another() -> None:
    data = load_digit_blocks(4, seed=0)
    cache: dict[str, tuple[float, np.ndarray, np.ndarray]] = {}
    rng = np.random.default_rng(0)
    dp_centroid_accuracy(data, 1, {"d0": 2.0}, rng, cache=cache)
    with pytest.raises(InternalError, match=r"perturbed at ε=2\.0, now 3\.0"):
        dp_centroid_accuracy(data, 1, {"d0": 3.0}, rng, cache=cache)


def test_regression_at_infinite_epsilon_is_the_ridge_solution() -> None:
    data = load_flight_blocks(3, rows_per_block=200, seed=0)
    chosen = ("p0", "p2")
    xtx = sum(data.blocks[b][0].T @ data.blocks[b][0] for b in chosen)
    xty = sum(data.blocks[b][0].T @ data.blocks[b][1] for b in chosen)
    ridge = 1.0 + abs(float(np.min(np.linalg.eigvalsh(xtx))))
    w = np.linalg.solve(xtx + ridge * np.eye(4), xty)
    err = (data.x_test @ w - data.y_test) * 180.0
    mse, medae = dp_regression_errors(data, {"p0": HUGE, "p2": HUGE}, np.random.default_rng(0))
    assert mse == pytest.approx(float(np.mean(err**2)), rel=1e-9)
    assert medae == pytest.approx(float(np.median(np.abs(err))), rel=1e-9)
    # nothing granted: the zero model, whose error is the label itself
    mse0, medae0 = dp_regression_errors(data, {}, np.random.default_rng(0))
    assert mse0 == pytest.approx(float(np.mean((data.y_test * 180.0) ** 2)))
    assert medae0 == pytest.approx(float(np.median(np.abs(data.y_test * 180.0))))


def test_flight_blocks_and_their_recency_significance() -> None:
    data = load_flight_blocks(3, rows_per_block=200, seed=0)
    assert sorted(data.blocks) == ["p0", "p1", "p2"]
    for xb, yb in data.blocks.values():
        assert xb.shape == (200, 4) and np.all(np.abs(xb) <= 1) and np.all(np.abs(yb) <= 1)
        assert np.all(xb[:, 3] == 1.0)  # the intercept column
    times = [data.times[b] for b in ("p0", "p1", "p2")]
    assert times == sorted(times) and times[-1] < 11 * 31  # all before December
    sig = flight_significance(data, half_life=60.0)
    for b, t in data.times.items():  # halves every 60 days before mid-December (day 356)
        assert sig[b] == pytest.approx(2.0 ** (-(356 - t) / 60.0))


def test_demands_are_the_stated_shares_of_a_block() -> None:
    rng = np.random.default_rng(5)
    small = [_demand(rng, False) for _ in range(300)]
    mixed = [_demand(rng, True) for _ in range(300)]
    assert all(0.01 * EPSILON_G <= d <= 0.05 * EPSILON_G for d in small)
    assert all(
        0.01 * EPSILON_G <= d <= 0.05 * EPSILON_G or 0.3 * EPSILON_G <= d <= 0.8 * EPSILON_G
        for d in mixed
    )
    large = sum(d >= 0.3 * EPSILON_G for d in mixed)
    assert 60 <= large <= 120  # 30% of 300 = 90, within ±3.5 standard deviations
    assert all(round(d, 4) == d for d in small + mixed)


@pytest.mark.parametrize("method", ["ours", "sage", "streaming"])
def test_validated_runs_never_charge_a_block_past_its_capacity(method: str) -> None:
    data = load_digit_blocks(4, seed=0)
    pool, tasks, passed = _validated_run(method, True, data, 8, 0, target=0.93)
    per_block: dict[str, float] = defaultdict(float)
    holders: dict[str, set[str]] = defaultdict(set)
    for t in tasks:
        for block, eps in granted_epsilons(pool, t.task_id).items():
            per_block[block] += eps
            holders[block].add(t.task_id)
        assert granted_epsilons(pool, t.task_id).keys() == set(pool.charged_blocks[t.task_id])
        if pool.status[t.task_id] is TaskStatus.GRANTED:
            assert t.task_id in passed  # a granted task was validated
    assert per_block and set(per_block) <= set(data.blocks)
    assert all(v <= EPSILON_G * (1 + 1e-12) for v in per_block.values()), dict(per_block)
    if method == "streaming":  # each block serves one query
        assert all(len(h) == 1 for h in holders.values())


def test_competitive_ratio_is_one_when_every_query_fits() -> None:
    # 8 queries of ε = 0.1 on one block of ε = 1, all at the top ratio U: the online algorithm
    # takes every one, as the offline optimum does
    assert _ratio(np.full(8, 5.0), np.full(8, 0.1), 10.0, 1.0, "ideal", 0) == 1.0
    rising = np.linspace(1.0, 10.0, 20)  # twice the block's capacity, rising values
    ratio = _ratio(rising, np.full(20, 0.1), 10.0, 1.0, "ideal", 0)
    assert 1.0 < ratio <= 1.0 + math.log(10.0)


def test_ratio_tasks_carry_significance_ratio_times_cost() -> None:
    tasks = _tasks(np.array([2.0, 3.0]), np.array([0.25, 0.5]))
    assert [t.significance for t in tasks] == [{"b0": 0.5}, {"b0": 1.5}]
    assert [float(t.demand.epsilon) for t in tasks] == [0.25, 0.5]  # type: ignore[union-attr]
    assert tasks[0].arrival < tasks[1].arrival and all(t.max_blocks == 1 for t in tasks)


def test_significance_cache_never_answers_for_a_collected_data_set() -> None:
    """The cache is keyed by ``id(data)``; a data set built, used and dropped must not lend its
    significances to the next one that happens to get the same id."""
    base = load_digit_blocks(4, seed=0)
    for digit in (3, 7):
        first = Digits(dict(base.blocks), base.x_val, base.y_val, base.x_test, base.y_test)
        digit_significance(first, digit)
        del first
        flipped = {b: (xb, (yb + 1) % 10) for b, (xb, yb) in base.blocks.items()}
        second = Digits(flipped, base.x_val, base.y_val, base.x_test, base.y_test)
        assert digit_significance(second, digit) == _digit_significance(second, digit)

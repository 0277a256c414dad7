"""Pipelines split the run's budget across their stages and draw before releasing; the
concentration bounds and noise corrections match their distributions."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from scipy import stats

from blockbudget.apps.flights.features import Granularity, year_frame
from blockbudget.apps.flights.pipelines import AverageSpeedPipeline, regression_pipeline
from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError, ReservationError
from blockbudget.mechanisms import SeededNoise
from blockbudget.training import (
    BudgetSplit,
    Inequality,
    MeteredSource,
    Outcome,
    SlaMode,
)
from blockbudget.training.bounds import (
    bernstein_upper,
    clopper_pearson_lower,
    clopper_pearson_upper,
    hoeffding_margin,
    laplace_one_sided,
    laplace_two_sided,
)
from blockbudget.training.pipeline import split_frame, split_rows


@pytest.fixture(scope="module")
def month() -> object:
    frame = year_frame()
    return frame[frame["month"] == 3].reset_index(drop=True)


def test_regression_pipeline_splits_its_budget_and_charges_each_stage(month: object) -> None:
    src = MeteredSource()
    run = regression_pipeline(target=0.03).run(
        src, month, epsilon=1.0, delta=1e-6, eta=0.05, noise=SeededNoise(1), seed=2
    )
    labels = [label for label, _ in src.draws]
    assert labels == ["adassp-regression/train", "adassp-regression/validate"]
    assert src.draws[0][1] == Budget(epsilon=Decimal("0.5"), delta=1e-6)
    assert src.draws[1][1] == Budget(epsilon=Decimal("0.5"))
    assert src.spent == Budget(epsilon=1.0, delta=1e-6)
    total = run.n_train + run.n_test
    assert abs(run.n_test - 0.1 * total) < 5 * math.sqrt(0.09 * total)  # per-row coin, 10%
    assert run.validation.outcome is Outcome.ACCEPT  # a month of flights: bound ≈ 0.022 < 0.03


def test_the_split_of_a_neighbor_differs_only_in_the_changed_row(month: object) -> None:
    """Each row's side depends on that row alone: removing one row moves no other row, so
    each split of a neighboring window is a neighbor of the split (parallel composition)."""
    frame = month  # type: ignore[assignment]
    train, test = split_frame(frame, test_fraction=0.1, seed=7)
    assert len(train) + len(test) == len(frame) and not set(train) & set(test)
    drop = int(test[3])
    smaller = frame.drop(index=drop).reset_index(drop=True)
    train2, test2 = split_frame(smaller, test_fraction=0.1, seed=7)
    kept = np.delete(np.arange(len(frame)), drop)
    assert np.array_equal(kept[train2], train) and np.array_equal(kept[test2], test[test != drop])
    # the permutation split (simulations only) reshuffles almost every row for the same change
    _, perm_test = split_rows(len(frame), test_fraction=0.1, seed=7)
    _, perm_test2 = split_rows(len(frame) - 1, test_fraction=0.1, seed=7)
    assert len(set(perm_test) & set(kept[perm_test2])) < 0.5 * len(perm_test)
    # the seed matters, and the fraction is checked
    assert not np.array_equal(split_frame(frame, test_fraction=0.1, seed=8)[1], test)
    for bad in (0.0, 1.0, float("nan"), True):
        with pytest.raises(InvalidRequestError, match="test_fraction"):
            split_frame(frame, test_fraction=bad, seed=7)


def test_a_refused_stage_stops_the_pipeline(month: object) -> None:
    src = MeteredSource(cap=Budget(epsilon=0.6, delta=1e-6))
    with pytest.raises(ReservationError):
        regression_pipeline(target=0.02).run(src, month, epsilon=1.0, delta=1e-6, eta=0.05)
    assert [label for label, _ in src.draws] == ["adassp-regression/train"]


def test_an_np_sla_pipeline_is_refused_before_anything_is_charged(month: object) -> None:
    src = MeteredSource()
    pipe = regression_pipeline(target=0.03, mode=SlaMode.NON_PRIVATE)
    with pytest.raises(InvalidRequestError, match="NON_PRIVATE"):
        pipe.run(src, month, epsilon=1.0, delta=1e-6, eta=0.05, noise=SeededNoise(1))
    assert src.draws == []


def test_statistics_pipeline_validates_the_released_means(month: object) -> None:
    src = MeteredSource()
    run = AverageSpeedPipeline(target=60.0, granularity=Granularity.DAY_OF_WEEK).run(
        src, month, epsilon=1.0, delta=0, eta=0.05, noise=SeededNoise(3)
    )
    assert run.validation.outcome is Outcome.ACCEPT
    assert len(run.model.value.means) == 7
    # The validation reuses the counts and sums the release published and costs nothing, so
    # the release gets the whole ε.
    assert src.spent == Budget(epsilon=1.0) and [c for _, c in src.draws] == [Budget(epsilon=1)]
    assert run.validation.cost is None and run.validation.epsilon == 0
    eb = AverageSpeedPipeline(
        target=60.0, granularity=Granularity.DAY_OF_WEEK, inequality=Inequality.EMPIRICAL_BERNSTEIN
    ).run(MeteredSource(), month, epsilon=1.0, delta=0, eta=0.05, noise=SeededNoise(3))
    assert eb.validation.outcome is Outcome.ACCEPT and eb.validation.epsilon == Decimal("0.5")
    assert eb.validation.accept_bound < run.validation.accept_bound


def test_budget_split_is_checked_and_never_exceeds_the_whole() -> None:
    parts = BudgetSplit(preprocess=0.1, train=0.6, validate=0.3).parts(Decimal(1), Decimal("1e-6"))
    assert sum(e for e, _ in parts.values()) <= 1
    assert sum(d for _, d in parts.values()) <= Decimal("1e-6")
    assert parts["validate"][1] == 0
    for bad in ({"train": 0.0}, {"validate": -0.1}, {"train": 0.8, "validate": 0.5}):
        with pytest.raises(InvalidRequestError):
            BudgetSplit(**bad)


def test_laplace_corrections_are_exact_tails() -> None:
    for scale, p in ((2.0, 0.01), (0.5, 0.2)):
        assert stats.laplace(scale=scale).sf(laplace_one_sided(scale, p)) == pytest.approx(p)
        two = laplace_two_sided(scale, p)
        assert 2 * stats.laplace(scale=scale).sf(two) == pytest.approx(p)


def test_clopper_pearson_matches_scipy_and_rounds_noisy_counts_conservatively() -> None:
    ci = stats.binomtest(80, 100).proportion_ci(confidence_level=0.9, method="exact")
    assert clopper_pearson_lower(80, 100, p=0.05) == pytest.approx(ci.low)
    assert clopper_pearson_upper(80, 100, p=0.05) == pytest.approx(ci.high)
    assert clopper_pearson_lower(80.9, 99.2, p=0.05) == clopper_pearson_lower(80, 100, p=0.05)
    assert clopper_pearson_lower(0, 10, p=0.05) == 0.0 and clopper_pearson_upper(5, 0, p=0.05) == 1


def test_bernstein_and_hoeffding_cover_their_means_by_simulation() -> None:
    rng = np.random.default_rng(0)
    n, mean, p = 500, 0.1, 0.05
    sums = rng.binomial(n, mean, size=20_000) / n
    upper = np.array([bernstein_upper(s, n, bound=1.0, p=p) for s in sums])
    assert np.mean(upper < mean) <= p
    assert np.mean(sums - hoeffding_margin(n, bound=1.0, p=p) > mean) <= p
    assert bernstein_upper(0.1, 0, bound=1.0, p=p) == math.inf

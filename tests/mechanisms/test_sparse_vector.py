"""AboveThreshold (Dwork & Roth 2014 Alg. 1): exact at huge ε, halts, charged once."""

from __future__ import annotations

import copy
import pickle
from fractions import Fraction

import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve
from blockbudget.errors import (
    BudgetExceededError,
    DataError,
    InvalidBudgetError,
    InvalidRequestError,
)
from blockbudget.mechanisms import AboveThreshold, SeededNoise
from blockbudget.mechanisms.noise import NoiseKind

from .fakes import FakeSource, NoNoise


def test_answers_exactly_at_huge_epsilon_and_halts_after_the_first_true() -> None:
    source = FakeSource()
    at = AboveThreshold(source, epsilon=1e12, threshold=10.0)  # secure noise, scale ~ 4e-12
    assert at.secure_noise is True
    assert [at.query(v) for v in (1.0, 5.0, 9.9, -3.0)] == [False] * 4
    assert at.query(10.1) is True
    assert at.halted and at.answered == 5
    with pytest.raises(InvalidRequestError, match="halted"):
        at.query(100.0)
    with pytest.raises(InvalidRequestError):
        at.query(0.0)
    assert len(source.draws) == 1  # charged once, at construction


def test_threshold_is_inclusive_at_zero_noise() -> None:
    at = AboveThreshold(FakeSource(), epsilon=1.0, threshold=3.0, noise=NoNoise())
    assert at.query(2.999) is False
    assert at.query(3.0) is True


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (Accounting.BASIC, Budget(epsilon="0.4")),
        (Accounting.STRONG, Budget(epsilon="0.4")),
        (Accounting.RDP, RdpCurve.from_pure_dp("0.4")),
    ],
)
def test_cost_is_drawn_once_before_any_noise(rule: Accounting, expected: object) -> None:
    events: list[str] = []
    source = FakeSource(rule, events=events)
    at = AboveThreshold(source, epsilon="0.4", threshold=0.0, noise=NoNoise(events), label="svt")
    for _ in range(50):
        at.query(-1.0)
    assert source.draws == [(expected, "svt")]
    assert at.cost == expected
    assert events[0] == "draw:svt"
    assert events[1:] == ["noise:laplace"] * 51  # threshold + 50 queries


def test_noise_scales_are_two_and_four_delta_over_epsilon_rounded_up() -> None:
    noise = NoNoise()
    at = AboveThreshold(FakeSource(), epsilon=0.3, threshold=5.0, sensitivity=1.5, noise=noise)
    at.query(1.0)
    threshold_call, query_call = noise.calls
    eps = Fraction(3, 10)
    for call, factor in ((threshold_call, 2), (query_call, 4)):
        exact = Fraction(factor) * Fraction(1.5) / eps
        assert call.kind is NoiseKind.LAPLACE
        assert Fraction(call.scale) >= exact
        assert call.scale == pytest.approx(float(exact), rel=1e-15)
    assert threshold_call.values == (5.0,)
    assert query_call.values == (1.0,)
    assert [p.scale for p in at.perturbations] == [threshold_call.scale, query_call.scale]


def test_a_refused_draw_samples_nothing() -> None:
    noise = NoNoise()
    with pytest.raises(BudgetExceededError):
        AboveThreshold(FakeSource(refuse=True), epsilon=1.0, threshold=0.0, noise=noise)
    assert noise.calls == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"epsilon": 0}, InvalidBudgetError),
        ({"sensitivity": -1.0}, InvalidBudgetError),
        ({"threshold": float("nan")}, InvalidRequestError),
        ({"threshold": "10"}, InvalidRequestError),
    ],
)
def test_invalid_parameters_draw_nothing(kwargs: dict[str, object], error: type[Exception]) -> None:
    source = FakeSource()
    params: dict[str, object] = {"epsilon": 1.0, "threshold": 0.0} | kwargs
    with pytest.raises(error):
        AboveThreshold(source, **params)  # type: ignore[arg-type]
    assert source.events == []


def test_non_finite_query_values_are_refused() -> None:
    at = AboveThreshold(FakeSource(), epsilon=1.0, threshold=0.0, noise=NoNoise())
    with pytest.raises(DataError):
        at.query(float("inf"))
    with pytest.raises(DataError):
        at.query("3")  # type: ignore[arg-type]
    assert at.answered == 0


def test_it_cannot_be_copied_or_pickled() -> None:
    at = AboveThreshold(FakeSource(), epsilon=1.0, threshold=0.0, noise=SeededNoise(1))
    with pytest.raises(InvalidRequestError):
        copy.copy(at)
    with pytest.raises(InvalidRequestError):
        copy.deepcopy(at)
    with pytest.raises(InvalidRequestError):
        pickle.dumps(at)
    assert "SeededNoise" not in repr(at) and "open" in repr(at)


def test_false_answers_are_mostly_right_far_below_the_threshold() -> None:
    """With ε = 1 and queries 40 below the threshold, a False is wrong only if the two Laplace
    noises (scales 2 and 4) differ by more than 40: probability < 2·e^{−40/4} ≈ 1e-4 per query,
    so the chance that any of 20 queries says True is < 3e-3 for any seed; the seed fixes it."""
    at = AboveThreshold(FakeSource(), epsilon=1.0, threshold=50.0, noise=SeededNoise(11))
    assert not any(at.query(10.0) for _ in range(20))
    assert at.query(200.0) is True

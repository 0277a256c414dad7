"""Calibration: Laplace scales rounded up exactly; the analytic Gaussian against references."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from dp_accounting import GaussianDpEvent
from dp_accounting.pld import common, privacy_loss_mechanism
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from hypothesis import given
from hypothesis import strategies as st

from blockbudget.accounting import get_rule
from blockbudget.budget import ALPHAS, Budget, RdpCurve
from blockbudget.errors import InvalidBudgetError
from blockbudget.mechanisms.calibration import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    float_down,
    float_up,
    laplace_scale,
    rdp_gaussian_sigma,
    split_epsilon,
)


def exact_ratio(sensitivity: float, epsilon: object) -> Fraction:
    """Δ/ε with rational arithmetic (independent of the Decimal code under test)."""
    eps = Fraction(Decimal(repr(epsilon)) if isinstance(epsilon, float) else Decimal(str(epsilon)))
    return Fraction(sensitivity) / eps


def assert_rounded_up(scale: float, target: Fraction) -> None:
    assert Fraction(scale) >= target
    assert Fraction(math.nextafter(scale, 0.0)) < target


@pytest.mark.parametrize(
    ("sensitivity", "epsilon"),
    [
        (1.0, 0.1),
        (1.0, 3),
        (1.0, "0.3"),
        (2.0, Decimal("0.7")),
        (0.1, 0.1),
        (1.0, 1e-9),
        (5.5, 1e12),
        (1.0, "1.000000000000000000000000000001"),
    ],
)
def test_laplace_scale_is_the_smallest_double_above_sensitivity_over_epsilon(
    sensitivity: float, epsilon: object
) -> None:
    scale = laplace_scale(sensitivity=sensitivity, epsilon=epsilon)  # type: ignore[arg-type]
    assert_rounded_up(scale, exact_ratio(sensitivity, epsilon))


def test_laplace_scale_is_above_the_naive_float_division_when_it_rounds_down() -> None:
    # 1/3 as a double is below the real 1/3; the calibrated scale must not be.
    assert Fraction(1.0 / 3.0) < Fraction(1, 1) / Fraction(3)
    scale = laplace_scale(sensitivity=1.0, epsilon=3)
    assert scale == math.nextafter(1.0 / 3.0, math.inf)
    # ε given as the float 0.1 means the decimal 0.1 (budget.py), so Δ/ε is exactly 10.
    assert laplace_scale(sensitivity=1.0, epsilon=0.1) == 10.0


@given(
    sensitivity=st.floats(min_value=1e-6, max_value=1e6),
    epsilon=st.decimals(min_value=Decimal("1e-6"), max_value=Decimal("1e6"), places=12),
)
def test_laplace_scale_rounds_up_for_any_inputs(sensitivity: float, epsilon: Decimal) -> None:
    if epsilon <= 0:
        return
    scale = laplace_scale(sensitivity=sensitivity, epsilon=epsilon)
    assert_rounded_up(scale, Fraction(sensitivity) / Fraction(epsilon))


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "abc", True])
def test_laplace_scale_rejects_bad_epsilon(bad: object) -> None:
    with pytest.raises(InvalidBudgetError):
        laplace_scale(sensitivity=1.0, epsilon=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), True])
def test_laplace_scale_rejects_bad_sensitivity(bad: float) -> None:
    with pytest.raises(InvalidBudgetError):
        laplace_scale(sensitivity=bad, epsilon=1.0)


def test_float_up_and_down_bracket_the_decimal() -> None:
    d = Decimal(1) / Decimal(3)
    assert Fraction(float_down(d)) <= Fraction(d) <= Fraction(float_up(d))
    assert math.nextafter(float_down(d), math.inf) == float_up(d)
    assert float_up(Decimal("0.5")) == float_down(Decimal("0.5")) == 0.5


@pytest.mark.parametrize(("epsilon", "parts"), [(1, 2), ("0.1", 3), (Decimal("1") / 7, 3), (2, 7)])
def test_split_epsilon_never_exceeds_the_total(epsilon: object, parts: int) -> None:
    share = split_epsilon(epsilon, parts)  # type: ignore[arg-type]
    total = Decimal(str(epsilon)) if not isinstance(epsilon, Decimal) else epsilon
    assert Fraction(share) * parts <= Fraction(total)
    assert Fraction(total) - Fraction(share) * parts < Fraction(1, 10**40)


def test_split_epsilon_halves_exactly() -> None:
    assert split_epsilon("0.3", 2) == Decimal("0.15")


GAUSSIAN_CASES = [
    (1.0, 1e-5, 1.0),
    (0.5, 1e-6, 2.0),
    (0.01, 1e-10, 1.0),
    (0.9, 1e-3, 0.5),
    (3.0, 1e-6, 1.0),
    (10.0, 1e-9, 4.0),
]


@pytest.mark.parametrize(("epsilon", "delta", "sensitivity"), GAUSSIAN_CASES)
def test_analytic_gaussian_meets_the_target_exactly_per_dp_accounting(
    epsilon: float, delta: float, sensitivity: float
) -> None:
    sigma = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    # dp-accounting's exact Gaussian privacy loss (its own implementation of the same curve).
    loss = privacy_loss_mechanism.GaussianPrivacyLoss(sigma, sensitivity=sensitivity)
    assert loss.get_delta_for_epsilon(epsilon) <= delta
    # ... and it is tight: 1e-6 less noise already breaks the target.
    smaller = privacy_loss_mechanism.GaussianPrivacyLoss(sigma * (1 - 1e-6), sensitivity)
    assert smaller.get_delta_for_epsilon(epsilon) > delta
    # agrees with dp-accounting's own calibration to 1e-6
    ref = privacy_loss_mechanism.GaussianPrivacyLoss.from_privacy_guarantee(
        common.DifferentialPrivacyParameters(epsilon, delta), sensitivity=sensitivity
    ).standard_deviation
    assert sigma == pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize("epsilon", [0.05, 0.3, 0.7, 0.99])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-12])
def test_analytic_gaussian_beats_the_classical_bound_below_epsilon_one(
    epsilon: float, delta: float
) -> None:
    analytic = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=2.0)
    classical = classical_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=2.0)
    assert analytic <= classical


def test_the_classical_bound_is_not_private_above_epsilon_one() -> None:
    # Why the analytic calibration is needed: at ε = 10 the classical σ falls short.
    classical = classical_gaussian_sigma(epsilon=10.0, delta=1e-9)
    assert analytic_gaussian_delta(sigma=classical, epsilon=10.0) > 1e-9
    assert analytic_gaussian_sigma(epsilon=10.0, delta=1e-9) > classical


def test_analytic_gaussian_delta_decreases_in_sigma() -> None:
    deltas = [analytic_gaussian_delta(sigma=s, epsilon=1.0) for s in (0.5, 1, 2, 4, 8)]
    assert deltas == sorted(deltas, reverse=True)
    assert deltas[-1] < 1e-10


def test_analytic_gaussian_rounds_epsilon_down_to_a_double() -> None:
    # ε = 0.1 means the decimal 0.1, which lies below the double 0.1: the solver must use the
    # double just below it (more noise), the same one as for any decimal in between.
    assert float_down(Decimal("0.1")) < 0.1
    between = analytic_gaussian_sigma(epsilon="0.1000000000000000000001", delta=1e-5)
    assert between == analytic_gaussian_sigma(epsilon=0.1, delta=1e-5)


@pytest.mark.parametrize(("kwargs"), [{"delta": 0}, {"delta": 1}, {"epsilon": 0}, {"delta": -1}])
def test_analytic_gaussian_rejects_bad_parameters(kwargs: dict[str, float]) -> None:
    params: dict[str, float] = {"epsilon": 1.0, "delta": 1e-5} | kwargs
    with pytest.raises(InvalidBudgetError):
        analytic_gaussian_sigma(**params)


@pytest.mark.parametrize(("epsilon", "delta", "sensitivity"), [(1.0, 1e-5, 1.0), (3.0, 1e-6, 2.0)])
def test_rdp_gaussian_sigma_converts_to_at_most_the_target(
    epsilon: float, delta: float, sensitivity: float
) -> None:
    sigma = rdp_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    curve = RdpCurve.gaussian(sigma=sigma, sensitivity=sensitivity)
    assert curve.to_dp(delta=delta).epsilon <= Decimal(repr(epsilon))
    # dp-accounting's RDP accountant on the same orders agrees
    acc = rdp.RdpAccountant(list(ALPHAS))
    acc.compose(GaussianDpEvent(sigma / sensitivity))
    assert acc.get_epsilon(delta) <= epsilon
    # it is the rdp2 filter's conversion: the curve fits an empty (ε, δ) block, and a little
    # less noise does not
    f = get_rule("rdp2").filter(capacity=Budget(epsilon=repr(epsilon), delta=repr(delta)))
    assert f.fits(f.features(curve))
    less = RdpCurve.gaussian(sigma=sigma * (1 - 1e-9), sensitivity=sensitivity)
    assert not f.fits(f.features(less))
    # RDP on a 12-order grid needs more noise than the exact analytic calibration
    assert sigma > analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)

"""Laplace RDP pricing: finite, never below the exact curve, never above the pure-DP bound."""

from __future__ import annotations

import decimal
import math

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbudget.budget import ALPHAS, RdpCurve
from blockbudget.errors import InvalidBudgetError


def _exact(alpha: float, t: float) -> mp.mpf:
    """Mironov 2017, Prop. 6, at 100 digits (in log space, as mpmath has no overflow anyway)."""
    with mp.workdps(100):
        a, x = mp.mpf(repr(alpha)), mp.mpf(repr(t))
        arg = a / (2 * a - 1) * mp.exp((a - 1) * x) + (a - 1) / (2 * a - 1) * mp.exp(-a * x)
        return mp.log(arg) / (a - 1)


def _check(scale: float, sensitivity: float) -> None:
    curve = RdpCurve.laplace(scale=scale, sensitivity=sensitivity)
    t = mp.mpf(repr(sensitivity)) / mp.mpf(repr(scale))
    for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
        assert value.is_finite(), (alpha, value)
        with mp.workdps(100):
            assert mp.mpf(str(value)) >= _exact(alpha, sensitivity / scale), (alpha, value)
            assert mp.mpf(str(value)) <= t * (1 + mp.mpf("1e-30")), (alpha, value)


@pytest.mark.parametrize("sensitivity", [1e3, 1e5, 1e8, 1e12])
def test_huge_sensitivity_over_scale_prices_finite_and_bounded(sensitivity: float) -> None:
    # e^{(α−1)Δ/b} at α=64 passed Decimal's Emax: a raw decimal.Overflow before.
    _check(1.0, sensitivity)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(log_t=st.floats(min_value=-30.0, max_value=25.0))
def test_laplace_curve_between_exact_and_pure_dp_bound(log_t: float) -> None:
    _check(1.0, math.exp(log_t))


@pytest.mark.parametrize(
    ("scale", "sensitivity"), [(1.0, -1.0), (1.0, math.inf), (1.0, math.nan), (0.0, 1.0)]
)
def test_bad_laplace_parameters_are_refused(scale: float, sensitivity: float) -> None:
    with pytest.raises(InvalidBudgetError):
        RdpCurve.laplace(scale=scale, sensitivity=sensitivity)


def test_decimal_signal_in_pricing_is_an_invalid_budget_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import decimal

    import blockbudget.budget as budget_module

    def overflow(alpha: float, t: object) -> float:
        raise decimal.Overflow("simulated")

    monkeypatch.setattr(budget_module, "_laplace_rdp", overflow)
    with pytest.raises(InvalidBudgetError, match="cannot be computed"):
        RdpCurve.laplace(scale=1.0, sensitivity=1.0)


@pytest.mark.parametrize("epsilon", [3.041e18, 3.0e20, 7.77e13, 1.23456789e25])
def test_a_huge_epsilon_laplace_is_never_priced_below_its_exact_rdp(epsilon: float) -> None:
    """Where the pure-DP cap binds (t = Δ/b ≳ 1e11), t must be the exact quotient of the
    doubles the mechanism uses: their shortest decimals can be below it (a review found 1,530
    of 3,600 orders priced low)."""
    scale = 1.0 / epsilon
    curve = RdpCurve.laplace(scale=scale)
    with mp.workdps(200):
        t = mp.mpf(1) / mp.mpf(scale)  # mpf of a float is its exact binary value
        for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
            a = mp.mpf(alpha)
            tail = (a - 1) / (2 * a - 1) * mp.exp(-(2 * a - 1) * t)
            exact = t + mp.log(a / (2 * a - 1) + tail) / (a - 1)
            assert mp.mpf(str(value)) >= exact, (alpha, value)


def test_laplace_pricing_ignores_the_callers_decimal_context() -> None:
    with decimal.localcontext(decimal.Context(traps=[decimal.Inexact])):
        assert RdpCurve.laplace(scale=2.0) == RdpCurve.laplace(scale=2.0, sensitivity=1.0)

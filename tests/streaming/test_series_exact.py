"""DPI's series (seed 002, S&P'24, Thm 5.4 / App. B.4) sums to at most ε in exact arithmetic, and
its ratio r is found by a bounded bisection."""

from __future__ import annotations

import math
from decimal import Decimal

import mpmath
import pytest

from blockbudget.budget import units_up
from blockbudget.streaming.accountant import StreamAccountant
from blockbudget.streaming.config import DPIConfig
from blockbudget.streaming.series import DPISeries, solve_ratio, tail_sum_upper

#: for_horizon settings as the experiments use them; several summed above ε by up to ~4e-14.
HORIZONS = [(1.0, 365), (10.0, 365), (2.0, 100), (5.0, 100), (0.5, 30), (10.0, 1000)]


def _series(config: DPIConfig) -> DPISeries:
    return DPISeries(epsilon=config.epsilon, mu=config.mu, zeta=config.zeta)


def _exact_sum(scale: float, r: float) -> mpmath.mpf:
    """C·(π²/6 − Li₂(r)) at 60 digits, with C and r the exact values of the floats."""
    with mpmath.workdps(60):
        return mpmath.mpf(scale) * (mpmath.pi**2 / 6 - mpmath.polylog(2, mpmath.mpf(r)))


@pytest.mark.parametrize(("epsilon", "slots"), HORIZONS)
def test_infinite_sum_of_the_series_is_at_most_epsilon_in_exact_arithmetic(
    epsilon: float, slots: int
) -> None:
    series = _series(DPIConfig.for_horizon(epsilon=epsilon, slots=slots))
    total = _exact_sum(series.scale, series.ratio)
    assert total <= mpmath.mpf(epsilon)
    assert total >= mpmath.mpf(epsilon) * (1 - mpmath.mpf("1e-11"))  # and it still spends ε
    assert series.total <= epsilon
    assert Decimal(repr(series.total)) >= Decimal(str(total)) * (1 - Decimal("1e-15"))


@pytest.mark.parametrize(("epsilon", "slots"), HORIZONS[:3])
def test_every_prefix_sum_is_at_most_epsilon_on_the_ledger_grid(epsilon: float, slots: int) -> None:
    series = _series(DPIConfig.for_horizon(epsilon=epsilon, slots=slots))
    accountant = StreamAccountant(epsilon=epsilon)
    exact_total = Decimal(0)
    scale, r = mpmath.mpf(series.scale), mpmath.mpf(series.ratio)
    for t in range(1, 20_001):
        grid = series.exact_term(t)
        assert grid == grid.quantize(Decimal("1e-18"))  # on the grid
        charged = Decimal(repr(series.term(t)))  # what the accountant reads
        assert charged <= grid
        assert units_up(charged) == accountant.units(series.term(t)) <= units_up(grid)
        exact_total += grid
        if t % 997 == 1:  # the grid term is below Thm 5.4's formula for this C and r
            with mpmath.workdps(60):
                assert mpmath.mpf(str(grid)) <= scale * (1 - r**t) / t**2
        assert accountant.try_charge(series.term(t))
    assert exact_total <= Decimal(repr(epsilon))
    assert accountant.spent <= Decimal(repr(epsilon))


def test_tail_sum_upper_bounds_pi2_6_minus_dilog() -> None:
    with mpmath.workdps(60):
        for r in [0.0, 1e-300, 1e-17, 0.25, 0.5, 0.5000000000000001, 0.9, 0.999, 1 - 2**-52]:
            exact = mpmath.pi**2 / 6 - mpmath.polylog(2, mpmath.mpf(r))
            upper = mpmath.mpf(str(tail_sum_upper(r)))
            assert exact <= upper <= exact * (1 + mpmath.mpf("1e-40")) + mpmath.mpf("1e-60")


@pytest.mark.timeout(5)
def test_ratio_near_the_cap_is_solved_quickly() -> None:
    """ε just below C·π²/6 (C = 20 with the defaults): the old solver walked r up one ulp at a
    time from ~1e-300 and never returned."""
    config = DPIConfig(epsilon=32.89868133696452)
    series = _series(config)
    assert 0.0 <= series.ratio < 1e-10
    total = _exact_sum(series.scale, series.ratio)
    assert total <= mpmath.mpf(config.epsilon)
    assert total >= mpmath.mpf(config.epsilon) * (1 - mpmath.mpf("1e-12"))


@pytest.mark.timeout(5)
@pytest.mark.parametrize("share", [1e-12, 1e-6, 0.01, 0.3, 0.6, 0.9, 0.999999, 1 - 1e-15])
def test_solved_ratio_satisfies_its_equation(share: float) -> None:
    scale = 40.0
    epsilon = scale * share * float(mpmath.pi**2 / 6)
    r = solve_ratio(epsilon=epsilon, scale=scale)
    assert 0.0 <= r < 1.0
    eps = mpmath.mpf(epsilon)
    # The root is bracketed to one ulp of r: C·S(r) ≤ ε and C·S(r⁻) ≥ ε for the float r⁻ just
    # below, both up to the float evaluation's rounding (the decimal check is the series' job).
    assert _exact_sum(scale, r) <= eps * (1 + mpmath.mpf("1e-13"))
    assert _exact_sum(scale, math.nextafter(r, 0.0)) >= eps * (1 - mpmath.mpf("1e-13"))
    if share > 1e-6:  # away from r ≈ 1, one ulp of r moves the sum by little
        assert _exact_sum(scale, r) >= eps * (1 - mpmath.mpf("1e-12"))
    series = DPISeries(epsilon=epsilon, mu=0.5, zeta=2.0 / (0.5 * scale))
    assert _exact_sum(series.scale, series.ratio) <= mpmath.mpf(epsilon)

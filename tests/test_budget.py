"""Budget and RdpCurve: validation on construction and exact, conservative arithmetic."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbudget.budget import (
    ALPHAS,
    INF_UNITS,
    UNIT,
    Budget,
    RdpCurve,
    bump_up,
    from_units,
    rdp_to_dp,
    sum_costs,
    to_decimal,
    units_down,
    units_up,
)
from blockbudget.errors import InvalidBudgetError


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [
        (-0.1, 0.0),
        (math.nan, 0.0),
        (math.inf, 0.0),
        (1.0, 1.0),
        (1.0, 1.5),
        (1.0, -1e-9),
        (1.0, math.nan),
        ("abc", 0.0),
        (True, 0.0),
        ("1e999999999", 0.0),  # would overflow Decimal arithmetic
        (1e31, 0.0),
        (1e-101, 0.0),  # below the smallest storable magnitude
        (1.0, 1e-200),
    ],
)
def test_invalid_budgets_are_refused(epsilon: object, delta: object) -> None:
    with pytest.raises(InvalidBudgetError):
        Budget(epsilon=epsilon, delta=delta)  # type: ignore[arg-type]


def test_budget_is_frozen_and_keyword_only() -> None:
    b = Budget(epsilon=0.5, delta=1e-6)
    with pytest.raises(AttributeError):
        b.epsilon = Decimal(1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Budget(0.5)  # type: ignore[misc]


def test_floats_are_read_as_their_shortest_decimal() -> None:
    assert Budget(epsilon=0.1).epsilon == Decimal("0.1")
    assert Budget(epsilon="0.1") == Budget(epsilon=0.1)
    assert Budget(epsilon=Decimal("0.1")) == Budget(epsilon=0.1)


def test_ten_tenths_fit_one_and_an_extra_nanoepsilon_does_not() -> None:
    total = sum([Budget(epsilon=0.1)] * 10, Budget.zero())
    assert total == Budget(epsilon=1.0)
    assert total <= Budget(epsilon=1.0)
    assert not (total + Budget(epsilon=1e-9) <= Budget(epsilon=1.0))
    # The same holds in fixed point, where the ledger stores budgets.
    assert 10 * units_up(Decimal("0.1")) == units_down(Decimal("1.0"))
    assert 10 * units_up(Decimal("0.1")) + units_up(Decimal("1e-9")) > units_down(Decimal(1))


def test_fixed_point_rounds_charges_up_and_capacities_down() -> None:
    # Directed rounding even past the 200-digit working precision.
    long = Decimal("0." + "1" + "0" * 240 + "1")
    assert units_up(long) == units_up(Decimal("0.1")) + 1
    assert units_down(long) == units_down(Decimal("0.1"))
    tiny = Decimal("1e-30")
    assert units_up(tiny) == 1
    assert units_down(tiny) == 0
    third = Decimal(1) / Decimal(3)
    assert units_up(third) == units_down(third) + 1
    assert from_units(UNIT) == 1
    assert units_up(Decimal("Infinity")) == INF_UNITS
    assert from_units(INF_UNITS).is_infinite()


def test_subtraction_never_goes_negative() -> None:
    with pytest.raises(InvalidBudgetError):
        _ = Budget(epsilon=0.1) - Budget(epsilon=0.2)
    assert Budget(epsilon=0.3, delta=1e-6) - Budget(epsilon=0.1) == Budget(
        epsilon="0.2", delta=1e-6
    )


@given(st.lists(st.decimals(min_value=0, max_value=1, places=12), min_size=1, max_size=30))
def test_sums_are_exact(values: list[Decimal]) -> None:
    total = sum((Budget(epsilon=v) for v in values), Budget.zero())
    assert total.epsilon == sum(values, Decimal(0))
    assert sum(units_up(v) for v in values) >= units_down(total.epsilon)


def test_rdp_curve_validation_and_addition() -> None:
    with pytest.raises(InvalidBudgetError):
        RdpCurve([0.1] * 3)
    with pytest.raises(InvalidBudgetError):
        RdpCurve([-0.1] + [0.1] * (len(ALPHAS) - 1))
    with pytest.raises(InvalidBudgetError):
        RdpCurve([math.nan] * len(ALPHAS))
    a = RdpCurve([0.1] * len(ALPHAS))
    total = sum_costs([a] * 10)
    assert isinstance(total, RdpCurve)
    assert all(v == Decimal(1) for v in total.epsilons)
    with pytest.raises(InvalidBudgetError):
        sum_costs([a, Budget(epsilon=0.1)])


def test_gaussian_curve_matches_formula_and_rounds_up() -> None:
    curve = RdpCurve.gaussian(sigma=2.0, sensitivity=1.0)
    for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
        exact = alpha / 8.0
        assert float(value) >= exact
        assert float(value) <= exact * (1 + 1e-9)


def test_laplace_curve_is_a_valid_rdp_curve_below_the_pure_dp_bound() -> None:
    for scale in [0.5, 2.0, 50.0]:
        eps = 1.0 / scale
        curve = RdpCurve.laplace(scale=scale, sensitivity=1.0)
        pure = RdpCurve.from_pure_dp(eps)
        for alpha, lap, bound in zip(ALPHAS, curve.epsilons, pure.epsilons, strict=True):
            assert 0 < lap <= bound * Decimal(1 + 1e-9), (scale, alpha)
            # Small-order limit of the exact curve: ≈ α·ε²/2 when α·ε is small.
            if alpha * eps <= 0.1:
                assert float(lap) == pytest.approx(alpha * eps * eps / 2, rel=0.05)
        values = [float(v) for v in curve.epsilons]
        assert values == sorted(values)  # monotone in α, as every RDP curve is


def test_rdp_conversion_through_dp_accounting() -> None:
    curve = RdpCurve.gaussian(sigma=1.0)
    budget = rdp_to_dp(curve, delta=1e-5)
    assert budget.delta == Decimal("1e-5")
    # ε = min_α α/2 + log(1/δ)/(α−1) over the grid is an upper bound on dp-accounting's answer.
    naive = min(a / 2 + math.log(1e5) / (a - 1) for a in ALPHAS)
    assert 0 < float(budget.epsilon) <= naive
    with pytest.raises(InvalidBudgetError):
        rdp_to_dp(curve, delta=0.0)


def test_bump_up_is_strictly_conservative() -> None:
    for x in [1e-300, 0.1, 1.0, 123.456]:
        assert bump_up(x) > x
    assert bump_up(0.0) == 0.0


def test_laplace_curve_never_undercounts_against_a_high_precision_reference() -> None:
    """The exact Laplace RDP (Mironov 2017, Prop. 6) at 400 digits: our stored curve is never
    below it (the float log-sum-exp was, by up to 0.8% at Δ/b = 1e-7) and at most 1e-9 above."""
    import mpmath

    with mpmath.workdps(400):
        for ratio in [10.0, 1.0, 1e-3, 1e-6, 1e-7, 1e-12, 1e-20, 1e-39]:
            curve = RdpCurve.laplace(scale=1.0, sensitivity=ratio)
            t = mpmath.mpf(ratio)
            for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
                a = mpmath.mpf(alpha)
                exact = mpmath.log(
                    a / (2 * a - 1) * mpmath.exp((a - 1) * t)
                    + (a - 1) / (2 * a - 1) * mpmath.exp(-a * t)
                ) / (a - 1)
                exact = min(exact, t)
                relative = (mpmath.mpf(str(value)) - exact) / exact
                assert 0 <= relative < 1e-9, (ratio, alpha, relative)
    # Below 1e-40 the pure-DP bound min(ε, αε²/2) is used, at the larger of the exact binary
    # value of Δ/b (the double the mechanism uses) and its decimal reading: an upper bound both
    # ways (tests/test_laplace_curve_rounding.py).
    tiny = RdpCurve.laplace(scale=1.0, sensitivity=1e-45)
    bound = RdpCurve.from_pure_dp(max(Decimal.from_float(1e-45), Decimal("1e-45")))
    for ours, pure in zip(tiny.epsilons, bound.epsilons, strict=True):
        assert pure <= ours and ours - pure <= pure * Decimal("1e-30")  # Δ/b rounded up


def test_json_has_one_canonical_form_per_value_and_round_trips_exactly() -> None:
    # 0.0 and 0, 0.50 and 0.5 are the same budget: their JSON must be the same too, so that a
    # replayed answer (read back from the ledger) equals the fresh one.
    assert Budget(epsilon=0.2, delta=0.0).to_json() == Budget(epsilon="0.20", delta=0).to_json()
    assert Budget(epsilon=0.2, delta=0.0).to_json() == {"epsilon": "0.2", "delta": "0"}
    assert Budget(epsilon=Decimal("1E+2")).to_json()["epsilon"] == "100"
    long = Decimal("1.000000000000000000000000000000000000001")  # more digits than the context
    for value in (long, Decimal("1E-100"), Decimal("123.4500"), Decimal("1e30")):
        budget = Budget(epsilon=value, delta=Decimal("1e-6"))
        assert Budget.from_json(budget.to_json()) == budget
        assert Decimal(budget.to_json()["epsilon"]) == value
    curve = RdpCurve.from_pure_dp(Decimal("0.50"))
    assert RdpCurve.from_json(curve.to_json()) == curve
    assert all(not v.endswith("0") or v == "0" for v in curve.to_json()["rdp"] if "." in v)


# --- a cost never rounds below its true value (no free charges by underflow) -----------------


@pytest.mark.parametrize("sigma", [1e200, 1e163, 1e160, 1e120, 1e60, 1e50])
def test_gaussian_curve_of_a_huge_sigma_is_never_free(sigma: float) -> None:
    """α·Δ²/(2σ²) is positive for every σ: it was computed in floats, where (Δ/σ)² underflows
    to 0 for σ/Δ above ~1e162, and the charge cost nothing."""
    curve = RdpCurve.gaussian(sigma=sigma)
    assert not curve.is_zero
    for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
        exact = Decimal(repr(alpha)) / (2 * Decimal(repr(sigma)) ** 2)
        assert value >= exact > 0
        assert units_up(value) >= 1  # the ledger charges at least one unit of 1e-18


def test_gaussian_curve_with_a_tiny_ratio_of_tiny_numbers_is_never_free() -> None:
    for sensitivity, sigma in [(1e-200, 1e200), (1e-300, 1.0), (5e-324, 1e10)]:
        curve = RdpCurve.gaussian(sigma=sigma, sensitivity=sensitivity)
        assert not curve.is_zero, (sensitivity, sigma)
        assert all(v > 0 for v in curve.epsilons)
    assert RdpCurve.gaussian(sigma=1e200, sensitivity=0.0).is_zero  # truly free: Δ = 0


@pytest.mark.parametrize("scale", [1e200, 1e120, 1e60, 1e45])
def test_laplace_curve_of_a_huge_scale_is_priced_not_free_nor_refused(scale: float) -> None:
    curve = RdpCurve.laplace(scale=scale)
    t = 1 / Decimal(repr(scale))
    for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
        assert value >= min(t, Decimal(repr(alpha)) * t * t / 2) > 0


@pytest.mark.parametrize("epsilon", [Decimal("1e-100"), Decimal("1e-60"), Decimal("3e-51")])
def test_pure_dp_curve_of_a_tiny_epsilon_is_clamped_up(epsilon: Decimal) -> None:
    curve = RdpCurve.from_pure_dp(epsilon)
    for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
        assert value >= min(epsilon, Decimal(repr(alpha)) * epsilon * epsilon / 2)
        assert value > 0


def test_pure_dp_curve_rounds_up_a_many_digit_epsilon() -> None:
    eps = Decimal(1) / Decimal(3)  # 28 digits: ε² has 56, more than a stored value keeps
    curve = RdpCurve.from_pure_dp(eps)
    with localcontext() as ctx:
        ctx.prec = 200  # exact
        for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
            assert value >= min(eps, Decimal(repr(alpha)) * eps * eps / 2)


BAD_TEXTS = ["１", "\u0661", "٣.5", " 1", "1 ", "1\n", "1_0", "0x1", "1e", "."]


@pytest.mark.parametrize("text", BAD_TEXTS)
def test_budget_text_is_ascii_decimal_only(text: str) -> None:
    from blockbudget.cli.common import budget_number
    from blockbudget.errors import InvalidRequestError

    with pytest.raises(InvalidBudgetError, match="ASCII digits"):
        Budget(epsilon=text)
    with pytest.raises(InvalidBudgetError, match="ASCII digits"):
        Budget(epsilon=1, delta=text)
    with pytest.raises(InvalidRequestError, match="--epsilon must be a decimal number"):
        budget_number(text)


def test_budget_text_forms_and_short_messages() -> None:
    for text, value in [("1e-9", "1E-9"), (".5", "0.5"), ("+2.", "2"), ("-0.25E+1", "-2.5")]:
        assert to_decimal(text, name="x") == Decimal(value)
    with pytest.raises(InvalidBudgetError) as info:
        Budget(epsilon="1" * 1_000_000 + "x")
    assert len(str(info.value)) < 200 and "(1000003 characters)" in str(info.value)

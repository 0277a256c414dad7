"""Rényi per-order capacities are never above their exact values.

Version 1 (``rdp``, Mironov's conversion with the whole δ_g): ε_g − ln(1/δ_g)/(α−1); ``rdp2``
(renyi_capacity's theorem): ε_g − (ln(|Λ|/δ_g) − ln α)/(α−1) − ln(α/(α−1)) on the usable orders Λ;
``rdp`` admits at most the smaller of the two at every order.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbudget.accounting import Accounting, RdpFilter
from blockbudget.accounting.rdp2 import Rdp2Filter
from blockbudget.accounting.renyi_capacity import (
    UNUSABLE,
    mironov_capacities,
    proved_capacities,
    proved_orders,
    proved_shares,
)
from blockbudget.budget import ALPHAS, UNIT, Budget, RdpCurve
from blockbudget.errors import BudgetExceededError
from blockbudget.ledger import Ledger


def _exact_units(eps_g: str, delta_g: str, alpha: float) -> mp.mpf:
    with mp.workdps(80):
        log_term = mp.log(1 / mp.mpf(delta_g)) / (mp.mpf(repr(alpha)) - 1)
        return (mp.mpf(eps_g) - log_term) * UNIT


def _exact_proved_units(eps_g: str, delta_g: str, alpha: float, share: Fraction) -> mp.mpf:
    with mp.workdps(80):
        a = mp.mpf(repr(alpha))
        w = mp.mpf(share.numerator) / share.denominator
        term = (mp.log(1 / (w * mp.mpf(delta_g))) - mp.log(a)) / (a - 1) - mp.log(a / (a - 1))
        # ε_g·UNIT as an exact decimal (a binary mpf of ε_g itself can sit an ulp below it)
        return mp.mpf(str(Decimal(eps_g) * UNIT)) - max(term, 0) * UNIT


def _assert_below_exact(eps_g: str, delta_g: str) -> None:
    capacity = Budget(epsilon=eps_g, delta=delta_g)
    legacy = mironov_capacities(capacity)
    proved = proved_capacities(capacity)
    shares = proved_shares(capacity)
    assert sum(shares) in (0, 1)  # δ_g is split over Λ, never more
    for alpha, cap, cap2, share in zip(ALPHAS, legacy, proved, shares, strict=True):
        exact = _exact_units(eps_g, delta_g, alpha)
        assert cap <= exact, (eps_g, delta_g, alpha, cap, exact)
        assert exact - cap < 2  # floored to a unit, not lowered further
        if cap2 == UNUSABLE:
            continue
        assert share > 0
        exact2 = _exact_proved_units(eps_g, delta_g, alpha, share)
        assert 0 < cap2 <= exact2, (eps_g, delta_g, alpha, cap2, exact2)
        assert exact2 - cap2 < 2
    f = RdpFilter(capacity=capacity)
    assert f.legacy_capacity == legacy
    assert f.order_capacity == tuple(min(a, b) for a, b in zip(legacy, proved, strict=True))


def test_reviewer_worst_case_capacity_is_not_rounded_up() -> None:
    # The float formula gave 7105 units at α=1.75 where the exact capacity is 55.7 units.
    eps_g, delta_g = "36.8413614879047310", "1e-12"
    _assert_below_exact(eps_g, delta_g)
    cap = mironov_capacities(Budget(epsilon=eps_g, delta=delta_g))
    assert cap[ALPHAS.index(1.75)] == 55


def test_usable_orders_are_those_with_positive_capacity() -> None:
    # (1, 1e-6): Λ = {16, 32, 64}; every other order admits nothing.
    capacity = Budget(epsilon=1, delta="1e-6")
    assert [float(a) for a in proved_orders(capacity)] == [16.0, 32.0, 64.0]
    caps = proved_capacities(capacity)
    assert caps[:-3] == (UNUSABLE,) * (len(ALPHAS) - 3)
    assert all(c > 0 for c in caps[-3:])
    # the two orders best for Gaussian charges (16 and 32 here) share 90% of δ_g
    assert proved_shares(capacity)[-3:] == (Fraction(9, 20), Fraction(9, 20), Fraction(1, 10))
    # (10, 1e-6): α = 4 and 5 are favoured; α = 2.5's 1/70 share leaves it nothing
    wide = Budget(epsilon=10, delta="1e-6")
    shares = proved_shares(wide)
    assert shares[ALPHAS.index(4.0)] == shares[ALPHAS.index(5.0)] == Fraction(9, 20)
    assert shares[ALPHAS.index(2.5)] == Fraction(1, 70) and sum(shares) == 1
    assert [float(a) for a in proved_orders(wide)] == [3.0, 4.0, 5.0, 6.0, 8.0, 16.0, 32.0, 64.0]
    # No order's capacity exceeds ε_g, even at a δ_g so large that the conversion term is < 0.
    wide = proved_capacities(Budget(epsilon=1, delta="0.9"))
    assert max(wide) <= UNIT


def test_no_capacity_of_an_rdp_block_grows() -> None:
    for eps, delta in (("0.5", "1e-7"), ("1", "1e-6"), ("3", "1e-5"), ("10", "1e-6")):
        f = RdpFilter(capacity=Budget(epsilon=eps, delta=delta))
        assert all(c <= old for c, old in zip(f.order_capacity, f.legacy_capacity, strict=True))
        g = Rdp2Filter(capacity=Budget(epsilon=eps, delta=delta))
        assert all(c <= p for c, p in zip(f.order_capacity, g.order_capacity, strict=True))


def test_ledger_refuses_charge_above_exact_capacity() -> None:
    # ε_g a hair above the rdp2 conversion term at α = 1.5 for its share of δ_g (every order is
    # usable; 1.5 is not favoured, so its share is 1/100): its exact capacity is 55.7 units.
    with mp.workdps(80):
        a, w = mp.mpf("1.5"), mp.mpf(1) / 100
        term = (mp.log(1 / (w * mp.mpf("1e-12"))) - mp.log(a)) / (a - 1) - mp.log(a / (a - 1))
        eps_g = mp.nstr(term + mp.mpf("55.712e-18"), 40)
    capacity = Budget(epsilon=eps_g, delta="1e-12")
    assert len(proved_orders(capacity)) == len(ALPHAS)
    assert proved_shares(capacity)[0] == Fraction(1, 100)
    assert proved_capacities(capacity)[0] == 55
    led = Ledger("sqlite://")
    led.add_context("a")
    led.add_blocks(["b"], stream="s", capacity=capacity, accounting=Accounting("rdp2"))
    i = ALPHAS.index(1.5)
    cost = RdpCurve(["1e30" if j != i else "5.6e-17" for j in range(len(ALPHAS))])
    with pytest.raises(BudgetExceededError):
        led.charge(["b"], cost, context="a")
    led.charge(["b"], RdpCurve(["1e30" if j != i else "5.5e-17" for j in range(len(ALPHAS))]),
               context="a")  # fmt: skip
    assert led.verify().ok


_deltas = st.sampled_from(["1e-12", "1e-9", "1e-6", "3e-7", "1e-5", "0.001", "0.5", "1e-100"])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(delta=_deltas, order=st.sampled_from(ALPHAS), digits=st.integers(15, 22),
       offset=st.integers(-40, 40))  # fmt: skip
def test_capacity_never_above_exact_near_cancellation(
    delta: str, order: float, digits: int, offset: int
) -> None:
    # ε_g within a few ulps of ln(1/δ)/(α−1): the subtraction cancels.
    with mp.workdps(60):
        target = mp.log(1 / mp.mpf(delta)) / (mp.mpf(repr(order)) - 1)
        text = mp.nstr(target, digits, strip_zeros=False)
    eps = Decimal(text) + Decimal(offset).scaleb(-digits + 2)
    if eps <= 0:
        return
    _assert_below_exact(str(eps), delta)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(eps=st.decimals(min_value="0.001", max_value="1e6", places=12), delta=_deltas)
def test_capacity_never_above_exact_anywhere(eps: Decimal, delta: str) -> None:
    _assert_below_exact(str(eps), delta)

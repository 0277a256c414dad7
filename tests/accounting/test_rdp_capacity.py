"""RDP per-order capacity ε_g − ln(1/δ_g)/(α−1) is never above its exact value."""

from __future__ import annotations

from decimal import Decimal

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbudget.accounting import Accounting, RdpFilter
from blockbudget.budget import ALPHAS, UNIT, Budget, RdpCurve
from blockbudget.errors import BudgetExceededError
from blockbudget.ledger import Ledger


def _exact_units(eps_g: str, delta_g: str, alpha: float) -> mp.mpf:
    with mp.workdps(80):
        log_term = mp.log(1 / mp.mpf(delta_g)) / (mp.mpf(repr(alpha)) - 1)
        return (mp.mpf(eps_g) - log_term) * UNIT


def _assert_below_exact(eps_g: str, delta_g: str) -> None:
    caps = RdpFilter(capacity=Budget(epsilon=eps_g, delta=delta_g)).order_capacity
    for alpha, cap in zip(ALPHAS, caps, strict=True):
        exact = _exact_units(eps_g, delta_g, alpha)
        assert cap <= exact, (eps_g, delta_g, alpha, cap, exact)
        assert exact - cap < 2  # floored to a unit, not lowered further


def test_reviewer_worst_case_capacity_is_not_rounded_up() -> None:
    # The float formula gave 7105 units at α=1.75 where the exact capacity is 55.7 units.
    eps_g, delta_g = "36.8413614879047310", "1e-12"
    _assert_below_exact(eps_g, delta_g)
    cap = RdpFilter(capacity=Budget(epsilon=eps_g, delta=delta_g)).order_capacity
    assert cap[ALPHAS.index(1.75)] == 55


def test_ledger_refuses_charge_above_exact_capacity() -> None:
    led = Ledger("sqlite://")
    led.add_context("a")
    led.add_blocks(
        ["b"],
        stream="s",
        capacity=Budget(epsilon="36.8413614879047310", delta="1e-12"),
        accounting=Accounting.RDP,
    )
    i = ALPHAS.index(1.75)
    cost = RdpCurve(["1e30" if j != i else "7.1e-15" for j in range(len(ALPHAS))])
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

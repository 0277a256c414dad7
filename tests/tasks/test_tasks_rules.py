"""The live queue's pieces under every registered rule: a LivePool mirrors the ledger's exact
feature units (whatever the rule's layout), the queue refuses rules by the shape of their fit
test, and a grant's uniform cost compares costs of every kind."""

from __future__ import annotations

from decimal import Decimal

import pytest

from blockbudget.accounting import Accounting, Combine, GaussianDp, get_rule, rule_names
from blockbudget.budget import Budget
from blockbudget.errors import BudgetExceededError, InvalidBudgetError, InvalidRequestError
from blockbudget.ledger import Ledger
from blockbudget.scheduling import get_scheduler
from blockbudget.tasks.bridge import smallest
from blockbudget.tasks.guards import refuse_strong
from blockbudget.tasks.livepool import LivePool

CAPACITY = Budget(epsilon=1, delta="1e-6")
LINEAR = [r for r in rule_names() if get_rule(r).combine is not Combine.FILTER]


@pytest.mark.parametrize("rule", LINEAR)
def test_a_live_pool_counts_exactly_what_the_ledger_counts(rule: str) -> None:
    """Charges of several sizes made on the ledger behind the pool's back: after a sync the
    pool's exact usage is the ledger's, feature by feature (for the advanced-composition
    filter Σε² is not (Σε)², so a cost could not carry it: the units are mirrored)."""
    accounting = Accounting(rule)
    ledger = Ledger("sqlite://")
    try:
        ledger.add_context("team")
        ledger.add_blocks(["s/0"], stream="s", capacity=CAPACITY, accounting=accounting)
        live = LivePool(ledger, stream="s", context="team", scheduler=get_scheduler("fcfs"))
        for eps in ("0.05", "0.02", "0.03"):
            ledger.charge(["s/0"], accounting.rule.pure(Decimal(eps)), context="team")
        assert live.sync().charged == 1
        (state,) = ledger.states("s", "team")
        assert live.pool.exact_used("s/0") == tuple(state.used)
        # and a credit gives back exactly the ledger's difference (less the sync slack)
        res = ledger.reserve(["s/0"], accounting.rule.pure(Decimal("0.1")), context="team")
        live.sync()
        ledger.release(res.id)
        assert live.sync().credited == 1
        (state,) = ledger.states("s", "team")
        used = live.pool.exact_used("s/0")
        assert all(0 <= u - s <= 10**6 for u, s in zip(used, state.used, strict=True))
    finally:
        ledger.dispose()


@pytest.mark.parametrize("rule", rule_names())
def test_the_queue_refuses_a_rule_by_the_shape_of_its_test(rule: str) -> None:
    accounting = Accounting(rule)
    if accounting.rule.combine is Combine.FILTER:
        with pytest.raises(InvalidRequestError, match=f"{rule} \\(a non-linear fit test"):
            refuse_strong("s", accounting)
    else:
        refuse_strong("s", accounting)
    fcfs = get_scheduler("fcfs")
    assert fcfs.serves(rule) is (accounting.rule.combine is not Combine.FILTER)
    if not fcfs.serves(rule):
        with pytest.raises(
            InvalidRequestError, match=f"'fcfs' cannot schedule stream 's' under {rule}"
        ):
            fcfs.check_serves(rule, stream="s")


def test_a_uniform_grant_cost_compares_every_kind() -> None:
    a, b = GaussianDp(mu="0.3"), GaussianDp(mu="0.2")
    assert smallest([a, b, a]) == b
    assert smallest([a, a]) is a
    assert smallest([Budget(epsilon="0.5"), Budget(epsilon="0.2", delta="1e-9")]) == Budget(
        epsilon="0.2"
    )
    with pytest.raises(InvalidBudgetError, match="gdp"):
        smallest([a, Budget(epsilon="0.1")])


def test_the_live_pool_takes_the_slack_the_ledger_stores() -> None:
    """A whitehouse block with δ' = 1e-9 (not the default δ_g/2): the pool's filter is the
    ledger's, so it never grants what the ledger would refuse (ε = 0.175 fits only at δ_g/2)."""
    acc = Accounting("whitehouse")
    ledger = Ledger("sqlite://")
    try:
        ledger.add_context("team")
        ledger.add_blocks(["s/0"], stream="s", capacity=CAPACITY, accounting=acc, slack_delta=1e-9)
        live = LivePool(ledger, stream="s", context="team", scheduler=get_scheduler("fcfs"))
        assert live.pool.filters[0].slack_delta == Decimal("1e-9")  # type: ignore[attr-defined]
        big = Budget(epsilon="0.175")
        assert not live.pool.filters[0].fits(live.pool.filters[0].features(big))
        with pytest.raises(BudgetExceededError):
            ledger.reserve(["s/0"], big, context="team")
    finally:
        ledger.dispose()

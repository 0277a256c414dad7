"""A replayed reserve answers with the reservation as it is now, flagged replayed."""

from __future__ import annotations

from ledger_support import FakeClock

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.ledger import Ledger, ReservationState


def test_replayed_reserve_reports_the_current_state(ledger: Ledger) -> None:
    ledger.add_blocks(["b"], stream="s", capacity=Budget(epsilon=1), accounting=Accounting.BASIC)
    first = ledger.reserve(["b"], Budget(epsilon="0.1"), context="ml", request_id="R")
    assert first.state is ReservationState.OPEN and not first.replayed
    ledger.charge(["b"], Budget(epsilon="0.04"), reservation_id=first.id)
    again = ledger.reserve(["b"], Budget(epsilon="0.1"), context="ml", request_id="R")
    assert again.replayed and again.id == first.id and again.state is ReservationState.OPEN
    assert again.remaining_of("b")[0] == 60_000_000_000_000_000  # 0.06 left, not 0.1
    ledger.release(first.id)
    closed = ledger.reserve(["b"], Budget(epsilon="0.1"), context="ml", request_id="R")
    assert closed.replayed and closed.state is ReservationState.CLOSED
    assert closed == ledger.reservation(first.id)
    assert ledger.state("b", "ml").reserved == (0, 0)  # nothing reserved by the replays


def test_replayed_reserve_reports_expiry(ledger: Ledger, clock: FakeClock) -> None:
    ledger.add_blocks(["b"], stream="s", capacity=Budget(epsilon=1), accounting=Accounting.BASIC)
    first = ledger.reserve(
        ["b"], Budget(epsilon="0.1"), context="ml", request_id="R", ttl_seconds=10
    )
    clock.advance(11)
    assert ledger.expire_reservations() == [first.id]
    again = ledger.reserve(
        ["b"], Budget(epsilon="0.1"), context="ml", request_id="R", ttl_seconds=10
    )
    assert again.replayed and again.state is ReservationState.EXPIRED

"""Verified checkpoints: a verification replays only the events after the last clean one, still
compares every table, and keeps only the open reservations in memory; ``full=True`` replays
everything."""

from __future__ import annotations

import pytest
from ledger_support import Backend, FakeClock
from sqlalchemy import select, update
from test_ledger_audit import drop_triggers, history

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.ledger import Ledger, checkpoint
from blockbudget.ledger.schema import audit, budgets, checkpoints, reservations
from blockbudget.ledger.verify import verify_ledger


def _more(ledger: Ledger) -> int:
    """Three events on block "c" (added, reserved, charged): none touches "a"."""
    ledger.add_blocks(["c"], stream="s", capacity=Budget(epsilon=1), accounting=Accounting.BASIC)
    res = ledger.reserve(["c"], Budget(epsilon=0.3), context="ops")
    ledger.charge(["c"], Budget(epsilon=0.1), reservation_id=res.id)
    return 3


def test_a_second_verification_replays_only_the_events_after_the_checkpoint(
    ledger: Ledger, clock: FakeClock
) -> None:
    history(ledger, clock)
    first = ledger.verify()
    assert first.ok and first.checkpoint_seq == 0 and first.replayed == first.events == 13
    added = _more(ledger)
    second = ledger.verify()
    assert second.ok and second.problems == ()
    assert (second.checkpoint_seq, second.replayed, second.events) == (13, added, 13 + added)
    assert (second.blocks, second.contexts) == (3, 4)
    third = ledger.verify()  # nothing new: nothing replayed, the tables still compared
    assert third.ok and (third.checkpoint_seq, third.replayed, third.events) == (16, 0, 16)
    full = ledger.verify(full=True)
    assert full.ok and (full.checkpoint_seq, full.replayed, full.events) == (0, 16, 16)


def test_tampering_after_the_checkpoint_is_found(
    backend: Backend, ledger: Ledger, clock: FakeClock
) -> None:
    history(ledger, clock)
    assert ledger.verify().ok
    _more(ledger)
    drop_triggers(backend, ledger)
    with ledger.engine.begin() as conn:
        conn.execute(update(audit).where(audit.c.seq == 15).values(ts=1.0))
    report = ledger.verify()
    assert not report.ok and report.checkpoint_seq == 13
    assert any(p.startswith("event 15: hash mismatch") for p in report.problems)


def test_a_table_row_changed_after_the_checkpoint_is_found_without_a_full_replay(
    ledger: Ledger, clock: FakeClock
) -> None:
    history(ledger, clock)
    assert ledger.verify().ok
    _more(ledger)
    with ledger.engine.begin() as conn:  # "a" is not touched after the checkpoint
        conn.execute(
            update(budgets)
            .where(budgets.c.block_id == "a", budgets.c.context == "default")
            .values(charged='["0"]')
        )
    report = ledger.verify()
    assert report.checkpoint_seq == 13 and report.replayed == 3
    assert any("'a'/'default': table charged/reserved" in p for p in report.problems)


def test_a_closed_reservation_changed_in_the_table_is_found(
    ledger: Ledger, clock: FakeClock
) -> None:
    history(ledger, clock)
    assert ledger.verify().ok
    with ledger.engine.begin() as conn:  # the released one now claims to have expired
        conn.execute(
            update(reservations).where(reservations.c.request_id == "r1").values(state="expired")
        )
    problems = ledger.verify().problems
    assert any("closed reservations differ" in p for p in problems)


def test_tampering_before_the_checkpoint_is_found_by_a_full_replay(
    backend: Backend, ledger: Ledger, clock: FakeClock
) -> None:
    history(ledger, clock)
    assert ledger.verify().ok
    drop_triggers(backend, ledger)
    with ledger.engine.begin() as conn:
        conn.execute(update(audit).where(audit.c.seq == 6).values(ts=1.0))
    assert ledger.verify().ok  # the checkpoint vouches for events 1..13
    full = ledger.verify(full=True)
    assert not full.ok and any(p.startswith("event 6: hash mismatch") for p in full.problems)


def test_a_rewritten_log_under_the_checkpoint_is_refused(
    backend: Backend, ledger: Ledger, clock: FakeClock
) -> None:
    history(ledger, clock)
    assert ledger.verify().ok
    drop_triggers(backend, ledger)
    with ledger.engine.begin() as conn:
        conn.execute(update(audit).where(audit.c.seq == 13).values(hash="f" * 64))
    problems = ledger.verify().problems
    assert any("is not the one the checkpoint verified" in p for p in problems)


def test_a_corrupt_checkpoint_is_reported(ledger: Ledger, clock: FakeClock) -> None:
    history(ledger, clock)
    assert ledger.verify().ok
    with ledger.engine.begin() as conn:
        conn.execute(update(checkpoints).values(digest="0" * 64))
    problems = ledger.verify().problems
    assert any("checkpoint at seq 13 is corrupt" in p for p in problems)
    assert ledger.verify(full=True).ok  # a full replay stores a good checkpoint again
    assert ledger.verify().ok


def test_the_checkpoint_is_stored_after_success_in_a_transaction_of_its_own(
    ledger: Ledger, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    history(ledger, clock)
    assert ledger.verify().ok  # checkpoint at 13
    _more(ledger)
    real_store = checkpoint.store

    def crash(conn: object, **kw: object) -> bool:
        real_store(conn, **kw)  # type: ignore[arg-type]
        raise RuntimeError("power cut before the commit")

    monkeypatch.setattr(checkpoint, "store", crash)
    with pytest.raises(RuntimeError):
        ledger.verify()
    monkeypatch.setattr(checkpoint, "store", real_store)
    with ledger.engine.connect() as conn:
        assert [r[0] for r in conn.execute(select(checkpoints.c.seq))] == [13]
    again = ledger.verify()
    assert again.ok and (again.checkpoint_seq, again.replayed) == (13, 3)
    with ledger.engine.connect() as conn:
        assert [r[0] for r in conn.execute(select(checkpoints.c.seq))] == [16]


def test_a_failed_verification_stores_no_checkpoint(ledger: Ledger, clock: FakeClock) -> None:
    history(ledger, clock)
    with ledger.engine.begin() as conn:
        conn.execute(update(budgets).where(budgets.c.block_id == "a").values(reserved='["7"]'))
    assert not ledger.verify().ok
    with ledger.engine.connect() as conn:
        assert conn.execute(select(checkpoints)).first() is None


def test_the_replay_keeps_only_open_reservations(ledger: Ledger) -> None:
    ledger.add_blocks(["x"], stream="s", capacity=Budget(epsilon=100), accounting=Accounting.BASIC)
    for _ in range(30):
        res = ledger.reserve(["x"], Budget(epsilon=0.1), context="ml")
        ledger.charge(["x"], Budget(epsilon=0.1), reservation_id=res.id)
        ledger.release(res.id)
    held = ledger.reserve(["x"], Budget(epsilon=0.1), context="ml")
    with ledger.engine.connect() as conn:
        report, state = verify_ledger(conn, full=True)
    assert report.ok and state is not None
    assert [r[0] for r in state["open"]] == [held.id]
    assert state["closed_reservations"][0] == 30

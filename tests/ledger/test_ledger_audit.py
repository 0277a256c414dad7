"""The audit log (invariant 5 in docs/architecture.md): append-only by triggers, hash-chained,
and replayed from scratch by verify(), which must notice any tampering."""

from __future__ import annotations

import json

import pytest
from ledger_support import Backend, FakeClock
from sqlalchemy import select, text, update
from sqlalchemy.exc import DBAPIError

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import AuditError
from blockbudget.ledger import GENESIS_HASH, EventKind, Ledger, canonical_json, event_hash
from blockbudget.ledger.schema import audit, budgets

CAP = Budget(epsilon=1.0)


def history(ledger: Ledger, clock: FakeClock) -> None:
    """One of every event kind (after the fixture's three context_added events: default, ml,
    ops)."""
    ledger.add_blocks(["a", "b"], stream="s", capacity=CAP, accounting=Accounting.BASIC)
    ledger.charge(["a", "b"], Budget(epsilon=0.2), request_id="c1")
    res = ledger.reserve(["a", "b"], Budget(epsilon=0.3), context="ml", request_id="r1")
    ledger.charge(["b"], Budget(epsilon=0.1), reservation_id=res.id, request_id="d1")
    ledger.release(res.id, request_id="rel1")
    ledger.reserve(["a"], Budget(epsilon=0.2), ttl_seconds=5, request_id="r2")
    clock.advance(6)
    ledger.expire_reservations()
    ledger.retire(["b"], request_id="ret1", reason="closed")
    ledger.add_context("late", description="added after the rest", request_id="ctx1")


#: The seq of history()'s direct charge "c1" (after 3 context_added and 2 block_added events).
C1 = 6


def drop_triggers(backend: Backend, ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        if backend.name == "sqlite":
            conn.execute(text("DROP TRIGGER ledger_audit_no_update"))
            conn.execute(text("DROP TRIGGER ledger_audit_no_delete"))
        else:
            conn.execute(text("DROP TRIGGER ledger_audit_no_update ON ledger_audit"))


def test_every_change_is_a_versioned_hash_chained_event(ledger: Ledger, clock: FakeClock) -> None:
    history(ledger, clock)
    events = ledger.events()
    assert [e.kind for e in events] == [
        EventKind.CONTEXT_ADDED,
        EventKind.CONTEXT_ADDED,
        EventKind.CONTEXT_ADDED,
        EventKind.BLOCK_ADDED,
        EventKind.BLOCK_ADDED,
        EventKind.CHARGED,
        EventKind.RESERVED,
        EventKind.CHARGED,
        EventKind.RELEASED,
        EventKind.RESERVED,
        EventKind.EXPIRED,
        EventKind.RETIRED,
        EventKind.CONTEXT_ADDED,
    ]
    prev = GENESIS_HASH
    for i, e in enumerate(events, start=1):
        assert e.seq == i and e.version == 1 and e.prev_hash == prev
        assert e.payload_json == canonical_json(e.payload)
        assert e.hash == event_hash(
            prev_hash=prev,
            seq=e.seq,
            ts=e.ts,
            kind=e.kind.value,
            version=e.version,
            request_id=e.request_id,
            context=e.context,
            payload=e.payload_json,
        )
        prev = e.hash
    assert events[C1 - 1].request_id == "c1"
    assert events[0].request_id is not None  # default: registered by the fixture, like any
    assert [e.request_id for e in events[C1 - 1 :]] == [
        "c1",
        "r1",
        "d1",
        "rel1",
        "r2",
        None,
        "ret1",
        "ctx1",
    ]
    added = [e for e in events if e.kind is EventKind.CONTEXT_ADDED]
    assert [(e.context, e.payload) for e in added] == [
        ("default", {"name": "default", "description": "the default team (test)"}),
        ("ml", {"name": "ml", "description": "the ml team (test)"}),
        ("ops", {"name": "ops", "description": "the ops team (test)"}),
        ("late", {"name": "late", "description": "added after the rest"}),
    ]
    report = ledger.verify()
    assert report.ok and report.problems == ()
    assert (report.events, report.blocks, report.contexts) == (13, 2, 4)
    assert ledger.verify_or_raise(full=True) == report


def test_update_and_delete_on_the_audit_table_are_refused(
    backend: Backend, ledger: Ledger, clock: FakeClock
) -> None:
    history(ledger, clock)
    before = ledger.events()
    for stmt in (
        update(audit).where(audit.c.seq == C1).values(payload="{}"),
        audit.delete().where(audit.c.seq == 13),
    ):
        with pytest.raises(DBAPIError, match="append-only"), ledger.engine.begin() as conn:
            conn.execute(stmt)
    if backend.name == "postgres":
        with pytest.raises(DBAPIError, match="append-only"), ledger.engine.begin() as conn:
            conn.execute(text("TRUNCATE ledger_audit"))
    assert ledger.events() == before
    assert ledger.verify().ok


def test_verify_reports_a_modified_payload(
    backend: Backend, ledger: Ledger, clock: FakeClock
) -> None:
    history(ledger, clock)
    drop_triggers(backend, ledger)
    forged = json.dumps(
        {"blocks": ["a", "b"], "cost": {"epsilon": "0.01", "delta": "0"}, "reservation_id": None},
        sort_keys=True,
        separators=(",", ":"),
    )
    with ledger.engine.begin() as conn:
        conn.execute(update(audit).where(audit.c.seq == C1).values(payload=forged))
    report = ledger.verify()
    assert not report.ok
    assert any(p.startswith(f"event {C1}: hash mismatch") for p in report.problems)
    assert any("'a'/'default': table charged/reserved" in p for p in report.problems)
    with pytest.raises(AuditError, match="hash mismatch"):
        ledger.verify_or_raise()


def test_verify_reports_a_deleted_event(backend: Backend, ledger: Ledger, clock: FakeClock) -> None:
    history(ledger, clock)
    drop_triggers(backend, ledger)
    with ledger.engine.begin() as conn:
        conn.execute(audit.delete().where(audit.c.seq == C1 + 2))
    problems = ledger.verify().problems
    assert any("sequence gap" in p for p in problems)
    assert any("chain broken" in p for p in problems)


def test_verify_reports_tampered_budget_rows(ledger: Ledger, clock: FakeClock) -> None:
    history(ledger, clock)
    with ledger.engine.begin() as conn:
        conn.execute(
            update(budgets)
            .where(budgets.c.block_id == "a", budgets.c.context == "default")
            .values(charged='["0","0"]')
        )
    problems = ledger.verify().problems
    assert len(problems) == 1 and "'a'/'default'" in problems[0]


def test_a_rehashed_forgery_is_caught_by_replaying_the_filters(
    backend: Backend, ledger: Ledger, clock: FakeClock
) -> None:
    """An attacker who rewrites a payload *and* recomputes every hash after it still fails:
    the replay finds an overspend, and the tables disagree with the log."""
    history(ledger, clock)
    drop_triggers(backend, ledger)
    with ledger.engine.begin() as conn:
        rows = conn.execute(select(audit).order_by(audit.c.seq)).all()
        prev = GENESIS_HASH
        for row in rows:
            m = dict(row._mapping)
            if m["seq"] == C1:
                data = json.loads(m["payload"])
                data["cost"] = {"epsilon": "5", "delta": "0"}
                m["payload"] = canonical_json(data)
            digest = event_hash(
                prev_hash=prev,
                seq=m["seq"],
                ts=m["ts"],
                kind=m["kind"],
                version=m["version"],
                request_id=m["request_id"],
                context=m["context"],
                payload=m["payload"],
            )
            conn.execute(
                update(audit)
                .where(audit.c.seq == m["seq"])
                .values(payload=m["payload"], prev_hash=prev, hash=digest)
            )
            prev = digest
    problems = ledger.verify().problems
    assert not any("hash" in p for p in problems)
    assert any(p.startswith(f"event {C1}: overspend: block 'a'") for p in problems)
    assert any("table charged/reserved" in p for p in problems)

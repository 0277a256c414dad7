"""Closing a context (an audited administrative act) and ledgers written before contexts could
be closed: a closed context never spends again, does not keep exhausted blocks from retiring,
and counts in the coalition bound only if it ever charged; a version 2 ledger (which registered
``default`` by itself) is migrated in place, verifies and keeps serving.

Runs on SQLite, and on PostgreSQL when BLOCKBUDGET_TEST_POSTGRES_URL is set (the fixture file
test is SQLite only)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from ledger_support import FakeClock
from test_ledger_contexts import append_forged

from blockbudget.accounting import Accounting, make_filter
from blockbudget.budget import Budget
from blockbudget.errors import (
    ClosedContextError,
    ReservationError,
    SchemaRevisionError,
    UnknownContextError,
)
from blockbudget.ledger import EventKind, Ledger, ReservationState
from blockbudget.migrations import upgrade
from blockbudget.platform import Platform

FIXTURE = Path(__file__).parent.parent / "fixtures" / "v2_home"
CAP = Budget(epsilon=1.0)


def add_blocks(ledger: Ledger, blocks: list[str]) -> None:
    ledger.add_blocks(blocks, stream="s", capacity=CAP, accounting=Accounting.BASIC)


def test_a_closed_context_never_spends_again_and_verify_replays_the_close(
    ledger: Ledger, clock: FakeClock
) -> None:
    add_blocks(ledger, ["a"])
    ledger.charge(["a"], Budget(epsilon=0.25), context="ml")
    clock.advance(3)
    info = ledger.close_context("ml", request_id="close-ml")
    assert info.closed and info.closed_at == clock.now
    event = ledger.events()[-1]
    assert (event.kind, event.context, event.request_id) == (
        EventKind.CONTEXT_CLOSED,
        "ml",
        "close-ml",
    )
    assert event.payload == {"name": "ml"}
    assert ledger.close_context("ml", request_id="close-ml") == info  # idempotent replay
    assert ledger.close_context("ml") == info  # closing a closed context changes nothing
    assert ledger.events()[-1] == event
    with pytest.raises(ClosedContextError, match="'ml' was closed"):
        ledger.charge(["a"], Budget(epsilon=0.1), context="ml")
    with pytest.raises(ClosedContextError):
        ledger.reserve(["a"], Budget(epsilon=0.1), context="ml")
    assert "ml" not in ledger.contexts()
    assert "ml" in ledger.contexts(include_closed=True)
    spent = make_filter(Accounting.BASIC, capacity=CAP).features(Budget(epsilon=0.25))
    assert ledger.state("a", "ml").charged == spent  # its history stays readable
    assert [i.name for i in ledger.context_infos() if i.closed] == ["ml"]
    assert ledger.add_context("ml", description="the ml team (test)").closed  # never reopened
    report = ledger.verify()
    assert report.ok, report.problems


def test_the_coalition_counts_a_closed_context_only_if_it_ever_charged(ledger: Ledger) -> None:
    add_blocks(ledger, ["a"])
    assert ledger.coalition_contexts() == ["default", "ml", "ops"]
    ledger.charge(["a"], Budget(epsilon=0.5), context="ml")
    ledger.close_context("ml")
    ledger.close_context("default")  # never used: it released nothing
    assert ledger.contexts() == ["ops"]
    assert ledger.coalition_contexts() == ["ml", "ops"]


def test_closing_needs_no_live_reservation_and_expires_stale_ones(
    ledger: Ledger, clock: FakeClock
) -> None:
    add_blocks(ledger, ["a"])
    live = ledger.reserve(["a"], Budget(epsilon=0.3), context="ops", ttl_seconds=10)
    with pytest.raises(ReservationError, match="open reservation"):
        ledger.close_context("ops")
    assert "ops" in ledger.contexts()
    clock.advance(11)
    ledger.close_context("ops")  # the stale reservation is expired, never charged
    assert ledger.reservation(live.id).state is ReservationState.EXPIRED
    assert not any(ledger.state("a", "ops").charged)
    assert not any(ledger.state("a", "ops").reserved)
    assert ledger.verify().ok


def test_closing_an_unknown_context_is_refused(ledger: Ledger) -> None:
    with pytest.raises(UnknownContextError, match="'nobody'"):
        ledger.close_context("nobody")


def test_verify_reports_a_charge_after_the_close(ledger: Ledger) -> None:
    add_blocks(ledger, ["a"])
    ledger.close_context("ops")
    seq = append_forged(
        ledger,
        "charged",
        "ops",
        {"blocks": ["a"], "cost": Budget(epsilon=0.1).to_json(), "reservation_id": None},
    )
    problems = ledger.verify().problems
    assert any(p.startswith(f"event {seq}:") and "closed" in p for p in problems)


def test_a_version_2_ledger_is_upgraded_then_verifies_and_serves(tmp_path: Path) -> None:
    """``tests/fixtures/v2_home`` was written by the release whose ledgers registered
    ``default`` by themselves (schema version 2; see ``make_v2_home.py``): contexts default, ops
    and ml, stream ``events`` with two day blocks, the first one spent in ops and ml. Opening
    it is refused until ``blockbudget db upgrade`` (:func:`blockbudget.migrations.upgrade`)
    brings it to version 4 and the head revision."""
    home = tmp_path / "home"
    shutil.copytree(FIXTURE, home)
    con = sqlite3.connect(home / "platform.db")
    assert con.execute("SELECT schema_version FROM ledger_head").fetchone() == (2,)
    con.close()
    with pytest.raises(SchemaRevisionError, match=r"version 2; .*`blockbudget db upgrade`"):
        Platform(home)
    upgrade(f"sqlite:///{home / 'platform.db'}")
    platform = Platform(home)
    try:
        assert platform.verify().ok
        assert platform.contexts() == ["default", "ml", "ops"]
        assert platform.ledger.events()[0].kind is EventKind.CONTEXT_ADDED
        first, second = (m.block_id for m in platform.store.blocks("events"))
        # `default` never used the first block: it still keeps it from retiring...
        assert platform.retire_exhausted("events") == []
        # ...until an administrator closes it (audited); then the spent block retires.
        platform.close_context("default")
        assert platform.coalition_contexts() == ["ml", "ops"]
        assert platform.retire_exhausted("events") == [first]
        with platform.request(
            "events", blocks=[second], budget=Budget(epsilon=0.5), context="ops"
        ) as grant:
            grant.draw(Budget(epsilon=0.5), label="q")
        assert platform.ledger.state(second, "ops").remaining == "(ε=0.5, δ=0)"
        assert platform.verify().ok
    finally:
        platform.close()
    con = sqlite3.connect(home / "platform.db")
    assert con.execute("SELECT schema_version FROM ledger_head").fetchone() == (4,)
    con.close()

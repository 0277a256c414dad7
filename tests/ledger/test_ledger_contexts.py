"""Contexts are administrative (Sage §3.2: one per-block budget per group of non-colluding
principals): only registered contexts may be named, registering one is audited, a new ledger
has no context at all (not even ``default``), and verify() replays the registrations.

Runs on SQLite, and on PostgreSQL when BLOCKBUDGET_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ledger_support import (
    BACKENDS,
    POSTGRES_URL,
    Backend,
    FakeClock,
    assert_unchanged,
    postgres_schema,
    request_count,
    snapshot,
)
from ledger_workers import open_at_once
from sqlalchemy import Engine, create_engine, insert, select, text
from sqlalchemy.exc import IntegrityError

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import (
    BudgetExceededError,
    InvalidRequestError,
    UnknownBlockError,
    UnknownContextError,
)
from blockbudget.ledger import (
    DEFAULT_CONTEXT,
    ContextInfo,
    EventKind,
    Ledger,
    canonical_json,
    event_hash,
    validate_context_name,
)
from blockbudget.ledger.schema import audit, budgets, contexts

CAP = Budget(epsilon=1.0)


def add_blocks(ledger: Ledger, blocks: list[str]) -> None:
    ledger.add_blocks(blocks, stream="s", capacity=CAP, accounting=Accounting.BASIC)


# --- the default context -------------------------------------------------------------------


def test_a_new_ledger_has_no_context(backend: Backend, clock: FakeClock) -> None:
    """Contexts exist only when an administrator registers them: a new ledger has none, its log
    is empty, and naming ``default`` (the methods' default) is refused until it is registered."""
    ledger = backend.open(clock=clock)
    assert ledger.contexts() == [] and ledger.context_infos() == []
    assert ledger.coalition_contexts() == [] and ledger.events() == []
    add_blocks(ledger, ["a"])
    with pytest.raises(UnknownContextError, match="'default'"):
        ledger.charge(["a"], Budget(epsilon=0.1))
    ledger.dispose()
    clock.advance(5)
    again = backend.open(clock=clock)  # reopening registers nothing
    assert again.contexts() == [] and len(again.events()) == 1
    report = again.verify()
    assert report.ok and report.contexts == 0
    again.dispose()


def test_add_context_default_again_is_a_no_op(ledger: Ledger) -> None:
    before = snapshot(ledger)
    info = ledger.add_context(DEFAULT_CONTEXT, description="the default team (test)")
    assert info == ledger.context_infos()[0]
    assert_unchanged(ledger, before)


# --- add_context ---------------------------------------------------------------------------


def test_add_context_registers_audits_and_lists_contexts(ledger: Ledger, clock: FakeClock) -> None:
    clock.advance(7)
    n = len(ledger.events())
    info = ledger.add_context("team.a", description="analysts of team A", request_id="ctx-a")
    assert info == ContextInfo(
        name="team.a", description="analysts of team A", created_at=clock.now
    )
    (event,) = ledger.events(after_seq=n)
    assert event.kind is EventKind.CONTEXT_ADDED and event.version == 1
    assert event.context == "team.a" and event.request_id == "ctx-a"
    assert event.payload == {"name": "team.a", "description": "analysts of team A"}
    record = ledger.request("ctx-a")
    assert record is not None and record.operation.value == "add_context"
    assert record.seq == event.seq
    # registered contexts are listed even before they touch a block, sorted
    assert ledger.contexts() == ["default", "ml", "ops", "team.a"]
    assert [c.name for c in ledger.context_infos()] == ledger.contexts()
    assert ledger.context_infos()[-1] == info
    report = ledger.verify()
    assert report.ok and report.contexts == 4


def test_add_context_is_idempotent(ledger: Ledger, clock: FakeClock) -> None:
    first = ledger.add_context("c1", description="d", request_id="ctx-1")
    before = snapshot(ledger)
    clock.advance(60)
    assert ledger.add_context("c1", description="d") == first  # the original registration
    assert ledger.add_context("c1", description="d", request_id="ctx-1") == first  # replay
    assert_unchanged(ledger, before)
    # an explicit new request id for an existing context is acknowledged, with no event
    assert ledger.add_context("c1", description="d", request_id="ctx-1b") == first
    assert ledger.request("ctx-1b") is not None
    assert len(ledger.events()) == before[4]


def test_add_context_with_another_description_is_refused(ledger: Ledger) -> None:
    ledger.add_context("c1", description="first")
    before = snapshot(ledger)
    with pytest.raises(InvalidRequestError, match="'c1' already exists with description 'first'"):
        ledger.add_context("c1", description="second", request_id="ctx-x")
    with pytest.raises(InvalidRequestError, match="already exists"):
        ledger.add_context("c1")
    with pytest.raises(InvalidRequestError, match="already exists"):
        ledger.add_context("ml", description="another team")  # registered by the fixture
    assert_unchanged(ledger, before)
    assert ledger.request("ctx-x") is None


def test_a_request_id_reused_for_another_context_is_refused(ledger: Ledger) -> None:
    ledger.add_context("c1", request_id="ctx")
    before = snapshot(ledger)
    with pytest.raises(InvalidRequestError, match="'ctx'"):
        ledger.add_context("c2", request_id="ctx")
    assert_unchanged(ledger, before)
    assert "c2" not in ledger.contexts()


@pytest.mark.parametrize(
    "name", ["a", "Z", "7", "team.a", "ml:prod-1_eu", "a" * 64, "0-0", "x.y:z_w-v"]
)
def test_well_formed_context_names_are_accepted(ledger: Ledger, name: str) -> None:
    assert validate_context_name(name) == name
    assert ledger.add_context(name).name == name
    add_blocks(ledger, ["a"])
    ledger.charge(["a"], Budget(epsilon=1.0), context=name)
    assert ledger.state("a", name).exhausted


@pytest.mark.parametrize(
    "name",
    [
        "",
        " ",
        " a",
        "a ",
        "-a",
        "_a",
        ".a",
        ":a",
        "a" * 65,
        "a b",
        "a/b",
        "a\n",
        "a\x00",
        "é",
        "ctx*",
        None,
        42,
        b"ml",
    ],
)
def test_malformed_context_names_are_refused(ledger: Ledger, name: Any) -> None:
    add_blocks(ledger, ["a"])
    before = snapshot(ledger)
    with pytest.raises(InvalidRequestError, match="context name is 1–64 characters"):
        ledger.add_context(name)
    if name is not None:  # charge(context=None) means "default" (or the reservation's)
        with pytest.raises(InvalidRequestError, match="context name"):
            ledger.charge(["a"], Budget(epsilon=0.1), context=name)
    with pytest.raises(InvalidRequestError, match="context name"):
        ledger.reserve(["a"], Budget(epsilon=0.1), context=name)
    assert_unchanged(ledger, before)


def test_malformed_descriptions_are_refused(ledger: Ledger) -> None:
    before = snapshot(ledger)
    with pytest.raises(InvalidRequestError, match="description must be a string"):
        ledger.add_context("c", description=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="at most 1000 characters, got 1001"):
        ledger.add_context("c", description="x" * 1001)
    assert_unchanged(ledger, before)
    assert ledger.add_context("c", description="x" * 1000).description == "x" * 1000


def test_concurrent_add_context_registers_once(ledger: Ledger) -> None:
    got: list[ContextInfo] = []
    lock = threading.Lock()

    def go() -> None:
        info = ledger.add_context("shared", description="one team")
        with lock:
            got.append(info)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 6 and all(g == got[0] for g in got)
    added = [e for e in ledger.events() if e.kind is EventKind.CONTEXT_ADDED]
    assert [e.context for e in added].count("shared") == 1
    assert ledger.verify().ok


# --- unregistered contexts are refused -----------------------------------------------------


def test_naming_fresh_contexts_mints_no_budget(ledger: Ledger) -> None:
    """The review's bug: reserve(..., context=f"c{i}") in a loop handed out a fresh full
    budget each time. Now every unregistered context is refused and nothing is written."""
    add_blocks(ledger, ["a"])
    ledger.charge(["a"], Budget(epsilon=1.0))  # "default" is spent
    before = snapshot(ledger)
    for i in range(5):
        with pytest.raises(UnknownContextError, match=f"unknown context 'c{i}'"):
            ledger.reserve(["a"], Budget(epsilon=1.0), context=f"c{i}", request_id=f"r{i}")
        with pytest.raises(UnknownContextError, match=f"'c{i}'.*Ledger.add_context"):
            ledger.charge(["a"], Budget(epsilon=1.0), context=f"c{i}", request_id=f"q{i}")
    assert_unchanged(ledger, before)  # no event, no budget row, no request row
    assert all(ledger.request(f"{k}{i}") is None for k in "rq" for i in range(5))
    assert ledger.contexts() == ["default", "ml", "ops"]
    with pytest.raises(BudgetExceededError):
        ledger.charge(["a"], Budget(epsilon=0.1))


def test_unknown_context_refusals_change_nothing(ledger: Ledger, clock: FakeClock) -> None:
    add_blocks(ledger, ["a", "b"])
    res = ledger.reserve(["a", "b"], Budget(epsilon=0.5), context="ml", ttl_seconds=5)
    clock.advance(10)  # res is stale: a successful request on a/b in "ml" would expire it
    before = snapshot(ledger)
    n_requests = request_count(ledger)
    calls: list[Callable[[], object]] = [
        lambda: ledger.reserve(["a", "b"], Budget(epsilon=0.1), context="ghost"),
        lambda: ledger.reserve(["a"], Budget(epsilon=0.1), context="ghost", request_id="g1"),
        lambda: ledger.charge(["a", "b"], Budget(epsilon=0.1), context="ghost"),
        lambda: ledger.charge(["b"], Budget(epsilon=0.1), context="ghost", request_id="g2"),
        # a draw naming an unknown context (not the reservation's)
        lambda: ledger.charge(["a"], Budget(epsilon=0.1), reservation_id=res.id, context="ghost"),
    ]
    for call in calls:
        with pytest.raises(UnknownContextError, match="'ghost'") as info:
            call()
        assert isinstance(info.value, UnknownBlockError)  # the documented hierarchy
    assert_unchanged(ledger, before)
    assert request_count(ledger) == n_requests
    assert ledger.request("g1") is None and ledger.request("g2") is None
    # registering the context makes the very same request work, with its full budget
    ledger.add_context("ghost", description="now registered")
    ledger.charge(["b"], Budget(epsilon=1.0), context="ghost", request_id="g2")
    assert ledger.state("b", "ghost").exhausted
    assert ledger.verify().ok


def test_the_context_check_reads_inside_the_transaction(backend: Backend) -> None:
    """A context registered through another Ledger object (another process's view) is usable
    at once: nothing about contexts is cached across transactions."""
    one, two = backend.open(), backend.open()
    add_blocks(one, ["a"])
    with pytest.raises(UnknownContextError):
        two.charge(["a"], Budget(epsilon=0.5), context="late")
    one.add_context("late")
    two.charge(["a"], Budget(epsilon=0.5), context="late")
    assert one.state("a", "late").charged[0] == 5 * 10**17
    one.dispose()
    two.dispose()


def test_the_database_refuses_budget_rows_of_unregistered_contexts(ledger: Ledger) -> None:
    """Defence in depth: ledger_budgets.context is a foreign key to ledger_contexts, so even
    SQL that bypasses the ledger cannot give an unregistered context a budget, nor remove a
    context that holds one."""
    add_blocks(ledger, ["a"])
    ledger.charge(["a"], Budget(epsilon=0.1), context="ml")
    row = {"block_id": "a", "context": "ghost", "charged": '["0","0"]', "reserved": '["0","0"]'}
    with pytest.raises(IntegrityError), ledger.engine.begin() as conn:
        conn.execute(insert(budgets).values(**row))
    with pytest.raises(IntegrityError), ledger.engine.begin() as conn:
        conn.execute(contexts.delete().where(contexts.c.name == "ml"))
    assert ledger.contexts() == ["default", "ml", "ops"]
    assert ledger.verify().ok


# --- verify --------------------------------------------------------------------------------


def append_forged(ledger: Ledger, kind: str, context: str, payload: dict[str, Any]) -> int:
    """Append a correctly hash-chained event at the tip with plain SQL, bypassing the ledger
    (the append-only triggers refuse UPDATE and DELETE, not INSERT). Returns its seq."""
    with ledger.engine.begin() as conn:
        tip = conn.execute(select(audit).order_by(audit.c.seq.desc()).limit(1)).one()
        seq, ts, text_payload = int(tip.seq) + 1, float(tip.ts) + 1, canonical_json(payload)
        digest = event_hash(
            prev_hash=tip.hash,
            seq=seq,
            ts=ts,
            kind=kind,
            version=1,
            request_id="forged",
            context=context,
            payload=text_payload,
        )
        conn.execute(
            insert(audit).values(
                seq=seq,
                ts=ts,
                kind=kind,
                version=1,
                request_id="forged",
                context=context,
                payload=text_payload,
                prev_hash=tip.hash,
                hash=digest,
            )
        )
    return seq


def test_verify_reports_a_reservation_in_a_context_that_was_never_added(ledger: Ledger) -> None:
    add_blocks(ledger, ["a"])
    ledger.charge(["a"], Budget(epsilon=0.2), context="ml")
    assert ledger.verify().ok
    seq = append_forged(
        ledger,
        "reserved",
        "mint",
        {
            "reservation_id": "res-forged",
            "blocks": ["a"],
            "cost": {"epsilon": "1", "delta": "0"},
            "holder": None,
            "expires_at": 2e9,
        },
    )
    report = ledger.verify()
    assert not report.ok
    assert (
        f"event {seq}: a reserved event in context 'mint', which no earlier context_added "
        "event registered"
    ) in report.problems
    assert not any("hash" in p or "chain" in p for p in report.problems)  # a valid chain
    assert report.contexts == 3


def test_verify_reports_a_charge_before_its_context_was_added(ledger: Ledger) -> None:
    add_blocks(ledger, ["a"])
    charged = append_forged(
        ledger,
        "charged",
        "early",
        {"blocks": ["a"], "cost": {"epsilon": "1", "delta": "0"}, "reservation_id": None},
    )
    append_forged(ledger, "context_added", "early", {"name": "early", "description": ""})
    problems = ledger.verify().problems
    assert any(
        p.startswith(f"event {charged}: a charged event in context 'early', which no earlier")
        for p in problems
    )
    assert "context 'early' was added in the log but is missing from the table" in problems


def test_verify_compares_the_contexts_table_with_the_log(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(insert(contexts).values(name="sneaky", description="", created_at=0.0))
        conn.execute(
            contexts.update().where(contexts.c.name == "ops").values(description="changed")
        )
    problems = ledger.verify().problems
    assert "context 'sneaky' is in the table but no event added it" in problems
    assert any(p.startswith("context 'ops': table description / created_at") for p in problems)
    assert len(problems) == 2


def test_verify_reports_a_context_added_twice(ledger: Ledger) -> None:
    seq = append_forged(ledger, "context_added", "ml", {"name": "ml", "description": "x"})
    problems = ledger.verify().problems
    assert any(p.startswith(f"event {seq}: cannot replay") and "added twice" in p for p in problems)


def test_verify_reports_a_context_added_event_for_another_context(ledger: Ledger) -> None:
    seq = append_forged(ledger, "context_added", "ml", {"name": "other", "description": ""})
    problems = ledger.verify().problems
    assert any(p.startswith(f"event {seq}: cannot replay") and "'other'" in p for p in problems)


# --- concurrent creation -------------------------------------------------------------------

OPENERS = 6


def open_concurrently(url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(OPENERS)
    procs = [ctx.Process(target=open_at_once, args=(url, barrier)) for _ in range(OPENERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * OPENERS


def check_created_once(ledger: Ledger) -> None:
    assert ledger.events() == [] and ledger.contexts() == []
    assert ledger.verify().ok


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_processes_creating_the_ledger_at_once_create_it_once(
    backend_name: str, tmp_path: Path
) -> None:
    if backend_name == "sqlite":
        url = f"sqlite:///{tmp_path / 'fresh.db'}"
        open_concurrently(url)
        ledger = Ledger(url)
        check_created_once(ledger)
        ledger.dispose()
        return
    assert POSTGRES_URL is not None
    with postgres_schema() as args:
        old = os.environ.get("PGOPTIONS")
        os.environ["PGOPTIONS"] = args["options"]  # the children's search_path
        try:
            open_concurrently(POSTGRES_URL)
        finally:
            if old is None:
                del os.environ["PGOPTIONS"]
            else:
                os.environ["PGOPTIONS"] = old
        engine: Engine = create_engine(POSTGRES_URL, connect_args=args)
        with engine.connect() as conn:  # the children created the tables in the test's schema
            assert conn.execute(text("SELECT count(*) FROM ledger_head")).scalar_one() == 1
        ledger = Ledger(engine)
        check_created_once(ledger)
        ledger.dispose()
        engine.dispose()

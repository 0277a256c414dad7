"""The storage layer: SQLite durability settings, BEGIN IMMEDIATE, retries of transient
errors, the statements compiled once per dialect, and the schema version check."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, inspect, select, update
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.exc import DBAPIError, OperationalError

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError
from blockbudget.ledger import SCHEMA_VERSION, Ledger
from blockbudget.ledger import statements as st
from blockbudget.ledger.db import is_retryable, run_transaction
from blockbudget.ledger.fastsql import Prepared
from blockbudget.ledger.schema import head


def test_sqlite_connections_are_durable(tmp_path: Path) -> None:
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}", busy_timeout_seconds=7)
    with ledger.engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        assert dbapi.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert dbapi.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert dbapi.execute("PRAGMA busy_timeout").fetchone()[0] == 7000
        assert dbapi.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert dbapi.isolation_level is None  # BEGIN is ours, not pysqlite's
    ledger.dispose()


def test_write_transactions_hold_the_write_lock_from_begin(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    ledger = Ledger(f"sqlite:///{path}")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    seen: list[str] = []

    def body(conn: Connection) -> None:
        # No statement has run yet in this transaction: only BEGIN IMMEDIATE can hold the lock.
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        seen.append("locked")

    run_transaction(ledger.engine, body, write=True, attempts=1)
    assert seen == ["locked"]
    other.execute("BEGIN IMMEDIATE")  # free again after the commit
    other.execute("ROLLBACK")

    def read(conn: Connection) -> None:
        conn.execute(select(head.c.id)).all()  # a read snapshot is open…
        other.execute("BEGIN IMMEDIATE")  # …and a writer still gets the lock (DEFERRED + WAL)
        other.execute("ROLLBACK")

    run_transaction(ledger.engine, read, write=False, attempts=1)
    other.close()
    ledger.dispose()


class _Orig(Exception):
    def __init__(self, text: str, sqlstate: str | None = None) -> None:
        super().__init__(text)
        self.sqlstate = sqlstate


def _err(text: str, sqlstate: str | None = None, cls: Any = DBAPIError) -> DBAPIError:
    return cls("stmt", {}, _Orig(text, sqlstate))  # type: ignore[no-any-return]


def test_retryable_errors_are_classified() -> None:
    assert is_retryable(_err("could not serialize", "40001"))
    assert is_retryable(_err("deadlock detected", "40P01"))
    assert is_retryable(_err("database is locked", cls=OperationalError))
    assert not is_retryable(_err("duplicate key", "23505"))
    assert not is_retryable(_err("no such table", cls=OperationalError))


def test_run_transaction_reruns_transient_failures(tmp_path: Path) -> None:
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    calls: list[int] = []

    def flaky(conn: Connection) -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _err("database is locked", cls=OperationalError)
        return "done"

    assert run_transaction(ledger.engine, flaky, write=True, attempts=5) == "done"
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(OperationalError):
        run_transaction(ledger.engine, flaky, write=True, attempts=2)
    assert len(calls) == 2
    ledger.dispose()


@pytest.mark.parametrize("dialect", [sqlite_dialect.dialect(), psycopg_dialect.dialect()])
def test_statements_compile_once_per_dialect(dialect: Any) -> None:
    builders = [
        st.lock_head,
        st.select_context,
        st.insert_context,
        st.update_budget,
        st.insert_budget,
        st.select_reservation,
        st.select_stale,
        st.select_stale_all,
        st.select_remaining,
        st.update_remaining,
        st.close_reservation,
        st.insert_reservation,
        st.insert_reservation_block,
        st.insert_request,
        st.chain_tip,
        st.insert_event,
    ]
    for build in builders:
        assert Prepared(build(), dialect).sql
    p = Prepared(st.select_budgets(3), dialect)
    args = p.bind({"id0": "a", "id1": "b", "id2": "c", "ctx": "x"})
    if dialect.name == "sqlite":
        assert p.sql.count("?") == 4 and args == ("a", "b", "c", "x")
        assert "FOR UPDATE" not in p.sql
    else:
        assert "FOR UPDATE OF ledger_budgets" in p.sql and "%(id2)s" in p.sql
        assert args == {"id0": "a", "id1": "b", "id2": "c", "ctx": "x"}
    stale = Prepared(st.select_stale(), dialect).bind({"now": 5, "ctx": "x"})
    values = list(stale.values()) if isinstance(stale, dict) else list(stale)
    assert "open" in values  # the literal state is bound too


def test_a_database_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    ledger = Ledger(url)
    ledger.add_blocks(["a"], stream="s", capacity=Budget(epsilon=1), accounting=Accounting.BASIC)
    with ledger.engine.begin() as conn:
        conn.execute(update(head).values(schema_version=99))
    ledger.dispose()
    with pytest.raises(InvalidRequestError, match="schema version 99"):
        Ledger(url)


def test_a_version_1_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    """Version 2 added registered contexts; a version 1 ledger (contexts minted on first use)
    is refused, and opening it creates no table in it (versions 2 and 3 are brought to 4 by
    ``blockbudget db upgrade``)."""
    assert SCHEMA_VERSION == 4
    path = tmp_path / "v1.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE ledger_head (id INTEGER PRIMARY KEY, schema_version INTEGER)")
    con.execute("INSERT INTO ledger_head VALUES (1, 1)")
    con.commit()
    con.close()
    with pytest.raises(InvalidRequestError, match="schema version 1; this blockbudget reads"):
        Ledger(f"sqlite:///{path}")
    con = sqlite3.connect(path)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    con.close()
    assert tables == ["ledger_head"]


def test_budgets_and_reservations_reference_registered_contexts(tmp_path: Path) -> None:
    """The foreign keys that let a loaded budget row prove its context is registered."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    fks = {
        table: [(fk["constrained_columns"], fk["referred_table"]) for fk in fk_list]
        for table, fk_list in (
            (t, inspect(ledger.engine).get_foreign_keys(t))
            for t in ("ledger_budgets", "ledger_reservations")
        )
    }
    assert (["context"], "ledger_contexts") in fks["ledger_budgets"]
    assert (["context"], "ledger_contexts") in fks["ledger_reservations"]
    ledger.dispose()

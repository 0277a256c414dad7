"""Engines and transactions: durable SQLite, PostgreSQL, and retries of whole transactions.

SQLite (the embedded default) is made durable and serial:

* every connection runs ``PRAGMA journal_mode=WAL``, ``PRAGMA synchronous=FULL`` (a commit is
  on disk when it returns), ``PRAGMA busy_timeout`` and ``PRAGMA foreign_keys=ON``;
* SQLAlchemy takes over transaction control from pysqlite, as in SQLAlchemy's "Serializable
  isolation / Savepoints / Transactional DDL" recipe for pysqlite: the driver is put in
  autocommit mode (``isolation_level = None``) and the ``begin`` event emits the ``BEGIN``
  itself — ``BEGIN IMMEDIATE`` for write transactions, so a writer holds the database write lock
  from its first statement (no lock upgrade, no stale read), and plain ``BEGIN`` for reads,
  which see one WAL snapshot.

PostgreSQL runs the same statements at READ COMMITTED for writes (serialized by the head-row
lock, see :mod:`blockbudget.ledger.schema`) and REPEATABLE READ for reads (one snapshot).

:func:`run_transaction` retries a whole transaction on serialization failures (40001),
deadlocks (40P01), a SQLite database still locked after the busy timeout, and dropped
connections.
"""

from __future__ import annotations

import random
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, OperationalError

from blockbudget.errors import InvalidRequestError

T = TypeVar("T")

#: Execution option read by the SQLite ``begin`` hook: "IMMEDIATE" (default) or "DEFERRED".
BEGIN_OPTION = "blockbudget_sqlite_begin"

_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
_LOCKED_MESSAGES = ("database is locked", "database is busy", "database table is locked")


class TransientConflict(Exception):
    """Internal: a concurrent writer created the same row first; rerun the transaction."""


@dataclass(frozen=True)
class AfterCommit(Generic[T]):
    """A transaction's result with the in-process changes to make once it has committed.

    A transaction function that would update a process-wide cache returns this instead of
    touching the cache: :func:`run_committed` (or the group committer, after its batch
    committed) calls ``hook`` and hands out ``value``; a rollback drops both, so nothing in
    process memory ever reflects a transaction that did not commit.
    """

    value: T
    hook: Callable[[], None]
    #: the (seq, hash) of the last audit event the transaction appended and whether it
    #: appended a ``charged`` event, when it appended any and its writer wants the commit
    #: observed (:class:`~blockbudget.ledger.guard.WriteGuard`)
    tip: tuple[int, str, bool] | None = None


_configured: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()


def open_engine(target: str | Engine, *, busy_timeout_seconds: float) -> tuple[Engine, bool]:
    """An engine for ``target`` with the ledger's transaction hooks installed.

    Args:
        target: a database URL (``sqlite:////path/ledger.db``, ``postgresql+psycopg://…``) or
            an existing engine.
        busy_timeout_seconds: how long a SQLite writer waits for the write lock.

    Returns:
        The engine and whether the ledger owns it (and so disposes of it on close).

    Raises:
        InvalidRequestError: for a target that is neither, or a database other than SQLite and
            PostgreSQL.
    """
    if not busy_timeout_seconds > 0:
        raise InvalidRequestError(f"busy_timeout_seconds must be > 0, got {busy_timeout_seconds!r}")
    if isinstance(target, Engine):
        engine, owned = target, False
    elif isinstance(target, str) and target:
        kwargs: dict[str, Any] = {}
        if target.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": busy_timeout_seconds}
        engine, owned = create_engine(target, **kwargs), True
    else:
        raise InvalidRequestError(
            f"a ledger needs a database URL or a sqlalchemy Engine, got {target!r}"
        )
    name = engine.dialect.name
    if name == "sqlite":
        if engine not in _configured:
            _install_sqlite_hooks(engine, busy_timeout_seconds)
            _configured[engine] = busy_timeout_seconds
            if not owned:
                # Pooled connections opened before the hooks lack them; start afresh.
                engine.dispose()
    elif name != "postgresql":
        raise InvalidRequestError(
            f"the ledger supports SQLite and PostgreSQL, not {name!r} ({engine.url!r})"
        )
    return engine, owned


def _wal_mode(cursor: Any, timeout_seconds: float) -> str:
    """Switch a connection to the WAL journal and return the mode SQLite reports.

    Switching a new database's journal mode needs an exclusive lock, and SQLite can answer
    "database is locked" at once, without its busy handler, while other processes open the same
    new file (seen when several servers start together): retry until ``timeout_seconds``."""
    import sqlite3
    import time

    deadline = time.monotonic() + timeout_seconds
    pause = 0.005
    while True:
        try:
            return str(cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def _install_sqlite_hooks(engine: Engine, busy_timeout_seconds: float) -> None:
    busy_ms = int(busy_timeout_seconds * 1000)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from pysqlite; the begin hook below emits it.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            mode = _wal_mode(cursor, busy_timeout_seconds)
            if mode not in ("wal", "memory"):
                raise InvalidRequestError(
                    f"SQLite refused the WAL journal (it reports {mode!r}); the ledger needs WAL "
                    "for durable, concurrent writes — use a local file system"
                )
            cursor.execute("PRAGMA synchronous = FULL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    def on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(BEGIN_OPTION, "IMMEDIATE")
        sql = "BEGIN IMMEDIATE" if mode == "IMMEDIATE" else "BEGIN"
        # The recipe's conn.exec_driver_sql(sql), minus ~40 µs of statement machinery: the
        # same BEGIN on the same DBAPI connection, errors wrapped as the engine wraps them.
        dbapi_conn = conn.connection.dbapi_connection
        assert dbapi_conn is not None
        base: type[Exception] = conn.dialect.loaded_dbapi.Error
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(sql)
        except base as exc:
            raise DBAPIError.instance(sql, (), exc, base, dialect=conn.dialect) from exc
        finally:
            cursor.close()

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)


def is_retryable(exc: DBAPIError) -> bool:
    """Whether a database error is transient, so that rerunning the transaction may succeed."""
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate in _RETRYABLE_SQLSTATES:
        return True
    if isinstance(exc, OperationalError):
        text = str(orig).lower()
        return any(m in text for m in _LOCKED_MESSAGES)
    return False


def run_transaction(
    engine: Engine, fn: Callable[[Connection], T], *, write: bool, attempts: int
) -> T:
    """Run ``fn`` in one transaction, committing on return and rolling back on any exception.

    Transient database errors (see :func:`is_retryable`) rerun the whole of ``fn`` in a fresh
    transaction, up to ``attempts`` times in all, with jittered exponential backoff; ``fn`` must
    therefore have no effect outside the transaction. Any other exception propagates at once.
    """
    delay = 0.005
    for attempt in range(attempts):
        try:
            with engine.connect() as conn:
                if not write:
                    if conn.dialect.name == "sqlite":
                        conn.execution_options(**{BEGIN_OPTION: "DEFERRED"})
                    else:
                        conn.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin():
                    return fn(conn)
        except DBAPIError as exc:
            if attempt + 1 >= attempts or not is_retryable(exc):
                raise
        except TransientConflict:
            if attempt + 1 >= attempts:
                raise
        time.sleep(delay * (1.0 + random.random()))
        delay = min(delay * 2.0, 0.25)
    raise AssertionError("unreachable: the last attempt either returns or raises")


def run_committed(
    engine: Engine,
    fn: Callable[[Connection], AfterCommit[T]],
    *,
    write: bool,
    attempts: int,
    on_commit: Callable[[int, str, bool], None] | None = None,
) -> T:
    """:func:`run_transaction`, then the result's after-commit hook (only once the
    transaction committed; a failed or retried attempt's hook is never called), then
    ``on_commit(seq, hash, charged)`` of the result's :attr:`~AfterCommit.tip` when it has one
    — before the value is handed out, so that an exception there withholds it."""
    out = run_transaction(engine, fn, write=write, attempts=attempts)
    out.hook()
    if on_commit is not None and out.tip is not None:
        on_commit(*out.tip)
    return out.value

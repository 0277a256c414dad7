"""``fastsql`` sends the database exactly what ``Connection.execute`` would.

The ledger's write path runs SQLAlchemy's compiled SQL on the DBAPI cursor (ledger/fastsql.py),
which reads compiler attributes (``positiontup``, a bind's ``effective_value``) that a new
SQLAlchemy release could change. This test records every statement the hot path sends during a
representative workload — blocks, a direct charge, a reservation drawn and released, a refusal,
an expiry — and replays each through ``Connection.execute``, capturing what SQLAlchemy would hand
the cursor (``before_cursor_execute``) and aborting before it runs. The SQL text and the
parameters must be identical, statement by statement, on every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from ledger_support import Backend, FakeClock

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve
from blockbudget.errors import BudgetExceededError
from blockbudget.ledger import fastsql
from blockbudget.ledger.fastsql import FastSql


class _Abort(Exception):
    """Raised by the listener: the replayed statement must not run."""


class _RecordingCursor:
    def __init__(self, cursor: Any, sent: list[tuple[str, Any]]) -> None:
        self._cursor = cursor
        self._sent = sent

    def execute(self, sql: str, args: Any) -> Any:
        self._sent.append((sql, args))
        return self._cursor.execute(sql, args)

    def executemany(self, sql: str, args: Any) -> Any:
        self._sent.append((sql, list(args)))
        return self._cursor.executemany(sql, args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


Call = tuple[Callable[[], Any], Any]  # (statement builder, params or a list of params)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[Call], list[tuple[str, Any]]]]:
    calls: list[Call] = []
    sent: list[tuple[str, Any]] = []
    init, rows, run, run_many = FastSql.__init__, FastSql.rows, FastSql.run, FastSql.run_many

    def rec_init(self: FastSql, conn: sa.Connection) -> None:
        init(self, conn)
        self._cursor = _RecordingCursor(self._cursor, sent)  # type: ignore[assignment]

    def rec_rows(self: FastSql, key: Any, build: Any, params: Mapping[str, Any]) -> Any:
        calls.append((build, dict(params)))
        return rows(self, key, build, params)

    def rec_run(self: FastSql, key: Any, build: Any, params: Mapping[str, Any]) -> None:
        calls.append((build, dict(params)))
        run(self, key, build, params)

    def rec_many(self: FastSql, key: Any, build: Any, params: Sequence[Mapping[str, Any]]) -> None:
        if len(params) > 1:  # one parameter set goes through run(), which records it
            calls.append((build, [dict(p) for p in params]))
        run_many(self, key, build, params)

    monkeypatch.setattr(FastSql, "__init__", rec_init)
    monkeypatch.setattr(FastSql, "rows", rec_rows)
    monkeypatch.setattr(FastSql, "run", rec_run)
    monkeypatch.setattr(FastSql, "run_many", rec_many)
    fastsql._cache.clear()  # compile afresh under the recorder
    yield calls, sent


def _workload(backend: Backend, clock: FakeClock) -> None:
    led = backend.open(clock=clock)
    try:
        led.add_context("ml", description="the ml team")
        blocks = [f"s/{i}" for i in range(3)]
        cap = Budget(epsilon=1.0, delta=1e-6)
        led.add_blocks(blocks, stream="s", capacity=cap, accounting=Accounting.BASIC)
        led.add_blocks(["r/0", "r/1"], stream="r", capacity=cap, accounting=Accounting.RDP)
        led.charge(blocks, Budget(epsilon=0.25, delta=1e-7), context="ml")
        res = led.reserve(blocks[:2], Budget(epsilon=0.5), context="ml", holder="ann")
        led.charge(blocks[:1], Budget(epsilon=0.2), context="ml", reservation_id=res.id)
        led.release(res.id)
        with pytest.raises(BudgetExceededError):
            led.charge(blocks, Budget(epsilon=0.9), context="ml")
        led.charge(["r/0", "r/1"], RdpCurve.gaussian(sigma=20.0), context="ml")
        led.reserve(blocks[2:], Budget(epsilon=0.1), context="ml", ttl_seconds=1.0)
        clock.advance(5.0)
        led.expire_reservations()
    finally:
        led.dispose()


def _what_execute_sends(conn: sa.Connection, build: Callable[[], Any], params: Any) -> tuple:
    seen: list[tuple[str, Any]] = []

    def listener(conn_: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, list(parameters) if isinstance(parameters, list) else parameters))
        raise _Abort

    sa.event.listen(conn, "before_cursor_execute", listener)
    try:
        with pytest.raises(_Abort):
            conn.execute(build(), params)
    finally:
        sa.event.remove(conn, "before_cursor_execute", listener)
    assert len(seen) == 1
    return seen[0]


def test_fastsql_sends_what_connection_execute_would(
    backend: Backend, clock: FakeClock, recorded: tuple[list[Call], list[tuple[str, Any]]]
) -> None:
    calls, sent = recorded
    _workload(backend, clock)
    assert len(calls) == len(sent) >= 20  # the workload exercises the hot path
    engine = backend.engine()
    try:
        with engine.connect() as conn:
            for (build, params), actually in zip(calls, sent, strict=True):
                expected = _what_execute_sends(conn, build, params)
                got_sql, got_args = actually
                exp_sql, exp_args = expected
                assert got_sql == exp_sql
                if isinstance(exp_args, list):
                    assert [_plain(a) for a in got_args] == [_plain(a) for a in exp_args]
                else:
                    assert _plain(got_args) == _plain(exp_args), got_sql
    finally:
        engine.dispose()


def _plain(args: Any) -> Any:
    """Positional parameters as a tuple, named ones as a dict (the DBAPI accepts either type)."""
    return dict(args) if isinstance(args, Mapping) else tuple(args)

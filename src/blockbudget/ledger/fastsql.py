"""The hot path: SQLAlchemy Core statements compiled once per dialect, run on the DBAPI cursor.

Executing a cached Core statement through :meth:`Connection.execute` costs about 30 µs of
Python per statement; a charge needs six, which alone was more than a raw SQLite transaction.
So the write path compiles each Core statement **once per dialect** (the SQL text is
SQLAlchemy's, identical to what ``Connection.execute`` would send) and runs it on the cursor of
the very DBAPI connection that the SQLAlchemy :class:`~sqlalchemy.Connection` holds, inside the
transaction SQLAlchemy began (SQLAlchemy's documented "working with the DBAPI cursor directly").

Rules that keep this equivalent to ``Connection.execute``:

* the SQL text and the parameter order come from SQLAlchemy's compiler; the types' bind
  processors are applied as the engine would (only Float's ``to_float`` occurs here);
* DBAPI errors are wrapped into SQLAlchemy's exception classes (``IntegrityError``,
  ``OperationalError``, …) exactly as the engine would, so retry and duplicate detection work
  the same; a disconnect invalidates the connection;
* results are plain tuples in the select's column order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement

from blockbudget.errors import InternalError

#: Largest IN list in one statement; longer lists are split (SQLite allows 32,766 variables).
IN_CHUNK = 500


class Prepared:
    """One Core statement compiled for one dialect.

    Args:
        stmt: the Core statement.
        dialect: the dialect to compile for.

    """

    __slots__ = ("defaults", "names", "positional", "processors", "sql")

    def __init__(self, stmt: ClauseElement, dialect: Dialect) -> None:
        compiled = cast(SQLCompiler, stmt.compile(dialect=dialect))
        # The type's bind processors, applied in bind() as Connection.execute would.
        self.processors: dict[str, Callable[[Any], Any]] = {}
        # Values bound in the statement itself (literals such as ``state == 'open'``).
        self.defaults: dict[str, Any] = {}
        for bind, name in compiled.bind_names.items():
            proc = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if proc is not None:
                self.processors[name] = proc
            if not bind.required:
                self.defaults[name] = bind.effective_value
        self.sql = str(compiled)
        self.positional = bool(compiled.positional)
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())

    def bind(self, params: Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        """DBAPI parameters for ``params`` (named values; literals filled in; processed)."""
        if self.positional and not self.defaults and not self.processors:
            return tuple([params[n] for n in self.names])
        values = {**self.defaults, **params} if self.defaults else params
        if self.processors:
            values = dict(values)
            for name, proc in self.processors.items():
                if name in values:
                    values[name] = proc(values[name])
        if self.positional:
            return tuple(values[n] for n in self.names)
        return values


_cache_lock = threading.Lock()
_cache: dict[tuple[str, str, str, Any], Prepared] = {}


def prepared(dialect: Dialect, key: Any, build: Callable[[], ClauseElement]) -> Prepared:
    """The statement ``key`` compiled for ``dialect`` (built and compiled on first use)."""
    ck = (dialect.name, dialect.driver, dialect.paramstyle, key)
    p = _cache.get(ck)
    if p is None:
        p = Prepared(build(), dialect)
        with _cache_lock:
            _cache[ck] = p
    return p


class FastSql:
    """Runs :class:`Prepared` statements on the DBAPI cursor of a SQLAlchemy connection.

    Only valid inside a transaction begun on ``conn``.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._dialect = conn.dialect
        dbapi_conn = conn.connection.dbapi_connection
        if dbapi_conn is None:  # pragma: no cover - a begun connection always has one
            raise InternalError("the connection has no DBAPI connection")
        self._dbapi_conn = dbapi_conn
        self._cursor = dbapi_conn.cursor()

    def close(self) -> None:
        """Close the cursor (the connection and its transaction stay)."""
        self._cursor.close()

    def _wrap(self, exc: Exception, sql: str, params: Any) -> BaseException:
        dbapi = self._dialect.loaded_dbapi
        base: type[Exception] = dbapi.Error
        if not isinstance(exc, base):
            return exc
        lost = self._dialect.is_disconnect(exc, self._dbapi_conn, self._cursor)  # type: ignore[arg-type]
        if lost:
            self._conn.invalidate(exc)
        return DBAPIError.instance(
            sql, params, exc, base, connection_invalidated=lost, dialect=self._dialect
        )

    def rows(
        self, key: Any, build: Callable[[], ClauseElement], params: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """Run a SELECT and fetch every row as a tuple."""
        p = prepared(self._dialect, key, build)
        args = p.bind(params)
        try:
            self._cursor.execute(p.sql, args)
            return [tuple(r) for r in self._cursor.fetchall()]
        except Exception as exc:
            raise self._wrap(exc, p.sql, args) from exc

    def run(self, key: Any, build: Callable[[], ClauseElement], params: Mapping[str, Any]) -> None:
        """Run one DML statement."""
        p = prepared(self._dialect, key, build)
        args = p.bind(params)
        try:
            self._cursor.execute(p.sql, args)
        except Exception as exc:
            raise self._wrap(exc, p.sql, args) from exc

    def run_many(
        self, key: Any, build: Callable[[], ClauseElement], params: Sequence[Mapping[str, Any]]
    ) -> None:
        """Run one DML statement for each parameter set (``executemany``)."""
        if not params:
            return
        p = prepared(self._dialect, key, build)
        if len(params) == 1:
            self.run(key, build, params[0])
            return
        args: Any = [p.bind(x) for x in params]
        try:
            self._cursor.executemany(p.sql, args)
        except Exception as exc:
            raise self._wrap(exc, p.sql, args) from exc


def chunks(items: Sequence[str], size: int = IN_CHUNK) -> list[Sequence[str]]:
    """``items`` split into runs of at most ``size`` (for IN lists)."""
    return [items[i : i + size] for i in range(0, len(items), size)]

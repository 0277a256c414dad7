"""The embedded default engine: one DuckDB statement per plan over the part files.

A plan becomes one SQL statement over ``read_parquet([...files...])`` (:mod:`blockbudget.engine.
duckdb_sql`): DuckDB pushes the projection and the predicates into the Parquet scan, runs on all
the connection's threads and returns exact integers (``SUM`` over ``BIGINT`` is a 128-bit
``HUGEINT``). User-level bounding is a ``row_number()`` window over the stored order
(``file_index``, ``file_row_number``).

Files on another filesystem (S3 and any other pyarrow filesystem) are read through the source's
own pyarrow filesystem, with the credentials the store uses — DuckDB's own ``httpfs`` extension
is not needed (it would be downloaded at run time). An aggregate without contribution bounding
scans them as a pyarrow dataset (native reads, projection and filter pushdown; order does not
matter to exact integer sums); a bounded aggregate and :meth:`DuckDBEngine.batches` need the
stored-order columns of ``read_parquet``, so there the filesystem is wrapped for DuckDB as an
fsspec filesystem under a private protocol (``bbfs0://bucket/prefix/...``). On a local S3
server at 1M rows the dataset scan took 0.13 s against 0.25 s through fsspec.

One in-memory database per engine holds the settings (``memory_limit``, ``threads``, a spill
directory); every call runs on its own cursor, so an engine is safe to use from several threads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from blockbudget.engine.arrow_engine import find_damaged_file
from blockbudget.engine.base import Engine
from blockbudget.engine.duckdb_sql import Columns, batches_sql, plan_sql
from blockbudget.engine.kernels import output_columns
from blockbudget.engine.plan import AggKind, Partials, zero_partials
from blockbudget.errors import DataError, InvalidRequestError

if TYPE_CHECKING:
    import duckdb

    from blockbudget.engine.plan import Plan, Predicate, ScanSource

#: The name a remote source's Arrow dataset is registered under, on its own cursor.
DATASET = "__bb_parts"

#: Environment variables that set the defaults of :class:`DuckDBEngine`'s arguments.
MEMORY_ENV = "BLOCKBUDGET_DUCKDB_MEMORY_LIMIT"
THREADS_ENV = "BLOCKBUDGET_DUCKDB_THREADS"


class DuckDBEngine(Engine):
    """Computes plans with embedded DuckDB.

    Args:
        memory_limit: DuckDB's memory limit (``"4GB"``; default: ``$BLOCKBUDGET_DUCKDB_MEMORY_
            LIMIT`` or DuckDB's own, 80% of RAM). Sorts and windows beyond it spill to
            ``temp_directory``.
        threads: worker threads (default: ``$BLOCKBUDGET_DUCKDB_THREADS`` or one per core).
        temp_directory: where DuckDB spills (default: a private directory under the system's
            temporary directory, never the working directory).

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
        >>> from blockbudget.engine import (
        ...     AggKind, Aggregate, BlockFiles, FixedPoint, Op, Plan, Predicate, ScanSource)
        >>> root = tempfile.mkdtemp()
        >>> pq.write_table(pa.table({"x": [1.0, 2.5, None]}), os.path.join(root, "p.parquet"))
        >>> src = ScanSource(blocks=(BlockFiles("s/1", ("p.parquet",), 3),), base=root,
        ...                  columns=("x",))
        >>> plan = Plan(src, (Aggregate("s", AggKind.SUM, "x", fixed=FixedPoint(0.0, 4.0)),),
        ...             predicates=(Predicate("x", Op.GT, 1.0),))
        >>> engine = DuckDBEngine(threads=1)
        >>> engine.aggregate(plan).of("s")[0] * FixedPoint(0.0, 4.0).quantum
        2.5
        >>> engine.close()
    """

    name = "duckdb"

    def __init__(
        self,
        *,
        memory_limit: str | None = None,
        threads: int | None = None,
        temp_directory: str | None = None,
    ) -> None:
        self._memory_limit = memory_limit or os.environ.get(MEMORY_ENV) or None
        env_threads = os.environ.get(THREADS_ENV)
        self._threads = threads if threads is not None else (int(env_threads or 0) or None)
        if self._threads is not None and self._threads < 1:
            raise InvalidRequestError(f"threads must be at least 1, got {self._threads}")
        self._temp_directory = temp_directory
        self._own_temp: str | None = None
        self._cleanup: weakref.finalize[..., Any] | None = None
        self._lock = threading.Lock()
        self._db: duckdb.DuckDBPyConnection | None = None
        self._protocols: dict[int, tuple[pafs.FileSystem, str]] = {}

    def _cursor(
        self, source: ScanSource, *, paths_for_duckdb: bool = True
    ) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
        """A cursor of the engine's database and the source's files as DuckDB paths (through
        the fsspec wrapper for a remote filesystem, unless ``paths_for_duckdb`` is False)."""
        with self._lock:
            if self._db is None:
                temp = self._temp_directory
                if temp is None:
                    if self._own_temp is None:  # one spill folder per engine, reused on reopen
                        self._own_temp = tempfile.mkdtemp(prefix="blockbudget-duckdb-")
                        # removed on close(), or when the engine is collected unclosed
                        self._cleanup = weakref.finalize(
                            self, shutil.rmtree, self._own_temp, ignore_errors=True
                        )
                    temp = self._own_temp
                self._db = _open_database(self._memory_limit, self._threads, temp)
            paths = source.full_paths()
            fs = source.filesystem
            if paths_for_duckdb and _remote(source):
                assert fs is not None
                entry = self._protocols.get(id(fs))
                if entry is None:
                    protocol = f"bbfs{len(self._protocols)}"
                    self._db.register_filesystem(_wrap(fs, protocol))
                    entry = self._protocols[id(fs)] = (fs, protocol)
                paths = [f"{entry[1]}://{p}" for p in paths]
            return self._db.cursor(), paths

    def aggregate(self, plan: Plan) -> Partials:
        source = plan.source
        if not source.full_paths():
            return zero_partials(plan)
        kinds = _column_kinds(source)
        bounded = source.user_column is not None and source.rows_per_user is not None
        if _remote(source) and not bounded:
            # No stored order is needed: DuckDB scans the source's own pyarrow dataset (native
            # S3 reads, projection and filter pushdown), 2-3x faster than through fsspec.
            cursor, files = self._cursor(source, paths_for_duckdb=False)
            text, params = plan_sql(plan, files, kinds, dataset=DATASET)
        else:
            cursor, files = self._cursor(source)
            text, params = plan_sql(plan, files, kinds)
        try:
            if _remote(source) and not bounded:
                cursor.register(DATASET, _dataset(source))
            rows = cursor.execute(text, params).fetchall()
        except Exception as exc:  # duckdb.Error; duckdb is imported lazily
            self._forget_if_broken(exc)
            raise _translate(exc, source) from None
        finally:
            cursor.close()
        return _partials(plan, rows)

    def batches(
        self,
        source: ScanSource,
        *,
        columns: Sequence[str] | None = None,
        predicates: Sequence[Predicate] = (),
        batch_rows: int = 65_536,
    ) -> Iterator[pa.RecordBatch]:
        out = output_columns(source, columns, predicates, batch_rows)
        needed = set(out) | {p.column for p in predicates}
        return self._stream(source, out, needed, tuple(predicates), batch_rows)

    def _stream(
        self,
        source: ScanSource,
        out: list[str],
        needed: set[str],
        predicates: tuple[Predicate, ...],
        batch_rows: int,
    ) -> Iterator[pa.RecordBatch]:
        if not source.full_paths():
            return
        if source.user_column is not None:
            needed.add(source.user_column)
        read = [c for c in source.columns if c in needed]
        kinds = _column_kinds(source)
        cursor, files = self._cursor(source)
        text, params = batches_sql(
            files,
            read,
            out,
            predicates,
            kinds,
            user=source.user_column,
            rows_per_user=source.rows_per_user,
        )
        try:
            reader = cursor.sql(text, params=params).to_arrow_reader(batch_rows)
            for batch in reader:
                if batch.num_rows:
                    yield batch
        except Exception as exc:
            self._forget_if_broken(exc)
            raise _translate(exc, source) from None
        finally:
            cursor.close()

    def _forget_if_broken(self, exc: BaseException) -> None:
        """After an internal or fatal DuckDB error the database refuses every later query:
        drop it (the next call opens a new one)."""
        if type(exc).__name__ in ("InternalException", "FatalException"):
            with self._lock:
                self._db = None
                self._protocols.clear()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
                self._protocols.clear()
            if self._cleanup is not None:
                self._cleanup()  # removes the spill folder (once)
                self._cleanup = None
                self._own_temp = None


def _open_database(
    memory_limit: str | None, threads: int | None, temp_directory: str
) -> duckdb.DuckDBPyConnection:
    import duckdb

    config: dict[str, Any] = {
        "temp_directory": temp_directory,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        # Parquet statistics exclude NaN; DuckDB would fold isnan() to false (see duckdb_sql).
        "disabled_optimizers": "statistics_propagation",
    }
    if memory_limit is not None:
        config["memory_limit"] = memory_limit
    if threads is not None:
        config["threads"] = threads
    try:
        db = duckdb.connect(":memory:", config=config)
    except duckdb.Error as exc:
        raise InvalidRequestError(f"invalid DuckDB settings {config}: {exc}") from None
    # Timestamps are compared and returned in UTC, whatever the server's time zone (a
    # connect-time setting would need the ICU extension before it is loaded; GLOBAL reaches
    # every cursor).
    db.execute("SET GLOBAL TimeZone = 'UTC'")
    return db


def _remote(source: ScanSource) -> bool:
    """Whether the source's files live on a filesystem DuckDB cannot open by path."""
    fs = source.filesystem
    return fs is not None and not isinstance(fs, pafs.LocalFileSystem)


def _dataset(source: ScanSource) -> Any:
    """The source's part files as a pyarrow dataset on its own filesystem."""
    import pyarrow.dataset as pads

    return pads.dataset(source.full_paths(), filesystem=source.filesystem, format="parquet")


def _wrap(fs: pafs.FileSystem, protocol: str) -> Any:
    """``fs`` as an fsspec filesystem answering to ``protocol://``."""
    from fsspec.implementations.arrow import ArrowFSWrapper  # type: ignore[import-untyped]

    prefix = f"{protocol}://"

    def strip(cls: type, path: Any) -> Any:  # keep the bucket: "bbfs0://b/x" -> "b/x"
        if isinstance(path, list):
            return [strip(cls, p) for p in path]
        text = str(path)
        return text[len(prefix) :] if text.startswith(prefix) else text

    namespace = {"protocol": protocol, "_strip_protocol": classmethod(strip)}
    wrapper_type = type(f"_BlockFS_{protocol}", (ArrowFSWrapper,), namespace)
    return wrapper_type(fs)


def _column_kinds(source: ScanSource) -> Columns:
    """The float columns (from the first part file's schema: a stream has one schema)."""
    fs = source.filesystem if source.filesystem is not None else pafs.LocalFileSystem()
    first = source.full_paths()[0]
    try:
        schema = pq.read_schema(first, filesystem=fs)
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, source) from None
    return Columns(
        floats=frozenset(f.name for f in schema if pa.types.is_floating(f.type)),
        doubles=frozenset(f.name for f in schema if pa.types.is_float64(f.type)),
        types={f.name: f.type for f in schema},
    )


def _translate(exc: BaseException, source: ScanSource) -> Exception:
    """A DuckDB failure as the contract's error, without the engine's message text.

    A failure on data is diagnosed by checking each part file (only on this error path): the
    first missing or unreadable one is named. Otherwise a binder or conversion error is the
    plan's fault (a literal that does not fit its column).
    """
    if isinstance(exc, DataError | InvalidRequestError):
        return exc
    damaged = find_damaged_file(source)
    if damaged is not None:
        return damaged
    kind = type(exc).__name__
    if kind in ("ConversionException", "BinderException", "InvalidInputException"):
        return InvalidRequestError(
            f"the plan's literals or aggregates do not fit the columns' types (DuckDB {kind})"
        )
    return DataError(f"the part files could not be read (DuckDB {kind})")


def _partials(plan: Plan, rows: list[tuple[Any, ...]]) -> Partials:
    """Map result rows (the group keys' domain indexes, then one value per aggregate) to the
    flat partials. Every key and histogram cell is an index computed in SQL, so nothing here
    depends on how DuckDB compared the declared values with the data."""
    out = {a.name: [0] * (plan.groups * a.width) for a in plan.aggregates}
    sizes = [len(g.domain) for g in plan.group_by]
    nkeys = len(sizes)
    for row in rows:
        group = 0
        for code, size in zip(row[:nkeys], sizes, strict=True):
            group = group * size + int(code)
        for agg, value in zip(plan.aggregates, row[nkeys:], strict=True):
            if value is None:
                continue
            target = out[agg.name]
            if isinstance(value, list):  # [index, count] pairs of declared categories
                for cell, count in value:
                    if cell >= 0:
                        target[group * agg.width + int(cell)] += int(count)
            elif agg.kind in (AggKind.BINS, AggKind.CATEGORIES):
                for cell, count in value.items():
                    target[group * agg.width + int(cell)] += int(count)
            else:
                target[group] += int(value)
    return Partials({k: tuple(v) for k, v in out.items()})

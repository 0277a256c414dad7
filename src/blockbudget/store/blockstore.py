"""The block store: streams of records cut into blocks, kept as Parquet part files.

See ``docs/store.md`` for the concepts. In short: :meth:`BlockStore.ingest` validates a whole
input, groups its rows by block key and either commits all of them or nothing; rows for an open
block are appended as a new part file, rows for a sealed block (or a closed window) follow the
stream's :class:`LatePolicy`; :meth:`BlockStore.seal` freezes blocks before their data first
leaves in a grant; :meth:`BlockStore.read` assembles the rows of chosen blocks.

Atomicity and concurrency. An ingest (run by :mod:`blockbudget.store.ingesting`, idempotent per
ingest id, with its overlap check in :mod:`blockbudget.store.overlap`) streams its input batch by
batch
(:mod:`blockbudget.store.staging`): each batch is checked, its rows grouped by block key and
appended to the part files of their blocks (:mod:`blockbudget.store.writers`, bounded memory),
each key's block planned from a snapshot of the catalog when the key first appears. Once the
whole input has been checked, the files are made durable (fsync on local filesystems) and the
ingest commits in one transaction that first locks the stream (see
:mod:`blockbudget.store.catalog`) and re-derives the plan (:mod:`blockbudget.store.commit`): if
another writer changed the plan's premises (a block was sealed or created meanwhile), the
transaction is abandoned and the ingest re-plans, moving staged files whose block changed. Any
failure deletes the files the ingest wrote, so the catalog and the directory tree are left as
they were. Readers only ever open part files listed in the catalog.

Orphans. An ingest killed before its commit (SIGKILL, a power loss) cannot delete its files:
they stay under the data root, listed by no catalog entry, never read. The first ingest into a
stream in a process — and again once per :data:`ORPHAN_GRACE` in a long-running one — sweeps
that stream's orphans older than :data:`ORPHAN_GRACE` (:meth:`BlockStore.vacuum`: under the
stream's lock, so a file committed meanwhile is kept, and an ingest still running after that
long whose staged file was swept fails instead of committing a missing file).
:meth:`BlockStore.check_files` compares the data root with the catalog both ways (orphans, and
listed parts whose file is missing, e.g. after a restore).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar

import pandas as pd
import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from blockbudget.engine.plan import BlockFiles, ScanSource
from blockbudget.errors import (
    InvalidRequestError,
    StreamExistsError,
    UnknownBlockError,
)
from blockbudget.store import catalog
from blockbudget.store.content import check_ingest_id
from blockbudget.store.files import DataFiles
from blockbudget.store.ingesting import MAX_ATTEMPTS, IngestRun
from blockbudget.store.inputs import (
    BATCH_ROWS,
    IngestData,
    open_batches,
    schema_from_bytes,
)
from blockbudget.store.keys import key_ordinal
from blockbudget.store.model import (
    BlockMeta,
    DataFormat,
    FileCheck,
    IngestReport,
    OnOverlap,
    StreamSpec,
    Unit,
    check_stream_name,
    parse_block_id,
    utc_now,
)
from blockbudget.store.planning import (
    backoff,
    coerce_format,
    coerce_on_overlap,
    require_known,
    retryable,
    unique_ids,
)
from blockbudget.store.staging import WriterLimits
from blockbudget.store.writers import BUFFER_BYTES, MAX_OPEN_WRITERS

_T = TypeVar("_T")

log = logging.getLogger("blockbudget.store")

#: How old a part file that no catalog entry lists must be before an ingest's own sweep deletes
#: it: far longer than an ingest runs (a staged file is younger than its ingest), so the sweep
#: meets only the leftovers of killed ingests.
ORPHAN_GRACE = timedelta(hours=24)


class BlockStore:
    """Streams, blocks and their data.

    Args:
        url_or_engine: a SQLAlchemy URL (``"sqlite:////path/platform.db"``,
            ``"postgresql+psycopg://..."``) or an existing engine (shared with the ledger).
        root: where part files live: a local directory or a pyarrow filesystem URI.
        orphan_grace: the age past which an ingest sweeps its stream's orphaned part files
            (see the module docstring; default :data:`ORPHAN_GRACE`); None: never.

    Example:
        >>> store = BlockStore("sqlite:///platform.db", "blocks")  # doctest: +SKIP
        >>> store.create_stream(spec)  # doctest: +SKIP
        >>> store.ingest("flights", frame).new_blocks  # doctest: +SKIP
        ('flights/2013-01-01', 'flights/2013-01-02')
    """

    def __init__(
        self,
        url_or_engine: str | Engine,
        root: str | os.PathLike[str],
        *,
        orphan_grace: timedelta | None = ORPHAN_GRACE,
    ) -> None:
        if isinstance(url_or_engine, Engine):
            self._engine = url_or_engine
            self._owns_engine = False
        else:
            url = sa.engine.make_url(url_or_engine)
            kwargs: dict[str, Any] = {}
            if url.get_backend_name() == "sqlite":
                kwargs["connect_args"] = {"timeout": 60}
            self._engine = sa.create_engine(url, **kwargs)
            self._owns_engine = True
        self._files = DataFiles(root)
        self._pool: ThreadPoolExecutor | None = None
        # Committed facts that never change: a stream's spec, and its schema once set.
        self._specs: dict[str, StreamSpec] = {}
        self._schemas: dict[str, pa.Schema] = {}
        self._orphan_grace = orphan_grace
        self._swept: dict[str, float] = {}  # stream -> monotonic time of its last sweep
        self._sweep_lock = threading.Lock()
        try:
            catalog.create_tables(self._engine)
        except BaseException:
            self.dispose()
            raise

    @property
    def engine(self) -> Engine:
        """The catalog's database engine."""
        return self._engine

    @property
    def root(self) -> str:
        """The data root as given (path or URI)."""
        return self._files.uri

    @property
    def files(self) -> DataFiles:
        """The data root's files (the filesystem the part files and the audit log's
        high-water mark live on)."""
        return self._files

    def dispose(self) -> None:
        """Release the engine's connections if this store created it (an engine passed in is
        left to its owner)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._owns_engine:
            self._engine.dispose()

    def close(self) -> None:
        """Same as :meth:`dispose`."""
        self.dispose()

    def __enter__(self) -> BlockStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    # ----------------------------------------------------------------------------- streams

    def create_stream(self, spec: StreamSpec, *, exclusive: bool = False) -> StreamSpec:
        """Register a stream. Creating an identical stream again is a no-op, unless
        ``exclusive``: then only the call that inserts the stream succeeds (of two concurrent
        creators exactly one does), so its caller knows it created the stream.

        Raises:
            StreamExistsError: when a stream of that name exists with a different spec, or at
                all when ``exclusive`` (the message never shows the existing spec).
        """
        if not isinstance(spec, StreamSpec):
            raise InvalidRequestError(f"create_stream needs a StreamSpec, got {spec!r}")

        def attempt(conn: Connection) -> None:
            existing = catalog.select_stream(conn, spec.name)
            if existing is None:
                catalog.insert_stream(conn, spec, utc_now())
            elif exclusive:
                raise StreamExistsError(f"stream {spec.name!r} already exists")
            elif existing.spec != spec:
                raise StreamExistsError(
                    f"stream {spec.name!r} already exists with a different spec; a stream's "
                    "spec never changes"
                )

        self._transaction(attempt)
        return spec

    def get_stream(self, name: str) -> StreamSpec:
        """The spec of a stream.

        Raises:
            UnknownBlockError: when there is no such stream.
        """
        spec = self._specs.get(name)
        if spec is None:
            spec = self._stream_row(name).spec
            # A committed stream's spec never changes and a stream is never dropped, so the
            # spec read from the catalog is kept (no hook needed: it is committed data).
            self._specs[name] = spec
        return spec

    def list_streams(self) -> list[StreamSpec]:
        """Every stream, by name."""
        with self._engine.connect() as conn:
            return [row.spec for row in catalog.select_streams(conn)]

    def schema(self, stream: str) -> pa.Schema | None:
        """The stream's Arrow schema, fixed by its first non-empty ingest (None before)."""
        cached = self._schemas.get(stream)
        if cached is not None:
            return cached
        row = self._stream_row(stream)
        if row.schema_bytes is None:
            return None
        schema = schema_from_bytes(row.schema_bytes)
        self._schemas[stream] = schema  # fixed once set by the first non-empty ingest
        return schema

    def _stream_row(self, name: str) -> catalog.StreamRow:
        check_stream_name(name)
        with self._engine.connect() as conn:
            row = catalog.select_stream(conn, name)
        if row is None:
            raise UnknownBlockError(
                f"no stream {name!r}; create it first (command line: `blockbudget stream create "
                f"{name}`; HTTP: POST /v1/streams; Python: Platform.create_stream)"
            )
        return row

    # ------------------------------------------------------------------------------ ingest

    def ingest(
        self,
        stream: str,
        data: IngestData,
        *,
        format: DataFormat | str | None = None,
        batch_rows: int = BATCH_ROWS,
        max_open_writers: int = MAX_OPEN_WRITERS,
        buffer_bytes: int = BUFFER_BYTES,
        ingest_id: str | None = None,
        on_overlap: OnOverlap | str = OnOverlap.REFUSE,
    ) -> IngestReport:
        """Add records to a stream, all or nothing, streaming them into the block files;
        idempotent per ingest id.

        Every ingest has an id: ``ingest_id``, or by default ``"sha256:<content hash>"``
        (:mod:`blockbudget.store.content`: the rows as stored, in input order). An id is
        unique within its stream: an ingest whose id is committed already changes nothing and
        returns the first ingest's report with ``repeat=True`` (of two concurrent ingests of
        one id exactly one commits; the other gets the repeat); the same id with other
        content is refused. Rows that repeat stored rows of their block key are governed by
        ``on_overlap`` (:class:`OnOverlap`) and reported in ``overlap``.

        The input is read batch by batch; each batch is checked and its rows go to the part
        file of their block (one per block and ingest, unless more than ``max_open_writers``
        blocks are written at once: see :mod:`blockbudget.store.writers`). Memory stays bounded
        by one batch, ``buffer_bytes`` and the open writers, whatever the input's size. Every
        row is checked before anything is committed; the files are made durable
        (:meth:`~blockbudget.store.files.DataFiles.sync`) before the catalog commit that lists
        them, and deleted if the ingest fails.

        Args:
            stream: the stream's name.
            data: a pandas DataFrame (its index is ignored: ``reset_index()`` first to keep
                it), a pyarrow Table, RecordBatch or RecordBatchReader, an iterable of
                RecordBatches, or a path to a CSV (``.csv``, ``.csv.gz``…) or Parquet
                (``.parquet``, ``.pq``) file.
            format: the file format; inferred from the suffix when None.
            batch_rows: rows per batch read from a Parquet file or an in-memory input.
            max_open_writers: the most part files open for writing at once.
            buffer_bytes: the most bytes of rows buffered before they are written.
            ingest_id: the caller's id of this ingest (1 to 128 characters of letters, digits
                and ``._:@/+=-``); default: the content hash.
            on_overlap: what to do with exact duplicates of stored rows (default REFUSE).

        Returns:
            What was done: rows, new and appended blocks, late rows, rows per block, the
            blocks that ``close_after`` sealed, the ingest id and content hash, the overlap
            with stored rows, and whether this was a repeat (then: what the first one did).

        Raises:
            UnknownBlockError: when the stream does not exist.
            InvalidRequestError: for a format given with in-memory data, an unknown format, or
                a bound below its minimum.
            DataError: for unreadable or malformed input (naming the file, column and row), a
                schema mismatch, or late records refused by LatePolicy.REJECT. Nothing is
                written then.
            StoreConflictError: if other writers kept winning the race for this stream, or
                a :meth:`vacuum` deleted a staged part file before the commit (an ingest that
                ran longer than its ``older_than``). Nothing is written then; retry.
            IngestIdConflictError: the ingest id names a committed ingest of other content.
            DuplicateRowsError: under ``on_overlap`` REFUSE, rows equal to stored rows.
        """
        fmt = coerce_format(format, data)
        policy = coerce_on_overlap(on_overlap)
        if ingest_id is not None:
            check_ingest_id(ingest_id)
        if batch_rows < 1 or max_open_writers < 1 or buffer_bytes < 0:
            raise InvalidRequestError(
                "ingest needs batch_rows >= 1, max_open_writers >= 1 and buffer_bytes >= 0; got "
                f"{batch_rows}, {max_open_writers}, {buffer_bytes}"
            )
        row = self._stream_row(stream)
        spec = row.spec
        schema = None if row.schema_bytes is None else schema_from_bytes(row.schema_bytes)
        batches, source = open_batches(data, fmt=fmt, schema=schema, batch_rows=batch_rows)
        limits = WriterLimits(max_open=max_open_writers, buffer_bytes=buffer_bytes)
        run = IngestRun(self._engine, self._files, self._transaction, spec, limits)
        try:
            return run.run(batches, source, schema=schema, ingest_id=ingest_id, policy=policy)
        finally:
            self._sweep_orphans(stream)

    def _sweep_orphans(self, stream: str) -> None:
        """Delete ``stream``'s orphaned part files older than the grace, at most once per grace
        in this process (the first ingest after a start sweeps what a killed one left). Best
        effort: a failure is logged, never raised (the ingest's own outcome stands)."""
        grace = self._orphan_grace
        if grace is None:
            return
        now = time.monotonic()
        with self._sweep_lock:
            last = self._swept.get(stream)
            if last is not None and now - last < grace.total_seconds():
                return
            self._swept[stream] = now
        try:
            removed = self.vacuum(stream, older_than=grace)
        except Exception:  # a sweep must not turn a finished ingest into a failure
            log.warning("sweeping orphaned part files of stream %r failed", stream, exc_info=True)
            return
        if removed:
            log.info(
                "removed %d orphaned part file(s) of stream %r (left by killed ingests): %s",
                len(removed),
                stream,
                ", ".join(removed[:10]) + (" …" if len(removed) > 10 else ""),
            )

    # ----------------------------------------------------------------------------- sealing

    def seal(self, block_ids: Iterable[str]) -> list[str]:
        """Seal blocks so that they never change again (idempotent, all or nothing).

        The platform calls this before a block's data first leaves in a grant.

        Returns:
            The ids that were open and are now sealed (already sealed ones are not listed).

        Raises:
            InvalidRequestError: for an empty list.
            UnknownBlockError: when any block does not exist; nothing is sealed then.
        """
        ids = unique_ids(block_ids, allow_duplicates=True, what="seal")
        streams = sorted({parse_block_id(b)[0] for b in ids})
        with self._engine.connect() as conn:  # sealing is permanent: a sealed block stays so
            known = catalog.select_blocks_by_id(conn, ids)
        if len(known) == len(set(ids)) and all(m.sealed for m in known.values()):
            return []  # nothing to write: no write transaction (and no fsync) per query

        def attempt(conn: Connection) -> list[str]:
            for s in streams:  # lock in name order: no deadlocks between sealers
                catalog.lock_stream(conn, s)
            metas = catalog.select_blocks_by_id(conn, ids)
            require_known(ids, metas, "nothing was sealed")
            todo = [b for b in ids if not metas[b].sealed]
            catalog.seal_blocks(conn, todo, utc_now())
            return todo

        return self._transaction(attempt)

    def close_before(self, stream: str, key: str | date | datetime | int) -> list[str]:
        """Close every window (or id range) that starts before the one containing ``key``.

        Their open blocks are sealed, and records for them arriving later are late. ``key`` is a
        block key, an ISO date/datetime or a ``date``/``datetime`` (time streams), or a user id
        (user streams). Idempotent.

        Returns:
            The ids of the blocks sealed now.

        Raises:
            UnknownBlockError: when there is no such stream.
            InvalidRequestError: for an attribute stream (no public order) or an unreadable key.
        """
        spec = self.get_stream(stream)
        bound = key_ordinal(spec.blocking, key)

        def attempt(conn: Connection) -> list[str]:
            catalog.lock_stream(conn, stream)
            state = catalog.select_stream(conn, stream)
            assert state is not None
            closed = bound if state.closed_until is None else max(bound, state.closed_until)
            catalog.update_stream_state(conn, stream, closed_until=closed)
            ids = catalog.open_blocks_before(conn, stream, closed)
            catalog.seal_blocks(conn, ids, utc_now())
            return ids

        return self._transaction(attempt)

    # ----------------------------------------------------------------------------- queries

    def blocks(self, stream: str, *, sealed: bool | None = None) -> list[BlockMeta]:
        """The stream's blocks in key order (time/id order; by key for attributes), then seq.

        Args:
            stream: the stream's name.
            sealed: only sealed blocks (True), only open ones (False), or all (None).

        Raises:
            UnknownBlockError: when there is no such stream.
        """
        self._stream_row(stream)
        with self._engine.connect() as conn:
            return catalog.select_blocks(conn, stream, sealed)

    def block_ids(self, stream: str, *, offset: int = 0, limit: int = 1000) -> list[str]:
        """One page of the stream's block ids in :meth:`blocks`' order, skipping the
        ``offset`` first: reads that page's index rows only (no block metadata)."""
        with self._engine.connect() as conn:
            return catalog.select_block_ids(conn, stream, offset=offset, limit=limit)

    def block(self, block_id: str) -> BlockMeta:
        """One block's metadata.

        Raises:
            UnknownBlockError: when it does not exist.
        """
        parse_block_id(block_id)
        with self._engine.connect() as conn:
            metas = catalog.select_blocks_by_id(conn, [block_id])
        require_known([block_id], metas, "")
        return metas[block_id]

    def read(
        self,
        block_ids: Sequence[str] | str,
        columns: Sequence[str] | None = None,
        *,
        require_sealed: bool = False,
    ) -> pa.Table:
        """Assemble the rows of the chosen blocks of one stream, all or nothing.

        Rows come block by block in the order given, each block's part files in commit order,
        each file's rows in ingest order.

        Args:
            block_ids: blocks of one stream, no duplicates (a single id may be passed as text).
            columns: the columns to return (default: all, in schema order).
            require_sealed: refuse blocks that are not sealed yet.

        Raises:
            InvalidRequestError: for an empty list, a duplicate id, blocks of several streams,
                an unknown column, or an open block with ``require_sealed``.
            UnknownBlockError: when any block does not exist; nothing is read then.
        """
        ids = unique_ids(
            [block_ids] if isinstance(block_ids, str) else block_ids,
            allow_duplicates=False,
            what="read",
        )
        streams = sorted({parse_block_id(b)[0] for b in ids})
        with self._engine.connect() as conn:
            metas = catalog.select_blocks_by_id(conn, ids)
            require_known(ids, metas, "nothing was read")
            if len(streams) > 1:
                raise InvalidRequestError(
                    f"read assembles blocks of one stream; got blocks of {streams}"
                )
            state = catalog.select_stream(conn, streams[0])
            parts = catalog.select_parts(conn, ids)
        if require_sealed:
            open_ids = [b for b in ids if not metas[b].sealed]
            if open_ids:
                raise InvalidRequestError(
                    f"block(s) {', '.join(open_ids)} are not sealed; seal them before their "
                    "data leaves the store"
                )
        assert state is not None and state.schema_bytes is not None
        schema = schema_from_bytes(state.schema_bytes)
        if columns is not None:
            cols = list(columns)
            unknown = [c for c in cols if c not in schema.names]
            if unknown or not cols:
                raise InvalidRequestError(
                    f"unknown or no columns {unknown} for stream {streams[0]!r}; "
                    f"it has {schema.names}"
                )
            schema = pa.schema([schema.field(c) for c in cols])
        paths = [p for b in ids for p in parts[b]]
        if not paths:
            return schema.empty_table()
        if len(paths) == 1:
            tables = [self._files.read_part(paths[0], columns)]
        else:
            # One long-lived pool per store: starting threads on every read cost more than the
            # reads themselves for small blocks.
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="blockstore-read")
            tables = list(self._pool.map(lambda p: self._files.read_part(p, columns), paths))
        return pa.concat_tables([t.select(schema.names) for t in tables])

    def source(self, block_ids: Sequence[str]) -> ScanSource:
        """The part files of blocks of one stream, for an engine to read (nothing is read here).

        Raises:
            InvalidRequestError: an empty list, a duplicate id, or blocks of several streams.
            UnknownBlockError: when any block does not exist.
        """
        ids = unique_ids(list(block_ids), allow_duplicates=False, what="read")
        streams = sorted({parse_block_id(b)[0] for b in ids})
        if len(streams) > 1:
            raise InvalidRequestError(f"a source holds blocks of one stream; got {streams}")
        with self._engine.connect() as conn:
            metas = catalog.select_blocks_by_id(conn, ids)
            require_known(ids, metas, "nothing was read")
            state = catalog.select_stream(conn, streams[0])
            parts = catalog.select_parts(conn, ids)
        assert state is not None
        spec = self.get_stream(streams[0])
        schema = None if state.schema_bytes is None else schema_from_bytes(state.schema_bytes)
        user = spec.blocking.column if spec.blocking.unit is Unit.USER else None
        return ScanSource(
            blocks=tuple(BlockFiles(b, tuple(parts[b]), metas[b].rows) for b in ids),
            base=self._files.base,
            columns=tuple(schema.names) if schema is not None else (),
            filesystem=self._files.fs,
            uri=self._files.uri,
            user_column=user,
            rows_per_user=(spec.blocking.rows_per_user or 1) if user is not None else None,
        )

    def read_pandas(
        self,
        block_ids: Sequence[str] | str,
        columns: Sequence[str] | None = None,
        *,
        require_sealed: bool = False,
    ) -> pd.DataFrame:
        """:meth:`read` as a pandas DataFrame (with a fresh RangeIndex)."""
        frame: pd.DataFrame = self.read(
            block_ids, columns, require_sealed=require_sealed
        ).to_pandas()
        return frame

    def vacuum(
        self, stream: str | None = None, *, older_than: timedelta = timedelta(hours=1)
    ) -> list[str]:
        """Delete part files that no catalog row references (left by crashed ingests).

        Only files older than ``older_than`` are candidates (files of unknown age only when it
        is 0). Each stream's candidates are checked and deleted in one transaction holding the
        stream's lock, under which an ingest's commit checks that its staged files still exist
        (:func:`~blockbudget.store.commit.record_ingest`): a file committed meanwhile is kept,
        and an ingest that lost a file to this vacuum fails (StoreConflictError, nothing
        committed) rather than commit a missing file. Streams go in name order, one lock at a
        time; files under no stream's directory need no lock (streams are never dropped).

        Returns:
            The root-relative paths removed, sorted.

        Raises:
            UnknownBlockError: when ``stream`` does not exist.

        Example:
            >>> store.vacuum("flights", older_than=timedelta(hours=6))  # doctest: +SKIP
            []
        """
        if stream is not None:
            self._stream_row(stream)
        cutoff = datetime.now(UTC) - older_than
        candidates: dict[str, list[str]] = {}
        for path, mtime in self._files.list_files(stream or ""):
            if not path.endswith(".parquet"):
                continue
            if older_than <= timedelta(0) or (mtime is not None and _aware(mtime) < cutoff):
                candidates.setdefault(path.split("/", 1)[0], []).append(path)
        with self._engine.connect() as conn:  # read after the listing (see the docstring)
            names = {s.spec.name for s in catalog.select_streams(conn)}
        removed: list[str] = []
        for top in sorted(candidates):
            paths = candidates[top]
            if top not in names:
                self._files.remove_parts(paths)
                removed.extend(paths)
                continue

            def attempt(conn: Connection, top: str = top, paths: list[str] = paths) -> list[str]:
                catalog.lock_stream(conn, top)
                known = catalog.registered(conn, paths)
                orphans = [p for p in paths if p not in known]
                self._files.remove_parts(orphans)
                return orphans

            removed.extend(self._transaction(attempt))
        return sorted(removed)

    def check_files(self, stream: str | None = None) -> FileCheck:
        """Compare the part files under the data root (one stream's directory, or all of it)
        with the catalog, both ways: orphans (files no catalog entry lists) and missing files
        (listed parts whose file is gone). Reads only.

        The catalog is read before and after the listing: an orphan is a file unlisted after
        it (so a file an ingest committed meanwhile is no orphan), a missing file one listed
        before it (a commit comes after its files are durable, so a file listed then was there
        unless something removed it), confirmed by looking the file up again.

        Raises:
            UnknownBlockError: when ``stream`` does not exist.
        """
        if stream is not None:
            self._stream_row(stream)
        with self._engine.connect() as conn:
            before = catalog.select_part_paths(conn, stream)
        found = [
            (path, None if mtime is None else _aware(mtime))
            for path, mtime in self._files.list_files(stream or "")
            if path.endswith(".parquet")
        ]
        with self._engine.connect() as conn:
            after = catalog.select_part_paths(conn, stream)
        paths = {path for path, _ in found}
        orphans = tuple((path, mtime) for path, mtime in found if path not in after)
        missing = self._files.missing(sorted(before - paths))
        return FileCheck(
            stream=stream,
            files=len(found),
            parts=len(after),
            orphans=orphans,
            missing=tuple(missing),
        )

    # ----------------------------------------------------------------------------- helpers

    def _transaction(self, fn: Callable[[Connection], _T]) -> _T:
        """Run ``fn`` in a transaction, retrying when the database reports lock contention."""
        for attempt in range(MAX_ATTEMPTS):
            try:
                with self._engine.begin() as conn:
                    return fn(conn)
            except (OperationalError, IntegrityError) as exc:
                if not retryable(exc) or attempt == MAX_ATTEMPTS - 1:
                    raise
            backoff(attempt)
        raise AssertionError("unreachable")  # pragma: no cover


def _ids(spec: StreamSpec) -> int:
    n = spec.blocking.ids_per_block
    assert n is not None
    return n


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

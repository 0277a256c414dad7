"""One ingest's run: stage, check the id and the overlap, commit (see
:meth:`~blockbudget.store.blockstore.BlockStore.ingest` for the contract and
:mod:`~blockbudget.store.blockstore` for the protocol)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from blockbudget.errors import (
    DuplicateRowsError,
    IngestIdConflictError,
    StoreConflictError,
    UnknownBlockError,
)
from blockbudget.store import catalog
from blockbudget.store.commit import AlreadyIngested, IngestIdentity, PlanConflict, record_ingest
from blockbudget.store.content import ContentHasher, hash_ingest_id
from blockbudget.store.files import DataFiles, WrittenPart
from blockbudget.store.inputs import schema_from_bytes
from blockbudget.store.model import IngestReport, OnOverlap, OverlapReport, StreamSpec, utc_now
from blockbudget.store.overlap import OverlapCheck
from blockbudget.store.planning import Target, backoff, fit_schema, plan_targets, retryable
from blockbudget.store.staging import Staged, WriterLimits, restage, stage

#: How many times an ingest re-plans after losing a race before giving up (and how many times
#: the store retries a transaction that met lock contention).
MAX_ATTEMPTS = 60


class IngestRun:
    """One ingest into one stream.

    Args:
        engine: the catalog's engine.
        files: the data root.
        transaction: runs a function in a write transaction, retrying lock contention.
        spec: the stream.
        limits: the writers' memory bounds.
    """

    def __init__(
        self,
        engine: Engine,
        files: DataFiles,
        transaction: Callable[[Callable[[Connection], Any]], Any],
        spec: StreamSpec,
        limits: WriterLimits,
    ) -> None:
        self.engine = engine
        self.files = files
        self.transaction = transaction
        self.spec = spec
        self.limits = limits

    def run(
        self,
        batches: Iterator[pa.Table],
        source: str,
        *,
        schema: pa.Schema | None,
        ingest_id: str | None,
        policy: OnOverlap,
    ) -> IngestReport:
        """Ingest ``batches`` (validated arguments), or answer a repeat."""
        spec, limits, stream = self.spec, self.limits, self.spec.name
        hasher = ContentHasher()
        if ingest_id is not None:
            done = self._ingested(stream, ingest_id)
            if done is not None:  # read the input only to compare it: nothing is written
                for batch in batches:
                    hasher.update(fit_schema(batch, schema, stream=stream, source=source))
                return self._repeat(stream, ingest_id, hasher.hexdigest(), done)

        def snapshot(keys: Sequence[str]) -> tuple[int | None, dict[str, tuple[int, bool]]]:
            with self.engine.connect() as conn:
                state = catalog.select_stream(conn, stream)
                latest = catalog.latest_blocks(conn, stream, list(keys))
            if state is None:
                raise UnknownBlockError(f"no stream {stream!r}")
            return state.closed_until, latest

        staged = stage(self.files, spec, schema, batches, source, snapshot, limits, hasher.update)
        content = hasher.hexdigest()
        identity = IngestIdentity(ingest_id or hash_ingest_id(content), content)
        if staged.rows == 0:
            self._cleanup(staged, set())
            return IngestReport(
                stream=stream,
                source=source,
                rows=0,
                ingest_id=identity.ingest_id,
                content_hash=content,
                overlap=OverlapReport(policy=policy),
            )
        done = self._ingested(stream, identity.ingest_id)
        if done is not None:
            self._cleanup(staged, set())
            return self._repeat(stream, identity.ingest_id, content, done)
        try:
            return self._commit(spec, staged, limits, identity, OverlapCheck(policy))
        except AlreadyIngested as exc:  # a concurrent ingest of this id committed first
            return self._repeat(stream, identity.ingest_id, content, exc.row)
        except DuplicateRowsError:
            # The overlap check runs before the id is recorded: a concurrent ingest of this very
            # id that committed in between shows up as duplicate rows. Nothing was written, so
            # answer as the repeat it is; any other duplicate stays refused.
            done = self._ingested(stream, identity.ingest_id)
            if done is None:
                raise
            return self._repeat(stream, identity.ingest_id, content, done)

    def _ingested(self, stream: str, ingest_id: str) -> catalog.IngestRow | None:
        with self.engine.connect() as conn:
            return catalog.select_ingest(conn, stream, ingest_id)

    def _repeat(
        self, stream: str, ingest_id: str, content_hash: str, done: catalog.IngestRow
    ) -> IngestReport:
        """The answer to an ingest whose id is committed: the first report, marked a repeat
        (and counted in the catalog), or a refusal when the content differs."""
        if done.content_hash != content_hash:
            raise IngestIdConflictError(
                f"ingest id {ingest_id!r} of stream {stream!r} names an ingest of other "
                f"content (content hash {done.content_hash[:16]}…, this input's "
                f"{content_hash[:16]}…); an ingest id names one content; nothing was ingested"
            )
        self.transaction(lambda conn: catalog.note_repeat(conn, stream, ingest_id, utc_now()))
        return replace(done.report, repeat=True)

    def _commit(
        self,
        spec: StreamSpec,
        staged: Staged,
        limits: WriterLimits,
        identity: IngestIdentity,
        overlap: OverlapCheck,
    ) -> IngestReport:
        stream = spec.name
        report: IngestReport | None = None
        synced: set[str] = set()
        try:
            for attempt in range(MAX_ATTEMPTS):
                keys, counts = staged.ordered()
                written = [k.key for k in keys if k.key in staged.parts]
                with self.engine.connect() as conn:
                    state = catalog.select_stream(conn, stream)
                    latest = catalog.latest_blocks(conn, stream, [k.key for k in keys])
                    stored = catalog.select_key_parts(conn, stream, written)
                if state is None:
                    raise UnknownBlockError(f"no stream {stream!r}")
                assert staged.schema is not None
                if state.schema_bytes is not None:
                    fixed = schema_from_bytes(state.schema_bytes)
                    if not staged.schema.equals(fixed):  # a concurrent first ingest won
                        staged = restage(self.files, spec, staged, fixed, limits)
                closed = state.closed_until
                plan_targets(spec, keys, counts, latest, closed, staged.source)  # late REJECT
                overlap.run(self.files, stream, staged, stored)  # may leave rows out
                keys, counts = staged.ordered()
                plan = plan_targets(spec, keys, counts, latest, closed, staged.source)
                self._place(staged, plan)
                paths = [p.path for t in plan for p in staged.parts[t.key.key][1]]
                self.files.sync([p for p in paths if p not in synced])
                synced.update(paths)
                try:
                    with self.engine.begin() as conn:
                        report = record_ingest(
                            conn, spec, staged, plan, self.files.missing, identity, overlap
                        )
                except PlanConflict:
                    pass
                except (OperationalError, IntegrityError) as exc:
                    if not retryable(exc):
                        raise
                if report is not None:
                    self._cleanup(staged, set(paths))
                    return report
                backoff(attempt)
            raise StoreConflictError(
                f"ingest into stream {stream!r} lost the race to other writers {MAX_ATTEMPTS} "
                "times; nothing was written"
            )
        except BaseException:
            self._cleanup(staged, None)
            raise

    def _place(self, staged: Staged, plan: tuple[Target, ...]) -> None:
        """Move staged files whose block's seq changed since staging (a block was sealed or
        created meanwhile) into the planned seq's directory."""
        for t in plan:
            entry = staged.parts.get(t.key.key)
            if entry is None:  # cannot happen: a key late at staging stays late
                raise StoreConflictError(
                    f"ingest: rows for key {t.key.key!r} were late when read but are not now, "
                    "which blocks never allow (was the catalog edited?); nothing was written"
                )
            seq, parts = entry
            if seq != t.seq:
                moved = [
                    WrittenPart(self.files.move_part(p.path, t.seq), p.rows, p.nbytes)
                    for p in parts
                ]
                staged.paths.extend(p.path for p in moved)
                staged.parts[t.key.key] = (t.seq, moved)

    def _cleanup(self, staged: Staged, keep: set[str] | None) -> None:
        """Delete the part files this ingest wrote that the catalog does not reference.

        ``keep`` lists the committed paths after a success; after a failure (None) the catalog
        is asked, in case a commit went through although its acknowledgement was lost.
        """
        paths = list(dict.fromkeys(staged.paths))
        if not paths:
            return
        if keep is None:
            try:
                with self.engine.connect() as conn:
                    keep = catalog.registered(conn, paths)
            except SQLAlchemyError:
                return  # the database is unreachable: leave orphans (vacuum) rather than guess
        self.files.remove_parts([p for p in paths if p not in keep])

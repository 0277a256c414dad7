"""The commit of an ingest: one transaction that records its staged part files.

See :mod:`blockbudget.store.blockstore` for the protocol: the transaction locks the stream and
re-derives the plan; if anything the plan depends on changed (a block was sealed or created, a
window closed, the schema fixed by another ingest), it raises :class:`PlanConflict` and the
ingest re-plans.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from sqlalchemy.engine import Connection

from blockbudget.errors import StoreConflictError, UnknownBlockError
from blockbudget.store import catalog
from blockbudget.store.inputs import schema_from_bytes, schema_to_bytes
from blockbudget.store.model import IngestReport, StreamSpec, Unit, make_block_id, utc_now
from blockbudget.store.overlap import OverlapCheck
from blockbudget.store.planning import Target, block_values, plan_targets
from blockbudget.store.staging import Staged


class PlanConflict(Exception):
    """The catalog changed under a plan; re-plan."""


class AlreadyIngested(Exception):
    """The ingest's id was committed meanwhile (by a concurrent ingest of the same input, or
    another content under that id): nothing is committed; the caller answers from the row."""

    def __init__(self, row: catalog.IngestRow) -> None:
        super().__init__(row.report.ingest_id)
        self.row = row


@dataclass(frozen=True)
class IngestIdentity:
    """An ingest's id and the hash of its content (:mod:`blockbudget.store.content`)."""

    ingest_id: str
    content_hash: str


def record_ingest(
    conn: Connection,
    spec: StreamSpec,
    staged: Staged,
    plan: tuple[Target, ...],
    missing: Callable[[Sequence[str]], list[str]],
    identity: IngestIdentity,
    overlap: OverlapCheck,
) -> IngestReport:
    """The commit transaction of an ingest: lock the stream, check that the staged part files
    still exist, re-derive the plan from the catalog as it is now, and record the staged part
    files, the blocks' counts, the stream's schema, watermark and closed bound, and the blocks
    that ``close_after`` seals.

    The files are checked under the stream's lock because
    :meth:`~blockbudget.store.blockstore.BlockStore.vacuum` deletes a stream's unreferenced
    files under that same lock: either this commit comes first (the files are referenced and
    vacuum keeps them) or the vacuum does (its deletions are done, and seen here). So the catalog
    never lists a file a vacuum deleted, however long the ingest ran.

    The ingest's id is checked and recorded under the same lock, so of two ingests of one id
    exactly one commits; so are the stored part files of the keys whose rows were compared for
    duplicates (:mod:`blockbudget.store.overlap`), which must not have changed since.

    Args:
        missing: returns which of the given root-relative paths do not exist.
        identity: the ingest's id and content hash, recorded with the report.
        overlap: the overlap check run on the plan's snapshot.

    Raises:
        AlreadyIngested: when the id is committed already (nothing is written).
        PlanConflict: when the plan's premises changed (roll back and re-plan).
        StoreConflictError: when a staged part file is gone (a vacuum deleted it): the ingest
            cannot commit and must be retried.
        UnknownBlockError: when the stream is gone.
    """
    stream = spec.name
    if not catalog.lock_stream(conn, stream):
        raise UnknownBlockError(f"no stream {stream!r}")
    paths = [p.path for t in plan for p in staged.parts[t.key.key][1]]
    gone = missing(paths)
    if gone:
        raise StoreConflictError(
            f"ingest into stream {stream!r}: {len(gone)} of its {len(paths)} staged part files "
            f"(first {gone[0]!r}) were deleted before its commit, by a vacuum whose older_than "
            "was shorter than the ingest ran; nothing was written; retry the ingest (and give "
            "vacuum an older_than longer than any ingest)"
        )
    done = catalog.select_ingest(conn, stream, identity.ingest_id)
    if done is not None:
        raise AlreadyIngested(done)
    expected = overlap.expected()
    if expected:
        current = catalog.select_key_parts(conn, stream, list(expected))
        if any(set(current.get(k, ())) != paths for k, paths in expected.items()):
            raise PlanConflict
    state = catalog.select_stream(conn, stream)
    assert state is not None and staged.schema is not None
    keys, counts = staged.ordered()
    latest = catalog.latest_blocks(conn, stream, [k.key for k in keys])
    if plan_targets(spec, keys, counts, latest, state.closed_until, staged.source) != plan:
        raise PlanConflict
    if state.schema_bytes is not None and not staged.schema.equals(
        schema_from_bytes(state.schema_bytes)
    ):
        raise PlanConflict
    now = utc_now()
    new_blocks: list[str] = []
    appended: list[str] = []
    block_rows: dict[str, int] = {}
    part_rows: list[dict[str, Any]] = []
    for t in plan:
        parts = staged.parts[t.key.key][1]
        block_id = make_block_id(stream, t.key.key, t.seq)
        rows = sum(p.rows for p in parts)
        if t.new:
            catalog.insert_block(conn, block_values(stream, block_id, t, parts, now))
            new_blocks.append(block_id)
        else:
            if not catalog.append_rows(conn, block_id, rows, sum(p.nbytes for p in parts)):
                raise PlanConflict
            appended.append(block_id)
        block_rows[block_id] = rows
        part_rows.extend(
            {
                "block_id": block_id,
                "path": p.path,
                "row_count": p.rows,
                "byte_count": p.nbytes,
                "created_at": now,
            }
            for p in parts
        )
    catalog.insert_parts(conn, part_rows)
    ordinals = [k.ordinal for k in keys if k.ordinal is not None]
    watermark = max(ordinals) if ordinals else None
    closed = state.closed_until
    if spec.close_after is not None and watermark is not None:
        latest_start = max(watermark, state.watermark if state.watermark is not None else watermark)
        step = spec.blocking.window_us if spec.blocking.unit is Unit.TIME else _ids_per_block(spec)
        bound = latest_start - (spec.close_after - 1) * step
        closed = bound if closed is None else max(closed, bound)
    catalog.update_stream_state(
        conn,
        stream,
        schema_bytes=schema_to_bytes(staged.schema) if state.schema_bytes is None else None,
        watermark=watermark,
        closed_until=closed,
    )
    sealed: list[str] = []
    if closed is not None:
        sealed = catalog.open_blocks_before(conn, stream, closed)
        catalog.seal_blocks(conn, sealed, now)
    kept = sum(counts[t.index] for t in plan)
    report = IngestReport(
        stream=stream,
        source=staged.source,
        rows=kept,
        dropped_rows=staged.rows - kept - staged.skipped,
        new_blocks=tuple(new_blocks),
        appended_blocks=tuple(appended),
        late_rows=sum(counts[t.index] for t in plan if t.late),
        block_rows=block_rows,
        sealed_blocks=tuple(sealed),
        ingest_id=identity.ingest_id,
        content_hash=identity.content_hash,
        overlap=overlap.report(),
        ingested_at=now.replace(tzinfo=UTC),
    )
    catalog.insert_ingest(conn, report, now)
    return report


def _ids_per_block(spec: StreamSpec) -> int:
    n = spec.blocking.ids_per_block
    assert n is not None
    return n

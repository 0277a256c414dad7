"""The store's catalog: streams, blocks and part files in SQL tables (SQLAlchemy Core).

The tables use their own :class:`~sqlalchemy.MetaData` and the prefix ``store_`` so they can
share a database with the ledger. Only portable Core constructs are used (tested on SQLite and
PostgreSQL).

Concurrency. Every change to a stream's blocks starts by bumping that stream's ``version``
(:func:`lock_stream`): an ``UPDATE`` that takes the row lock on PostgreSQL and the write lock on
SQLite, so writers to one stream are serialized and each sees the others' committed changes.
Reads that follow in the same transaction are therefore consistent, and nothing else can seal a
block or add a block between an ingest's check and its commit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError, ProgrammingError

from blockbudget.dbrevision import ensure_current
from blockbudget.store.model import BlockMeta, IngestReport, StreamSpec

metadata = sa.MetaData()

streams_table = sa.Table(
    "store_streams",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("arrow_schema", sa.LargeBinary, nullable=True),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("watermark", sa.BigInteger, nullable=True),
    sa.Column("closed_until", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.DateTime, nullable=False),
)

blocks_table = sa.Table(
    "store_blocks",
    metadata,
    sa.Column("block_id", sa.String(320), primary_key=True),
    sa.Column("stream", sa.String(64), sa.ForeignKey("store_streams.name"), nullable=False),
    sa.Column("block_key", sa.String(255), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("ordinal", sa.BigInteger, nullable=True),
    sa.Column("row_count", sa.BigInteger, nullable=False),
    sa.Column("byte_count", sa.BigInteger, nullable=False),
    sa.Column("sealed", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("sealed_at", sa.DateTime, nullable=True),
    sa.Column("window_start", sa.DateTime, nullable=True),
    sa.Column("window_end", sa.DateTime, nullable=True),
    sa.Column("id_start", sa.BigInteger, nullable=True),
    sa.Column("id_end", sa.BigInteger, nullable=True),
    sa.Column("attribute", sa.Text, nullable=True),
    sa.UniqueConstraint("stream", "block_key", "seq", name="uq_store_blocks_key_seq"),
    sa.Index("ix_store_blocks_stream_sealed", "stream", "sealed"),
)

#: The order :func:`select_blocks` lists a stream's blocks in, as an index, so that a walk from
#: the newest block (:func:`select_newest_block_ids`) reads only the rows it returns (catalogs
#: made before it existed get it from ``blockbudget db upgrade``).
order_index = sa.Index(
    "ix_store_blocks_order",
    blocks_table.c.stream,
    blocks_table.c.ordinal,
    blocks_table.c.block_key,
    blocks_table.c.seq,
)

parts_table = sa.Table(
    "store_parts",
    metadata,
    sa.Column("part_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("block_id", sa.String(320), sa.ForeignKey("store_blocks.block_id"), nullable=False),
    sa.Column("path", sa.String(1024), nullable=False, unique=True),
    sa.Column("row_count", sa.BigInteger, nullable=False),
    sa.Column("byte_count", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Index("ix_store_parts_block", "block_id"),
)

#: One row per committed ingest: its id (unique within the stream: a second commit of the same
#: id fails on the primary key), the hash of its content, and the report it returned, which a
#: repeat of the ingest returns again. ``repeats`` counts the repeats answered from this row.
ingests_table = sa.Table(
    "store_ingests",
    metadata,
    sa.Column("stream", sa.String(64), sa.ForeignKey("store_streams.name"), primary_key=True),
    sa.Column("ingest_id", sa.String(128), primary_key=True),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("row_count", sa.BigInteger, nullable=False),
    sa.Column("report", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("repeats", sa.BigInteger, nullable=False),
    sa.Column("last_repeat_at", sa.DateTime, nullable=True),
)

#: SQLite's default limit on bound parameters is large in recent versions; stay well below.
CHUNK = 500


def create_tables(engine: Engine) -> None:
    """Create the store's tables if missing (safe when several processes race to do it), once
    the database's schema revision is found current (:func:`~blockbudget.dbrevision.
    ensure_current`; a fresh database is stamped).

    Raises:
        SchemaRevisionError: the database needs ``blockbudget db upgrade``.
    """
    ensure_current(engine)
    for attempt in range(5):
        try:
            metadata.create_all(engine, checkfirst=True)
            return
        except (OperationalError, ProgrammingError):
            if attempt == 4:
                raise  # pragma: no cover - persistent DDL failure


@dataclass(frozen=True)
class StreamRow:
    """A stream's catalog row."""

    spec: StreamSpec
    schema_bytes: bytes | None
    version: int
    watermark: int | None
    closed_until: int | None


def chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    """``items`` in slices of at most :data:`CHUNK` (bound-parameter limits)."""
    for i in range(0, len(items), CHUNK):
        yield items[i : i + CHUNK]


def insert_stream(conn: Connection, spec: StreamSpec, now: datetime) -> None:
    """Add a stream row: version 0, no schema, no watermark, nothing closed."""
    conn.execute(
        streams_table.insert().values(
            name=spec.name,
            spec=json.dumps(spec.to_json(), sort_keys=True),
            arrow_schema=None,
            version=0,
            watermark=None,
            closed_until=None,
            created_at=now,
        )
    )


def _stream_row(row: Any) -> StreamRow:
    raw = row.arrow_schema
    return StreamRow(
        spec=StreamSpec.from_json(json.loads(row.spec)),
        schema_bytes=None if raw is None else bytes(raw),
        version=int(row.version),
        watermark=row.watermark,
        closed_until=row.closed_until,
    )


def select_stream(conn: Connection, name: str) -> StreamRow | None:
    """A stream's row, or None."""
    row = conn.execute(sa.select(streams_table).where(streams_table.c.name == name)).first()
    return None if row is None else _stream_row(row)


def select_streams(conn: Connection) -> list[StreamRow]:
    """Every stream's row, by name."""
    rows = conn.execute(sa.select(streams_table).order_by(streams_table.c.name))
    return [_stream_row(r) for r in rows]


def lock_stream(conn: Connection, name: str) -> bool:
    """Bump the stream's version, taking its write lock; False when the stream is missing."""
    t = streams_table
    result = conn.execute(sa.update(t).where(t.c.name == name).values(version=t.c.version + 1))
    return bool(result.rowcount == 1)


def update_stream_state(
    conn: Connection,
    name: str,
    *,
    schema_bytes: bytes | None = None,
    watermark: int | None = None,
    closed_until: int | None = None,
) -> None:
    """Set the schema (only if unset), and raise the watermark / closing bound (never lower)."""
    t = streams_table
    values: dict[str, Any] = {}
    if schema_bytes is not None:
        values["arrow_schema"] = sa.func.coalesce(t.c.arrow_schema, schema_bytes)
    if watermark is not None:
        values["watermark"] = sa.case(
            (t.c.watermark.is_(None), watermark),
            (t.c.watermark < watermark, watermark),
            else_=t.c.watermark,
        )
    if closed_until is not None:
        values["closed_until"] = sa.case(
            (t.c.closed_until.is_(None), closed_until),
            (t.c.closed_until < closed_until, closed_until),
            else_=t.c.closed_until,
        )
    if values:
        conn.execute(sa.update(t).where(t.c.name == name).values(**values))


def latest_blocks(
    conn: Connection, stream: str, keys: Sequence[str]
) -> dict[str, tuple[int, bool]]:
    """For each key that has blocks: (highest seq, whether that block is sealed)."""
    b = blocks_table
    out: dict[str, tuple[int, bool]] = {}
    for part in chunks(list(keys)):
        rows = conn.execute(
            sa.select(b.c.block_key, b.c.seq, b.c.sealed).where(
                b.c.stream == stream, b.c.block_key.in_(part)
            )
        )
        for key, seq, sealed in rows:
            if key not in out or out[key][0] < seq:
                out[key] = (int(seq), bool(sealed))
    return out


def insert_block(conn: Connection, values: dict[str, Any]) -> None:
    """Add a block row (see :func:`~blockbudget.store.planning.block_values`)."""
    conn.execute(blocks_table.insert().values(**values))


def append_rows(conn: Connection, block_id: str, rows: int, nbytes: int) -> bool:
    """Add counts to an open block; False if it is sealed (nothing changes then)."""
    b = blocks_table
    result = conn.execute(
        sa.update(b)
        .where(b.c.block_id == block_id, b.c.sealed == sa.false())
        .values(row_count=b.c.row_count + rows, byte_count=b.c.byte_count + nbytes)
    )
    return bool(result.rowcount == 1)


def insert_parts(conn: Connection, values: list[dict[str, Any]]) -> None:
    """Add part-file rows."""
    if values:
        conn.execute(parts_table.insert(), values)


def open_blocks_before(conn: Connection, stream: str, bound: int) -> list[str]:
    """Ids of the stream's open blocks whose ordinal is below ``bound``."""
    b = blocks_table
    rows = conn.execute(
        sa.select(b.c.block_id)
        .where(b.c.stream == stream, b.c.sealed == sa.false(), b.c.ordinal < bound)
        .order_by(b.c.ordinal, b.c.seq)
    )
    return [r[0] for r in rows]


def seal_blocks(conn: Connection, block_ids: Sequence[str], now: datetime) -> None:
    """Seal the listed blocks that are still open (sealed ones keep their sealed_at)."""
    b = blocks_table
    for part in chunks(list(block_ids)):
        conn.execute(
            sa.update(b)
            .where(b.c.block_id.in_(part), b.c.sealed == sa.false())
            .values(sealed=True, sealed_at=now)
        )


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=UTC)


def _block_meta(row: Any) -> BlockMeta:
    return BlockMeta(
        block_id=row.block_id,
        stream=row.stream,
        key=row.block_key,
        seq=int(row.seq),
        rows=int(row.row_count),
        nbytes=int(row.byte_count),
        parts=int(row.parts),
        sealed=bool(row.sealed),
        created_at=row.created_at.replace(tzinfo=UTC),
        sealed_at=_aware(row.sealed_at),
        window_start=row.window_start,
        window_end=row.window_end,
        id_start=row.id_start,
        id_end=row.id_end,
        attribute=row.attribute,
    )


def _blocks_query() -> sa.Select[Any]:
    b, p = blocks_table, parts_table
    nparts = (
        sa.select(sa.func.count())
        .where(p.c.block_id == b.c.block_id)
        .correlate(b)
        .scalar_subquery()
        .label("parts")
    )
    return sa.select(b, nparts)


def select_blocks(conn: Connection, stream: str, sealed: bool | None) -> list[BlockMeta]:
    """A stream's blocks by ordinal, key and seq; optionally only sealed or only open ones."""
    b = blocks_table
    query = _blocks_query().where(b.c.stream == stream)
    if sealed is not None:
        query = query.where(b.c.sealed == (sa.true() if sealed else sa.false()))
    query = query.order_by(b.c.ordinal, b.c.block_key, b.c.seq)
    return [_block_meta(r) for r in conn.execute(query)]


def select_blocks_by_id(conn: Connection, block_ids: Sequence[str]) -> dict[str, BlockMeta]:
    """The blocks among ``block_ids`` that exist, by id."""
    b = blocks_table
    out: dict[str, BlockMeta] = {}
    for part in chunks(list(block_ids)):
        for r in conn.execute(_blocks_query().where(b.c.block_id.in_(part))):
            out[r.block_id] = _block_meta(r)
    return out


def select_parts(conn: Connection, block_ids: Sequence[str]) -> dict[str, list[str]]:
    """Part paths per block, in the order they were committed."""
    p = parts_table
    out: dict[str, list[str]] = {bid: [] for bid in block_ids}
    for part in chunks(list(block_ids)):
        rows = conn.execute(
            sa.select(p.c.block_id, p.c.path).where(p.c.block_id.in_(part)).order_by(p.c.part_id)
        )
        for block_id, path in rows:
            out[block_id].append(path)
    return out


def select_part_paths(conn: Connection, stream: str | None = None) -> set[str]:
    """Every registered part path (of one stream, or all)."""
    p, b = parts_table, blocks_table
    query = sa.select(p.c.path)
    if stream is not None:
        query = query.join(b, b.c.block_id == p.c.block_id).where(b.c.stream == stream)
    return {r[0] for r in conn.execute(query)}


def registered(conn: Connection, paths: Sequence[str]) -> set[str]:
    """Which of ``paths`` are registered part files."""
    p = parts_table
    out: set[str] = set()
    for part in chunks(list(paths)):
        out.update(r[0] for r in conn.execute(sa.select(p.c.path).where(p.c.path.in_(part))))
    return out


def select_newest_block_ids(conn: Connection, stream: str, *, offset: int, limit: int) -> list[str]:
    """One page of a stream's block ids, newest first: the reverse of :func:`select_blocks`'s
    order (ordinal, key, seq — reversed exactly on SQLite and PostgreSQL, NULL ordinals
    included), skipping the ``offset`` newest. Reads the page's rows of
    :data:`order_index` only."""
    b = blocks_table
    query = (
        sa.select(b.c.block_id)
        .where(b.c.stream == stream)
        .order_by(b.c.ordinal.desc(), b.c.block_key.desc(), b.c.seq.desc())
        .limit(limit)
        .offset(offset)
    )
    return [r[0] for r in conn.execute(query)]


def select_block_ids(conn: Connection, stream: str, *, offset: int, limit: int) -> list[str]:
    """One page of a stream's block ids, oldest first (:func:`select_blocks`'s order),
    skipping the ``offset`` oldest. Reads :data:`order_index` rows only."""
    b = blocks_table
    query = (
        sa.select(b.c.block_id)
        .where(b.c.stream == stream)
        .order_by(b.c.ordinal, b.c.block_key, b.c.seq)
        .limit(limit)
        .offset(offset)
    )
    return [r[0] for r in conn.execute(query)]


def select_named_blocks(
    conn: Connection, stream: str, names: Sequence[str]
) -> tuple[set[str], dict[str, list[str]]]:
    """Which of ``names`` are ids of the stream's blocks, and the block ids each of the others
    names as a key (its window's first block and any late ones, in seq order). Index look-ups
    of the names only."""
    b = blocks_table
    ids: set[str] = set()
    by_key: dict[str, list[str]] = {}
    for part in chunks(list(dict.fromkeys(names))):
        ids.update(
            r[0]
            for r in conn.execute(
                sa.select(b.c.block_id).where(b.c.stream == stream, b.c.block_id.in_(part))
            )
        )
        rows = conn.execute(
            sa.select(b.c.block_key, b.c.block_id)
            .where(b.c.stream == stream, b.c.block_key.in_(part))
            .order_by(b.c.block_key, b.c.seq)
        )
        for key, block_id in rows:
            by_key.setdefault(key, []).append(block_id)
    return ids, by_key


@dataclass(frozen=True)
class IngestRow:
    """A committed ingest: its content hash and the report it returned."""

    content_hash: str
    report: IngestReport
    repeats: int


def select_ingest(conn: Connection, stream: str, ingest_id: str) -> IngestRow | None:
    """The committed ingest of that id into ``stream``, or None (a primary-key look-up)."""
    t = ingests_table
    row = conn.execute(
        sa.select(t.c.content_hash, t.c.report, t.c.repeats).where(
            t.c.stream == stream, t.c.ingest_id == ingest_id
        )
    ).first()
    if row is None:
        return None
    return IngestRow(
        content_hash=row.content_hash,
        report=IngestReport.from_json(json.loads(row.report)),
        repeats=int(row.repeats),
    )


def insert_ingest(conn: Connection, report: IngestReport, now: datetime) -> None:
    """Record a committed ingest (its report as JSON)."""
    conn.execute(
        ingests_table.insert().values(
            stream=report.stream,
            ingest_id=report.ingest_id,
            content_hash=report.content_hash,
            row_count=report.rows,
            report=json.dumps(report.to_json(), sort_keys=True),
            created_at=now,
            repeats=0,
            last_repeat_at=None,
        )
    )


def note_repeat(conn: Connection, stream: str, ingest_id: str, now: datetime) -> None:
    """Count one more repeat of a committed ingest."""
    t = ingests_table
    conn.execute(
        sa.update(t)
        .where(t.c.stream == stream, t.c.ingest_id == ingest_id)
        .values(repeats=t.c.repeats + 1, last_repeat_at=now)
    )


def select_key_parts(conn: Connection, stream: str, keys: Sequence[str]) -> dict[str, list[str]]:
    """The part files of every block of each of ``keys`` (late blocks included), per key, in
    commit order; keys without blocks are left out. Index look-ups of those keys only."""
    b, p = blocks_table, parts_table
    out: dict[str, list[str]] = {}
    for part in chunks(list(keys)):
        rows = conn.execute(
            sa.select(b.c.block_key, p.c.path)
            .join(p, p.c.block_id == b.c.block_id)
            .where(b.c.stream == stream, b.c.block_key.in_(part))
            .order_by(p.c.part_id)
        )
        for key, path in rows:
            out.setdefault(key, []).append(path)
    return out

"""Which audit events concern which stream: a derived index, so that the dashboard reads one
stream's history without reading the others'.

The audit log (``ledger_audit``) is keyed by ``seq`` only; an event names its stream in its
payload (``block_added``) or through its block ids (``charged``, ``retired``). Reading a
stream's history from the log alone means reading every stream's history. This module keeps
two tables of its own in the same database:

* ``dashboard_stream_events`` — one row (stream, seq) per ``block_added``, ``charged`` and
  ``retired`` event of that stream (the events the dashboard replays); primary key (stream,
  seq), so a stream's events are one index range.
* ``dashboard_index_mark`` — one row: the audit seq up to which the index is complete.

:meth:`StreamEventIndex.events` first catches up (reads the log after the mark, in batches,
adds their rows and moves the mark in the same transaction), then joins the stream's range of
the index with the log. Each event is read for the index once in the life of the database,
whichever process reads it (rows are inserted with "on conflict do nothing" and the mark only
moves forward, so servers sharing a PostgreSQL database may catch up concurrently); a request
then costs the events appended since the last catch-up plus its own stream's events —
never the history of other streams.

The index is derived data: dropping both tables only makes the next request rebuild them. It
decides nothing about budgets.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    insert,
    select,
    update,
)

from blockbudget.errors import UnknownBlockError
from blockbudget.ledger import AuditEvent, EventKind
from blockbudget.ledger.audit import row_to_event
from blockbudget.ledger.schema import audit
from blockbudget.store.model import parse_block_id

#: The event kinds the index records (what the dashboard's heatmap and series replay).
INDEXED = (EventKind.BLOCK_ADDED, EventKind.CHARGED, EventKind.RETIRED)

#: Events read from the log per catch-up transaction.
BATCH = 5_000

metadata = MetaData()

stream_events = Table(
    "dashboard_stream_events",
    metadata,
    Column("stream", String, primary_key=True),
    Column(
        "seq",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=False,
    ),
    sqlite_with_rowid=False,
)

index_mark = Table(
    "dashboard_index_mark",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("seq", BigInteger, nullable=False),
)


def streams_of(kind: str, payload_json: str) -> set[str]:
    """The streams an indexed event concerns (none for other kinds).

    Example:
        >>> sorted(streams_of("charged", '{"blocks": ["a/1", "b/2"], "cost": {}}'))
        ['a', 'b']
        >>> streams_of("context_added", '{"name": "t"}')
        set()
    """
    if kind not in {k.value for k in INDEXED}:
        return set()
    payload = json.loads(payload_json)
    if kind == EventKind.BLOCK_ADDED.value:
        return {str(payload["stream"])}
    out = set()
    for block in payload.get("blocks", ()):
        try:
            out.add(parse_block_id(block)[0])
        except UnknownBlockError:
            continue  # not a stream's block id: nothing to index
    return out


class StreamEventIndex:
    """The per-stream index of a ledger database's audit log (see the module docstring).

    Args:
        engine: the ledger's engine (the index's tables live in the same database).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._ready = False
        self._lock = threading.Lock()

    def _ensure(self) -> None:
        if self._ready:
            return
        with self._lock:
            if not self._ready:
                metadata.create_all(self._engine, checkfirst=True)
                with self._engine.begin() as conn:
                    if conn.execute(select(index_mark.c.seq)).first() is None:
                        conn.execute(insert(index_mark).values(id=1, seq=0))
                self._ready = True

    def catch_up(self) -> int:
        """Index every event appended since the mark; return the new mark."""
        self._ensure()
        while True:
            with self._engine.begin() as conn:
                mark, done = _catch_up_batch(conn)
            if done:
                return mark

    def events(self, stream: str, kinds: Sequence[EventKind] = INDEXED) -> list[AuditEvent]:
        """``stream``'s events of these ``kinds`` (indexed ones), oldest first: its index range
        joined with the log, after catching up."""
        self.catch_up()
        wanted = [k.value for k in kinds]
        q = (
            select(audit)
            .join(stream_events, stream_events.c.seq == audit.c.seq)
            .where(stream_events.c.stream == stream, audit.c.kind.in_(wanted))
            .order_by(stream_events.c.seq)  # the index range's own order: no sort
        )
        with self._engine.connect() as conn:
            return [row_to_event(r._mapping) for r in conn.execute(q)]


def _catch_up_batch(conn: Connection) -> tuple[int, bool]:
    """Index up to :data:`BATCH` events after the mark; (the new mark, whether it is the tip)."""
    mark = int(conn.execute(select(index_mark.c.seq).where(index_mark.c.id == 1)).scalar_one())
    rows = conn.execute(
        select(audit.c.seq, audit.c.kind, audit.c.payload)
        .where(audit.c.seq > mark)
        .order_by(audit.c.seq)
        .limit(BATCH)
    ).all()
    if not rows:
        return mark, True
    pairs = [
        {"stream": s, "seq": int(seq)}
        for seq, kind, payload in rows
        for s in sorted(streams_of(kind, payload))
    ]
    _insert_new(conn, pairs)
    new_mark = int(rows[-1][0])
    conn.execute(
        update(index_mark)
        .where(index_mark.c.id == 1, index_mark.c.seq < new_mark)
        .values(seq=new_mark)
    )
    return new_mark, len(rows) < BATCH


def _insert_new(conn: Connection, rows: Iterable[dict[str, object]]) -> None:
    """Insert index rows, skipping those another process inserted first."""
    values = list(rows)
    if not values:
        return
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        conn.execute(pg_insert(stream_events).on_conflict_do_nothing(), values)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        conn.execute(sqlite_insert(stream_events).on_conflict_do_nothing(), values)

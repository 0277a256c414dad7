"""Retiring exhausted blocks incrementally: a sweep examines the blocks that changed since the
previous sweep of the stream, not the whole stream.

Whether a live block retires (:func:`retire_exhausted`) depends only on its own rows — its
``charged`` vectors in the contexts considered and its ``reserved`` vectors in every context —
on those contexts and on the minimum cost. A block that a sweep kept therefore stays kept until
an event touches one of its rows (``reserved``, ``charged``, ``released``, ``expired``) or a
later sweep considers other contexts or another minimum cost; a new block (``block_added``) has
never been examined. So each stream has a mark in ``ledger_sweeps``: the audit seq up to which
every block was examined, with a fingerprint of the contexts and the minimum cost. A sweep with
the same fingerprint examines only the blocks named by events after the mark (read from the
audit log's primary key, in the sweep's own write transaction), plus the blocks of the stale
reservations it expires itself; any other sweep examines every live block. Both end by moving
the mark to the log's tip, in the same transaction.

The mark is derived data: it decides which blocks a sweep examines, never what a block may
spend (every reservation and charge is checked against the block's filter whatever the mark
says), and :meth:`~blockbudget.ledger.Ledger.verify` does not depend on it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

from sqlalchemy import insert, select, update

from blockbudget.budget import Cost
from blockbudget.ledger import reads
from blockbudget.ledger import statements as st
from blockbudget.ledger.audit import chain_tip
from blockbudget.ledger.catalog import info_from_tuple
from blockbudget.ledger.fastsql import chunks
from blockbudget.ledger.operations import retire
from blockbudget.ledger.requests import cost_key
from blockbudget.ledger.schema import audit, blocks, sweeps
from blockbudget.ledger.txn import WriteTx, unknown_context
from blockbudget.ledger.types import BlockInfo, EventKind, ReservationState

#: The events that change a block's rows (or create it), and so may make it retirable.
_TOUCHING = (
    EventKind.BLOCK_ADDED,
    EventKind.RESERVED,
    EventKind.CHARGED,
    EventKind.RELEASED,
    EventKind.EXPIRED,
)


def sweep_fingerprint(contexts: Sequence[str], min_cost: Cost) -> str:
    """What a sweep's decisions depend on besides the blocks' rows: the contexts whose charges
    count and the minimum cost."""
    text = json.dumps([sorted(contexts), cost_key(min_cost)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def touched_since(tx: WriteTx, seq: int) -> set[str]:
    """The blocks named by the touching events after ``seq`` (a range of the log's key)."""
    q = select(audit.c.kind, audit.c.payload).where(
        audit.c.seq > seq, audit.c.kind.in_([k.value for k in _TOUCHING])
    )
    out: set[str] = set()
    for kind, payload in tx.conn.execute(q):
        p = json.loads(payload)
        if kind == EventKind.BLOCK_ADDED.value:
            out.add(p["block"])
        elif kind in (EventKind.RELEASED.value, EventKind.EXPIRED.value):
            out.update(p["returned"])
        else:
            out.update(p["blocks"])
    return out


def _infos_in_stream(tx: WriteTx, stream: str, ids: Iterable[str]) -> list[BlockInfo]:
    """The registrations of those of ``ids`` that belong to ``stream``, by id."""
    out: list[BlockInfo] = []
    for part in chunks(sorted(set(ids))):
        q = (
            select(*st.BLOCK_COLUMNS)
            .where(blocks.c.block_id.in_(list(part)), blocks.c.stream == stream)
            .order_by(blocks.c.block_id)
        )
        out.extend(info_from_tuple(tuple(r)) for r in tx.conn.execute(q))
    return out


def expire_stale_in_stream(tx: WriteTx, stream: str) -> set[str]:
    """Expire (audited, never charged) every open reservation past its TTL that holds a block
    of ``stream``; returns those blocks. Reads the stale reservations only (an index range)."""
    touched: set[str] = set()
    for (rid,) in tx.sql.rows("stale_all", st.select_stale_all, {"now": tx.now}):
        res = tx.read_reservation(str(rid))
        if res.state is not ReservationState.OPEN:
            continue
        mine = _infos_in_stream(tx, stream, res.blocks)
        if mine:
            tx.close_reservation(res, ReservationState.EXPIRED)
            touched.update(i.block_id for i in mine)
    return touched


def _read_mark(tx: WriteTx, stream: str) -> tuple[str, int] | None:
    q = select(sweeps.c.fingerprint, sweeps.c.seq).where(sweeps.c.stream == stream)
    row = tx.conn.execute(q).first()
    return None if row is None else (str(row[0]), int(row[1]))


def _write_mark(tx: WriteTx, stream: str, fingerprint: str, existed: bool) -> None:
    seq = tx.last_seq if tx.last_seq is not None else chain_tip(tx.sql)[0]
    values = {"fingerprint": fingerprint, "seq": seq}
    if existed:
        tx.conn.execute(update(sweeps).where(sweeps.c.stream == stream).values(**values))
    else:
        tx.conn.execute(insert(sweeps).values(stream=stream, **values))


def retire_exhausted(
    tx: WriteTx,
    stream: str,
    *,
    contexts: Sequence[str] | None,
    min_cost: Cost,
    reason: str,
) -> tuple[BlockInfo, ...]:
    """Retire, in this one transaction, every live block of ``stream`` that no context of
    ``contexts`` (default: every open one) can fit ``min_cost`` on any more, counting charges
    only; a block with an open reservation in any context is kept (a running grant is never
    cut off) — after reservations past their TTL that hold a block of the stream were expired
    in this same transaction. Reading the rows and retiring happen under the same writer lock,
    so no reservation can slip in between. Examines only the blocks touched since the
    stream's previous sweep with the same contexts and minimum cost (see the module
    docstring).

    Retirement is global: with an explicit ``contexts`` subset, a block is retired for every
    context once the listed ones are exhausted, even if an unlisted open context could still
    use it. Pass ``None`` unless that is what you mean.

    Raises:
        UnknownContextError: a context named in ``contexts`` is not registered.
        InvalidBudgetError: ``min_cost`` is of a kind a block's filter cannot account.
    """
    if contexts is None:
        ctxs = reads.contexts(tx.conn)
    else:
        ctxs = list(contexts)
        for c in ctxs:
            if tx.read_context(c) is None:
                raise unknown_context(c)
    if not ctxs:
        return ()
    fingerprint = sweep_fingerprint(ctxs, min_cost)
    mark = _read_mark(tx, stream)
    expired = expire_stale_in_stream(tx, stream)
    if mark is not None and mark[0] == fingerprint:
        candidates = _infos_in_stream(tx, stream, touched_since(tx, mark[1]) | expired)
    else:
        candidates = reads.block_infos(tx.conn, stream=stream)
    live = [i for i in candidates if not i.retired]
    for info in live:
        tx.remember(info)
    ids = [i.block_id for i in live]
    every = sorted(set(ctxs) | set(reads.contexts(tx.conn, include_closed=True)))
    for c in every:
        tx.load(ids, c)
    dead = []
    for b in ids:
        if any(any(tx.budget(b, c)[1]) for c in every):
            continue  # a running grant holds budget here: keep the block
        f, need = tx.filter(b), tx.features(b, min_cost)
        if not any(f.fits_with(tx.budget(b, c)[0], need) for c in ctxs):
            dead.append(b)
    out = retire(tx, dead, reason=reason) if dead else ()
    if tx.events:  # reservations expired above, and nothing retired
        tx.flush()
    _write_mark(tx, stream, fingerprint, existed=mark is not None)
    return out

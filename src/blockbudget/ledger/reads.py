"""Read-only queries of the ledger, each run in one snapshot (see :mod:`blockbudget.ledger.db`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import Connection, RowMapping, bindparam, func, select

from blockbudget.accounting import Filter, add_vectors
from blockbudget.budget import cost_from_json
from blockbudget.errors import UnknownBlockError, UnknownReservationError
from blockbudget.ledger.audit import GENESIS_HASH, row_to_event
from blockbudget.ledger.catalog import BlockCatalog, info_from_row
from blockbudget.ledger.fastsql import chunks
from blockbudget.ledger.schema import (
    audit,
    blocks,
    budgets,
    requests,
    reservation_blocks,
    reservations,
)
from blockbudget.ledger.schema import contexts as contexts_table
from blockbudget.ledger.txn import unknown_context
from blockbudget.ledger.types import (
    AuditEvent,
    BlockInfo,
    BlockState,
    ChainHead,
    ContextInfo,
    EventKind,
    Operation,
    RequestRecord,
    Reservation,
    ReservationState,
    Vector,
    decode_vector,
)

_SELECT_ONE_BUDGET = select(budgets.c.charged, budgets.c.reserved).where(
    budgets.c.block_id == bindparam("b"), budgets.c.context == bindparam("ctx")
)


def make_state(
    info: BlockInfo, f: Filter, context: str, charged: Vector, reserved: Vector
) -> BlockState:
    """A :class:`BlockState` from a block's registration and its two vectors."""
    used = add_vectors(charged, reserved)
    return BlockState(
        block=info.block_id,
        stream=info.stream,
        context=context,
        accounting=info.accounting,
        capacity=info.capacity,
        charged=charged,
        reserved=reserved,
        retired=info.retired,
        remaining_fraction=float(f.remaining_fraction(used)),
        remaining=f.describe_remaining(used),
    )


def require_context(conn: Connection, context: str) -> None:
    """Raises UnknownContextError unless ``context`` is registered."""
    q = select(contexts_table.c.name).where(contexts_table.c.name == context)
    if conn.execute(q).first() is None:
        raise unknown_context(context)


def state(conn: Connection, catalog: BlockCatalog, block: str, context: str) -> BlockState:
    """The budget of one block in one context."""
    row = conn.execute(select(blocks).where(blocks.c.block_id == block)).first()
    if row is None:
        raise UnknownBlockError(f"unknown block {block!r}: add it with add_blocks first")
    require_context(conn, context)
    info = info_from_row(row._mapping)
    f = catalog.remember(info)
    b = conn.execute(_SELECT_ONE_BUDGET, {"b": block, "ctx": context}).first()
    if b is None:
        return make_state(info, f, context, f.zero(), f.zero())
    return make_state(info, f, context, decode_vector(b.charged), decode_vector(b.reserved))


def block_infos(conn: Connection, *, stream: str | None) -> list[BlockInfo]:
    """Registered blocks, sorted by id."""
    q = select(blocks).order_by(blocks.c.block_id)
    if stream is not None:
        q = q.where(blocks.c.stream == stream)
    return [info_from_row(r._mapping) for r in conn.execute(q)]


def contexts(conn: Connection, *, include_closed: bool = False) -> list[str]:
    """The registered contexts' names (open ones only unless ``include_closed``), sorted."""
    q = select(contexts_table.c.name).order_by(contexts_table.c.name)
    if not include_closed:
        q = q.where(contexts_table.c.closed_at.is_(None))
    return [r[0] for r in conn.execute(q)]


def context_infos(conn: Connection) -> list[ContextInfo]:
    """Every registered context, open or closed, sorted by name."""
    q = select(contexts_table).order_by(contexts_table.c.name)
    return [
        ContextInfo(
            name=r.name,
            description=r.description,
            created_at=float(r.created_at),
            closed_at=None if r.closed_at is None else float(r.closed_at),
        )
        for r in conn.execute(q)
    ]


def coalition_contexts(conn: Connection) -> list[str]:
    """The contexts whose budgets add up in the coalition bound: every open context, and every
    closed one that ever charged a block (a closed context that never did released nothing).
    Sorted."""
    infos = context_infos(conn)
    closed = [i.name for i in infos if i.closed]
    charged: set[str] = set()
    if closed:
        q = select(budgets.c.context, budgets.c.charged).where(budgets.c.context.in_(closed))
        charged = {r.context for r in conn.execute(q) if any(decode_vector(r.charged))}
    return [i.name for i in infos if not i.closed or i.name in charged]


def states(
    conn: Connection, catalog: BlockCatalog, *, stream: str | None, context: str | None
) -> list[BlockState]:
    """See :meth:`Ledger.states`."""
    if context is not None:
        require_context(conn, context)
    infos = block_infos(conn, stream=stream)
    q = select(budgets.c.block_id, budgets.c.context, budgets.c.charged, budgets.c.reserved)
    if stream is not None:
        q = q.join_from(budgets, blocks, budgets.c.block_id == blocks.c.block_id).where(
            blocks.c.stream == stream
        )
    if context is not None:
        q = q.where(budgets.c.context == context)
    rows = {(r.block_id, r.context): (r.charged, r.reserved) for r in conn.execute(q)}
    ctxs = [context] if context is not None else contexts(conn, include_closed=True)
    return _assemble(catalog, infos, ctxs, rows)


def states_of(
    conn: Connection, catalog: BlockCatalog, block_ids: Sequence[str], context: str | None
) -> list[BlockState]:
    """See :meth:`Ledger.states` with ``blocks``: primary-key reads of the named blocks only
    (their registrations, then their budget rows), whatever the size of their streams."""
    if context is not None:
        require_context(conn, context)
    wanted = sorted(set(block_ids))
    infos: list[BlockInfo] = []
    rows: dict[tuple[str, str], tuple[str, str]] = {}
    budget_q = select(budgets.c.block_id, budgets.c.context, budgets.c.charged, budgets.c.reserved)
    if context is not None:
        budget_q = budget_q.where(budgets.c.context == context)
    for part in chunks(wanted):
        ids = list(part)
        q = select(blocks).where(blocks.c.block_id.in_(ids)).order_by(blocks.c.block_id)
        infos.extend(info_from_row(r._mapping) for r in conn.execute(q))
        for r in conn.execute(budget_q.where(budgets.c.block_id.in_(ids))):
            rows[(r.block_id, r.context)] = (r.charged, r.reserved)
    ctxs = [context] if context is not None else contexts(conn, include_closed=True)
    return _assemble(catalog, infos, ctxs, rows)


def _assemble(
    catalog: BlockCatalog,
    infos: list[BlockInfo],
    ctxs: list[str],
    rows: dict[tuple[str, str], tuple[str, str]],
) -> list[BlockState]:
    out: list[BlockState] = []
    for info in infos:
        f = catalog.remember(info)
        for ctx in ctxs:
            found = rows.get((info.block_id, ctx))
            if found is None:
                out.append(make_state(info, f, ctx, f.zero(), f.zero()))
            else:
                charged, reserved = decode_vector(found[0]), decode_vector(found[1])
                out.append(make_state(info, f, ctx, charged, reserved))
    return out


def _reservation_from(m: RowMapping, remaining: dict[str, Vector]) -> Reservation:
    block_ids = tuple(json.loads(m["blocks"]))
    return Reservation(
        id=m["reservation_id"],
        blocks=block_ids,
        context=m["context"],
        cost=cost_from_json(json.loads(m["cost"])),
        expires_at=float(m["expires_at"]),
        state=ReservationState(m["state"]),
        holder=m["holder"],
        request_id=m["request_id"],
        created_at=float(m["created_at"]),
        remaining=tuple((b, remaining[b]) for b in block_ids),
    )


def _remaining_of(conn: Connection, ids: list[str]) -> dict[str, dict[str, Vector]]:
    out: dict[str, dict[str, Vector]] = {i: {} for i in ids}
    if not ids:
        return out
    q = select(reservation_blocks).where(
        reservation_blocks.c.reservation_id.in_(bindparam("ids", expanding=True))
    )
    for r in conn.execute(q, {"ids": ids}):
        out[r.reservation_id][r.block_id] = decode_vector(r.remaining)
    return out


def reservation(conn: Connection, reservation_id: str) -> Reservation:
    """One reservation, current state."""
    row = conn.execute(
        select(reservations).where(reservations.c.reservation_id == reservation_id)
    ).first()
    if row is None:
        raise UnknownReservationError(f"unknown reservation {reservation_id!r}")
    return _reservation_from(row._mapping, _remaining_of(conn, [reservation_id])[reservation_id])


def reservations_list(
    conn: Connection, *, state: ReservationState | None, context: str | None
) -> list[Reservation]:
    """Reservations filtered by state and context, by creation time then id."""
    if context is not None:
        require_context(conn, context)
    q = select(reservations).order_by(reservations.c.created_at, reservations.c.reservation_id)
    if state is not None:
        q = q.where(reservations.c.state == state.value)
    if context is not None:
        q = q.where(reservations.c.context == context)
    rows = conn.execute(q).all()
    remaining = _remaining_of(conn, [r.reservation_id for r in rows])
    return [_reservation_from(r._mapping, remaining[r.reservation_id]) for r in rows]


def request(conn: Connection, request_id: str) -> RequestRecord | None:
    """The request row with this id, if any."""
    row = conn.execute(select(requests).where(requests.c.request_id == request_id)).first()
    if row is None:
        return None
    m = row._mapping
    return RequestRecord(
        request_id=m["request_id"],
        operation=Operation(m["operation"]),
        fingerprint=m["fingerprint"],
        seq=int(m["seq"]),
        created_at=float(m["created_at"]),
        result_json=m["result"],
    )


def events(conn: Connection, after_seq: int, limit: int | None) -> list[AuditEvent]:
    """Audit events after ``after_seq``, oldest first."""
    q = select(audit).where(audit.c.seq > after_seq).order_by(audit.c.seq)
    if limit is not None:
        q = q.limit(limit)
    return [row_to_event(r._mapping) for r in conn.execute(q)]


def audit_tip(conn: Connection) -> int:
    """The seq of the last audit event (0 for an empty log)."""
    return int(conn.execute(select(func.max(audit.c.seq))).scalar() or 0)


def chain_head(conn: Connection) -> ChainHead:
    """The log's last event (seq, hash, time) and the hash of its first event."""
    last = conn.execute(
        select(audit.c.seq, audit.c.hash, audit.c.ts).order_by(audit.c.seq.desc()).limit(1)
    ).first()
    if last is None:
        return ChainHead(seq=0, hash=GENESIS_HASH, ts=None, first_hash=None)
    first = conn.execute(select(audit.c.hash).where(audit.c.seq == 1)).scalar()
    return ChainHead(
        seq=int(last[0]),
        hash=str(last[1]),
        ts=float(last[2]),
        first_hash=None if first is None else str(first),
    )


def chain_hash(conn: Connection, seq: int) -> str | None:
    """The hash of the event at ``seq`` (None when the log has none there)."""
    found = conn.execute(select(audit.c.hash).where(audit.c.seq == seq)).scalar()
    return None if found is None else str(found)


def added_blocks(conn: Connection, after_seq: int) -> tuple[list[tuple[str, str]], int]:
    """See :meth:`Ledger.added_blocks`."""
    tip = audit_tip(conn)
    q = (
        select(audit.c.payload)
        .where(audit.c.seq > after_seq, audit.c.kind == EventKind.BLOCK_ADDED.value)
        .order_by(audit.c.seq)
    )
    out = []
    for (payload,) in conn.execute(q):
        p = json.loads(payload)
        out.append((str(p["block"]), str(p["stream"])))
    return out, tip

"""The bodies of the write operations, each run inside one :class:`WriteTx`.

Each function checks everything first, then changes the working copies, queues its audit
event(s) and flushes. Any exception before the commit rolls the whole transaction back, so a
refused or malformed request changes nothing (invariants 1 and 2 in docs/architecture.md).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence

from sqlalchemy import bindparam, insert, select, update

from blockbudget.accounting.filters import exact_text, vector_json
from blockbudget.budget import Cost, cost_from_json
from blockbudget.errors import InvalidRequestError, ReservationError
from blockbudget.ledger import statements as st
from blockbudget.ledger.fastsql import chunks
from blockbudget.ledger.schema import blocks
from blockbudget.ledger.txn import WriteTx, unknown_context
from blockbudget.ledger.types import (
    DEFAULT_CONTEXT,
    BlockInfo,
    Charge,
    ContextInfo,
    EventKind,
    Reservation,
    ReservationState,
    Vector,
    cost_json,
    encode_vector,
    vadd,
    vsub,
)

_INSERT_BLOCK = insert(blocks)
_RETIRE = (
    update(blocks)
    .where(blocks.c.block_id.in_(bindparam("ids", expanding=True)))
    .values(retired=True, retired_reason=bindparam("reason"))
)
_EXISTING = select(blocks.c.block_id).where(blocks.c.block_id.in_(bindparam("ids", expanding=True)))
_LIVE = select(blocks.c.block_id).where(blocks.c.retired.is_(False)).order_by(blocks.c.block_id)


def add_context(tx: WriteTx, name: str, description: str) -> ContextInfo:
    """Register a context; an existing one with the same description is left as it is.

    Raises:
        InvalidRequestError: when the context exists with another description.
    """
    existing = tx.read_context(name)
    if existing is not None:
        if existing.description != description:
            raise InvalidRequestError(
                f"context {name!r} already exists with description {existing.description!r}; "
                f"re-adding it needs the same description, got {description!r} (a context is "
                "never changed or removed)"
            )
        return existing
    info = ContextInfo(name=name, description=description, created_at=tx.now)
    tx.insert_context(info)
    tx.flush()
    return info


def close_context(tx: WriteTx, name: str) -> ContextInfo:
    """Close a context for good (see :meth:`Ledger.close_context`); closing a closed one
    changes nothing.

    Open reservations past their TTL are expired first; a live one refuses the close.

    Raises:
        UnknownContextError: the context is not registered.
        ReservationError: the context still holds a live open reservation.
    """
    info = tx.read_context(name)
    if info is None:
        raise unknown_context(name)
    if info.closed:
        return info
    live = []
    for (rid,) in tx.sql.rows("open_of_context", st.select_open_reservations, {"ctx": name}):
        res = tx.read_reservation(str(rid))
        if tx.now >= res.expires_at:
            tx.close_reservation(res, ReservationState.EXPIRED)
        else:
            live.append(res.id)
    if live:
        raise ReservationError(
            f"context {name!r} still holds {len(live)} open reservation(s) (first "
            f"{live[0]!r}); a context is closed only when none is open: release them or let "
            "them expire, then close it"
        )
    closed = tx.close_context(info)
    tx.flush()
    return closed


def add_blocks(tx: WriteTx, infos: Sequence[BlockInfo]) -> tuple[BlockInfo, ...]:
    """Register blocks; an existing block with equal parameters is left as it is.

    Raises:
        InvalidRequestError: when an existing block has other parameters.
    """
    found = [
        row.block_id
        for part in chunks([i.block_id for i in infos])
        for row in tx.conn.execute(_EXISTING, {"ids": list(part)})
    ]
    existing = tx.read_blocks(found) if found else {}
    for info in infos:
        old = existing.get(info.block_id)
        # A retired block never serves again whatever its parameters, so re-adding it is
        # answered with its registration (a reconciliation's tombstone of a block whose
        # stream the database had lost is registered with placeholder parameters).
        if old is not None and not old.retired and not old.same_parameters(info):
            raise InvalidRequestError(
                f"block {info.block_id!r} already exists with stream={old.stream!r}, "
                f"accounting={old.accounting.value}, capacity={old.capacity}, "
                f"slack_delta={old.slack_delta}; re-adding it needs the same parameters, "
                f"got stream={info.stream!r}, accounting={info.accounting.value}, "
                f"capacity={info.capacity}, slack_delta={info.slack_delta}"
            )
    new = [i for i in infos if i.block_id not in existing]
    if new:
        tx.conn.execute(
            _INSERT_BLOCK,
            [
                {
                    "block_id": i.block_id,
                    "stream": i.stream,
                    "accounting": i.accounting.value,
                    "capacity_epsilon": str(i.capacity.epsilon),
                    "capacity_delta": str(i.capacity.delta),
                    "slack_delta": i.slack_delta,
                    "retired": False,
                    "retired_reason": None,
                    "created_at": tx.now,
                }
                for i in new
            ],
        )
        for i in new:
            tx.remember(i)
            tx.event(
                EventKind.BLOCK_ADDED,
                None,
                {
                    "block": i.block_id,
                    "stream": i.stream,
                    "accounting": i.accounting.value,
                    "capacity": i.capacity.to_json(),
                    "slack_delta": i.slack_delta,
                },
            )
        tx.flush()
    return tuple(existing.get(i.block_id, i) for i in infos)


def _features_all(tx: WriteTx, block_ids: Sequence[str], cost: Cost) -> dict[str, Vector]:
    return {b: tx.features(b, cost) for b in block_ids}


def reserve(
    tx: WriteTx,
    block_ids: Sequence[str],
    cost: Cost,
    *,
    context: str,
    holder: str | None,
    ttl_seconds: float,
) -> Reservation:
    """Reserve ``cost`` on every block, all-or-nothing (see :meth:`Ledger.reserve`)."""
    tx.load(block_ids, context)
    tx.require_context(context)
    tx.require_live(block_ids)
    feats = _features_all(tx, block_ids, cost)
    tx.expire_stale(block_ids, context)
    tx.check_fits(block_ids, context, cost, feats)
    rid = f"res-{uuid.uuid4().hex}"
    expires_at = tx.now + ttl_seconds
    tx.sql.run(
        "insert_reservation",
        st.insert_reservation,
        {
            "reservation_id": rid,
            "context": context,
            "holder": holder,
            "request_id": tx.request_id,
            "cost": json.dumps(cost_json(cost), sort_keys=True),
            "blocks": json.dumps(list(block_ids)),
            "created_at": tx.now,
            "expires_at": expires_at,
            "state": ReservationState.OPEN.value,
            "closed_at": None,
        },
    )
    tx.sql.run_many(
        "insert_reservation_block",
        st.insert_reservation_block,
        [
            {"reservation_id": rid, "block_id": b, "remaining": encode_vector(feats[b])}
            for b in block_ids
        ],
    )
    for b in block_ids:
        charged, reserved = tx.budget(b, context)
        tx.set_budget(b, context, charged, vadd(reserved, feats[b]))
    tx.event(
        EventKind.RESERVED,
        context,
        {
            "reservation_id": rid,
            "blocks": list(block_ids),
            "cost": cost_json(cost),
            "holder": holder,
            "expires_at": expires_at,
        },
    )
    tx.flush()
    assert tx.request_id is not None
    return Reservation(
        id=rid,
        blocks=tuple(block_ids),
        context=context,
        cost=cost,
        expires_at=expires_at,
        state=ReservationState.OPEN,
        holder=holder,
        request_id=tx.request_id,
        created_at=tx.now,
        remaining=tuple((b, feats[b]) for b in block_ids),
    )


def charge(
    tx: WriteTx,
    block_ids: Sequence[str],
    cost: Cost,
    *,
    context: str | None,
    reservation_id: str | None,
) -> Charge:
    """Charge ``cost`` to every block, directly or from a reservation (see
    :meth:`Ledger.charge`)."""
    if reservation_id is None:
        ctx = context if context is not None else DEFAULT_CONTEXT
        tx.load(block_ids, ctx)
        tx.require_context(ctx)
        tx.require_live(block_ids)
        feats = _features_all(tx, block_ids, cost)
        tx.expire_stale(block_ids, ctx)
        tx.check_fits(block_ids, ctx, cost, feats)
        for b in block_ids:
            charged, reserved = tx.budget(b, ctx)
            tx.set_budget(b, ctx, vadd(charged, feats[b]), reserved)
    else:
        res = tx.read_reservation(reservation_id)
        ctx = res.context
        if context is not None and context != res.context:
            tx.require_context(context)
            raise InvalidRequestError(
                f"reservation {reservation_id!r} holds budget in context {res.context!r}; "
                f"it cannot be drawn in context {context!r}"
            )
        _require_drawable(tx, res.id, res.state, res.expires_at)
        outside = sorted(set(block_ids) - set(res.blocks))
        if outside:
            raise ReservationError(
                f"a draw must name a subset of the reservation's blocks: reservation "
                f"{reservation_id!r} does not hold {', '.join(map(repr, outside))}"
            )
        tx.load(block_ids, ctx)
        tx.require_context(ctx)  # registered when reserved; proven by the rows just loaded
        tx.require_live(block_ids)
        feats = _features_all(tx, block_ids, cost)
        left = tx.remaining(res.id)
        over = [b for b in block_ids if any(f > r for f, r in zip(feats[b], left[b], strict=True))]
        if over:
            b = over[0]
            short = tuple(max(0, n - h) for n, h in zip(feats[b], left[b], strict=True))
            rule = tx.filter(b).accounting
            raise ReservationError(
                f"a draw cannot exceed what its reservation still holds: drawing {cost} "
                f"on {len(over)} block(s) of reservation {reservation_id!r}, first {b!r}, "
                f"which holds {exact_text(vector_json(rule, left[b]))}, short by "
                f"{exact_text(vector_json(rule, short))}; nothing was charged"
            )
        tx.expire_stale(block_ids, ctx)
        new_left = {b: vsub(left[b], feats[b]) for b in block_ids}
        tx.set_remaining(res.id, new_left)
        for b in block_ids:
            charged, reserved = tx.budget(b, ctx)
            tx.set_budget(b, ctx, vadd(charged, feats[b]), vsub(reserved, feats[b]))
    tx.event(
        EventKind.CHARGED,
        ctx,
        {"blocks": list(block_ids), "cost": cost_json(cost), "reservation_id": reservation_id},
    )
    seq = tx.flush()
    assert tx.request_id is not None
    return Charge(
        request_id=tx.request_id,
        blocks=tuple(block_ids),
        context=ctx,
        cost=cost,
        reservation_id=reservation_id,
        seq=seq,
        charged_at=tx.now,
    )


def _require_drawable(tx: WriteTx, rid: str, state: ReservationState, expires_at: float) -> None:
    if state is not ReservationState.OPEN:
        raise ReservationError(
            f"reservation {rid!r} is {state.value}; only an open reservation can be drawn on "
            "or released"
        )
    if tx.now >= expires_at:
        raise ReservationError(
            f"reservation {rid!r} expired at {_when(expires_at)} (now {_when(tx.now)}); an "
            "expired reservation is released, never charged"
        )


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) + f" ({ts:.3f})"


def release(tx: WriteTx, reservation_id: str) -> Reservation:
    """Return what is left of a reservation to unallocated and close it."""
    res = tx.read_reservation(reservation_id)
    if res.state is not ReservationState.OPEN:
        raise ReservationError(
            f"reservation {reservation_id!r} is already {res.state.value}; only an open "
            "reservation can be released"
        )
    tx.close_reservation(res, ReservationState.CLOSED)
    tx.flush()
    return Reservation(
        id=res.id,
        blocks=res.blocks,
        context=res.context,
        cost=cost_from_json(json.loads(res.cost_json)),
        expires_at=res.expires_at,
        state=ReservationState.CLOSED,
        holder=res.holder,
        request_id=res.request_id,
        created_at=res.created_at,
        remaining=tuple((b, tx.filter(b).zero()) for b in res.blocks),
    )


def expire(tx: WriteTx) -> list[str]:
    """Expire every open reservation whose TTL has passed at ``tx.now``; never charges."""
    ids = [row[0] for row in tx.sql.rows("stale_all", st.select_stale_all, {"now": tx.now})]
    for rid in ids:
        res = tx.read_reservation(rid)
        if res.state is ReservationState.OPEN:
            tx.close_reservation(res, ReservationState.EXPIRED)
    if ids:
        tx.flush()
    return ids


def retire(tx: WriteTx, block_ids: Sequence[str], *, reason: str) -> tuple[BlockInfo, ...]:
    """Retire blocks forever; already retired blocks are left as they are (no event)."""
    infos = tx.read_blocks(block_ids)
    fresh = [b for b in block_ids if not infos[b].retired]
    if fresh:
        for part in chunks(fresh):
            tx.conn.execute(_RETIRE, {"ids": list(part), "reason": reason})
        tx.event(EventKind.RETIRED, None, {"blocks": fresh, "reason": reason})
        tx.flush()
    out = []
    for b in block_ids:
        i = infos[b]
        if b in fresh:
            i = BlockInfo(
                block_id=i.block_id,
                stream=i.stream,
                accounting=i.accounting,
                capacity=i.capacity,
                slack_delta=i.slack_delta,
                retired=True,
                retired_reason=reason,
            )
        out.append(i)
    return tuple(out)


def reconcile(
    tx: WriteTx,
    tombstones: Sequence[BlockInfo],
    *,
    epoch: int,
    payload: dict[str, object],
    reason: str,
) -> tuple[list[str], list[str]]:
    """Count every block as spent for good: register the ``tombstones`` that are not
    registered, retire every live block (tombstones included) in one ``retired`` event, and
    append the ``reconciled`` event (``payload`` plus ``epoch``, ``retired``, ``tombstones``).

    Returns:
        The blocks that were live and are retired now, and the tombstones registered now.
    """
    wanted = [t.block_id for t in tombstones]
    found = {
        row.block_id
        for part in chunks(wanted)
        for row in tx.conn.execute(_EXISTING, {"ids": list(part)})
    }
    live = [str(row.block_id) for row in tx.conn.execute(_LIVE)]
    fresh = [
        t for t in dict((t.block_id, t) for t in tombstones).values() if t.block_id not in found
    ]
    if fresh:
        add_blocks(tx, fresh)
    every = sorted({*live, *(t.block_id for t in fresh)})
    if every:
        retire(tx, every, reason=reason)
    tx.event(
        EventKind.RECONCILED,
        None,
        {
            **payload,
            "epoch": epoch,
            "retired": len(live),
            "tombstones": [t.block_id for t in fresh],
        },
    )
    tx.flush()
    return live, [t.block_id for t in fresh]

"""The write path's Core statements, one builder each (compiled once per dialect by
:mod:`blockbudget.ledger.fastsql`). IN lists use one named parameter per element (``id0``,
``id1``, …) so that each list length compiles once."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Select, bindparam, insert, select, update
from sqlalchemy.sql.dml import Insert, Update

from blockbudget.ledger.schema import (
    audit,
    blocks,
    budgets,
    contexts,
    head,
    requests,
    reservation_blocks,
    reservations,
)
from blockbudget.ledger.types import ReservationState

#: Column order of every row that describes a block (see ``catalog.info_from_tuple``).
BLOCK_COLUMNS = (
    blocks.c.block_id,
    blocks.c.stream,
    blocks.c.accounting,
    blocks.c.capacity_epsilon,
    blocks.c.capacity_delta,
    blocks.c.slack_delta,
    blocks.c.retired,
    blocks.c.retired_reason,
)


def id_params(ids: Sequence[str]) -> dict[str, str]:
    """``{"id0": ids[0], "id1": ids[1], …}`` for the IN-list statements."""
    return {f"id{i}": b for i, b in enumerate(ids)}


def _in_ids(n: int) -> list[object]:
    return [bindparam(f"id{i}") for i in range(n)]


def lock_head() -> Select[tuple[int]]:
    """``SELECT id FROM ledger_head WHERE id = 1 FOR UPDATE`` (PostgreSQL's writer lock)."""
    return select(head.c.id).where(head.c.id == 1).with_for_update()


def select_context() -> Select[tuple[str, str, float, float | None]]:
    """One registered context's name, description, creation and closing time (no lock: a
    context is never removed, and is closed only under the writers' lock this transaction
    holds)."""
    return select(
        contexts.c.name, contexts.c.description, contexts.c.created_at, contexts.c.closed_at
    ).where(contexts.c.name == bindparam("name"))


def close_context() -> Update:
    """Set one context's closing time."""
    return (
        update(contexts)
        .where(contexts.c.name == bindparam("c_name"))
        .values(closed_at=bindparam("c_closed_at"))
    )


def select_open_reservations() -> Select[tuple[object, ...]]:
    """The ids of one context's open reservations."""
    return (
        select(reservations.c.reservation_id)
        .where(
            reservations.c.state == ReservationState.OPEN.value,
            reservations.c.context == bindparam("ctx"),
        )
        .order_by(reservations.c.reservation_id)
    )


def insert_context() -> Insert:
    return insert(contexts)


def select_budgets(n: int) -> Select[tuple[object, ...]]:
    """Charged, reserved and the block's columns for ``n`` blocks in one context, locked in
    block order (FOR UPDATE OF the budget rows; SQLite ignores it and is serial anyway)."""
    return (
        select(budgets.c.charged, budgets.c.reserved, *BLOCK_COLUMNS)
        .join_from(budgets, blocks, budgets.c.block_id == blocks.c.block_id)
        .where(budgets.c.block_id.in_(_in_ids(n)), budgets.c.context == bindparam("ctx"))
        .order_by(budgets.c.block_id)
        .with_for_update(of=budgets)
    )


def select_blocks(n: int) -> Select[tuple[object, ...]]:
    """The columns of ``n`` blocks, in block order."""
    return (
        select(*BLOCK_COLUMNS).where(blocks.c.block_id.in_(_in_ids(n))).order_by(blocks.c.block_id)
    )


def update_budget() -> Update:
    return (
        update(budgets)
        .where(budgets.c.block_id == bindparam("b_id"), budgets.c.context == bindparam("b_ctx"))
        .values(charged=bindparam("b_charged"), reserved=bindparam("b_reserved"))
    )


def insert_budget() -> Insert:
    return insert(budgets)


def select_reservation() -> Select[tuple[object, ...]]:
    """One reservation row, locked."""
    return (
        select(
            reservations.c.reservation_id,
            reservations.c.context,
            reservations.c.holder,
            reservations.c.request_id,
            reservations.c.cost,
            reservations.c.blocks,
            reservations.c.created_at,
            reservations.c.expires_at,
            reservations.c.state,
        )
        .where(reservations.c.reservation_id == bindparam("rid"))
        .with_for_update()
    )


def select_stale() -> Select[tuple[object, ...]]:
    """Open reservations of one context whose expiry time has passed."""
    return (
        select(reservations.c.reservation_id, reservations.c.blocks)
        .where(
            reservations.c.state == ReservationState.OPEN.value,
            reservations.c.expires_at <= bindparam("now"),
            reservations.c.context == bindparam("ctx"),
        )
        .order_by(reservations.c.reservation_id)
    )


def select_stale_all() -> Select[tuple[object, ...]]:
    """Every open reservation whose expiry time has passed."""
    return (
        select(reservations.c.reservation_id)
        .where(
            reservations.c.state == ReservationState.OPEN.value,
            reservations.c.expires_at <= bindparam("now"),
        )
        .order_by(reservations.c.reservation_id)
    )


def select_remaining() -> Select[tuple[object, ...]]:
    """Per block, what a reservation still holds (locked)."""
    return (
        select(reservation_blocks.c.block_id, reservation_blocks.c.remaining)
        .where(reservation_blocks.c.reservation_id == bindparam("rid"))
        .order_by(reservation_blocks.c.block_id)
        .with_for_update()
    )


def update_remaining() -> Update:
    return (
        update(reservation_blocks)
        .where(
            reservation_blocks.c.reservation_id == bindparam("r_id"),
            reservation_blocks.c.block_id == bindparam("r_block"),
        )
        .values(remaining=bindparam("r_remaining"))
    )


def close_reservation() -> Update:
    return (
        update(reservations)
        .where(reservations.c.reservation_id == bindparam("r_id"))
        .values(state=bindparam("r_state"), closed_at=bindparam("r_closed_at"))
    )


def insert_reservation() -> Insert:
    return insert(reservations)


def insert_reservation_block() -> Insert:
    return insert(reservation_blocks)


def insert_request() -> Insert:
    return insert(requests)


def chain_tip() -> Select[tuple[int, str]]:
    """The last event's (seq, hash)."""
    return select(audit.c.seq, audit.c.hash).order_by(audit.c.seq.desc()).limit(1)


def insert_event() -> Insert:
    return insert(audit)

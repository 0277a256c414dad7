"""One write transaction: locked budget rows, filters, reservations, pending events, flush.

A :class:`WriteTx` is created inside the serialized write transaction (see
:mod:`blockbudget.ledger.db`). It reads and locks the (block, context) budget rows it needs
(``SELECT … FOR UPDATE`` sorted by block, ignored by SQLite where ``BEGIN IMMEDIATE`` already
holds the lock), works on in-memory copies, and :meth:`WriteTx.flush` writes every changed row,
then the audit events, in the same transaction. Nothing is written before every check passed,
and any exception rolls the whole transaction back.

A request may only name a registered, open context (:meth:`WriteTx.require_context`): one
primary-key read of ``ledger_contexts`` in the same transaction (at most once per context and
transaction), which sees a context an administrator closed in any process. A (block, context)
budget row can only exist for a registered context (``ledger_budgets.context`` is a foreign key
to ``ledger_contexts``).

Blocks' registrations are immutable apart from the retired flag, so their filters are cached
per process in a :class:`~blockbudget.ledger.catalog.BlockCatalog`; the retired flag is read in
every transaction. A write transaction never changes that cache itself: registrations it reads
or writes are staged in the :class:`WriteTx` and published by :meth:`WriteTx.after_commit` once
the transaction committed (a rollback drops them with the transaction).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from blockbudget.accounting import Filter
from blockbudget.budget import Cost
from blockbudget.errors import (
    BudgetExceededError,
    ClosedContextError,
    InternalError,
    RetiredBlockError,
    UnknownBlockError,
    UnknownContextError,
    UnknownReservationError,
)
from blockbudget.ledger import statements as st
from blockbudget.ledger.audit import PendingEvent, append_events
from blockbudget.ledger.catalog import BlockCatalog, info_from_tuple
from blockbudget.ledger.db import TransientConflict
from blockbudget.ledger.fastsql import FastSql, chunks
from blockbudget.ledger.types import (
    BlockInfo,
    ContextInfo,
    EventKind,
    Operation,
    ReservationState,
    Vector,
    decode_vector,
    encode_vector,
    vadd,
    vsub,
)

_S = TypeVar("_S")


def _builder(fn: Callable[[int], _S], n: int) -> Callable[[], _S]:
    return lambda: fn(n)


class DuplicateRequest(Exception):
    """Internal: the request id is already in the request table (the transaction rolled back)."""


def unknown_context(context: str) -> UnknownContextError:
    """The error for a request naming an unregistered context."""
    return UnknownContextError(
        f"unknown context {context!r}: a request may only name a registered context — an "
        "administrator registers it (command line: `blockbudget context add NAME`; HTTP: POST "
        "/v1/contexts; Python: Ledger.add_context). Each context is a group of non-colluding "
        "principals with its own per-block budget (Sage §3.2)"
    )


@dataclass
class _Budget:
    """Working copy of one (block, context) row."""

    charged: Vector
    reserved: Vector
    exists: bool
    #: As read: both vectors and their stored texts (reused at flush when unchanged).
    stored: tuple[Vector, Vector, str, str] | None = None
    dirty: bool = False

    def texts(self) -> tuple[str, str]:
        s = self.stored
        charged = s[2] if s is not None and self.charged == s[0] else encode_vector(self.charged)
        reserved = s[3] if s is not None and self.reserved == s[1] else encode_vector(self.reserved)
        return charged, reserved


@dataclass
class OpenReservation:
    """A reservation row read (and locked) inside a write transaction."""

    id: str
    context: str
    holder: str | None
    request_id: str
    cost_json: str
    blocks: tuple[str, ...]
    created_at: float
    expires_at: float
    state: ReservationState


@dataclass
class WriteTx:
    """The working state of one write transaction (see the module docstring)."""

    conn: Connection
    catalog: BlockCatalog
    now: float
    request_id: str | None
    events: list[PendingEvent] = field(default_factory=list)
    last_seq: int | None = None
    #: the hash of the event at ``last_seq`` (the chain tip this transaction wrote)
    last_hash: str | None = None
    #: whether the transaction appended a ``charged`` event (after which an answer may leave)
    charged: bool = False
    _budgets: dict[tuple[str, str], _Budget] = field(default_factory=dict)
    _retired: dict[str, bool] = field(default_factory=dict)
    _contexts: dict[str, ContextInfo] = field(default_factory=dict)
    #: Registrations learnt in this transaction (block → filter, stream), published to the
    #: shared catalog only after the commit (:meth:`after_commit`).
    _learnt: dict[str, tuple[Filter, str]] = field(default_factory=dict)
    sql: FastSql = field(init=False)

    def __post_init__(self) -> None:
        self.sql = FastSql(self.conn)

    def lock_head(self) -> None:
        """Serialize with every other writer (PostgreSQL; SQLite is serial from BEGIN)."""
        if self.conn.dialect.name != "sqlite":
            self.sql.rows("lock_head", st.lock_head, {})

    # --- contexts ----------------------------------------------------------------------------

    def read_context(self, name: str) -> ContextInfo | None:
        """The registered context ``name`` (open or closed), or None when there is none."""
        known = self._contexts.get(name)
        if known is not None:
            return known
        rows = self.sql.rows("context", st.select_context, {"name": name})
        if not rows:
            return None
        got, description, created_at, closed_at = rows[0]
        info = ContextInfo(
            name=got,
            description=description,
            created_at=float(created_at),
            closed_at=None if closed_at is None else float(closed_at),
        )
        self._contexts[got] = info
        return info

    def require_context(self, context: str) -> None:
        """Raises unless ``context`` is registered and open (see the module docstring).

        Raises:
            UnknownContextError: naming the context and how contexts are registered.
            ClosedContextError: the context was closed (it never spends budget again).
        """
        info = self.read_context(context)
        if info is None:
            raise unknown_context(context)
        if info.closed_at is not None:
            from datetime import UTC, datetime

            when = datetime.fromtimestamp(info.closed_at, tz=UTC).isoformat(timespec="seconds")
            raise ClosedContextError(
                f"context {context!r} was closed by an administrator at "
                f"{when.replace('+00:00', 'Z')}: a closed context never reserves or charges "
                "budget again"
            )

    def close_context(self, info: ContextInfo) -> ContextInfo:
        """Mark an open context closed at ``now`` and queue its ``context_closed`` event."""
        self.sql.run(
            "close_context", st.close_context, {"c_name": info.name, "c_closed_at": self.now}
        )
        closed = ContextInfo(
            name=info.name,
            description=info.description,
            created_at=info.created_at,
            closed_at=self.now,
        )
        self._contexts[info.name] = closed
        self.event(EventKind.CONTEXT_CLOSED, info.name, {"name": info.name})
        return closed

    def insert_context(self, info: ContextInfo, *, automatic: bool = False) -> None:
        """Insert a new context's row and queue its ``context_added`` event."""
        try:
            self.sql.run(
                "insert_context",
                st.insert_context,
                {
                    "name": info.name,
                    "description": info.description,
                    "created_at": info.created_at,
                    "closed_at": None,
                },
            )
        except IntegrityError as exc:  # not possible under the writers' lock, but handled
            raise TransientConflict(str(exc)) from exc
        self._contexts[info.name] = info
        self.event(
            EventKind.CONTEXT_ADDED,
            info.name,
            {"name": info.name, "description": info.description},
            automatic=automatic,
        )

    # --- blocks and budget rows -------------------------------------------------------------

    def load(self, block_ids: Iterable[str], context: str) -> None:
        """Lock and read the budget rows of ``block_ids`` in ``context`` (sorted by block).

        Rows that do not exist yet start as zero vectors and are inserted at flush. A row found
        proves that ``context`` is registered (foreign key; see the module docstring).

        Raises:
            UnknownBlockError: when a block is not registered.
        """
        wanted = sorted({b for b in block_ids if (b, context) not in self._budgets})
        if not wanted:
            return
        seen: set[str] = set()
        for part in chunks(wanted):
            params: dict[str, str] = st.id_params(part)
            params["ctx"] = context
            for row in self.sql.rows(
                ("budgets", len(part)), _builder(st.select_budgets, len(part)), params
            ):
                block = row[2]
                if not self.known(block):
                    self.remember(info_from_tuple(row[2:]))
                self._retired[block] = bool(row[8])
                charged, reserved = decode_vector(row[0]), decode_vector(row[1])
                self._budgets[(block, context)] = _Budget(
                    charged, reserved, exists=True, stored=(charged, reserved, row[0], row[1])
                )
                seen.add(block)
        missing = [b for b in wanted if b not in seen]
        if not missing:
            return
        for info in self.read_blocks(missing).values():
            zero = self.filter(info.block_id).zero()
            self._budgets[(info.block_id, context)] = _Budget(zero, zero, exists=False)

    def read_blocks(self, block_ids: Sequence[str]) -> dict[str, BlockInfo]:
        """Read blocks' registrations (and retired flags) by id.

        Raises:
            UnknownBlockError: naming every id that is not registered.
        """
        found: dict[str, BlockInfo] = {}
        for part in chunks(sorted(set(block_ids))):
            key = ("blocks", len(part))
            for row in self.sql.rows(
                key, _builder(st.select_blocks, len(part)), st.id_params(part)
            ):
                info = info_from_tuple(row)
                self.remember(info)
                self._retired[info.block_id] = info.retired
                found[info.block_id] = info
        unknown = sorted(set(block_ids) - found.keys())
        if unknown:
            raise UnknownBlockError(
                f"unknown block(s) {', '.join(map(repr, unknown))}: a block must be added "
                "with add_blocks before it is reserved, charged or retired"
            )
        return found

    def require_live(self, block_ids: Sequence[str]) -> None:
        """Raises RetiredBlockError naming every retired block among ``block_ids``."""
        dead = [b for b in block_ids if self._retired[b]]
        if dead:
            raise RetiredBlockError(dead)

    def known(self, block: str) -> bool:
        """Whether ``block``'s registration is known here (committed, or read or written in
        this transaction)."""
        return block in self._learnt or self.catalog.known(block)

    def remember(self, info: BlockInfo) -> Filter:
        """Stage ``info``'s filter for this transaction; the shared catalog gets it only in
        :meth:`after_commit` (see :class:`BlockCatalog`). Returns the filter."""
        if self.catalog.known(info.block_id):
            return self.catalog.filter(info.block_id)
        staged = self._learnt.get(info.block_id)
        if staged is None:
            staged = (self.catalog.filter_for(info), info.stream)
            self._learnt[info.block_id] = staged
        return staged[0]

    def filter(self, block: str) -> Filter:
        staged = self._learnt.get(block)
        return staged[0] if staged is not None else self.catalog.filter(block)

    def after_commit(self) -> None:
        """Publish what this transaction learnt to the shared catalog. Call only once the
        transaction has committed; after a rollback just drop the :class:`WriteTx`."""
        self.catalog.publish(self._learnt)
        self._learnt = {}

    def features(self, block: str, cost: Cost) -> Vector:
        """The features of ``cost`` under ``block``'s filter (InvalidBudgetError if the kind
        does not suit the filter)."""
        return self.catalog.features(self.filter(block), cost)

    def budget(self, block: str, context: str) -> tuple[Vector, Vector]:
        """(charged, reserved) of a loaded row."""
        b = self._budgets[(block, context)]
        return b.charged, b.reserved

    def set_budget(self, block: str, context: str, charged: Vector, reserved: Vector) -> None:
        if min(charged, default=0) < 0 or min(reserved, default=0) < 0:
            raise InternalError(
                f"negative budget vector on {block!r}/{context!r}: charged={charged}, "
                f"reserved={reserved}"
            )
        b = self._budgets[(block, context)]
        b.charged, b.reserved, b.dirty = charged, reserved, True

    def check_fits(
        self, block_ids: Sequence[str], context: str, cost: Cost, feats: dict[str, Vector]
    ) -> None:
        """Raises BudgetExceededError unless ``charged + reserved + features`` fits on every
        block (reservations count as spent)."""
        refusing: list[str] = []
        used_of: dict[str, Vector] = {}
        for block in block_ids:
            b = self._budgets[(block, context)]
            used = vadd(b.charged, b.reserved)
            if not self.filter(block).fits(vadd(used, feats[block])):
                refusing.append(block)
                used_of[block] = used
        if not refusing:
            return
        filters = [self.filter(b) for b in refusing]
        rules = sorted({f.describe() for f in filters})
        raise BudgetExceededError(
            blocks=refusing,
            requested=str(cost),
            remaining=[
                f.describe_remaining(used_of[b]) for f, b in zip(filters, refusing, strict=True)
            ],
            difference=[
                f.shortfall(used_of[b], feats[b]) for f, b in zip(filters, refusing, strict=True)
            ],
            context=context,
            rule="; ".join(rules),
            exact=[
                {
                    "remaining": f.remaining_json(used_of[b]),
                    "shortfall": f.shortfall_json(used_of[b], feats[b]),
                }
                for f, b in zip(filters, refusing, strict=True)
            ],
        )

    # --- reservations ------------------------------------------------------------------------

    def read_reservation(self, reservation_id: str) -> OpenReservation:
        """Read and lock a reservation row.

        Raises:
            UnknownBlockError: when no reservation has this id.
        """
        rows = self.sql.rows("reservation", st.select_reservation, {"rid": reservation_id})
        if not rows:
            raise UnknownReservationError(f"unknown reservation {reservation_id!r}")
        rid, context, holder, request_id, cost, block_list, created, expires, state = rows[0]
        return OpenReservation(
            id=rid,
            context=context,
            holder=holder,
            request_id=request_id,
            cost_json=cost,
            blocks=tuple(json.loads(block_list)),
            created_at=float(created),
            expires_at=float(expires),
            state=ReservationState(state),
        )

    def remaining(self, reservation_id: str) -> dict[str, Vector]:
        """Per block, the features still drawable from a reservation (rows locked)."""
        rows = self.sql.rows("remaining", st.select_remaining, {"rid": reservation_id})
        return {block: decode_vector(vec) for block, vec in rows}

    def set_remaining(self, reservation_id: str, remaining: dict[str, Vector]) -> None:
        self.sql.run_many(
            "update_remaining",
            st.update_remaining,
            [
                {"r_id": reservation_id, "r_block": b, "r_remaining": encode_vector(v)}
                for b, v in sorted(remaining.items())
            ],
        )

    def close_reservation(self, res: OpenReservation, state: ReservationState) -> None:
        """Give a reservation's remaining features back to unallocated and close it.

        ``state`` is CLOSED (release; event ``released``) or EXPIRED (event ``expired``, no
        request id). Nothing is ever charged here.
        """
        left = self.remaining(res.id)
        self.load(left, res.context)
        returned: dict[str, list[str]] = {}
        for block, vec in sorted(left.items()):
            charged, reserved = self.budget(block, res.context)
            self.set_budget(block, res.context, charged, vsub(reserved, vec))
            returned[block] = [str(v) for v in vec]
        self.set_remaining(res.id, {b: (0,) * len(v) for b, v in left.items()})
        self.sql.run(
            "close_reservation",
            st.close_reservation,
            {"r_id": res.id, "r_state": state.value, "r_closed_at": self.now},
        )
        payload: dict[str, Any] = {"reservation_id": res.id, "returned": returned}
        if state is ReservationState.EXPIRED:
            payload["expires_at"] = res.expires_at
            payload["now"] = self.now
            self.event(EventKind.EXPIRED, res.context, payload, automatic=True)
        else:
            self.event(EventKind.RELEASED, res.context, payload)
        res.state = state

    def expire_stale(self, block_ids: Sequence[str], context: str) -> list[str]:
        """Expire every open reservation in ``context`` past its TTL that holds any of
        ``block_ids`` (a crashed holder never blocks a block forever). Returns their ids.

        Skipped when nothing is reserved on these rows: then no such reservation holds
        anything here.
        """
        if all(not any(self._budgets[(b, context)].reserved) for b in block_ids):
            return []
        wanted = set(block_ids)
        expired: list[str] = []
        stale = self.sql.rows("stale", st.select_stale, {"now": self.now, "ctx": context})
        for rid, block_list in stale:
            if wanted.isdisjoint(json.loads(block_list)):
                continue
            res = self.read_reservation(rid)
            if res.state is ReservationState.OPEN:
                self.close_reservation(res, ReservationState.EXPIRED)
                expired.append(res.id)
        return expired

    # --- events and flush --------------------------------------------------------------------

    def event(
        self,
        kind: EventKind,
        context: str | None,
        payload: dict[str, Any],
        *,
        automatic: bool = False,
    ) -> None:
        """Queue an audit event, carrying the transaction's request id unless ``automatic``."""
        rid = None if automatic else self.request_id
        self.events.append(PendingEvent(kind, rid, context, payload))

    def flush(self) -> int:
        """Write every changed budget row, then the queued events. Returns the last seq.

        Raises:
            InternalError: when nothing was queued (a change without an event).
        """
        updates: list[dict[str, str]] = []
        inserts: list[dict[str, str]] = []
        for (block, context), b in self._budgets.items():
            if not b.dirty:
                continue
            charged_text, reserved_text = b.texts()
            values = {
                "b_id": block,
                "b_ctx": context,
                "b_charged": charged_text,
                "b_reserved": reserved_text,
            }
            (updates if b.exists else inserts).append(values)
            b.exists, b.dirty = True, False
        if updates:
            self.sql.run_many("update_budget", st.update_budget, updates)
        if inserts:
            rows = [
                {
                    "block_id": v["b_id"],
                    "context": v["b_ctx"],
                    "charged": v["b_charged"],
                    "reserved": v["b_reserved"],
                }
                for v in inserts
            ]
            try:
                self.sql.run_many("insert_budget", st.insert_budget, rows)
            except IntegrityError as exc:  # a concurrent first touch; rerun the transaction
                raise TransientConflict(str(exc)) from exc
        if self.events:
            self.charged = self.charged or any(e.kind is EventKind.CHARGED for e in self.events)
            self.last_seq, self.last_hash = append_events(self.sql, self.events, ts=self.now)
            self.events = []
        if self.last_seq is None:
            raise InternalError("flush() without any event: every change must be audited")
        return self.last_seq

    def record_request(
        self, request_id: str, operation: Operation, fingerprint: str, result: str, seq: int
    ) -> None:
        """Insert the request row last; a duplicate id raises :class:`DuplicateRequest`."""
        try:
            self.sql.run(
                "insert_request",
                st.insert_request,
                {
                    "request_id": request_id,
                    "operation": operation.value,
                    "fingerprint": fingerprint,
                    "result": result,
                    "seq": seq,
                    "created_at": self.now,
                },
            )
        except IntegrityError as exc:
            raise DuplicateRequest(request_id) from exc

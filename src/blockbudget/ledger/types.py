"""Value types of the ledger: enums for modes and frozen dataclasses for everything returned.

Every value a :class:`~blockbudget.ledger.Ledger` returns is one of these frozen dataclasses.
Feature vectors (``charged``, ``reserved``, a reservation's ``remaining``) are tuples of Python
integers in the fixed-point units of :mod:`blockbudget.budget`, in the layout of the block's
filter (:mod:`blockbudget.accounting.filters`).

The ``to_json`` / ``from_json`` pairs exist because results are stored in the request table so
that a replayed request returns exactly what the first call returned (invariant 4 in
docs/architecture.md).
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import Any

from blockbudget.accounting import Accounting, Filter, make_filter
from blockbudget.budget import Budget, Cost, cost_from_json, normalize_exactly
from blockbudget.errors import InvalidRequestError

Vector = tuple[int, ...]

#: The context :class:`Ledger` methods name when a caller names none. Like any other context it
#: exists only once an administrator registers it (ledgers created before schema version 3
#: registered it automatically and keep it; see :meth:`Ledger.close_context`).
DEFAULT_CONTEXT = "default"

#: What a context name looks like: 1–64 letters, digits and ``_ . : -``, first a letter or digit.
CONTEXT_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")

#: The longest description :meth:`Ledger.add_context` accepts, in characters.
MAX_CONTEXT_DESCRIPTION = 1000

#: Default time-to-live of a reservation, in seconds.
DEFAULT_TTL_SECONDS = 600.0


class EventKind(Enum):
    """The kind of an audit event. Stored as its value; new kinds are only ever added."""

    CONTEXT_ADDED = "context_added"
    CONTEXT_CLOSED = "context_closed"
    BLOCK_ADDED = "block_added"
    RESERVED = "reserved"
    CHARGED = "charged"
    RELEASED = "released"
    EXPIRED = "expired"
    RETIRED = "retired"
    RECONCILED = "reconciled"


class ReservationState(Enum):
    """The life of a reservation: OPEN until released (CLOSED) or past its TTL (EXPIRED)."""

    OPEN = "open"
    CLOSED = "closed"
    EXPIRED = "expired"


class Operation(Enum):
    """The idempotent operations recorded in the request table."""

    ADD_CONTEXT = "add_context"
    CLOSE_CONTEXT = "close_context"
    ADD_BLOCKS = "add_blocks"
    RESERVE = "reserve"
    CHARGE = "charge"
    RELEASE = "release"
    RETIRE = "retire"
    RECONCILE = "reconcile"


def validate_context_name(name: object) -> str:
    """Return ``name`` if it is a well-formed context name (see :data:`CONTEXT_NAME_PATTERN`).

    Args:
        name: the candidate name.

    Returns:
        The name, unchanged.

    Raises:
        InvalidRequestError: when ``name`` is not a string of 1–64 letters, digits and
            ``_ . : -`` starting with a letter or digit.
    """
    if not isinstance(name, str) or CONTEXT_NAME_PATTERN.fullmatch(name) is None:
        raise InvalidRequestError(
            "a context name is 1–64 characters of letters, digits and _ . : - (the first a "
            f"letter or digit); got {name!r}"
        )
    return name


def encode_vector(vector: Vector) -> str:
    """JSON text of a feature vector: a list of decimal integer strings (exact at any size)."""
    return '["' + '","'.join(map(str, vector)) + '"]' if vector else "[]"


def decode_vector(text: str) -> Vector:
    """Inverse of :func:`encode_vector` (also accepts plain JSON integers)."""
    return _decode(text)


def _decode(text: str) -> Vector:
    inner = text.strip()[1:-1].replace('"', "")
    if not inner.strip():
        return ()
    return tuple(map(int, inner.split(",")))


_COST_JSON: dict[Cost, dict[str, Any]] = {}


def cost_json(cost: Cost) -> dict[str, Any]:
    """``cost.to_json()``, memoized per value (costs are immutable; a charge loop reuses one).

    Returns a shared dict: do not modify it.
    """
    data = _COST_JSON.get(cost)
    if data is None:
        data = cost.to_json()
        if len(_COST_JSON) >= 1024:
            _COST_JSON.clear()
        _COST_JSON[cost] = data
    return data


def vadd(a: Vector, b: Vector) -> Vector:
    """Elementwise sum of two vectors of one filter (same length by construction)."""
    return tuple(map(operator.add, a, b))


def vsub(a: Vector, b: Vector) -> Vector:
    """Elementwise difference of two vectors of one filter (same length by construction)."""
    return tuple(map(operator.sub, a, b))


@dataclass(frozen=True)
class BlockInfo:
    """A block's registration: its stream, accounting rule and capacity, and whether retired.

    Attributes:
        block_id: the block's id, e.g. ``"flights/2013-01-01"``.
        stream: the stream the block belongs to.
        accounting: which filter guards the block.
        capacity: the block's global budget (ε_g, δ_g), per context.
        slack_delta: the δ̃ of strong composition (None: the filter's default, δ_g/2).
        retired: True once the block was retired; a retired block never serves again.
        retired_reason: why it was retired (None while live).
    """

    block_id: str
    stream: str
    accounting: Accounting
    capacity: Budget
    slack_delta: float | None
    retired: bool = False
    retired_reason: str | None = None

    def make_filter(self) -> Filter:
        """The filter guarding this block (a fresh instance)."""
        return make_filter(self.accounting, capacity=self.capacity, slack_delta=self.slack_delta)

    def same_parameters(self, other: BlockInfo) -> bool:
        """Whether ``other`` registers the same stream, rule, capacity and slack."""
        return (
            self.stream == other.stream
            and self.accounting is other.accounting
            and self.capacity.epsilon == other.capacity.epsilon
            and self.capacity.delta == other.capacity.delta
            and self.slack_delta == other.slack_delta
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "block_id": self.block_id,
            "stream": self.stream,
            "accounting": self.accounting.value,
            "capacity": self.capacity.to_json(),
            "slack_delta": self.slack_delta,
            "retired": self.retired,
            "retired_reason": self.retired_reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BlockInfo:
        return cls(
            block_id=data["block_id"],
            stream=data["stream"],
            accounting=Accounting(data["accounting"]),
            capacity=Budget.from_json(data["capacity"]),
            slack_delta=data["slack_delta"],
            retired=bool(data["retired"]),
            retired_reason=data["retired_reason"],
        )


@dataclass(frozen=True)
class ContextInfo:
    """A registered context: a group of principals assumed not to collude, which gets its own
    full per-block budget (Sage §3.2). Contexts are registered by an administrator with
    :meth:`Ledger.add_context`, may be closed by one with :meth:`Ledger.close_context` (then
    never charged again) and are never removed.

    Attributes:
        name: the context's name (see :data:`CONTEXT_NAME_PATTERN`).
        description: free text saying whom the context stands for (may be empty).
        created_at: Unix time of its registration.
        closed_at: Unix time it was closed, or None while it is open.
    """

    name: str
    description: str
    created_at: float
    closed_at: float | None = None

    @property
    def closed(self) -> bool:
        """True once the context is closed (it can never reserve or charge again)."""
        return self.closed_at is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "created_at": self.created_at,
            "closed_at": self.closed_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContextInfo:
        closed = data.get("closed_at")
        return cls(
            name=data["name"],
            description=data["description"],
            created_at=float(data["created_at"]),
            closed_at=None if closed is None else float(closed),
        )


@dataclass(frozen=True)
class BlockState:
    """The budget of one block in one context.

    Attributes:
        block: the block id.
        stream: its stream.
        context: the context (group of non-colluding principals) this state belongs to.
        accounting: the block's rule.
        capacity: the block's (ε_g, δ_g).
        charged: summed features of every charge (spent; irreversible).
        reserved: summed features still held by open reservations.
        retired: whether the block is retired (globally).
        remaining_fraction: the filter's estimate of what is left, in [0, 1], after counting
            reservations as spent; 0 means nothing more fits (the block is exhausted here).
        remaining: the filter's human-readable statement of what remains.
    """

    block: str
    stream: str
    context: str
    accounting: Accounting
    capacity: Budget
    charged: Vector
    reserved: Vector
    retired: bool
    remaining_fraction: float
    remaining: str

    @property
    def used(self) -> Vector:
        """``charged + reserved``: what the filter counts as spent."""
        return tuple(c + r for c, r in zip(self.charged, self.reserved, strict=True))

    @property
    def exhausted(self) -> bool:
        """True when nothing more fits in this context (remaining fraction 0)."""
        return self.remaining_fraction <= 0.0


@dataclass(frozen=True)
class Reservation:
    """Budget set aside on blocks for one holder (Sage's "allocated" budget; PrivateKube's
    two-phase claim).

    Attributes:
        id: the reservation id.
        blocks: the reserved blocks, sorted.
        context: the context whose budget is reserved.
        cost: what was reserved on every block.
        expires_at: Unix time after which the reservation is released by expiry.
        state: OPEN, CLOSED (released) or EXPIRED.
        holder: who holds it (free text, may be empty).
        request_id: the request that created it.
        created_at: Unix time of creation.
        remaining: per block, the features still reserved (drawable), as (block, vector) pairs
            in block order. A reservation returned by :meth:`Ledger.reserve` shows the full
            features; a closed or expired one shows zeros.
        replayed: True when a write returned this as the stored result of an earlier request
            with the same id (nothing was done now) — also when the two raced and the other
            one committed first. Not part of the value (ignored by ``==``, not stored).
    """

    id: str
    blocks: tuple[str, ...]
    context: str
    cost: Cost
    expires_at: float
    state: ReservationState
    holder: str | None
    request_id: str
    created_at: float
    remaining: tuple[tuple[str, Vector], ...]
    replayed: bool = field(default=False, compare=False)

    @property
    def is_open(self) -> bool:
        return self.state is ReservationState.OPEN

    def remaining_of(self, block: str) -> Vector:
        """The features still reserved on ``block``.

        Raises:
            KeyError: when the block is not part of the reservation.
        """
        for b, v in self.remaining:
            if b == block:
                return v
        raise KeyError(block)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "blocks": list(self.blocks),
            "context": self.context,
            "cost": cost_json(self.cost),
            "expires_at": self.expires_at,
            "state": self.state.value,
            "holder": self.holder,
            "request_id": self.request_id,
            "created_at": self.created_at,
            "remaining": [[b, [str(x) for x in v]] for b, v in self.remaining],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reservation:
        return cls(
            id=data["id"],
            blocks=tuple(data["blocks"]),
            context=data["context"],
            cost=cost_from_json(data["cost"]),
            expires_at=float(data["expires_at"]),
            state=ReservationState(data["state"]),
            holder=data["holder"],
            request_id=data["request_id"],
            created_at=float(data["created_at"]),
            remaining=tuple((b, tuple(int(x) for x in v)) for b, v in data["remaining"]),
        )


@dataclass(frozen=True)
class Charge:
    """The receipt of a durable charge.

    Attributes:
        request_id: the request id (caller's, or generated when none was given).
        blocks: the charged blocks, sorted.
        context: the context charged.
        cost: what was charged to every block.
        reservation_id: the reservation drawn from, or None for a direct charge.
        seq: the audit sequence number of the CHARGED event.
        charged_at: Unix time of the charge.
    """

    request_id: str
    blocks: tuple[str, ...]
    context: str
    cost: Cost
    reservation_id: str | None
    seq: int
    charged_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "blocks": list(self.blocks),
            "context": self.context,
            "cost": cost_json(self.cost),
            "reservation_id": self.reservation_id,
            "seq": self.seq,
            "charged_at": self.charged_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Charge:
        return cls(
            request_id=data["request_id"],
            blocks=tuple(data["blocks"]),
            context=data["context"],
            cost=cost_from_json(data["cost"]),
            reservation_id=data["reservation_id"],
            seq=int(data["seq"]),
            charged_at=float(data["charged_at"]),
        )


@dataclass(frozen=True)
class RequestRecord:
    """A row of the request table: an acknowledged, idempotent request.

    Attributes:
        request_id: the id.
        operation: which operation it was.
        fingerprint: SHA-256 of the canonical form of its arguments.
        seq: the audit sequence number after the request (its last event, or the chain tip).
        created_at: Unix time it was committed.
        result_json: the stored result, as JSON text.
    """

    request_id: str
    operation: Operation
    fingerprint: str
    seq: int
    created_at: float
    result_json: str


@dataclass(frozen=True)
class AuditEvent:
    """One immutable event of the append-only, hash-chained audit log.

    Attributes:
        seq: position in the log, 1, 2, 3, … without gaps.
        ts: Unix time of the transaction that appended it.
        kind: what happened.
        version: the payload schema version of this kind.
        request_id: the request that caused it (None for expiries and other automatic events).
        context: the context it concerns (None for block-level events).
        payload_json: the canonical JSON text of the payload (what the hash covers).
        prev_hash: the previous event's hash (64 zeros for the first event).
        hash: SHA-256 over ``prev_hash`` and this event's fields.
    """

    seq: int
    ts: float
    kind: EventKind
    version: int
    request_id: str | None
    context: str | None
    payload_json: str
    prev_hash: str
    hash: str

    @property
    def payload(self) -> dict[str, Any]:
        """The payload, decoded (a fresh dict each time; the event itself stays immutable)."""
        data: dict[str, Any] = json.loads(self.payload_json)
        return data


@dataclass(frozen=True)
class ChainHead:
    """Where the audit log's hash chain ends (:meth:`Ledger.chain_head`).

    Attributes:
        seq: the last event's seq (0 for an empty log).
        hash: its hash (the genesis hash, 64 zeros, for an empty log).
        ts: its time (Unix seconds; None for an empty log).
        first_hash: the first event's hash — which names the database's history: a copy or a
            restore of the database keeps it, another database has another (None when empty).
    """

    seq: int
    hash: str
    ts: float | None
    first_hash: str | None


@dataclass(frozen=True)
class Reconciliation:
    """What :meth:`Ledger.reconcile <blockbudget.ledger.ledger.Ledger.reconcile>` did: the
    blocks it retired and registered, and the ``reconciled`` event that records it.

    Attributes:
        retired: the blocks retired now (they were live), sorted.
        tombstones: the blocks registered now, retired at once (they were not registered).
        seq: the ``reconciled`` event's seq.
        hash: its hash (the chain tip right after the reconciliation).
        epoch: the epoch the event names.
        replayed: True when this is the stored result of an earlier run (not part of the
            value).
    """

    retired: tuple[str, ...]
    tombstones: tuple[str, ...]
    seq: int
    hash: str
    epoch: int
    replayed: bool = field(default=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "retired": list(self.retired),
            "tombstones": list(self.tombstones),
            "seq": self.seq,
            "hash": self.hash,
            "epoch": self.epoch,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Reconciliation:
        return Reconciliation(
            retired=tuple(data["retired"]),
            tombstones=tuple(data["tombstones"]),
            seq=int(data["seq"]),
            hash=str(data["hash"]),
            epoch=int(data["epoch"]),
        )


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of :meth:`Ledger.verify`.

    Attributes:
        ok: True when no problem was found.
        events: how many events the verification covers (replayed now, or verified when its
            checkpoint was taken).
        blocks: how many blocks the log registers.
        contexts: how many contexts the log registers (``context_added`` events).
        problems: one sentence per problem found, in log order.
        replayed: how many events this verification replayed (``events`` less those its
            checkpoint had verified).
        checkpoint_seq: the seq of the verified checkpoint the replay started after (0: a
            full replay from the first event).
        notes: findings that are not problems, one sentence each: blocks whose history a
            rule admitted before it was capped at its proved bound (``rdp`` version 1) and
            that exceed that bound (docs/accounting.md, "The Rényi filters").
    """

    ok: bool
    events: int
    blocks: int
    contexts: int
    problems: tuple[str, ...]
    replayed: int = 0
    checkpoint_seq: int = 0
    notes: tuple[str, ...] = ()


def decimal_text(value: Decimal) -> str:
    """Canonical text of a decimal: equal values give equal text, different values different
    text (every digit is kept; see :func:`~blockbudget.budget.normalize_exactly`)."""
    if value == 0:
        return "0"
    return format(normalize_exactly(value), "f")

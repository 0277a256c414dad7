"""The scheduler queue's table: each task as stored in ``service_tasks``, and the fingerprint
that ties a request id to the arguments of its one submission (see
:mod:`blockbudget.service.queue`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from blockbudget.budget import Budget, normalize_exactly
from blockbudget.ledger import canonical_json
from blockbudget.service.auth import service_metadata

tasks_table = sa.Table(
    "service_tasks",
    service_metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("principal", sa.String(64), nullable=False, index=True),
    sa.Column("request_id", sa.String(200), nullable=True),
    sa.Column("stream", sa.String(256), nullable=False),
    sa.Column("context", sa.String(64), nullable=False),
    sa.Column("epsilon", sa.String(64), nullable=False),
    sa.Column("delta", sa.String(64), nullable=False),
    sa.Column("blocks", sa.Text, nullable=False),  # JSON list
    sa.Column("significance", sa.Text, nullable=True),  # JSON object or null
    sa.Column("submitted_at", sa.Float, nullable=False),
    sa.Column("deadline", sa.Float, nullable=True),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("reservation_id", sa.String(64), nullable=True),
    sa.Column("decided_at", sa.Float, nullable=True),
    sa.Column("note", sa.Text, nullable=False, default=""),
    # sha256 of the submission's arguments as given (see task_fingerprint); null for tasks
    # stored before the column existed
    sa.Column("fingerprint", sa.String(64), nullable=True),
    sa.UniqueConstraint("principal", "request_id"),
)


def task_fingerprint(
    *,
    stream: str,
    context: str,
    demand: Budget,
    selection: Sequence[str] | Mapping[str, Any],
    significance: Mapping[str, float] | None,
    timeout_seconds: float | None,
) -> str:
    """The fingerprint of a submission's arguments, as the caller gave them: a replay of a
    request id must carry the same ones. ``selection`` is the block ids, or how they were
    chosen (e.g. ``{"last": 3}``: the replay of a ``last`` submission need not resolve to the
    same blocks once new blocks arrived)."""
    text = canonical_json(
        {
            "stream": stream,
            "context": context,
            "epsilon": str(normalize_exactly(demand.epsilon)),
            "delta": str(normalize_exactly(demand.delta)),
            "selection": list(selection) if isinstance(selection, Sequence) else dict(selection),
            "significance": None if significance is None else dict(significance),
            "timeout_seconds": None if timeout_seconds is None else repr(float(timeout_seconds)),
        }
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class TaskState(Enum):
    """Where a queued task is (every state but WAITING is final)."""

    WAITING = "waiting"
    GRANTED = "granted"
    EXPIRED = "expired"
    REFUSED = "refused"


@dataclass(frozen=True)
class QueuedTask:
    """One task of the queue, as stored.

    Attributes:
        id: the task id (random, 32 hex digits).
        principal: who submitted it (the holder of its grant).
        stream, context: where its budget comes from.
        demand: the (ε, δ) it needs on each block.
        blocks: the block ids it needs (all-or-nothing).
        significance: optional p_ij per block (for significance-aware schedulers).
        submitted_at, deadline: wall-clock seconds (deadline None: waits forever).
        state: its state; reservation_id: its grant (GRANTED only); note: why it was decided.
    """

    id: str
    principal: str
    stream: str
    context: str
    demand: Budget
    blocks: tuple[str, ...]
    submitted_at: float
    state: TaskState
    significance: Mapping[str, float] | None = None
    deadline: float | None = None
    reservation_id: str | None = None
    decided_at: float | None = None
    note: str = ""
    request_id: str | None = None

    @classmethod
    def from_row(cls, m: sa.RowMapping) -> QueuedTask:
        """A task from its ``service_tasks`` row."""
        sig = m["significance"]
        return cls(
            id=m["id"],
            principal=m["principal"],
            stream=m["stream"],
            context=m["context"],
            demand=Budget(epsilon=Decimal(m["epsilon"]), delta=Decimal(m["delta"])),
            blocks=tuple(json.loads(m["blocks"])),
            submitted_at=float(m["submitted_at"]),
            state=TaskState(m["state"]),
            significance=None if sig is None else json.loads(sig),
            deadline=m["deadline"],
            reservation_id=m["reservation_id"],
            decided_at=m["decided_at"],
            note=m["note"] or "",
            request_id=m["request_id"],
        )


def add_fingerprint_column(engine: sa.Engine) -> None:
    """Add ``service_tasks.fingerprint`` to a table created before it existed."""

    def missing() -> bool:
        cols = sa.inspect(engine).get_columns(tasks_table.name)
        return "fingerprint" not in {c["name"] for c in cols}

    if not missing():
        return
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(f"ALTER TABLE {tasks_table.name} ADD COLUMN fingerprint VARCHAR(64)")
            )
    except DBAPIError:
        if missing():  # not another process adding it at the same time
            raise


def task_row(task: QueuedTask) -> dict[str, Any]:
    return {
        "id": task.id,
        "principal": task.principal,
        "request_id": task.request_id,
        "stream": task.stream,
        "context": task.context,
        "epsilon": str(task.demand.epsilon),
        "delta": str(task.demand.delta),
        "blocks": json.dumps(list(task.blocks)),
        "significance": None if task.significance is None else json.dumps(task.significance),
        "submitted_at": task.submitted_at,
        "deadline": task.deadline,
        "state": task.state.value,
        "reservation_id": None,
        "decided_at": None,
        "note": "",
    }

"""The task table ``service_tasks``: every task, in the ledger's own database.

The table keeps its name and its first columns (tasks stored by earlier releases — plain
budgets on named blocks — read back as ``kind=budget`` with a :class:`Named` selector); the
columns added since (``fingerprint``, ``kind``, ``selector``, ``demand``, ``work`` and
``result``) reach an older table through ``blockbudget db upgrade`` (its baseline revision).

Example:
    >>> import sqlalchemy as sa
    >>> engine = sa.create_engine("sqlite://")
    >>> ensure_table(engine)
    >>> {"kind", "selector", "demand"} <= {
    ...     c["name"] for c in sa.inspect(engine).get_columns("service_tasks")
    ... }
    True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from blockbudget.budget import Budget, Cost, cost_from_json
from blockbudget.dbrevision import ensure_current
from blockbudget.ledger import canonical_json
from blockbudget.tasks.model import Task, TaskState, WorkKind
from blockbudget.tasks.selectors import Named, selector_from_json

__all__ = [
    "DEFAULT_KEY",
    "ensure_table",
    "fingerprint",
    "scheduler_table",
    "task_from_row",
    "task_row",
    "tasks_table",
]

metadata = sa.MetaData()

tasks_table = sa.Table(
    "service_tasks",
    metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("principal", sa.String(64), nullable=False, index=True),
    sa.Column("request_id", sa.String(200), nullable=True),
    sa.Column("stream", sa.String(256), nullable=False),
    sa.Column("context", sa.String(64), nullable=False),
    sa.Column("epsilon", sa.String(64), nullable=False),  # a Budget demand's ε ("" for RDP)
    sa.Column("delta", sa.String(64), nullable=False),
    sa.Column("blocks", sa.Text, nullable=False),  # JSON list: named, then granted, blocks
    sa.Column("significance", sa.Text, nullable=True),  # JSON object or null
    sa.Column("submitted_at", sa.Float, nullable=False),
    sa.Column("deadline", sa.Float, nullable=True),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("reservation_id", sa.String(64), nullable=True),
    sa.Column("decided_at", sa.Float, nullable=True),
    sa.Column("note", sa.Text, nullable=False, default=""),
    sa.Column("fingerprint", sa.String(64), nullable=True),
    sa.Column("kind", sa.String(16), nullable=True),  # null: a budget task of an old release
    sa.Column("selector", sa.Text, nullable=True),  # JSON; null: Named(blocks)
    sa.Column("demand", sa.Text, nullable=True),  # Cost JSON; null: (epsilon, delta)
    sa.Column("work", sa.Text, nullable=True),
    sa.Column("result", sa.Text, nullable=True),
    sa.UniqueConstraint("principal", "request_id"),
)

#: The per-stream scheduler override (``set_scheduler``).
scheduler_table = sa.Table(
    "service_task_schedulers",
    metadata,
    sa.Column("stream", sa.String(256), primary_key=True),
    sa.Column("spec", sa.String(512), nullable=False),
)

#: The key of ``service_task_schedulers`` that stores the service's default scheduler (the
#: ``--scheduler`` of ``blockbudget serve``): no stream name can take it (stream names match
#: ``[a-z0-9][a-z0-9_-]*``).
DEFAULT_KEY = "*default"


def ensure_table(engine: sa.Engine) -> None:
    """Create the tables if missing (idempotent; safe when another process does the same at
    the same time), once the database's schema revision is found current.

    Raises:
        SchemaRevisionError: the database needs ``blockbudget db upgrade``.
    """
    ensure_current(engine)
    _create_tables(engine)


def _create_tables(engine: sa.Engine, *, attempts: int = 3) -> None:
    """``CREATE TABLE`` the missing tables. The check and the create are two statements, so
    a process starting at the same moment may create a table in between (PostgreSQL then
    says UniqueViolation on its catalog, or DuplicateTable): such an error is accepted once a
    fresh check finds every table there, and otherwise the step is tried again."""
    names = [table.name for table in metadata.sorted_tables]
    for attempt in range(attempts):
        try:
            metadata.create_all(engine, checkfirst=True)
            return
        except DBAPIError:
            have = set(sa.inspect(engine).get_table_names())
            if all(name in have for name in names):
                return
            if attempt == attempts - 1:
                raise


def fingerprint(arguments: Mapping[str, Any]) -> str:
    """sha256 of a submission's arguments (canonical JSON): a replayed request id must carry
    the same ones."""
    return hashlib.sha256(canonical_json(dict(arguments)).encode("utf-8")).hexdigest()


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def task_row(task: Task, *, fingerprint: str | None) -> dict[str, Any]:
    """The row that stores a new task."""
    demand = task.demand
    return {
        "id": task.id,
        "principal": task.principal,
        "request_id": task.request_id,
        "stream": task.stream,
        "context": task.context,
        "epsilon": str(demand.epsilon) if isinstance(demand, Budget) else "",
        "delta": str(demand.delta) if isinstance(demand, Budget) else "",
        "blocks": json.dumps(list(task.blocks)),
        "significance": _json(None if task.significance is None else dict(task.significance)),
        "submitted_at": task.submitted_at,
        "deadline": task.deadline,
        "state": task.state.value,
        "reservation_id": task.reservation_id,
        "decided_at": task.decided_at,
        "note": task.note,
        "fingerprint": fingerprint,
        "kind": task.kind.value,
        "selector": _json(task.selector.to_json()),
        "demand": _json(demand.to_json()),
        "work": _json(None if task.work is None else dict(task.work)),
        "result": _json(None if task.result is None else dict(task.result)),
    }


def task_from_row(m: sa.RowMapping) -> Task:
    """A task from its row (rows of older releases included)."""
    blocks = tuple(json.loads(m["blocks"]))
    kind = WorkKind(m["kind"]) if m.get("kind") else WorkKind.BUDGET
    sel_text = m.get("selector")
    selector = selector_from_json(json.loads(sel_text)) if sel_text else Named(blocks)
    demand_text = m.get("demand")
    demand: Cost = (
        cost_from_json(json.loads(demand_text))
        if demand_text
        else Budget(epsilon=Decimal(m["epsilon"]), delta=Decimal(m["delta"]))
    )
    state = TaskState(m["state"])
    granted = blocks if (sel_text or state is TaskState.GRANTED) else ()
    sig, work, result = m["significance"], m.get("work"), m.get("result")
    return Task(
        id=m["id"],
        principal=m["principal"],
        stream=m["stream"],
        context=m["context"],
        kind=kind,
        selector=selector,
        demand=demand,
        submitted_at=float(m["submitted_at"]),
        state=state,
        work=None if work is None else json.loads(work),
        significance=None if sig is None else json.loads(sig),
        deadline=m["deadline"],
        reservation_id=m["reservation_id"],
        blocks=granted,
        decided_at=m["decided_at"],
        note=m["note"] or "",
        result=None if result is None else json.loads(result),
        request_id=m["request_id"],
    )

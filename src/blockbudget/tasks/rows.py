"""The queue's reads and writes of the task table (:mod:`blockbudget.tasks.table`).

Every state change is a conditional update (``WHERE state IN (...)``) whose row count says
whether it happened: two deciders (a canceller and the leader granting) can never both win.

Example:
    >>> import sqlalchemy as sa
    >>> rows = TaskRows(sa.create_engine("sqlite://"))
    >>> rows.get("nope") is None
    True
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import sqlalchemy as sa

from blockbudget.errors import RequestIdConflictError
from blockbudget.tasks.model import Task, TaskState, WorkKind
from blockbudget.tasks.table import (
    DEFAULT_KEY,
    ensure_table,
    scheduler_table,
    task_from_row,
    task_row,
    tasks_table,
)

__all__ = ["TaskRows"]

t = tasks_table
_SUBMITTED_INDEX = sa.Index("ix_service_tasks_submitted_at", t.c.submitted_at)
_DECIDED_INDEX = sa.Index("ix_service_tasks_decided_at", t.c.decided_at)


class TaskRows:
    """Reads and conditional writes of ``service_tasks`` (and the scheduler overrides).

    Args:
        engine: the ledger's database engine (created tables and indexes if missing).
    """

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        #: Called with a task's id once this process moved it to REFUSED (e.g. a metric).
        self.on_refused: list[Callable[[str], None]] = []
        ensure_table(engine)
        for index in (_SUBMITTED_INDEX, _DECIDED_INDEX):
            with contextlib.suppress(sa.exc.DBAPIError):  # another process created it
                index.create(engine, checkfirst=True)

    # --- reads ---------------------------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t).where(t.c.id == task_id)).first()
        return None if row is None else task_from_row(row._mapping)

    def many(self, ids: Collection[str]) -> list[Task]:
        out: list[Task] = []
        ordered = sorted(ids)
        with self.engine.connect() as conn:
            for k in range(0, len(ordered), 500):
                q = sa.select(t).where(t.c.id.in_(ordered[k : k + 500]))
                out.extend(task_from_row(r._mapping) for r in conn.execute(q))
        return sorted(out, key=lambda x: (x.submitted_at, x.id))

    def select(
        self,
        *,
        principal: str | None = None,
        stream: str | None = None,
        states: Iterable[TaskState] | None = None,
        kind: WorkKind | None = None,
        limit: int = 1000,
    ) -> list[Task]:
        """Tasks, oldest first, filtered."""
        q = sa.select(t).order_by(t.c.submitted_at, t.c.id)
        if principal is not None:
            q = q.where(t.c.principal == principal)
        if stream is not None:
            q = q.where(t.c.stream == stream)
        if states is not None:
            q = q.where(t.c.state.in_([s.value for s in states]))
        if kind is WorkKind.BUDGET:
            q = q.where(sa.or_(t.c.kind == kind.value, t.c.kind.is_(None)))
        elif kind is not None:
            q = q.where(t.c.kind == kind.value)
        with self.engine.connect() as conn:
            return [task_from_row(r._mapping) for r in conn.execute(q.limit(limit))]

    def ids_since(self, column: str, since: float, state: TaskState) -> list[str]:
        """Ids of tasks in ``state`` whose ``submitted_at``/``decided_at`` is >= ``since``
        (a range of that column's index)."""
        col = t.c[column]
        q = sa.select(t.c.id).where(col >= since, t.c.state == state.value)
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(q)]

    def replay(self, principal: str, request_id: str, fingerprint: str) -> Task | None:
        """The task ``principal`` already submitted with ``request_id``, or None.

        Raises:
            RequestIdConflictError: the request id was used with other arguments.
        """
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(t).where(t.c.principal == principal, t.c.request_id == request_id)
            ).first()
        if row is None:
            return None
        stored = row._mapping["fingerprint"]
        if stored is not None and stored != fingerprint:
            raise RequestIdConflictError(
                f"request id {request_id!r} was already used for a task with other arguments; "
                "a request id names exactly one task — retry with the same arguments or use a "
                "new id"
            )
        return task_from_row(row._mapping)

    def overrides(self) -> dict[str, str]:
        """Stream → its scheduler spec, for streams with an override."""
        s = scheduler_table
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(s).where(s.c.stream != DEFAULT_KEY))
            return {r.stream: r.spec for r in rows}

    def stored_default(self) -> str | None:
        """The service's default scheduler spec (:meth:`set_default`), None if never stored."""
        s = scheduler_table
        with self.engine.connect() as conn:
            return conn.execute(sa.select(s.c.spec).where(s.c.stream == DEFAULT_KEY)).scalar()

    # --- writes --------------------------------------------------------------------------

    def insert(self, task: Task, *, fingerprint: str | None) -> None:
        """Store a new task (IntegrityError on a duplicate (principal, request id))."""
        with self.engine.begin() as conn:
            conn.execute(sa.insert(t).values(**task_row(task, fingerprint=fingerprint)))

    def move(
        self,
        task_id: str,
        *,
        frm: Collection[TaskState],
        to: TaskState,
        when: float | None = None,
        note: str | None = None,
        reservation_id: str | None = None,
        blocks: tuple[str, ...] | None = None,
        result: Mapping[str, Any] | None = None,
    ) -> bool:
        """Move a task from one of ``frm`` to ``to``; False when it was in none of them (a
        concurrent decision won)."""
        values: dict[str, Any] = {"state": to.value}
        if when is not None:
            values["decided_at"] = when
        if note is not None:
            values["note"] = note[:2000]
        if reservation_id is not None:
            values["reservation_id"] = reservation_id
        if blocks is not None:
            values["blocks"] = json.dumps(list(blocks))
        if result is not None:
            values["result"] = json.dumps(dict(result), sort_keys=True)
        with self.engine.begin() as conn:
            done = conn.execute(
                sa.update(t)
                .where(t.c.id == task_id, t.c.state.in_([s.value for s in frm]))
                .values(**values)
            )
        moved = bool(done.rowcount)
        if moved and to is TaskState.REFUSED:
            for hook in self.on_refused:
                hook(task_id)
        return moved

    def set_significance(self, task_id: str, values: Mapping[str, float]) -> None:
        """Store a task's significance table (a paid provider's values, once scored)."""
        text = json.dumps({str(b): float(v) for b, v in values.items()}, sort_keys=True)
        with self.engine.begin() as conn:
            conn.execute(sa.update(t).where(t.c.id == task_id).values(significance=text))

    def set_default(self, spec: str) -> None:
        """Store the service's default scheduler spec (replacing any)."""
        self.set_override(DEFAULT_KEY, spec)

    def set_override(self, stream: str, spec: str) -> None:
        """Store a stream's scheduler spec (replacing any). Safe when several processes store
        one at the same moment (servers starting together): an update, else an insert, and an
        insert that lost the race to another process's is retried as an update."""
        s = scheduler_table
        for attempt in range(3):
            try:
                with self.engine.begin() as conn:
                    done = conn.execute(
                        sa.update(s).where(s.c.stream == stream).values(spec=spec)
                    ).rowcount
                    if not done:
                        conn.execute(sa.insert(s).values(stream=stream, spec=spec))
                return
            except sa.exc.IntegrityError:
                if attempt == 2:
                    raise

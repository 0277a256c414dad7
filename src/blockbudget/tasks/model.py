"""The values of the task queue: what a task is, where it is, and why it waits.

A task is work (a DP query, a plain budget, a privacy-adaptive pipeline) that asks the
stream's scheduler for budget on blocks chosen by a :mod:`~blockbudget.tasks.selectors`
selector. Its life::

    waiting ──► granted (BUDGET: the reservation is the holder's)
       │    └─► running (QUERY/PIPELINE: work runs on the grant) ──► done | failed
       └─► refused | expired | cancelled

Example:
    >>> TaskState.WAITING.terminal, TaskState.DONE.terminal
    (False, True)
    >>> WorkKind("query")
    <WorkKind.QUERY: 'query'>
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from blockbudget.budget import Cost
from blockbudget.tasks.selectors import Selector

__all__ = ["Shortfall", "Task", "TaskState", "Waiting", "WorkKind"]


class WorkKind(Enum):
    """What a task's grant is for."""

    QUERY = "query"  # a blockbudget.query.Query, run on its grant by the queue
    BUDGET = "budget"  # a plain demand; the grant (a reservation) is handed to the holder
    PIPELINE = "pipeline"  # privacy-adaptive training (the pipeline family)


class TaskState(Enum):
    """Where a task is; see the module docstring for the transitions."""

    WAITING = "waiting"
    GRANTED = "granted"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    REFUSED = "refused"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether the task can change no more (GRANTED is terminal for the queue: the
        reservation is the holder's)."""
        return self not in (TaskState.WAITING, TaskState.RUNNING)


@dataclass(frozen=True)
class Task:
    """One task as stored.

    Attributes:
        id: random, 32 hex digits.
        principal: who submitted it (the holder of its grant).
        stream, context: where its budget comes from.
        kind: what the grant is for.
        selector: which blocks it may use.
        demand: what it needs on each block (QUERY: the query's priced reservation, group
            privacy included).
        work: JSON of the work (QUERY: the query's JSON form; PIPELINE: its config).
        significance: None, ``{block: p_ij}`` or a provider spec ``{"provider": ...}``.
        deadline: wall-clock seconds after which a waiting task expires (None: never).
        submitted_at: wall-clock seconds.
        state: where it is.
        reservation_id: its grant's ledger reservation (once granted).
        blocks: the blocks granted (empty before).
        decided_at: when it left ``waiting``.
        note: why (the scheduler's note, the refusal, the failure code and our message).
        result: JSON of the outcome (QUERY: the QueryResult; PIPELINE: its summary; a failure:
            ``{"code": ..., "message": ...}``).
        request_id: the submitter's idempotency key.
    """

    id: str
    principal: str
    stream: str
    context: str
    kind: WorkKind
    selector: Selector
    demand: Cost
    submitted_at: float
    state: TaskState
    work: Mapping[str, Any] | None = None
    significance: Mapping[str, Any] | None = None
    deadline: float | None = None
    reservation_id: str | None = None
    blocks: tuple[str, ...] = ()
    decided_at: float | None = None
    note: str = ""
    result: Mapping[str, Any] | None = None
    request_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The task as JSON (what the HTTP API and ``--json`` show)."""
        return {
            "id": self.id,
            "principal": self.principal,
            "stream": self.stream,
            "context": self.context,
            "kind": self.kind.value,
            "selector": self.selector.to_json(),
            "demand": self.demand.to_json(),
            "work": None if self.work is None else dict(self.work),
            "significance": None if self.significance is None else dict(self.significance),
            "deadline": self.deadline,
            "submitted_at": self.submitted_at,
            "state": self.state.value,
            "reservation_id": self.reservation_id,
            "blocks": list(self.blocks),
            "decided_at": self.decided_at,
            "note": self.note,
            "result": None if self.result is None else dict(self.result),
            "request_id": self.request_id,
        }


@dataclass(frozen=True)
class Shortfall:
    """One block a waiting task could use, and what it lacks there.

    Attributes:
        block: the block id.
        needs: the task's demand on it, exact (the stream filter's JSON form:
            ``{"epsilon", "delta"}`` decimal strings, or ``{"rdp": [...]}`` per order).
        has: what the block has left in the task's context for one more charge, in the same
            form; None when the block is retired.
        retired: whether the block is retired (it affords nothing, ever).
    """

    block: str
    needs: Mapping[str, str | list[str]]
    has: Mapping[str, str | list[str]] | None
    retired: bool = False


@dataclass(frozen=True)
class Waiting:
    """Why a task waits (or, once decided, what was decided).

    Attributes:
        task_id: the task.
        state: its state now.
        reason: one sentence: the scheduler and what it waits for.
        shortfall: the blocks the task could use that cannot afford its demand now.
        affordable: how many of the blocks it could use can afford its demand now.
    """

    task_id: str
    state: TaskState
    reason: str
    shortfall: tuple[Shortfall, ...] = ()
    affordable: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "state": self.state.value,
            "reason": self.reason,
            "affordable": self.affordable,
            "shortfall": [
                {"block": s.block, "needs": s.needs, "has": s.has} for s in self.shortfall
            ],
        }

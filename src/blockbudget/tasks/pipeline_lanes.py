"""The runs of the PIPELINE family (see :mod:`blockbudget.tasks.pipelines`): a lane per
(stream, context), the runs in flight, and the step that turns a lane's new decisions into
ledger writes, task states and started runs, and a finished run's outcome back into the
strategy."""

from __future__ import annotations

import logging
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from blockbudget.budget import Budget
from blockbudget.errors import BlockBudgetError, InternalError
from blockbudget.outcome import Outcome
from blockbudget.scheduling import Decision, DecisionKind, Pool
from blockbudget.scheduling.sage import RunRequest, SageStrategy
from blockbudget.tasks.bridge import run_request_id
from blockbudget.tasks.model import Task, TaskState
from blockbudget.tasks.pipeline_runs import (
    RUN_TTL_SECONDS,
    RunBridge,
    RunRecord,
    TaskMoves,
    release_quietly,
)

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Mapping

    from blockbudget.platform import Platform
    from blockbudget.tasks.livepool import LivePool

log = logging.getLogger("blockbudget.tasks")


@dataclass
class _Run:
    """A run in flight."""

    task: Task
    number: int
    blocks: tuple[str, ...]
    budget: Budget
    reservation_id: str
    discard: bool = False


@dataclass
class _Lane:
    """The live pool, strategy and bridge of one (stream, context)."""

    live: LivePool
    strategy: SageStrategy
    bridge: RunBridge
    tasks: dict[str, Task] = field(default_factory=dict)
    runs: dict[str, list[RunRecord]] = field(default_factory=dict)
    earlier: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # a former leader's
    running: dict[str, _Run] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)  # cancelled or failed: no REFUSED record
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict)  # task → summary
    started: list[RunRequest] = field(default_factory=list)  # runs to start, in order
    term: str = field(default_factory=lambda: secrets.token_hex(4))  # in its runs' request ids

    @property
    def pool(self) -> Pool:
        return self.live.pool


class LaneRuns:
    """Decisions into ledger writes, runs and task states (see the module docstring);
    :class:`~blockbudget.tasks.pipelines.PipelineFamily` sets the attributes and provides
    :meth:`progress`, :meth:`cancel` and :meth:`_execute`."""

    platform: Platform
    rows: TaskMoves
    lock: AbstractContextManager[Any]
    clock: Callable[[], float]
    _closing: bool
    _workers: ThreadPoolExecutor
    _idle: threading.Condition

    def progress(self, task_id: str) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def cancel(self, task_id: str, *, note: str) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _execute(self, lane: _Lane, run: _Run) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _record(
        self,
        task_id: str,
        state: TaskState,
        *,
        note: str,
        result: Mapping[str, Any] | None = None,
    ) -> bool:
        """Move a pipeline's row (waiting ↔ running while it searches, then terminal); False
        when it is no longer waiting or running (cancelled by another process)."""
        return self.rows.move(
            task_id,
            frm=(TaskState.WAITING, TaskState.RUNNING),
            to=state,
            when=self.clock() if state.terminal else None,
            note=note,
            result=result,
        )

    def _settle(self, lane: _Lane) -> None:
        """Apply the pool's new decisions (ledger writes, then task states), then start the
        runs the strategy decided on."""
        pool, bridge = lane.pool, lane.bridge
        bridge.registered.update(b.block_id for b in pool.blocks)  # blocks come from the ledger
        start = bridge.applied
        for done, d in enumerate(pool.decisions[start:], start=start + 1):
            try:
                bridge.apply(d)
            except BlockBudgetError as exc:  # a share raced by another writer: the pool
                # over-counts it until the next reconcile (the conservative direction)
                log.warning("pipeline decision %d not applied: %s", d.seq, type(exc).__name__)
            self._on_terminal(lane, d)
            bridge.applied = done
        started, lane.started[:] = list(lane.started), []
        for request in started:
            if pool.is_pending(request.task_id) and request.task_id not in lane.stopped:
                self._start(lane, request)

    def _on_terminal(self, lane: _Lane, d: Decision) -> None:
        task = lane.tasks.get(d.task_id)
        if task is None or d.kind not in _TERMINAL:
            return
        progress = self.progress(task.id)
        if d.kind is DecisionKind.GRANT:
            summary = lane.accepted.pop(task.id, progress)
            self._record(task.id, TaskState.DONE, note=d.note, result=summary)
        elif task.id not in lane.stopped:
            state = TaskState.EXPIRED if d.kind is DecisionKind.EXPIRE else TaskState.REFUSED
            note = "deadline passed" if d.kind is DecisionKind.EXPIRE else d.note
            self._record(task.id, state, note=note, result=progress)
        if task.id not in lane.running:
            _forget(lane, task.id)

    def _start(self, lane: _Lane, request: RunRequest) -> None:
        """Reserve the run's one grant (its CHARGE decisions, which the bridge did not apply)
        and hand the run to a worker."""
        task_id = request.task_id
        if self._closing:  # the task stays waiting; the next leader decides its runs afresh
            return
        task = lane.tasks[task_id]
        budget = request.cost
        if not isinstance(budget, Budget):
            raise InternalError(f"a pipeline run charges an (ε, δ) budget, got {budget!r}")
        number = len(lane.earlier[task_id]) + len(lane.runs[task_id]) + 1  # ids never reused
        blocks = request.blocks
        try:
            res = self.platform.ledger.reserve(
                blocks,
                budget,
                context=task.context,
                holder=task.principal,
                ttl_seconds=RUN_TTL_SECONDS,
                request_id=run_request_id(task.principal, task.id, number, lane.term),
            )
        except BlockBudgetError as exc:  # another writer took the budget since the sync, or
            # between the release of this pipeline's shares (applied in _settle) and this
            # reservation — not one ledger transaction (docs/service.md, "Tasks"): refused
            lane.stopped.add(task_id)
            lane.pool.reject(task_id, note=f"the ledger refused run {number}")
            self._record(
                task_id,
                TaskState.REFUSED,
                note=f"the ledger refused run {number}: {type(exc).__name__}",
                result=self.progress(task_id),
            )
            self._settle(lane)
            return
        run = _Run(task, number, blocks, budget, res.id)
        moved = self._record(
            task_id,
            TaskState.RUNNING,
            note=f"run {number}",
            result={**self.progress(task_id), "grant": res.id},
        )
        if not moved:  # cancelled by another process meanwhile: stop, give the grant back
            release_quietly(self.platform.ledger, res.id)
            self.cancel(task_id, note="cancelled")
            return
        try:
            self._workers.submit(self._execute, lane, run)
        except RuntimeError:  # the workers were shut down: give the grant back, wait
            release_quietly(self.platform.ledger, res.id)
            self._record(task_id, TaskState.WAITING, note=f"run {number} not started")
            return
        lane.running[task_id] = run

    def _finish(
        self,
        lane: _Lane,
        run: _Run,
        outcome: Outcome | None,
        summary: dict[str, Any] | None,
        failure: dict[str, str] | None,
    ) -> None:
        task_id = run.task.id
        lane.running.pop(task_id, None)
        discarded = run.discard or not lane.pool.is_pending(task_id)
        label = "DISCARDED" if discarded else ("FAILED" if outcome is None else outcome.name)
        lane.runs[task_id].append(
            RunRecord(
                run.number,
                run.budget.epsilon,
                run.budget.delta,
                run.blocks,
                run.reservation_id,
                label,
            )
        )
        if discarded:
            log.info(
                "pipeline task %s: run %d ended after the task was stopped; its result "
                "is discarded",
                task_id,
                run.number,
            )
            if not lane.pool.is_pending(task_id):
                for state in (TaskState.CANCELLED, TaskState.EXPIRED):  # the run, on its row
                    self.rows.move(task_id, frm=(state,), to=state, result=self.progress(task_id))
                _forget(lane, task_id)
            return
        if outcome is None:
            lane.stopped.add(task_id)
            lane.pool.reject(task_id, note="failed")
            self._record(
                task_id,
                TaskState.FAILED,
                note=(failure or {}).get("code", ""),
                result={**self.progress(task_id), "error": failure},
            )
        else:
            if outcome is Outcome.ACCEPT:
                lane.accepted[task_id] = {**self.progress(task_id), **(summary or {})}
            lane.strategy.report(lane.pool, task_id, outcome)
        self._settle(lane)
        if lane.pool.is_pending(task_id) and task_id not in lane.running:
            # it waits for blocks or budget (a next run would have been recorded RUNNING)
            note = f"run {run.number}: {label}; waiting for blocks or budget"
            self._record(task_id, TaskState.WAITING, note=note, result=self.progress(task_id))


def _forget(lane: _Lane, task_id: str) -> None:
    """A task that left the lane for good (its row says how it ended)."""
    for table in (lane.tasks, lane.runs, lane.earlier, lane.accepted, lane.strategy.profiles):
        table.pop(task_id, None)


_TERMINAL = frozenset({DecisionKind.GRANT, DecisionKind.REJECT, DecisionKind.EXPIRE})

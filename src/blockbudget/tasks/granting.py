"""The grant phase of the task queue's leader (:class:`~blockbudget.tasks.decider.Decider`):
a pool's new decisions applied to the ledger and the task rows in order (a grant is one
reservation; a refusal or an expiry moves the row), and granted work run in a worker thread
on exactly its reservation, what it leaves unspent released after."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from blockbudget.errors import BlockBudgetError, ReservationError
from blockbudget.failures import failure_of, new_reference
from blockbudget.ledger import ReservationState
from blockbudget.scheduling import Decision, DecisionKind
from blockbudget.tasks.bridge import GrantBridge
from blockbudget.tasks.families import WorkFamily
from blockbudget.tasks.guards import INSECURE, TRANSIENT
from blockbudget.tasks.livepool import LEDGER_TASK, LivePool
from blockbudget.tasks.model import Task, TaskState, WorkKind
from blockbudget.tasks.rows import TaskRows
from blockbudget.tasks.schedspec import SchedulerSpec

if TYPE_CHECKING:
    from blockbudget.budget import Cost
    from blockbudget.ledger import Ledger
    from blockbudget.platform import Platform

log = logging.getLogger("blockbudget.tasks")

_WAITING = (TaskState.WAITING,)


@dataclass
class _Run:
    family: str
    spec: SchedulerSpec
    live: LivePool
    bridge: GrantBridge
    last_tick: float
    tasks: dict[str, Task] = field(default_factory=dict)
    deadlines: list[tuple[float, str]] = field(default_factory=list)
    closing: bool = False
    #: waiting tasks not in the pool yet: fewer blocks they may use exist than they need
    #: (:func:`~blockbudget.tasks.binding.blocks_wanting`); they enter once enough exist
    unbound: dict[str, Task] = field(default_factory=dict)
    #: the stream's known-id bound when its unbound tasks last tried to enter (a user stream:
    #: a new maximum-id release offers more blocks); a poll retries them only when it changed
    known_seen: object = field(default=None, compare=False)
    #: whether :attr:`known_seen` was read yet (a new run, or a new leader, retries once)
    known_read: bool = False


class GrantPhase:
    """Decisions applied, grants recorded, work run (see the module docstring); the
    :class:`~blockbudget.tasks.decider.Decider` sets the attributes and runs queries."""

    platform: Platform
    clock: Callable[[], float]
    rows: TaskRows
    ledger: Ledger
    access_check: Callable[[Task], str | None] | None
    _where: dict[str, tuple[str, str, str]]
    _families: dict[WorkKind, WorkFamily]
    _executor: ThreadPoolExecutor

    def _run_query(self, task: Task) -> Mapping[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- decisions ----------------------------------------------------------------------

    def _apply(self, run: _Run) -> None:
        start = run.bridge.applied
        for done, d in enumerate(run.live.pool.decisions[start:], start=start + 1):
            try:
                self._apply_one(run, d)
            except TRANSIENT:
                raise  # the database is unreachable: the same decision is retried next pump
            except Exception as exc:  # a bug applying one decision must not jam the stream
                self._failed_decision(run, d, exc)
            run.bridge.applied = done

    def _failed_decision(self, run: _Run, d: Decision, exc: Exception) -> None:
        """Applying decision ``d`` raised something other than a ledger refusal: its task is
        refused with our words only (a reference to the log), and the stream goes on."""
        ref = new_reference()
        log.error(
            "applying decision %s of task %s failed (reference %s)",
            d.seq,
            d.task_id,
            ref,
            exc_info=exc,
        )
        run.bridge.charged.pop(d.task_id, None)
        if run.live.pool.is_pending(d.task_id):
            run.live.pool.reject(d.task_id, note=f"internal error (reference {ref})")
        self._forget(run, d.task_id)
        self._refuse(d.task_id, d.time, f"internal error applying its grant (reference {ref})")

    def _apply_one(self, run: _Run, d: Decision) -> None:
        if d.task_id == LEDGER_TASK or d.kind is DecisionKind.CREDIT:
            return
        if d.kind is DecisionKind.GRANT and d.task_id not in run.tasks:
            run.bridge.charged.pop(d.task_id, None)  # refused or cancelled meanwhile: no grant
            return
        if d.kind is DecisionKind.GRANT and self._lost(run.tasks[d.task_id], d.time, _WAITING):
            run.bridge.charged.pop(d.task_id, None)  # nothing reserved, nothing charged
            self._forget(run, d.task_id)
            return
        try:
            run.bridge.apply(d)
        except TRANSIENT:
            raise  # e.g. budgets refused until `db reconcile`: retried, not refused
        except BlockBudgetError as exc:  # a refusal of the ledger (not a lost connection)
            run.bridge.charged.pop(d.task_id, None)
            pool = run.live.pool
            if d.kind is DecisionKind.GRANT or not pool.is_pending(d.task_id):
                note = f"the ledger refused the grant: {type(exc).__name__}: {exc}"
                self._forget(run, d.task_id)
                self._refuse(d.task_id, d.time, note)
            else:
                pool.reject(d.task_id, note=f"the ledger refused a hold: {exc}")
            return
        if d.kind is DecisionKind.GRANT:
            rid, blocks, cost = run.bridge.granted.pop(d.task_id)
            task = self._forget(run, d.task_id)
            if task is not None:
                self._granted(task, rid, blocks, d.time, d.note, cost=cost)
        elif d.kind in (DecisionKind.REJECT, DecisionKind.EXPIRE):
            self._forget(run, d.task_id)
            if run.closing:
                return
            if d.kind is DecisionKind.REJECT:
                self._refuse(d.task_id, d.time, d.note or "rejected by the scheduler")
            else:
                self.rows.move(
                    d.task_id, frm=_WAITING, to=TaskState.EXPIRED, when=d.time, note="deadline"
                )

    def _lost(self, task: Task, when: float, frm: tuple[TaskState, ...]) -> bool:
        """Cancel ``task`` (from ``frm``) if its principal lost access to it since it was
        submitted (:attr:`access_check`); whether it did."""
        reason = None if self.access_check is None else self.access_check(task)
        if reason is None:
            return False
        note = f"cancelled: {reason}; nothing was charged"
        self.rows.move(task.id, frm=frm, to=TaskState.CANCELLED, when=when, note=note)
        return True

    def _forget(self, run: _Run, task_id: str) -> Task | None:
        self._where.pop(task_id, None)
        run.unbound.pop(task_id, None)
        return run.tasks.pop(task_id, None)

    def _refuse(self, task_id: str, when: float, note: str) -> None:
        self.rows.move(task_id, frm=_WAITING, to=TaskState.REFUSED, when=when, note=note)

    def _granted(
        self,
        task: Task,
        rid: str,
        blocks: tuple[str, ...],
        when: float,
        note: str,
        *,
        cost: Cost | None = None,
    ) -> None:
        """Record a grant; a budget task's result says what it was granted on each block (a
        partial grant of seed 000's Alg. 3 holds less than the demand)."""
        to = TaskState.GRANTED if task.kind is WorkKind.BUDGET else TaskState.RUNNING
        granted = None
        if task.kind is WorkKind.BUDGET and cost is not None:
            row = self.rows.get(task.id)  # the row, not the pool's (older) copy of the task
            granted = {
                **((row.result if row is not None else None) or {}),
                "granted": cost.to_json(),
            }
        moved = self.rows.move(
            task.id,
            frm=_WAITING,
            to=to,
            when=when,
            note=note or "granted",
            reservation_id=rid,
            blocks=blocks,
            result=granted,
        )
        if not moved:  # cancelled while the leader was granting: give the grant back
            self._release(rid)
            return
        if to is TaskState.RUNNING:
            self._start(task.id)

    def _release(self, rid: str) -> None:
        with contextlib.suppress(ReservationError):  # closed or expired: nothing to return
            self.ledger.release(rid)

    # --- work ---------------------------------------------------------------------------

    def _start(self, task_id: str) -> None:
        self._executor.submit(self._work, task_id)

    def _work(self, task_id: str) -> None:
        """Run a granted task's work (a worker thread, outside the scheduler lock)."""
        task = self.rows.get(task_id)
        if task is None or task.state is not TaskState.RUNNING or task.reservation_id is None:
            return
        try:
            if self._lost(task, self.clock(), (TaskState.RUNNING,)):
                return  # its grant is released below, undrawn
            family = self._families.get(task.kind)
            if task.kind is WorkKind.QUERY:
                result = self._run_query(task)
            elif family is not None:
                result = family.run(self, task)
            else:
                raise BlockBudgetError(f"no family runs {task.kind.value} work")
            if task.result is not None and INSECURE.items() <= task.result.items():
                result = {**result, **INSECURE}  # its significance was measured with a seed
            self.rows.move(
                task.id,
                frm=(TaskState.RUNNING,),
                to=TaskState.DONE,
                when=self.clock(),
                note="done",
                result=result,
            )
        except Exception as exc:  # its text may quote data: only our code and words go out
            ref = new_reference()
            log.error("task %s failed (reference %s)", task.id, ref, exc_info=exc)
            failure = failure_of(exc, what=task.kind.value, ref=ref)
            self.rows.move(
                task.id,
                frm=(TaskState.RUNNING,),
                to=TaskState.FAILED,
                when=self.clock(),
                note=f"{failure.code}: {failure.message}",
                result=failure.to_json(),
            )
        finally:
            self._release_if_open(task.reservation_id)

    def _release_if_open(self, rid: str) -> None:
        try:
            if self.ledger.reservation(rid).state is ReservationState.OPEN:
                self._release(rid)
        except BlockBudgetError:
            log.exception("could not release reservation %s", rid)

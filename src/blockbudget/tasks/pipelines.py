"""The PIPELINE family of the task queue: privacy-adaptive training scheduled by Sage.

Seed ``004_2b5d216070ae2ded.txt`` §3.2 (Sage Access Control), §3.3 (Privacy-Adaptive
Training) and §5.4 (Block/Conserve): a pipeline task is an OPEN
:class:`~blockbudget.scheduling.base.TaskSpec` whose demand is (``max_epsilon``, δ) per block,
handed to the queue's pipeline strategy (``sage-block-conserve`` by default; any ``sage-*``)
on one :class:`~blockbudget.scheduling.pool.Pool` per (stream, context) kept in step with the
ledger. The strategy decides everything about budget; this module turns its decisions into
ledger operations and real training runs:

* **Even split.** Each new block's budget is divided evenly among the waiting pipelines
  (§5.4); each share is a ledger reservation held for the pipeline (holder = the task id), made
  by the :class:`~blockbudget.scheduling.ledger_bridge.LedgerBridge` RESERVE path.
* **A run is one grant.** When the strategy starts a run (a fraction of the demand on a window
  of blocks) its CHARGE decisions become ONE ledger reservation, held by the principal, request
  id ``<principal %3A-escaped>:pipeline:<task id>:run:<n>``; the pipeline's share on those
  blocks is released in the same step, so the ledger never counts the run twice.
  :func:`~blockbudget.training.adaptive.run_iteration` trains and validates on it in a worker
  thread, outside the queue's lock; closing the grant returns what the run did not draw
  (the pool learns it from the ledger as a CREDIT).
* **Outcome.** The validator's ACCEPT / REJECT / RETRY goes back to the strategy
  (``strategy.report``): RETRY doubles ε when the pipeline's allocation allows, else its window
  (§3.3); ACCEPT ends the task ``done`` with a public summary (the DP model, its runs) and
  what it still held is split among the others; REJECT ends it ``refused``; its deadline,
  ``expired``. A run that fails ends the task ``failed`` with a stable code and our own words
  (:func:`~blockbudget.service.failures.failure_of`): no text of the exception leaves.
* **Cancel / revoke.** The pipeline's shares are released at once. A run already executing
  is let finish its draw (the noise was drawn against the ledger; stopping midway would not
  undo it); its result is discarded and its unspent budget returns when its grant closes.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from blockbudget.budget import Budget
from blockbudget.errors import BlockBudgetError, InternalError, InvalidRequestError
from blockbudget.scheduling import Decision, DecisionKind, Pool, TaskSpec
from blockbudget.scheduling.base import scheduler_classes
from blockbudget.scheduling.ledger_bridge import LedgerBridge
from blockbudget.scheduling.sage import RunRequest, SageStrategy, Usage
from blockbudget.tasks.livepool import LEDGER_TASK
from blockbudget.tasks.model import Task, TaskState
from blockbudget.tasks.pipeline_work import (
    FLIGHT_COLUMNS,
    MAX_LEVELS,
    PipelineWork,
    build_pipeline,
    check_stream,
    describe_model,
)
from blockbudget.training.validation import Outcome

if TYPE_CHECKING:  # pragma: no cover
    from blockbudget.ledger import Ledger
    from blockbudget.platform import Platform
    from blockbudget.tasks.livepool import FeedBatch, LedgerFeed, LivePool

__all__ = [
    "DEFAULT_PIPELINE_SCHEDULER",
    "PipelineFamily",
    "RunRecord",
    "TaskMoves",
    "make_strategy",
]

log = logging.getLogger("blockbudget.tasks")

#: The pipeline strategy by default: Sage's Block/Conserve (seed 004 §5.4).
DEFAULT_PIPELINE_SCHEDULER = "sage-block-conserve"


class TaskMoves(Protocol):
    """The queue's task rows (:class:`~blockbudget.tasks.rows.TaskRows`): the one write the
    family makes to them."""

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
        """Move a task from one of ``frm`` to ``to``; False when it was in none of them."""
        ...


@dataclass(frozen=True)
class RunRecord:
    """One run of a pipeline, as shown in its summary.

    Attributes:
        iteration: 1-based.
        epsilon, delta: the run's grant per block.
        blocks: the window (block ids).
        reservation_id: the run's grant in the ledger.
        outcome: ACCEPT / REJECT / RETRY, or ``"DISCARDED"`` (the task was stopped meanwhile)
            or ``"FAILED"``.
    """

    iteration: int
    epsilon: Decimal
    delta: Decimal
    blocks: tuple[str, ...]
    reservation_id: str
    outcome: str

    def to_json(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "epsilon": str(self.epsilon),
            "delta": str(self.delta),
            "blocks": len(self.blocks),
            "reservation_id": self.reservation_id,
            "outcome": self.outcome,
        }


class _RunProfile:
    """A :class:`~blockbudget.scheduling.sage.PipelineProfile` whose outcome is not known when
    the strategy asks: it answers None ("running") and the real run reports later."""

    def outcome(self, *, epsilon_fraction: float, blocks: int, partitioned: bool) -> None:
        del epsilon_fraction, blocks, partitioned
        return None


class _RunBridge(LedgerBridge):
    """The RESERVE/RELEASE path of :class:`LedgerBridge` (a pipeline's shares, held by the
    task id); CHARGE decisions are not applied — a run's charges become its one grant
    (:meth:`PipelineFamily._start`) — and the ledger task's are skipped (the ledger already
    shows them)."""

    def apply(self, decision: Decision) -> None:
        d = decision
        if d.task_id == LEDGER_TASK or d.kind is DecisionKind.CHARGE:
            return
        super().apply(d)


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
    bridge: _RunBridge
    tasks: dict[str, Task] = field(default_factory=dict)
    runs: dict[str, list[RunRecord]] = field(default_factory=dict)
    running: dict[str, _Run] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)  # cancelled or failed: no REFUSED record
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict)  # task → summary
    claimed: set[str] = field(default_factory=set)  # blocks split while pipelines waited
    started: list[RunRequest] = field(default_factory=list)  # runs to start, in order

    @property
    def pool(self) -> Pool:
        return self.live.pool


class PipelineFamily:
    """Pipeline tasks on the live ledger (see the module docstring).

    Args:
        platform: the platform.
        rows: the queue's task rows (the family moves its tasks' states there).
        lock: the queue's decision lock (re-entrant); the family's methods are called under
            it, and its workers take it to report a run's outcome.
        scheduler: the pipeline strategy's spec, ``name[:key=value,...]`` (a ``sage-*``).
        workers: threads that run iterations.
        clock: the time pools see (wall-clock seconds).
        feed: the queue's shared :class:`~blockbudget.tasks.livepool.LedgerFeed`.
        seed: seeds every run's split and noise (tests only; summaries then say
            ``secure_noise: false``); None: secure noise.
        hold_prefix: request-id prefix of the pipelines' share reservations (a new leader
            releases every open one with it).

    Raises:
        InvalidRequestError: ``scheduler`` is not one of Sage's strategies.
    """

    def __init__(
        self,
        platform: Platform,
        *,
        rows: TaskMoves,
        lock: AbstractContextManager[Any],
        scheduler: str = DEFAULT_PIPELINE_SCHEDULER,
        workers: int = 2,
        clock: Callable[[], float] = time.time,
        feed: LedgerFeed | None = None,
        seed: int | None = None,
        hold_prefix: str = "tasks-hold:",
    ) -> None:
        self.platform = platform
        self.rows = rows
        self.lock = lock
        self.hold_prefix = hold_prefix
        self.spec = scheduler
        self.clock = clock
        self.feed = feed
        self.seed = seed
        self.boot = secrets.token_hex(6)
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._where: dict[str, tuple[str, str]] = {}
        self._workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bb-pipeline")
        self._idle = threading.Condition()
        make_strategy(scheduler)  # refuse a bad spec now

    # --- the queue's calls ----------------------------------------------------------------------

    @staticmethod
    def prepare(platform: Platform, stream: str, work: PipelineWork) -> Budget:
        """Check a pipeline at submission (nothing changes) and return its demand per block.

        Raises:
            InvalidRequestError: the stream lacks the flights columns.
        """
        check_stream(platform, stream, work.kind)
        return work.demand

    def enter(self, task: Task) -> None:
        """Put a waiting pipeline task before its (stream, context)'s strategy; it may start
        a run at once on what the stream holds. A task already entered is left as it is. Call
        under the queue's lock.

        Raises:
            UnknownBlockError: the stream has no blocks yet.
        """
        if task.id in self._where:
            return
        work = PipelineWork.from_json(dict(task.work or {}))
        lane = self._lane(task.stream, task.context)
        timeout = None if task.deadline is None else max(task.deadline - task.submitted_at, 1e-9)
        spec = TaskSpec(task.id, arrival=task.submitted_at, demand=work.demand, timeout=timeout)
        pool = lane.pool
        pool.now = self.clock()
        pool.submit(spec)
        lane.tasks[task.id] = task
        lane.runs[task.id] = []
        self._where[task.id] = (task.stream, task.context)
        lane.strategy.profiles[task.id] = _RunProfile()
        if spec.deadline < pool.now:
            pool.expire_due()
        else:
            lane.strategy.on_task(pool, spec)
            _configure(lane.strategy, task.id, work)
            self._claim(lane)
            lane.strategy.on_tick(pool)
        self._settle(lane)

    def _claim(self, lane: _Lane) -> None:
        """Blocks that arrived while no pipeline waited (before the first pipeline, or between
        two) were split among nobody; they count as arriving now, split evenly among the
        pipelines waiting now (§5.4's rule, applied when the first taker appears)."""
        pool = lane.pool
        for block in pool.blocks:
            if block.block_id not in lane.claimed and block.block_id not in lane.live.retired:
                lane.claimed.add(block.block_id)
                lane.strategy.on_block(pool, block)

    def pump(self, batch: FeedBatch | None = None) -> None:
        """Sync every lane with the ledger (a new block is split among the waiting pipelines),
        expire what is due, let the strategies run and apply their decisions. ``batch``: what
        the queue's shared feed read (None: poll the family's feed). Call under the lock."""
        if batch is None and self._lanes:
            batch = self._feed().poll()
        for lane in list(self._lanes.values()):
            live = lane.live
            live.pool.now = self.clock()
            if batch is not None:
                live.absorb(batch)  # new blocks: on_block splits them (decisions)
            if lane.strategy.waiting:
                lane.claimed.update(b.block_id for b in live.pool.blocks)
            self._settle(lane)  # ...applied before the pool is compared with the ledger
            live.reconcile()
            live.pool.expire_due()
            lane.strategy.on_tick(live.pool)
            self._settle(lane)

    def cancel(self, task_id: str, *, note: str) -> bool:
        """Stop a pipeline: its shares are released now; a run in flight finishes its draw and
        its result is discarded. Returns whether the task was live here. The queue records the
        task's state (``cancelled``). Call under the queue's lock."""
        lane = self._lane_of(task_id)
        if lane is None or task_id not in lane.tasks:
            return False
        run = lane.running.get(task_id)
        if run is not None:
            run.discard = True
        lane.stopped.add(task_id)
        if lane.pool.is_pending(task_id):
            lane.pool.reject(task_id, note=note)
        self._settle(lane)
        return True

    def recover(self, task: Task) -> None:
        """A pipeline left ``running`` by a leader that died: its search state is lost, so it
        ends ``failed``; its run's grant (``task.reservation_id``) is released (what the run
        drew stays charged). Call under the queue's lock."""
        self.rows.move(
            task.id,
            frm=(TaskState.RUNNING,),
            to=TaskState.FAILED,
            when=self.clock(),
            note="pipeline_interrupted",
            result={
                **(task.result or {}),
                "error": {
                    "code": "pipeline_interrupted",
                    "message": "the process running the pipeline stopped; what its runs "
                    "drew stays charged",
                },
            },
        )
        if task.reservation_id is not None:
            _release_quietly(self.platform.ledger, task.reservation_id)

    def step_down(self) -> None:
        """This process lost the leadership: forget every lane (the new leader releases their
        shares and recovers their tasks); runs in flight finish and their results are
        discarded. Call under the queue's lock."""
        for lane in self._lanes.values():
            for run in lane.running.values():
                run.discard = True
        self._lanes.clear()
        self._where.clear()

    def progress(self, task_id: str) -> dict[str, Any]:
        """The task's runs so far (JSON)."""
        lane = self._lane_of(task_id)
        runs = [] if lane is None else lane.runs.get(task_id, [])
        return {"runs": [r.to_json() for r in runs]}

    def running(self) -> int:
        """How many runs are in flight."""
        return sum(len(lane.running) for lane in self._lanes.values())

    def wait_idle(self, timeout: float) -> bool:
        """Block until no run is in flight (tests, shutdown); False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self.running() == 0, timeout)

    def close(self) -> None:
        """Wait for the runs in flight (their outcomes are still applied) and stop."""
        self._workers.shutdown(wait=True)

    # --- lanes -----------------------------------------------------------------------------------

    def _feed(self) -> LedgerFeed:
        if self.feed is None:
            from blockbudget.tasks.livepool import LedgerFeed

            self.feed = LedgerFeed(self.platform.ledger)
        return self.feed

    def _lane(self, stream: str, context: str) -> _Lane:
        lane = self._lanes.get((stream, context))
        if lane is None:
            from blockbudget.tasks.livepool import LivePool

            strategy = make_strategy(self.spec)
            ledger = self.platform.ledger
            live = LivePool(
                ledger,
                stream=stream,
                context=context,
                scheduler=strategy,
                clock=self.clock,
                feed=self._feed(),
            )
            bridge = _RunBridge(
                ledger,
                stream=stream,
                run_id=f"{self.hold_prefix}{self.boot}:pipelines:{stream}:{context}",
                context=context,
            )
            lane = _Lane(live, strategy, bridge)
            strategy.on_run = lane.started.append
            self._lanes[(stream, context)] = lane
        return lane

    def _lane_of(self, task_id: str) -> _Lane | None:
        where = self._where.get(task_id)
        return None if where is None else self._lanes.get(where)

    # --- decisions → ledger, runs, states ------------------------------------------------------

    def _record(
        self,
        task_id: str,
        state: TaskState,
        *,
        note: str,
        result: Mapping[str, Any] | None = None,
        reservation_id: str | None = None,
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
            reservation_id=reservation_id,
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
            lane.tasks.pop(task.id, None)

    def _start(self, lane: _Lane, request: RunRequest) -> None:
        """Reserve the run's one grant (its CHARGE decisions, which the bridge did not apply)
        and hand the run to a worker."""
        task_id = request.task_id
        task = lane.tasks[task_id]
        budget = request.cost
        if not isinstance(budget, Budget):
            raise InternalError(f"a pipeline run charges an (ε, δ) budget, got {budget!r}")
        number = len(lane.runs[task_id]) + 1
        blocks = request.blocks
        principal = task.principal.replace(":", "%3A")
        try:
            res = self.platform.ledger.reserve(
                blocks,
                budget,
                context=task.context,
                holder=task.principal,
                ttl_seconds=_RUN_TTL_SECONDS,
                request_id=f"{principal}:pipeline:{task.id}:run:{number}",
            )
        except BlockBudgetError as exc:  # another writer took the budget since the sync
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
            result=self.progress(task_id),
            reservation_id=res.id,
        )
        if not moved:  # cancelled by another process meanwhile: stop, give the grant back
            _release_quietly(self.platform.ledger, res.id)
            self.cancel(task_id, note="cancelled")
            return
        lane.running[task_id] = run
        self._workers.submit(self._execute, lane, run)

    def _execute(self, lane: _Lane, run: _Run) -> None:
        """In a worker: the run on its grant, then its outcome under the queue's lock."""
        outcome, summary, failure = _run_on_grant(self.platform, run, seed=self.seed)
        try:
            with self.lock:
                self._finish(lane, run, outcome, summary, failure)
        except Exception:  # never lose a worker silently
            log.exception("pipeline task %s: applying run %d failed", run.task.id, run.number)
        finally:
            with self._idle:
                self._idle.notify_all()

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
                lane.tasks.pop(task_id, None)
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


_TERMINAL = frozenset({DecisionKind.GRANT, DecisionKind.REJECT, DecisionKind.EXPIRE})
#: A run's grant lives this long at most (a run that outlives it is refused by the ledger).
_RUN_TTL_SECONDS = 86_400.0


def make_strategy(spec: str) -> SageStrategy:
    """A fresh pipeline strategy from ``name[:key=value,...]``.

    Block/Conserve-like strategies get ``levels`` = :data:`MAX_LEVELS` unless the spec says
    otherwise, so that every task's own ε0 can be honoured (:func:`_configure`).

    Raises:
        InvalidRequestError: not one of Sage's strategies, or bad options.
    """
    from blockbudget.scheduling import get_scheduler

    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not value.strip().isdigit():
            raise InvalidRequestError(f"pipeline scheduler options are key=int, got {item!r}")
        options[key.strip()] = int(value)
    cls = scheduler_classes().get(name.strip())
    if cls is None or not issubclass(cls, SageStrategy):
        raise InvalidRequestError(f"pipelines need one of Sage's strategies (sage-*), got {spec!r}")
    if "levels" not in options and cls.usage is Usage.CONSERVE:
        options["levels"] = MAX_LEVELS
    strategy = get_scheduler(name.strip(), **options)
    assert isinstance(strategy, SageStrategy)
    return strategy


def _configure(strategy: SageStrategy, task_id: str, work: PipelineWork) -> None:
    """Per-task ε0 and first window (the strategy's own are per strategy): Block/Conserve's
    run spends 2**(level − levels) of the demand, so level = levels − k starts at
    ``max_epsilon / 2**k``."""
    state = strategy.state[task_id]
    if strategy.usage is Usage.CONSERVE:
        state.level = max(strategy.levels - work.levels, 0)
    state.window = work.min_window


def _run_on_grant(
    platform: Platform, run: _Run, *, seed: int | None
) -> tuple[Outcome | None, dict[str, Any] | None, dict[str, str] | None]:
    """One iteration on the run's grant: (outcome, public summary, None), or (None, None,
    failure) — the failure in our own words; the traceback goes to the log only."""
    from blockbudget.service.failures import failure_of, new_reference
    from blockbudget.training.adaptive import run_iteration

    work = PipelineWork.from_json(dict(run.task.work or {}))
    try:
        grant = platform.grant(
            run.reservation_id, holder=run.task.principal, columns=list(FLIGHT_COLUMNS)
        )
        with grant:
            result = run_iteration(
                grant,
                build_pipeline(work.kind, work.target),
                epsilon=run.budget.epsilon,
                delta=run.budget.delta,
                eta=work.eta_of(run.number),
                iteration=run.number,
                seed=seed,
            )
        summary = {
            "model": describe_model(result.model),
            "secure_noise": bool(result.secure_noise),
        }
        return result.validation.outcome, summary, None
    except Exception as exc:  # its text may quote a cell: only our words leave
        ref = new_reference()
        log.error(
            "pipeline task %s run %d failed (reference %s)",
            run.task.id,
            run.number,
            ref,
            exc_info=exc,
        )
        _release_quietly(platform.ledger, run.reservation_id)
        return None, None, failure_of(exc, what="pipeline", ref=ref).to_json()


def _release_quietly(ledger: Ledger, reservation_id: str) -> None:
    with contextlib.suppress(BlockBudgetError):  # the grant closed it already
        ledger.release(reservation_id)

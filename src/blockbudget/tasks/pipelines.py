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
  id ``<principal %3A-escaped>:pipeline:<task id>:run:<n>:<term>`` (a nonce per leader's lane:
  a run redone by a later leader never replays an id; that leader releases run grants a dead
  one left open before their task said RUNNING); the pipeline's share on those
  blocks is released in the same step, so the ledger never counts the run twice.
  :func:`~blockbudget.training.adaptive.run_iteration` trains and validates on it in a worker
  thread, outside the queue's lock; closing the grant returns what the run did not draw
  (the pool learns it from the ledger as a CREDIT).
* **Outcome.** The validator's ACCEPT / REJECT / RETRY goes back to the strategy
  (``strategy.report``): RETRY doubles ε when the pipeline's allocation allows, else its window
  (§3.3); ACCEPT ends the task ``done`` with a public summary (the DP model, its runs) and
  what it still held is split among the others; REJECT ends it ``refused``; its deadline,
  ``expired``. A run that fails ends the task ``failed`` with a stable code and our own words
  (:func:`~blockbudget.failures.failure_of`): no text of the exception leaves.
* **Cancel / revoke.** The pipeline's shares are released at once. A run already executing
  is let finish its draw (the noise was drawn against the ledger; stopping midway would not
  undo it); its result is discarded and its unspent budget returns when its grant closes.

How the :class:`~blockbudget.tasks.queue.TaskQueue` hosts the family. A pipeline is not one
grant handed to work (the QUERY path) but many runs decided while the task waits, each its own
grant, so the family drives its tasks itself: its own pools (the pipeline strategy is not the
stream's query scheduler; each sees the other's usage through the ledger), on the queue's lock
and task rows. The queue registers it and, as leader, calls under its lock:
:meth:`PipelineFamily.demand` / :meth:`PipelineFamily.selector` at submission,
:meth:`PipelineFamily.enter` for a waiting pipeline task (idempotent),
:meth:`PipelineFamily.pump` with the batch its shared feed read, :meth:`PipelineFamily.cancel`
when a task is cancelled or revoked (the queue moves the row), :meth:`PipelineFamily.recover`
for a task left ``running`` by a dead leader and :meth:`PipelineFamily.step_down` when it loses
the leadership; :meth:`PipelineFamily.close` on close. The family moves its rows ``waiting`` ↔
``running`` while the search goes on, then to one terminal state.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from blockbudget.budget import Budget
from blockbudget.errors import InternalError, InvalidRequestError
from blockbudget.scheduling import TaskSpec
from blockbudget.store import Unit
from blockbudget.tasks.model import Task, TaskState, WorkKind
from blockbudget.tasks.pipeline_lanes import LaneRuns, _Lane, _Run
from blockbudget.tasks.pipeline_runs import (
    RunBridge,
    RunProfile,
    RunRecord,
    TaskMoves,
    capped,
    configure,
    make_strategy,
    release_open,
    release_quietly,
    run_on_grant,
)
from blockbudget.tasks.pipeline_work import PipelineWork, check_stream
from blockbudget.tasks.selectors import AnyBlocks, Selector

if TYPE_CHECKING:  # pragma: no cover
    from blockbudget.platform import Platform
    from blockbudget.tasks.livepool import FeedBatch, LedgerFeed

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


class PipelineFamily(LaneRuns):
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
        self._worker_count = workers
        self._workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bb-pipeline")
        self._idle = threading.Condition()
        self._closing = False  # close() under way: no run starts (nor reserves its grant)
        make_strategy(scheduler)  # refuse a bad spec now

    #: the work kind it drives, and the name of its pools
    kind: WorkKind = WorkKind.PIPELINE
    family: str = "pipelines"

    # --- the queue's calls ----------------------------------------------------------------------

    def demand(self, platform: Platform, stream: str, work: Mapping[str, Any]) -> Budget:
        """Check a submitted pipeline's work JSON (nothing changes); its demand per block.

        Raises:
            InvalidRequestError: a bad work (unknown kind, ε0 above max_epsilon, ...) or a
                stream it cannot run on (see :meth:`prepare`).
        """
        return self.prepare(platform, stream, PipelineWork.from_json(dict(work)))

    def selector(self, work: Mapping[str, Any]) -> Selector:
        """Any blocks of the stream: the strategy chooses each run's window."""
        del work
        return AnyBlocks()

    @staticmethod
    def prepare(platform: Platform, stream: str, work: PipelineWork) -> Budget:
        """Check a pipeline at submission (nothing changes) and return its demand per block.

        Raises:
            InvalidRequestError: the stream lacks the kind's columns, or is a user-level stream
                with several rows per user (a run's grant would not cover its group cost).
        """
        check_stream(platform, stream, work.kind)
        blocking = platform.stream(stream).blocking
        if blocking.unit is Unit.USER and (blocking.rows_per_user or 1) > 1:
            raise InvalidRequestError(
                f"pipelines run on event-level streams (or one row per user); stream "
                f"{stream!r} has {blocking.rows_per_user} rows per user"
            )
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
        spec = TaskSpec(
            task.id,
            arrival=task.submitted_at,
            demand=work.demand,
            timeout=timeout,
            min_blocks=work.min_window,
        )
        pool = lane.pool
        pool.now = self.clock()
        pool.submit(spec)
        lane.tasks[task.id] = task
        lane.runs[task.id] = []
        prior = (task.result or {}).get("runs")  # runs made under a leader that stepped down
        lane.earlier[task.id] = list(prior) if isinstance(prior, list) else []
        self._where[task.id] = (task.stream, task.context)
        lane.strategy.profiles[task.id] = RunProfile()
        if spec.deadline < pool.now:
            pool.expire_due()
        else:
            lane.strategy.on_task(pool, spec)
            configure(lane.strategy, task.id, work)
            self._share_existing(lane, task.id)
            lane.strategy.on_tick(pool)
        self._settle(lane)

    def _share_existing(self, lane: _Lane, task_id: str) -> None:
        """A pipeline that enters finds blocks whose arrival split it missed: it reserves an
        even share (1/n of a block's budget, n the pipelines waiting now, at most its demand)
        of each block's budget that no one holds, halving the share (at most
        :data:`_HALVINGS` times) where it does not fit. Fresh blocks are split on arrival
        among the waiting pipelines (Sage §5.4); what others hold is never taken."""
        pool = lane.pool
        demand = pool.tasks[task_id].demand
        n = max(1, sum(1 for t in lane.strategy.waiting if pool.is_pending(t)))
        for block in pool.blocks:
            b = block.block_id
            if b in lane.live.retired or not pool.eligible(task_id, b):
                continue
            fraction = 1.0 / n
            for _ in range(_HALVINGS + 1):
                share = capped(pool.capacity_share(b, fraction), demand, pool)
                if pool.reserve(task_id, b, share, note="share of the unallocated budget"):
                    break
                fraction /= 2

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

    def run(self, queue: Any, task: Task) -> Mapping[str, Any]:
        """Not used: the family runs its tasks' iterations itself (:meth:`pump`).

        Raises:
            InternalError: always (a queue handed a pipeline grant to generic work).
        """
        raise InternalError(f"pipeline task {task.id} is driven by its family, not run once")

    def recover(self, queue: Any, task: Task) -> None:
        """A pipeline left ``running`` by a leader that died: its search state is lost, so it
        ends ``failed``; its run's grant (``result["grant"]``) is released (what the run drew
        stays charged). Call under the queue's lock."""
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
        grant = (task.result or {}).get("grant")
        if isinstance(grant, str):
            release_quietly(self.platform.ledger, grant)

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
        if lane is None:
            return {"runs": []}
        runs = [r.to_json() for r in lane.runs.get(task_id, [])]
        return {"runs": [*lane.earlier.get(task_id, []), *runs]}

    def running(self) -> int:
        """How many runs are in flight."""
        return sum(len(lane.running) for lane in self._lanes.values())

    def wait_idle(self, timeout: float) -> bool:
        """Block until no run is in flight (tests, shutdown); False on timeout."""

        def idle() -> bool:
            with self.lock:  # a finishing run may start the next one under the lock
                return self.running() == 0

        with self._idle:
            return self._idle.wait_for(idle, timeout)

    def close(self) -> None:
        """Stop: no new run starts from now on (a RETRY decided meanwhile reserves nothing),
        the runs in flight finish (their outcomes are still applied; a task whose search goes
        on is left ``waiting``), then the shares this family holds are released and its lanes
        forgotten, so the next leader — this process or another — takes the tasks over from
        their rows. The family may run again afterwards, with fresh worker threads."""
        with self.lock:
            self._closing = True
        try:
            self._workers.shutdown(wait=True)
            with self.lock:
                lanes = self._lanes.values()  # their shares; a run's grant closes with it
                release_open(self.platform.ledger, tuple(f"{x.bridge.run_id}:" for x in lanes))
                self._lanes.clear()
                self._where.clear()
        finally:
            self._workers = ThreadPoolExecutor(
                max_workers=self._worker_count, thread_name_prefix="bb-pipeline"
            )
            with self.lock:
                self._closing = False

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
                accounting=self.platform.stream(stream).accounting,
            )
            bridge = RunBridge(
                ledger,
                stream=stream,
                # a fresh nonce per lane: a lane built again (leadership lost and regained)
                # restarts its decision numbers; its request ids must not replay the old ones
                run_id=f"{self.hold_prefix}{self.boot}:{secrets.token_hex(6)}:pipelines:{stream}:{context}",
                context=context,
            )
            lane = _Lane(live, strategy, bridge)
            strategy.on_run = lane.started.append
            self._lanes[(stream, context)] = lane
        return lane

    def _lane_of(self, task_id: str) -> _Lane | None:
        where = self._where.get(task_id)
        return None if where is None else self._lanes.get(where)

    def _execute(self, lane: _Lane, run: _Run) -> None:
        """In a worker: the run on its grant, then its outcome under the queue's lock."""
        outcome, summary, failure = run_on_grant(
            self.platform,
            run.task,
            run.reservation_id,
            run.budget,
            number=run.number,
            seed=self.seed,
        )
        try:
            with self.lock:
                self._finish(lane, run, outcome, summary, failure)
        except Exception:  # never lose a worker silently
            log.exception("pipeline task %s: applying run %d failed", run.task.id, run.number)
        finally:
            with self._idle:
                self._idle.notify_all()


#: How often an entering pipeline halves its share of a block's unallocated budget.
_HALVINGS = 6

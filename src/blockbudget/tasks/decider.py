"""The leader's side of the task queue: pools, decisions, grants, work, recovery.

Only the process that holds the leadership runs this (:class:`Decider`); every process stores
submissions and reads tasks. Per (family, stream, context) the leader keeps a
:class:`~blockbudget.tasks.livepool.LivePool` (one scheduler on the live ledger) and a
:class:`~blockbudget.tasks.bridge.GrantBridge`. A pump:

1. reads the audit log since the last pump once (:class:`~blockbudget.tasks.livepool.LedgerFeed`)
   and syncs every pool to it (new blocks, usage beyond or below the pool);
2. every ``poll_seconds``, looks for tasks submitted or cancelled by other processes (ranges
   of indexed columns) and for changed per-stream scheduler overrides;
3. expires due tasks (a deadline heap: nothing is scanned while none is due), ticks the
   schedulers whose interval passed, lets every scheduler settle (``on_settle``: every task
   entered so far is in its pool) and applies the pools' new decisions to the ledger. A task
   that needs more blocks than exist for it waits outside its pool, unbound
   (:func:`~blockbudget.tasks.binding.blocks_wanting`): it expires at its deadline, and tries to
   enter again when blocks arrive and at every poll (a new maximum-id release).

Decisions are applied in order and the count of applied ones moves past a decision only once
its ledger write and its task's row committed (the cache rule): a failed write is retried at
the next pump, and every write is idempotent (request ids derived from the run and decision).

A grant is one reservation (:mod:`~blockbudget.tasks.bridge`). The row moves
``waiting → granted`` (BUDGET) or ``→ running`` (QUERY, PIPELINE) only if it is still
waiting; if a cancel won the race, the fresh reservation is released at once. Work runs in a
thread pool, outside the scheduler lock, on exactly that reservation; what it leaves unspent is
released after, and the ledger's release comes back to the pool as a credit at the next sync.

Taking over (a new leader, or the first pump): open reservations of dead leaders' pool holds
are released; a waiting task whose grant reservation exists (the leader died between the
reservation and the row) adopts it; ``running`` tasks are recovered (QUERY: run again on its
open reservation if nothing was drawn from it — a draw is at most once, because the
reservation holds one query's cost — else failed and released; other kinds: the family's
``recover``, by default failed and released); then every waiting task enters its pool. This
reads every open reservation and every waiting task once.

Costs per pump: the new audit events, the touched blocks' rows, the decisions made. O(n) in
the waiting tasks: scheduler callbacks that scan their queues (DPF and DPack re-examine
waiting tasks when budget unlocks, round-robin every tick), and ``Pool.expire_due`` when some
task is due.
"""

from __future__ import annotations

import functools
import heapq
import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from blockbudget.errors import BlockBudgetError, InvalidRequestError
from blockbudget.failures import LEDGER_REFUSALS, failure_of, new_reference
from blockbudget.ledger import Reservation, ReservationState
from blockbudget.scheduling import TaskShape
from blockbudget.tasks.binding import (
    blocks_in_range,
    blocks_wanting,
    resolved_blocks,
    task_spec,
)
from blockbudget.tasks.bridge import HOLD_PREFIX, GrantBridge, grant_request_id, run_task_of
from blockbudget.tasks.families import DrivenFamily as DrivenFamily
from blockbudget.tasks.families import WorkFamily as WorkFamily
from blockbudget.tasks.families import _driven
from blockbudget.tasks.granting import _WAITING, GrantPhase, _Run
from blockbudget.tasks.guards import INSECURE, durable_overhead
from blockbudget.tasks.livepool import FeedBatch, LedgerFeed, LivePool
from blockbudget.tasks.model import Task, TaskState, WorkKind
from blockbudget.tasks.rows import TaskRows
from blockbudget.tasks.schedspec import SchedulerSpec
from blockbudget.tasks.scoring import Significance, check_comparison, significance_of
from blockbudget.tasks.selectors import InRange
from blockbudget.userids import known_bound, known_filter

if TYPE_CHECKING:
    from blockbudget.mechanisms.noise import NoiseSource
    from blockbudget.platform import Platform
    from blockbudget.tasks.leader import Leadership

__all__ = ["Decider", "DrivenFamily", "WorkFamily"]

log = logging.getLogger("blockbudget.tasks")

#: Clock skew tolerated between processes when looking for their submissions and cancels.
SKEW_SECONDS = 120.0


class Decider(GrantPhase):
    """The leader's machinery (see the module docstring); :class:`TaskQueue` is its face."""

    platform: Platform
    clock: Callable[[], float]
    noise: NoiseSource | None
    grant_ttl_seconds: float
    leadership: Leadership
    rows: TaskRows
    poll_seconds: float = 1.0
    #: why a task's principal may no longer use it (None: it may), asked before a task is
    #: granted and before its work runs; the service sets it (its access rules live there).
    access_check: Callable[[Task], str | None] | None = None

    def _init_decider(self, workers: int) -> None:
        self.ledger = self.platform.ledger
        self._lock = threading.RLock()
        self._runs: dict[tuple[str, str, str], _Run] = {}
        self._where: dict[str, tuple[str, str, str]] = {}
        self._feed: LedgerFeed | None = None
        self._unpumped: FeedBatch | None = None  # read by a submission, not yet by a pump
        self._leading = False
        self._term = ""
        self._last_poll = -float("inf")
        self._families: dict[WorkKind, WorkFamily] = {}
        self._specs: dict[str, str] = {}
        self._workers = max(1, workers)
        self._executor = self._new_executor()

    # --- to be provided by the queue --------------------------------------------------------

    def _spec_for(self, family: str, stream: str) -> SchedulerSpec:  # pragma: no cover
        raise NotImplementedError

    def _run_query(self, task: Task) -> Mapping[str, Any]:  # pragma: no cover
        raise NotImplementedError

    def _refresh_default(self) -> bool:
        """Re-read the default scheduler where it is stored; True if it changed."""
        return False

    def _new_executor(self) -> ThreadPoolExecutor:
        """The worker threads that run granted work (threads start on first use)."""
        return ThreadPoolExecutor(self._workers, thread_name_prefix="tasks")

    # --- pump ---------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        """Whether this process decided in its last pump round (it held the leadership); no
        database access, for a monitoring gauge."""
        return self._leading

    def pump(self) -> None:
        """Decide, if this process holds the leadership (see the module docstring)."""
        if not self.leadership.try_acquire():
            if self._leading:
                self._step_down()
            return
        if self.platform.budget_refusal() is not None:
            # The database is behind its audit log's high-water mark: nothing is granted or
            # refused until `blockbudget db reconcile`; tasks wait.
            return
        with self._lock:
            if not self._leading:
                self._take_over()
            now = self.clock()
            batch = self._poll_feed()
            # kept until every pool has read it: a pump that fails (a database hiccup) leaves
            # it to the next, else its new blocks and retirements never reach the pools
            # (pools and lanes absorb a batch twice with no change)
            self._unpumped = batch
            polled = now - self._last_poll >= self.poll_seconds
            if polled:
                self._poll_table(now)
            for run in list(self._runs.values()):
                pool = run.live.pool
                self._catch_up(run, batch, now, polled=polled)
                interval = run.live.scheduler.tick_interval
                if interval is not None and now - run.last_tick >= interval:
                    run.last_tick = now
                    self._guard(run, run.live.scheduler.on_tick, pool)
                # every task this pump entered is in: decisions that depend on who else
                # waits (DPF's lending) are safe now (a take-over enters tasks one by one)
                self._guard(run, run.live.scheduler.on_settle, pool)
                self._apply(run)
            for fam in self._families.values():
                if (driven := _driven(fam)) is not None:
                    driven.pump(batch)
            self._unpumped = None

    def _catch_up(self, run: _Run, batch: FeedBatch, now: float, *, polled: bool) -> None:
        """Bring a pool to the ledger: due tasks expire, the feed's batch is absorbed (new
        blocks, retirements), unbound tasks retry (new blocks; ``polled``: a new maximum-id
        release too) and usage is reconciled once every decision is applied."""
        pool = run.live.pool
        pool.now = now
        # Deadlines first: budget that came back since the last pump (a credit, a new block)
        # must not serve a task whose deadline has passed.
        if run.deadlines and run.deadlines[0][0] < now:
            while run.deadlines and run.deadlines[0][0] < now:
                heapq.heappop(run.deadlines)
            pool.expire_due()
            self._apply(run)
        run.live.absorb(batch)
        self._apply(run)
        if run.unbound:
            self._retry_unbound(run, now, added=run.live.stream in batch.added, polled=polled)
        if run.bridge.applied == len(pool.decisions):
            run.live.reconcile()

    def _catch_up_all(self) -> None:
        """Bring every pool to the ledger now (as a pump does, under the lock, as leader):
        a submission its scheduler may grant at once is decided on what the ledger holds, not
        on a pool that has not seen a direct charge made since the last pump. The batch read
        is kept for the next pump too (the driven families read it there; pools absorb a
        batch twice with no change)."""
        assert self._feed is not None
        now = self.clock()
        batch = self._feed.poll()
        if self._unpumped is None:
            self._unpumped = FeedBatch(tip=batch.tip)
        self._unpumped.merge(batch)
        for run in list(self._runs.values()):
            self._catch_up(run, batch, now, polled=False)

    def _poll_feed(self) -> FeedBatch:
        """The feed's events since the last pump (those a submission read included)."""
        assert self._feed is not None
        batch = self._feed.poll()
        if self._unpumped is not None:
            self._unpumped.merge(batch)
            batch, self._unpumped = self._unpumped, None
        return batch

    def _step_down(self) -> None:
        with self._lock:
            for fam in self._families.values():
                if (driven := _driven(fam)) is not None:
                    driven.step_down()
            self._runs.clear()
            self._where.clear()
            self._leading = False

    # --- pools --------------------------------------------------------------------------

    def _family_of(self, kind: WorkKind) -> str:
        fam = self._families.get(kind)
        return "tasks" if fam is None else fam.family

    def _run(self, family: str, stream: str, context: str) -> _Run:
        key = (family, stream, context)
        run = self._runs.get(key)
        if run is not None:
            return run
        spec = self._spec_for(family, stream)
        scheduler = spec.build(noise=self.noise)
        assert self._feed is not None
        live = LivePool(
            self.ledger,
            stream=stream,
            context=context,
            scheduler=scheduler,
            clock=self.clock,
            feed=self._feed,
            accounting=self.platform.stream(stream).accounting,
        )

        def holder_of(task_id: str) -> tuple[str, str]:
            task = self._runs[key].tasks[task_id]
            return task.principal, grant_request_id(task.principal, task.id)

        bridge = GrantBridge(
            self.ledger,
            stream=stream,
            context=context,
            # a fresh nonce per pool: a rebuilt pool restarts its decision numbers, and reusing
            # an earlier pool's request ids would make the ledger answer its writes as replays
            run_id=f"{HOLD_PREFIX}{self._term}:{secrets.token_hex(6)}:{family}:{stream}:{context}",
            holder_of=holder_of,
            grant_ttl_seconds=self.grant_ttl_seconds,
            rule=live.pool.rule,
        )
        live.pool.overhead_sink = functools.partial(durable_overhead, bridge)
        run = _Run(family, spec, live, bridge, last_tick=self.clock())
        self._runs[key] = run
        self._apply(run)  # decisions on_block made for existing blocks (none hold tasks)
        return run

    def _enter(self, task: Task) -> None:
        """Put a waiting task in front of its scheduler (under the lock, as leader)."""
        if task.id in self._where:
            return
        now = self.clock()
        if (driven := _driven(self._families.get(task.kind))) is not None:
            try:
                driven.enter(task)
            except BlockBudgetError as exc:
                self._refuse(task.id, now, f"could not enter the scheduler: {exc}")
            return
        try:
            run = self._run(self._family_of(task.kind), task.stream, task.context)
            in_range = (
                blocks_in_range(self.platform, task.stream, task.selector)
                if isinstance(task.selector, InRange)
                else None
            )
            timeout = (
                None if task.deadline is None else max(task.deadline - task.submitted_at, 1e-9)
            )
            check_comparison(  # again: the stream's scheduler may have changed since
                run.live.scheduler,
                task.significance,
                demand=task.demand,
                block_filter=self.platform.filter(task.stream),
            )
            known = known_filter(self.platform, task.stream)  # user streams: Sage §4.4
            resolved = resolved_blocks(task, run.live, in_range, known)
            if blocks_wanting(task, run.live, resolved, named_only=run.spec.named_only):
                run.unbound[task.id] = task  # never bound to too few: it waits for blocks
                self._where[task.id] = (run.family, task.stream, task.context)
                return
            significance = self._scored(task, resolved)
            spec = task_spec(
                task,
                run.live,
                named_only=run.spec.named_only,
                takes_named=TaskShape.NAMED in run.spec.cls.shapes,
                in_range=in_range,
                timeout=timeout,
                significance=significance,
                known=known,
            )
            pool = run.live.pool
            pool.now = now
            pool.submit(spec)  # checks before it changes anything
        except BlockBudgetError as exc:
            self._refuse(task.id, now, f"could not enter the scheduler: {exc}")
            return
        run.tasks[task.id] = task
        self._where[task.id] = (run.family, task.stream, task.context)
        if spec.deadline < float("inf"):
            heapq.heappush(run.deadlines, (spec.deadline, task.id))
        if spec.deadline < now:
            pool.expire_due()
        else:
            self._guard(run, run.live.scheduler.on_task, pool, spec, task_id=task.id)
        self._apply(run)

    def _retry_unbound(self, run: _Run, now: float, *, added: bool, polled: bool) -> None:
        """Unbound tasks try to enter again when what they wait for may have come: new
        blocks in the feed, or (at a poll) a user stream's known-id bound that changed since
        their last try (a new maximum-id release) — one read per stream, not per task, and
        nothing when it did not change (a poll used to retry every unbound task)."""
        bound: object = None
        retry = added
        if polled and not added:
            bound = known_bound(self.platform, run.live.stream)
            retry = not run.known_read or bound != run.known_seen
        self._bind_unbound(run, now, retry=retry)
        if polled and not added:  # tried with this bound (a failed try raised above)
            run.known_seen, run.known_read = bound, True

    def _bind_unbound(self, run: _Run, now: float, *, retry: bool) -> None:
        """The tasks waiting unbound for blocks (:attr:`_Run.unbound`): those past their
        deadline expire; with ``retry``, the others try to enter their scheduler again
        (in submission order). A try that fails on the database (the pump fails, the next
        one retries) leaves the task waiting unbound: nothing else would find it again (the
        table's poll looks back only :data:`SKEW_SECONDS`)."""
        for tid, task in sorted(run.unbound.items(), key=lambda kv: kv[1].submitted_at):
            if task.deadline is not None and task.deadline < now:
                self.rows.move(tid, frm=_WAITING, to=TaskState.EXPIRED, when=now, note="deadline")
                self._forget(run, tid)
            elif retry:
                self._forget(run, tid)
                try:
                    self._enter(task)
                except BaseException:
                    if tid not in self._where:  # it did not enter: it still waits unbound
                        run.unbound[tid] = task
                        self._where[tid] = (run.family, task.stream, task.context)
                    raise

    def _settle(self, task_id: str) -> None:
        """After one submission entered its pool: let its scheduler settle (every other
        waiting task is already there) and apply what it decided, so that a task its
        scheduler grants at once is granted when its submission returns."""
        key = self._where.get(task_id)
        run = None if key is None else self._runs.get(key)
        if run is None:
            return
        self._guard(run, run.live.scheduler.on_settle, run.live.pool)
        self._apply(run)

    def _scored(self, task: Task, blocks: list[str] | None) -> Significance:
        """The task's significance as its scheduler reads it (:mod:`~.scoring`); a provider's
        failure while reading data refuses the task with our words only."""

        def store(values: Mapping[str, float], secure: bool) -> None:
            self.rows.set_significance(task.id, values)
            if not secure:  # a seeded measurement is not DP: the task says so from now on
                self.rows.move(task.id, frm=_WAITING, to=TaskState.WAITING, result=INSECURE)

        try:
            return significance_of(
                self.platform, task, blocks=blocks, noise=self.noise, store=store
            )
        except LEDGER_REFUSALS:
            raise
        except Exception as exc:
            ref = new_reference()
            log.error("significance of task %s failed (reference %s)", task.id, ref, exc_info=exc)
            failure = failure_of(exc, what="significance", ref=ref)
            raise InvalidRequestError(f"{failure.code}: {failure.message}") from None

    def _guard(
        self, run: _Run, step: Callable[..., None], *args: Any, task_id: str | None = None
    ) -> None:
        """Run a scheduler callback; a scheduler's refusal of a task rejects that task."""
        try:
            step(*args)
        except BlockBudgetError as exc:
            log.error("scheduler %s failed (%s)", run.spec.name, type(exc).__name__, exc_info=exc)
            pool = run.live.pool
            if task_id is not None and pool.is_pending(task_id):
                pool.reject(task_id, note=f"the scheduler could not serve it: {exc}")

    # --- other processes ----------------------------------------------------------------

    def _poll_table(self, now: float) -> None:
        """Submissions and cancels by other processes; changed scheduler overrides."""
        since = self._last_poll - SKEW_SECONDS
        self._last_poll = now
        fresh = [
            i
            for i in self.rows.ids_since("submitted_at", since, TaskState.WAITING)
            if i not in self._where
        ]
        for task in self.rows.many(fresh):
            if task.state is TaskState.WAITING:
                self._enter(task)
        for tid in self.rows.ids_since("decided_at", since, TaskState.CANCELLED):
            self._drop_waiting(tid)
        specs = self.rows.overrides()
        if specs != self._specs:
            changed = {
                s for s in set(specs) | set(self._specs) if specs.get(s) != self._specs.get(s)
            }
            self._specs = specs
            for stream in changed:
                self._rebuild(stream)
        if self._refresh_default():  # streams without an override follow the new default
            for stream in {k[1] for k in self._runs if k[0] == "tasks"} - set(self._specs):
                self._rebuild(stream)

    def _drop_waiting(self, task_id: str) -> None:
        """A task cancelled elsewhere: out of its pool, its holds released."""
        key = self._where.get(task_id)
        if key is None:
            for fam in self._families.values():
                if (driven := _driven(fam)) is not None:
                    driven.cancel(task_id, note="cancelled")
            return
        run = self._runs[key]
        if run.live.pool.is_pending(task_id):
            run.closing = True  # its row is already cancelled
            try:
                run.live.pool.reject(task_id, note="cancelled")
                self._apply(run)
            finally:
                run.closing = False
        self._forget(run, task_id)

    def _rebuild(self, stream: str) -> None:
        """A stream's scheduler changed: its waiting tasks go to a fresh pool."""
        for key in [k for k in self._runs if k[0] == "tasks" and k[1] == stream]:
            run = self._runs[key]
            run.closing = True
            for tid in list(run.tasks):
                if run.live.pool.is_pending(tid):
                    run.live.pool.reject(tid, note="the stream's scheduler changed")
            self._apply(run)
            for tid in list(run.unbound):
                self._forget(run, tid)
            del self._runs[key]
        for task in self.rows.select(stream=stream, states=_WAITING, limit=10**9):
            if self._family_of(task.kind) == "tasks":
                self._enter(task)

    # --- taking over --------------------------------------------------------------------

    def _take_over(self) -> None:
        self._runs.clear()
        self._where.clear()
        self._term = secrets.token_hex(4)
        self._feed = LedgerFeed(self.ledger)
        self._unpumped = None
        self._specs = self.rows.overrides()
        self._refresh_default()
        self._last_poll = self.clock()
        opened = self.ledger.reservations(state=ReservationState.OPEN)
        grants: dict[str, Reservation] = {}
        for res in opened:
            rid_text = res.request_id or ""
            if rid_text.startswith(HOLD_PREFIX):
                self._release(res.id)
            elif ":queue:" in rid_text:
                grants[rid_text] = res
        for task in self.rows.select(states=(TaskState.RUNNING,), limit=10**9):
            self._recover(task)
        self._release_orphan_runs(opened)
        for task in self.rows.select(states=_WAITING, limit=10**9):
            held = grants.get(grant_request_id(task.principal, task.id))
            if held is not None:  # granted, then the leader died before the row said so
                self._granted(
                    task, held.id, held.blocks, self.clock(), "granted (recovered)", cost=held.cost
                )
            else:
                self._enter(task)
        self._leading = True

    def _release_orphan_runs(self, opened: list[Reservation]) -> None:
        """Pipeline run grants a former leader left open, of tasks not running now: it died
        between reserving a run's grant and the row saying RUNNING (or its task was just
        recovered). Released: the run never happens here (what it drew stays charged)."""
        for res in opened:
            owner = run_task_of(res.request_id)
            task = None if owner is None else self.rows.get(owner[1])
            if (
                owner is not None
                and task is not None
                and task.kind is WorkKind.PIPELINE
                and task.state is not TaskState.RUNNING
                and owner[0] == task.principal.replace(":", "%3A")
                and res.holder == task.principal
            ):
                self._release(res.id)

    def _recover(self, task: Task) -> None:
        rid = task.reservation_id
        family = self._families.get(task.kind)
        if task.kind is not WorkKind.QUERY and family is not None:
            family.recover(self, task)
            return
        if rid is not None and task.kind is WorkKind.QUERY and self._untouched(rid):
            self._start(task.id)
            return
        self.rows.move(
            task.id,
            frm=(TaskState.RUNNING,),
            to=TaskState.FAILED,
            when=self.clock(),
            note="interrupted: the process running it stopped after its grant was drawn on",
            result={
                "code": f"{task.kind.value}_interrupted",
                "message": "the process running it stopped; what it drew stays charged",
            },
        )
        if rid is not None:
            self._release_if_open(rid)

    def _untouched(self, rid: str) -> bool:
        """Whether an open reservation was never drawn on."""
        res = self.ledger.reservation(rid)
        if res.state is not ReservationState.OPEN or not res.blocks:
            return False
        f = self.platform.filter(self.ledger.state(res.blocks[0], res.context).stream)
        full = tuple(f.features(res.cost))
        return all(tuple(left) == full for _, left in res.remaining)

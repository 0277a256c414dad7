"""The scheduler queue: analysts' tasks waiting for budget, decided by one named scheduler.

An analyst submits a *task* — a demand (ε, δ) on each of some named blocks of a stream, in one
of its contexts, with optional significance per block and a deadline. The service keeps every
task in the table ``service_tasks`` of the ledger's own database (through SQLAlchemy, beside
principals and keys), so a restart loses none. The scheduler the operator names at ``serve``
time (``--scheduler``, default ``dpf-n`` with N = 10: PrivateKube's DPF, OSDI'21 §4.2) decides,
through :mod:`blockbudget.scheduling`: one :class:`~blockbudget.scheduling.Pool` and one
scheduler per (stream, context), fed the stream's ledger blocks as they appear and the tasks as
they arrive, ticked about once a second (time is wall-clock seconds).

The ledger stays the only truth (the invariants in docs/architecture.md):

* Before every event the pool is **synced to the ledger**: whatever the ledger shows used on a
  block (charged + reserved, by anyone: direct charges, DP queries, pipelines, other server
  processes) beyond what the pool already counts is charged in the pool to a synthetic,
  never-scheduled task ``__ledger__``. The pool never counts less than the ledger; budget the
  ledger frees later (a released reservation remainder) is not given back to the pool — the
  conservative direction.
* A grant is applied through :class:`QueueBridge`, a
  :class:`~blockbudget.scheduling.ledger_bridge.LedgerBridge` whose GRANT becomes **one ledger
  reservation** of the task's demand on its blocks, held by the analyst, with the idempotent
  request id ``<principal>:queue:<task id>`` (a replay after a crash reserves once). The analyst
  draws from it with ``POST /v1/reservations/{id}/charges`` and releases the rest.
* If the ledger refuses a grant the pool accepted (a charge raced in between), the task is
  **refused** with the ledger's reason and nothing charged (reserve is all-or-nothing).

States: ``waiting`` → ``granted`` (with its reservation) | ``expired`` (deadline passed) |
``refused`` (its demand exceeds a block's whole capacity, the scheduler rejected it, or the
ledger refused the grant). Several server
processes: each process schedules the tasks it accepted and those it finds waiting at start;
every process lists all of them (they are in the database).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from blockbudget.accounting import Accounting
from blockbudget.budget import UNIT, UNIT_EXPONENT, Budget, Cost, RdpCurve
from blockbudget.errors import (
    BlockBudgetError,
    InternalError,
    InvalidRequestError,
    RequestIdConflictError,
    UnknownBlockError,
)
from blockbudget.ledger import Ledger
from blockbudget.scheduling import (
    BlockSpec,
    Decision,
    DecisionKind,
    Pool,
    Scheduler,
    TaskShape,
    TaskSpec,
    get_scheduler,
)
from blockbudget.scheduling.ledger_bridge import LedgerBridge
from blockbudget.service.queue_store import (
    QueuedTask,
    TaskState,
    add_fingerprint_column,
    task_fingerprint,
    task_row,
    tasks_table,
)

__all__ = [
    "DEFAULT_SCHEDULER",
    "QueueBridge",
    "QueuedTask",
    "SchedulerQueue",
    "TaskState",
    "task_fingerprint",
]

#: ``serve``'s default: DPF with N-unlocking, each block unlocked in tenths.
DEFAULT_SCHEDULER = "dpf-n:n=10"
#: The synthetic pool task that carries budget used outside the queue.
LEDGER_TASK = "__ledger__"
#: Below this many fixed-point units a pool/ledger difference is float rounding, not usage.
_SYNC_SLACK_UNITS = 10**6


class QueueBridge(LedgerBridge):
    """A :class:`LedgerBridge` whose grants become reservations held by the analyst.

    CHARGE decisions of a task are collected; its GRANT reserves the task's demand on those
    blocks in one all-or-nothing ledger operation (request id ``<principal>:queue:<task>``).
    OVERHEAD charges, RESERVE and RELEASE go to the base class.

    Args:
        ledger, stream, context, run_id: as :class:`LedgerBridge`.
        tasks: task id → its stored task (for the principal and the demand).
        grant_ttl_seconds: how long a grant's reservation stays open.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        stream: str,
        context: str,
        run_id: str,
        tasks: Mapping[str, QueuedTask],
        grant_ttl_seconds: float,
    ) -> None:
        super().__init__(ledger, stream=stream, run_id=run_id, context=context)
        self.tasks = tasks
        self.grant_ttl_seconds = grant_ttl_seconds
        self.charged: dict[str, list[str]] = {}
        self.granted: dict[str, str] = {}  # task id → reservation id

    def apply(self, decision: Decision) -> None:
        """Apply one decision (see the class docstring).

        Raises:
            BlockBudgetError: the ledger refused (nothing of this decision happened).
        """
        d = decision
        if d.task_id == LEDGER_TASK:
            return  # budget the ledger already shows
        if d.kind is DecisionKind.CHARGE and d.block_id is not None:
            chosen = self.charged.setdefault(d.task_id, [])
            if d.block_id not in chosen:  # a decision retried after a failed write
                chosen.append(d.block_id)
        elif d.kind is DecisionKind.GRANT:
            task = self.tasks[d.task_id]
            blocks = self.charged.get(d.task_id, []) or list(task.blocks)
            res = self.ledger.reserve(
                blocks,
                task.demand,
                context=self.context,
                holder=task.principal,
                ttl_seconds=self.grant_ttl_seconds,
                # the principal's name encoded as in service.charges.scoped, so no other
                # principal's scoped request id can equal it
                request_id=f"{task.principal.replace(':', '%3A')}:queue:{task.id}",
            )
            self.charged.pop(d.task_id, None)  # only once the reservation committed
            self.granted[d.task_id] = res.id
        elif d.kind in (DecisionKind.REJECT, DecisionKind.EXPIRE):
            self.charged.pop(d.task_id, None)
        else:
            super().apply(d)


@dataclass
class _Run:
    """The pool, scheduler and bridge of one (stream, context)."""

    pool: Pool
    scheduler: Scheduler
    bridge: QueueBridge
    accounting: Accounting
    last_tick: float
    tasks: dict[str, QueuedTask] = field(default_factory=dict)


def parse_scheduler(spec: str) -> tuple[str, dict[str, Any]]:
    """``"name"`` or ``"name:key=value,key=value"`` → (name, options); numbers become numbers.

    Raises:
        InvalidRequestError: a malformed option, or a scheduler that cannot serve named tasks.
    """
    from blockbudget.scheduling import scheduler_classes

    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise InvalidRequestError(f"scheduler option {part!r} is not key=value (in {spec!r})")
        options[key] = _number(value)
    cls = scheduler_classes().get(name)
    if cls is None:
        get_scheduler(name)  # raises with the list of known schedulers
    assert cls is not None
    if TaskShape.NAMED not in cls.shapes or cls.exact:
        raise InvalidRequestError(
            f"scheduler {name!r} cannot run the service queue: it needs an online scheduler of "
            "tasks that name their blocks (e.g. dpf-n, dpf-t, dpack, fcfs, round-robin)"
        )
    get_scheduler(name, **options)  # options are checked now, not at the first task
    return name, options


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


class SchedulerQueue:
    """The service's task queue (see the module docstring); its tasks are stored as in
    :mod:`blockbudget.service.queue_store`.

    Args:
        ledger: the platform's ledger (its database also holds the tasks).
        scheduler: ``"name[:key=value,...]"`` of a registered scheduler serving named tasks.
        grant_ttl_seconds: how long a grant's reservation stays open for the analyst.
        clock: wall-clock seconds (tests pass a fake one).
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        scheduler: str = DEFAULT_SCHEDULER,
        grant_ttl_seconds: float = 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.scheduler_spec = scheduler
        self.scheduler_name, self.options = parse_scheduler(scheduler)
        self.grant_ttl_seconds = grant_ttl_seconds
        self.clock = clock
        self.boot = secrets.token_hex(4)
        self._lock = threading.RLock()
        self._runs: dict[tuple[str, str], _Run] = {}
        tasks_table.create(ledger.engine, checkfirst=True)
        add_fingerprint_column(ledger.engine)
        self._resume()

    # --- reads --------------------------------------------------------------------------------

    def task(self, task_id: str) -> QueuedTask:
        """One stored task.

        Raises:
            UnknownBlockError: no such task (404).
        """
        with self.ledger.engine.connect() as conn:
            row = conn.execute(sa.select(tasks_table).where(tasks_table.c.id == task_id)).first()
        if row is None:
            raise UnknownBlockError(f"no task {task_id!r} in the queue")
        return QueuedTask.from_row(row._mapping)

    def tasks(
        self,
        *,
        principal: str | None = None,
        stream: str | None = None,
        state: TaskState | None = None,
        limit: int = 1000,
    ) -> list[QueuedTask]:
        """Stored tasks, oldest first, optionally filtered."""
        q = sa.select(tasks_table).order_by(tasks_table.c.submitted_at, tasks_table.c.id)
        if principal is not None:
            q = q.where(tasks_table.c.principal == principal)
        if stream is not None:
            q = q.where(tasks_table.c.stream == stream)
        if state is not None:
            q = q.where(tasks_table.c.state == state.value)
        with self.ledger.engine.connect() as conn:
            rows = conn.execute(q.limit(limit)).all()
        return [QueuedTask.from_row(r._mapping) for r in rows]

    def replay(self, principal: str, request_id: str, fingerprint: str) -> QueuedTask | None:
        """The task ``principal`` already submitted with ``request_id``, or None.

        Raises:
            RequestIdConflictError: the request id was used with other arguments (409).
        """
        with self.ledger.engine.connect() as conn:
            row = conn.execute(
                sa.select(tasks_table).where(
                    tasks_table.c.principal == principal,
                    tasks_table.c.request_id == request_id,
                )
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
        return QueuedTask.from_row(row._mapping)

    # --- writes -------------------------------------------------------------------------------

    def submit(
        self,
        *,
        principal: str,
        stream: str,
        context: str,
        demand: Budget,
        blocks: Sequence[str],
        significance: Mapping[str, float] | None = None,
        timeout_seconds: float | None = None,
        request_id: str | None = None,
        fingerprint: str | None = None,
    ) -> QueuedTask:
        """Queue a task and let the scheduler see it at once; returns it as stored.

        A repeated ``request_id`` of the same principal with the same arguments returns the
        first task (no new task), also when the two submissions race (from threads or server
        processes): the database's unique (principal, request id) decides, and the loser reads
        the winner's task back.

        Args:
            fingerprint: :func:`task_fingerprint` of the arguments as the caller gave them
                (default: of these arguments, with ``blocks`` as the selection).

        Raises:
            InvalidRequestError: duplicate blocks, significance for blocks the task does not
                name, a demand the stream's accounting cannot account (422).
            RequestIdConflictError: ``request_id`` was used with other arguments (409).
            UnknownBlockError: a block of another stream, or unknown.
        """
        if fingerprint is None:
            fingerprint = task_fingerprint(
                stream=stream,
                context=context,
                demand=demand,
                selection=list(blocks),
                significance=significance,
                timeout_seconds=timeout_seconds,
            )
        if request_id is not None:
            done = self.replay(principal, request_id, fingerprint)
            if done is not None:
                return done
        if len(set(blocks)) != len(blocks) or not blocks:
            raise InvalidRequestError(f"a task needs distinct blocks, got {list(blocks)[:10]}")
        if significance is not None and set(significance) - set(blocks):
            extra = sorted(set(significance) - set(blocks))[:5]
            raise InvalidRequestError(f"significance given for blocks the task omits: {extra}")
        now = self.clock()
        task = QueuedTask(
            id=secrets.token_hex(16),
            principal=principal,
            stream=stream,
            context=context,
            demand=demand,
            blocks=tuple(blocks),
            submitted_at=now,
            state=TaskState.WAITING,
            significance=None if significance is None else dict(significance),
            deadline=None if timeout_seconds is None else now + timeout_seconds,
            request_id=request_id,
        )
        with self._lock:
            run = self._run(stream, context)
            self._sync(run, now)
            for b in task.blocks:
                run.pool.index(b)  # UnknownBlockError before anything is stored
            run.pool.vector(demand)  # InvalidBudgetError for a demand the rule cannot take
            too_big = [
                b
                for b in task.blocks
                if not (f := run.pool.filters[run.pool.index(b)]).fits(f.features(demand))
            ]
            try:
                with self.ledger.engine.begin() as conn:
                    conn.execute(
                        sa.insert(tasks_table).values(**task_row(task), fingerprint=fingerprint)
                    )
            except IntegrityError:
                # A concurrent submission with the same request id won (the insert rolled
                # back; nothing of this one was stored or entered): answer with its task.
                if request_id is None:
                    raise
                done = self.replay(principal, request_id, fingerprint)
                if done is None:  # pragma: no cover - the row existed a moment ago
                    raise InternalError(
                        f"task request {request_id!r} vanished after a duplicate insert"
                    ) from None
                return done
            if too_big:  # could never be granted, even on an unused block: refuse at once
                note = f"the demand {demand} exceeds the capacity of block(s) {too_big[:5]}"
                self._decide(task.id, TaskState.REFUSED, now, note=note)
            else:
                self._enter(run, task, now)
                self._apply(run)
        return self.task(task.id)

    def pump(self) -> None:
        """Advance every (stream, context): sync to the ledger, expire what is due, tick the
        scheduler when its interval passed, apply the decisions."""
        with self._lock:
            now = self.clock()
            for run in self._runs.values():
                self._sync(run, now)
                run.pool.expire_due()
                interval = run.scheduler.tick_interval
                if interval is not None and now - run.last_tick >= interval:
                    run.last_tick = now
                    run.scheduler.on_tick(run.pool)
                self._apply(run)

    # --- internals ----------------------------------------------------------------------------

    def _resume(self) -> None:
        """After a restart: put every waiting task back in front of the scheduler."""
        now = self.clock()
        for task in self.tasks(state=TaskState.WAITING, limit=1_000_000):
            with self._lock:
                try:
                    run = self._run(task.stream, task.context)
                    self._sync(run, now)
                    self._enter(run, task, now)
                    self._apply(run)
                except BlockBudgetError as exc:
                    self._decide(task.id, TaskState.REFUSED, now, note=f"on restart: {exc}")

    def _run(self, stream: str, context: str) -> _Run:
        run = self._runs.get((stream, context))
        if run is not None:
            return run
        states = self.ledger.states(stream, context)
        if not states:
            raise UnknownBlockError(f"stream {stream!r} has no blocks to schedule yet")
        accounting = states[0].accounting
        scheduler = get_scheduler(self.scheduler_name, **self.options)
        if accounting not in scheduler.accountings or accounting is Accounting.STRONG:
            raise InvalidRequestError(
                f"the queue's scheduler {self.scheduler_name!r} cannot schedule a stream under "
                f"{accounting.value} accounting"
            )
        tasks: dict[str, QueuedTask] = {}
        bridge = QueueBridge(
            self.ledger,
            stream=stream,
            context=context,
            run_id=f"queue:{self.boot}:{stream}:{context}",
            tasks=tasks,
            grant_ttl_seconds=self.grant_ttl_seconds,
        )
        pool = Pool(accounting)
        pool.now = self.clock()
        pool.submit(TaskSpec(LEDGER_TASK, arrival=pool.now, demand=_tiny(accounting)))
        run = _Run(pool, scheduler, bridge, accounting, pool.now, tasks)
        self._runs[(stream, context)] = run
        return run

    def _sync(self, run: _Run, now: float) -> None:
        """Add new ledger blocks to the pool; charge ledger usage the pool does not count."""
        pool = run.pool
        pool.now = now
        for st in self.ledger.states(run.bridge.stream, run.bridge.context):
            if st.block not in pool.block_index:
                if st.retired:
                    continue
                spec = BlockSpec(st.block, arrival=now, capacity=st.capacity)
                pool.add_block(spec)
                run.bridge.registered.add(st.block)  # already in the ledger
                run.scheduler.on_block(pool, spec)
            i = pool.index(st.block)
            counted = pool.charged[i] + pool.reserved[i]
            extra = [
                max(0, u - int(Decimal(float(c)) * UNIT))
                for u, c in zip(st.used, counted, strict=True)
            ]
            if max(extra) > _SYNC_SLACK_UNITS:
                # False (nothing changed) only where the block is full to the last unit in the
                # ledger; the ledger then refuses any grant there, which refuses the task.
                pool.charge(LEDGER_TASK, {st.block: _cost_of(extra, run.accounting)})
        self._apply(run)

    def _enter(self, run: _Run, task: QueuedTask, now: float) -> None:
        run.tasks[task.id] = task
        timeout = None if task.deadline is None else max(task.deadline - task.submitted_at, 1e-9)
        spec = TaskSpec(
            task.id,
            arrival=task.submitted_at,
            demand=task.demand,
            blocks=task.blocks,
            significance=task.significance,
            timeout=timeout,
        )
        run.pool.submit(spec)
        run.pool.now = now
        if spec.deadline < now:
            run.pool.expire_due()
        else:
            run.scheduler.on_task(run.pool, spec)

    def _apply(self, run: _Run) -> None:
        """Apply the pool's new decisions to the ledger and record terminal ones.

        The count of applied decisions moves past a decision only once its ledger write and its
        task's state have committed (the cache rule): a decision whose write failed (a lost
        database connection, say) is applied again on the next pump. Every write is idempotent
        (request ids derived from the run and the decision), so a retry never charges twice.
        """
        start = run.bridge.applied
        for done, d in enumerate(run.pool.decisions[start:], start=start + 1):
            self._apply_one(run, d)
            run.bridge.applied = done

    def _apply_one(self, run: _Run, d: Decision) -> None:
        """One decision: its ledger write, then the task's state if the decision ends it."""
        if d.task_id != LEDGER_TASK:
            try:
                run.bridge.apply(d)
            except BlockBudgetError as exc:
                self._decide(
                    d.task_id,
                    TaskState.REFUSED,
                    d.time,
                    note=f"the ledger refused the grant: {type(exc).__name__}: {exc}",
                )
                return
            if d.kind is DecisionKind.GRANT:
                rid = run.bridge.granted.pop(d.task_id)
                self._decide(d.task_id, TaskState.GRANTED, d.time, note=d.note, reservation=rid)
            elif d.kind is DecisionKind.REJECT:
                self._decide(d.task_id, TaskState.REFUSED, d.time, note=d.note or "rejected")
            elif d.kind is DecisionKind.EXPIRE:
                self._decide(d.task_id, TaskState.EXPIRED, d.time, note=d.note or "deadline")
            if d.kind in (DecisionKind.GRANT, DecisionKind.REJECT, DecisionKind.EXPIRE):
                run.tasks.pop(d.task_id, None)

    def _decide(
        self,
        task_id: str,
        state: TaskState,
        when: float,
        *,
        note: str,
        reservation: str | None = None,
    ) -> None:
        with self.ledger.engine.begin() as conn:
            conn.execute(
                sa.update(tasks_table)
                .where(tasks_table.c.id == task_id, tasks_table.c.state == "waiting")
                .values(
                    state=state.value,
                    decided_at=when,
                    note=note[:2000],
                    reservation_id=reservation,
                )
            )


def _tiny(accounting: Accounting) -> Cost:
    """The synthetic task's nominal demand (never charged as such)."""
    del accounting
    return Budget(epsilon=Decimal("1e-12"), delta=Decimal(0))


def _cost_of(units: Sequence[int], accounting: Accounting) -> Cost:
    """The cost whose filter features are exactly ``units``."""
    values = [Decimal(u).scaleb(-UNIT_EXPONENT) for u in units]
    if accounting is Accounting.BASIC:
        return Budget(epsilon=values[0], delta=values[1])
    return RdpCurve(values)

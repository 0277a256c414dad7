"""The task queue: one engine for Python, the CLI and HTTP.

Work — a DP query, a plain budget, a privacy-adaptive pipeline — is submitted as a task that
says what it needs (a selector, a demand, optional significance, a deadline). The stream's
configured scheduler (any registered online one) chooses blocks and budget on the live ledger,
and its grant is ONE ledger reservation that the work spends: a QUERY runs on it in a worker
thread and what it leaves unspent returns; a BUDGET task's reservation is handed to its
holder. See :mod:`blockbudget.tasks.decider` for how the leader decides and recovers, and
:mod:`blockbudget.tasks.binding` for how selectors meet schedulers.

A submission is checked completely before anything is stored: the stream and context exist,
the query fits the stream's schema and is priced (its demand is the priced reservation, group
privacy included), the selector resolves, the demand fits a block's whole capacity, the
scheduler supports the stream's accounting. A refused submission stores and charges nothing.

Example:
    >>> import tempfile, pandas as pd
    >>> from blockbudget import Budget
    >>> from blockbudget.platform import Platform
    >>> from blockbudget.query import Query
    >>> from blockbudget.store import Blocking
    >>> from blockbudget.mechanisms.noise import SeededNoise
    >>> from blockbudget.tasks.selectors import AnyBlocks
    >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
    >>> _ = p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
    >>> _ = p.add_context("team")
    >>> days = pd.date_range("2024-01-01", periods=3, freq="D")
    >>> _ = p.ingest("s", pd.DataFrame({"t": days, "v": [1.0, 2.0, 3.0]}))
    >>> q = TaskQueue(p, scheduler="fcfs", noise=SeededNoise(0))
    >>> task = q.submit_query("s", Query.count(epsilon=0.5), selector=AnyBlocks(2),
    ...                       context="team", principal="ana")
    >>> done = q.wait(task.id, timeout=30)
    >>> done.state.value, len(done.blocks), done.result["secure_noise"]
    ('done', 2, False)
    >>> q.close(); p.close()
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError

from blockbudget.budget import Budget, Cost
from blockbudget.errors import (
    InternalError,
    InvalidRequestError,
    TaskStateError,
    UnknownContextError,
    UnknownTaskError,
)
from blockbudget.ledger import validate_context_name
from blockbudget.tasks.binding import blocks_in_range, check_significance
from blockbudget.tasks.decider import Decider, WorkFamily
from blockbudget.tasks.guards import refuse_strong, round_down
from blockbudget.tasks.model import Task, TaskState, Waiting, WorkKind
from blockbudget.tasks.rows import TaskRows
from blockbudget.tasks.schedspec import SchedulerSpec, parse_spec
from blockbudget.tasks.scoring import check_comparison, check_provider
from blockbudget.tasks.selectors import AnyBlocks, InRange, Named, Selector
from blockbudget.tasks.table import fingerprint
from blockbudget.tasks.why import MAX_LISTED, UNBOUND_NOTE, explain
from blockbudget.userids import require_release

if TYPE_CHECKING:
    from blockbudget.mechanisms.noise import NoiseSource
    from blockbudget.platform import Platform
    from blockbudget.query import Query
    from blockbudget.tasks.leader import Leadership

__all__ = ["DEFAULT_SCHEDULER", "TaskQueue"]

log = logging.getLogger("blockbudget.tasks")

#: The default scheduler of QUERY and BUDGET tasks: DPF with N-unlocking, N = 10, lending the
#: whole block to a task no other waiting task competes with (docs/scheduling.md: a task that
#: fits is granted at once unless others wait for its blocks; under contention, plain DPF).
DEFAULT_SCHEDULER = "dpf-n:n=10,lend=1"
_LIVE = (TaskState.WAITING, TaskState.GRANTED, TaskState.RUNNING)


class TaskQueue(Decider):
    """Tasks decided by the configured schedulers on the live ledger (module docstring).

    Args:
        platform: the platform (its database holds the task table).
        scheduler: spec of the QUERY/BUDGET scheduler, ``"name[:key=value,...]"``; a stream
            may override it (:meth:`set_scheduler`). None: the service's default stored in the
            database (:meth:`store_default_scheduler`; followed when it changes), else
            :data:`DEFAULT_SCHEDULER` — so a local CLI on a server's database decides with the
            server's scheduler.
        pipeline_scheduler: spec of the pipeline family's scheduler.
        grant_ttl_seconds: how long a grant's reservation stays open.
        clock: wall-clock seconds (deadlines, scheduler time); tests pass a fake one.
        leadership: who decides among processes (default: ``leadership_for`` the ledger's
            database, name ``"tasks"``: a lock file beside a SQLite file, an advisory lock on
            PostgreSQL — the same one the service takes, so a CLI and a server coordinate).
        workers: threads that run granted work.
        noise: the noise source of queries and of schedulers' DP decisions (None: OpenDP's
            secure samplers; a seeded one makes results say ``secure_noise=False``).
        poll_seconds: how often the leader looks for other processes' submissions, cancels
            and scheduler overrides.

    Raises:
        InvalidRequestError: an unknown or offline scheduler, or bad options.
    """

    def __init__(
        self,
        platform: Platform,
        *,
        scheduler: str | None = None,
        pipeline_scheduler: str = "sage-block-conserve",
        grant_ttl_seconds: float = 86_400.0,
        clock: Callable[[], float] = time.time,
        leadership: Leadership | None = None,
        workers: int = 2,
        noise: NoiseSource | None = None,
        poll_seconds: float = 1.0,
    ) -> None:
        self.platform = platform
        self.rows = TaskRows(platform.ledger.engine)
        self._explicit = scheduler is not None
        self.default_spec = parse_spec(scheduler) if scheduler is not None else self._stored()
        self.pipeline_spec = parse_spec(pipeline_scheduler)
        if not (grant_ttl_seconds > 0 and math.isfinite(grant_ttl_seconds)):
            raise InvalidRequestError(f"grant_ttl_seconds must be > 0, got {grant_ttl_seconds!r}")
        self.grant_ttl_seconds = grant_ttl_seconds
        self.clock = clock
        if leadership is None:
            from blockbudget.tasks.leader import leadership_for

            leadership = leadership_for(platform.ledger.engine, name="tasks")
        self.leadership = leadership
        self.noise = noise
        self.poll_seconds = poll_seconds
        self._init_decider(workers)
        from blockbudget.tasks.bridge import HOLD_PREFIX
        from blockbudget.tasks.pipelines import PipelineFamily

        self.register_family(  # pipelines: Sage's strategy drives them (tasks/pipelines.py)
            PipelineFamily(
                platform,
                rows=self.rows,
                lock=self._lock,
                scheduler=pipeline_scheduler,
                clock=clock,
                workers=workers,
                hold_prefix=HOLD_PREFIX,  # a new leader releases the pipelines' shares too
            )
        )
        self.pump()

    # --- submissions --------------------------------------------------------------------

    def submit_query(
        self,
        stream: str,
        query: Query,
        *,
        selector: Selector,
        context: str,
        principal: str = "",
        significance: Mapping[str, Any] | None = None,
        deadline_seconds: float | None = None,
        request_id: str | None = None,
    ) -> Task:
        """Queue a DP query; its demand is its priced reservation on each block.

        Raises:
            UnknownBlockError / UnknownColumnError / InvalidRequestError / InvalidBudgetError:
                the query, selector, context or demand is refused (nothing stored).
            RequestIdConflictError: ``request_id`` was used with other arguments.
        """
        from blockbudget.query import check, to_dict

        work = to_dict(query)

        def demand() -> Cost:
            return check(self.platform, stream, query).reserve

        return self.submit_work(
            WorkKind.QUERY,
            stream,
            demand=demand,
            selector=selector,
            context=context,
            principal=principal,
            work=work,
            significance=significance,
            deadline_seconds=deadline_seconds,
            request_id=request_id,
        )

    def submit_budget(
        self,
        stream: str,
        demand: Cost,
        *,
        selector: Selector,
        context: str,
        principal: str = "",
        significance: Mapping[str, Any] | None = None,
        deadline_seconds: float | None = None,
        request_id: str | None = None,
    ) -> Task:
        """Queue a plain demand; once granted, its reservation is the principal's to draw on
        (``Ledger.charge(..., reservation_id=...)``) and release.

        Raises:
            As :meth:`submit_query`.
        """
        return self.submit_work(
            WorkKind.BUDGET,
            stream,
            demand=lambda: demand,
            selector=selector,
            context=context,
            principal=principal,
            work=None,
            significance=significance,
            deadline_seconds=deadline_seconds,
            request_id=request_id,
            demand_json=demand.to_json(),
        )

    def submit_pipeline(
        self,
        stream: str,
        *,
        kind: str,
        target: float,
        context: str,
        principal: str = "",
        epsilon0: float,
        max_epsilon: float,
        min_window: int,
        deadline_seconds: float | None = None,
        request_id: str | None = None,
    ) -> Task:
        """Queue a privacy-adaptive pipeline, run by the registered pipeline family under
        ``pipeline_scheduler``.

        Raises:
            InvalidRequestError: no pipeline family is registered, or the family refuses.
        """
        family = self._families.get(WorkKind.PIPELINE)
        if family is None:
            raise InvalidRequestError(
                "this queue runs no pipelines: no pipeline family is registered"
            )
        work = {
            "kind": kind,
            "target": target,
            "epsilon0": epsilon0,
            "max_epsilon": max_epsilon,
            "min_window": min_window,
        }
        return self.submit_work(
            WorkKind.PIPELINE,
            stream,
            demand=lambda: family.demand(self.platform, stream, work),
            selector=family.selector(work),
            context=context,
            principal=principal,
            work=work,
            significance=None,
            deadline_seconds=deadline_seconds,
            request_id=request_id,
        )

    def register_family(self, family: WorkFamily) -> None:
        """Run ``family.kind`` work through ``family`` under ``pipeline_scheduler`` (pools keyed
        by ``family.family``)."""
        with self._lock:
            self._families[family.kind] = family

    def submit_work(
        self,
        kind: WorkKind,
        stream: str,
        *,
        demand: Callable[[], Cost],
        selector: Selector,
        context: str,
        principal: str,
        work: Mapping[str, Any] | None,
        significance: Mapping[str, Any] | None,
        deadline_seconds: float | None,
        request_id: str | None,
        demand_json: Mapping[str, Any] | None = None,
    ) -> Task:
        """Check and store a task of any kind (the submit methods' common part; ``demand``
        prices the work and may raise to refuse it)."""
        fp = fingerprint(
            {
                "kind": kind.value,
                "stream": stream,
                "context": context,
                "work": work,
                "demand": None if demand_json is None else dict(demand_json),
                "selector": selector.to_json(),
                "significance": significance,
                "deadline_seconds": None
                if deadline_seconds is None
                else repr(float(deadline_seconds)),
            }
        )
        if request_id is not None:
            done = self.rows.replay(principal, request_id, fp)
            if done is not None:
                return done
        cost, selector, sig = self._check(kind, stream, context, demand, selector, significance)
        if deadline_seconds is not None and not (
            deadline_seconds > 0 and math.isfinite(deadline_seconds)
        ):
            raise InvalidRequestError(f"deadline_seconds must be > 0, got {deadline_seconds!r}")
        now = self.clock()
        task = Task(
            id=secrets.token_hex(16),
            principal=principal,
            stream=stream,
            context=context,
            kind=kind,
            selector=selector,
            demand=cost,
            submitted_at=now,
            state=TaskState.WAITING,
            work=None if work is None else dict(work),
            significance=sig,
            request_id=request_id,
            deadline=None if deadline_seconds is None else now + deadline_seconds,
        )
        with self._lock:
            try:
                self.rows.insert(task, fingerprint=fp)
            except IntegrityError:
                if request_id is None:
                    raise
                done = self.rows.replay(principal, request_id, fp)
                if done is None:  # pragma: no cover - the row existed a moment ago
                    raise InternalError(f"task request {request_id!r} vanished") from None
                return done
            if self._leading and self.leadership.held:
                self._catch_up_all()  # decided at once: on the ledger as it is now
                self._enter(task)
                self._settle(task.id)
        return self.task(task.id)

    def _check(
        self,
        kind: WorkKind,
        stream: str,
        context: str,
        demand: Callable[[], Cost],
        selector: Selector,
        significance: Mapping[str, Any] | None,
    ) -> tuple[Cost, Selector, Mapping[str, Any] | None]:
        spec = self.platform.stream(stream)  # UnknownBlockError for an unknown stream
        require_release(self.platform, stream)  # a user stream: no block before its DP max id
        validate_context_name(context)
        if context not in self.platform.contexts():
            raise UnknownContextError(f"unknown or closed context {context!r}")
        sched = self._spec_for(self._family_of(kind), stream)
        refuse_strong(stream, spec.accounting)
        sched.cls.check_serves(spec.accounting, stream=stream)
        cost = demand()
        f = self.platform.filter(stream)
        if not f.fits_with(f.zero(), f.features(cost)):  # InvalidBudgetError for a bad kind
            raise InvalidRequestError(
                f"the demand {cost} exceeds a block's whole capacity {spec.policy} on stream "
                f"{stream!r}: it could never be granted"
            )
        if isinstance(selector, Named):
            selector = Named(
                self.platform.select(stream, list(selector.blocks), context=context, cost=cost)
            )
        elif isinstance(selector, InRange):
            found = len(blocks_in_range(self.platform, stream, selector))
            if found < selector.k:
                raise InvalidRequestError(
                    f"the range [{selector.start}, {selector.end}) of stream {stream!r} holds "
                    f"{found} block(s); the task needs {selector.k}"
                )
        named = selector.blocks if isinstance(selector, Named) else None
        sig = check_significance(significance, blocks=named)
        check_provider(sig, bounded=not isinstance(selector, AnyBlocks))
        check_comparison(sched.build(noise=None), sig, demand=cost, block_filter=f)
        return cost, selector, sig

    # --- reads --------------------------------------------------------------------------

    def task(self, task_id: str) -> Task:
        """One task.

        Raises:
            UnknownBlockError: no such task.
        """
        task = self.rows.get(task_id)
        if task is None:
            raise UnknownTaskError(f"no task {task_id!r} in the queue")
        return task

    def tasks(
        self,
        principal: str | None = None,
        stream: str | None = None,
        state: TaskState | None = None,
        kind: WorkKind | None = None,
        limit: int = 1000,
    ) -> list[Task]:
        """Stored tasks, oldest first, optionally filtered."""
        return self.rows.select(
            principal=principal,
            stream=stream,
            kind=kind,
            limit=limit,
            states=None if state is None else (state,),
        )

    def wait(self, task_id: str, timeout: float) -> Task:
        """Pump until the task is terminal (BUDGET: granted) or ``timeout`` seconds pass;
        returns it as it is then."""
        end = time.monotonic() + timeout
        while True:
            self.pump()
            task = self.task(task_id)
            if task.state.terminal or time.monotonic() >= end:
                return task
            time.sleep(0.01 if task.state is TaskState.RUNNING else 0.02)

    def why(self, task_id: str, *, limit: int | None = MAX_LISTED) -> Waiting:
        """Why a task waits: which blocks it may use lack what (read from the ledger; at most
        ``limit`` listed, see :func:`~blockbudget.tasks.why.explain`), and the scheduler's
        note. For a decided task, what was decided."""
        task = self.task(task_id)
        spec = self._spec_for(self._family_of(task.kind), task.stream)
        note = ""
        with self._lock:
            key = self._where.get(task.id)
            run = None if key is None else self._runs.get(key)
            hint = None if run is None else getattr(run.live.scheduler, "why", None)
            if run is not None and task.id in run.unbound:
                note = UNBOUND_NOTE
            elif callable(hint):
                note = str(hint(run.live.pool, task.id))  # type: ignore[union-attr]
        return explain(self.platform, task, spec, note=note, limit=limit)

    # --- operator's controls ------------------------------------------------------------

    def cancel(self, task_id: str, *, by: str, admin: bool = False) -> Task:
        """Cancel a waiting, granted or running task; its reservations are released at once
        (a running query whose draw is refused releases nothing).

        Raises:
            UnknownBlockError: no such task, or (not ``admin``) not ``by``'s.
            TaskStateError: the task is already decided for good.
        """
        task = self.task(task_id)
        if not admin and task.principal != by:
            raise UnknownTaskError(f"no task {task_id!r} in the queue")
        if task.state is TaskState.CANCELLED:
            return task
        if task.state not in _LIVE:
            raise TaskStateError(
                f"task {task_id} is already {task.state.value}: only a waiting, granted or "
                "running task can be cancelled"
            )
        with self._lock:
            moved = self.rows.move(
                task.id,
                frm=_LIVE,
                to=TaskState.CANCELLED,
                when=self.clock(),
                note=f"cancelled by {by or 'its owner'}",
            )
            if not moved:
                return self.cancel(task_id, by=by, admin=admin)  # it moved meanwhile
            self._drop_waiting(task.id)
        if task.reservation_id is not None:
            self._release_if_open(task.reservation_id)
        return self.task(task.id)

    def revoke(self, principal: str) -> list[str]:
        """Cancel every waiting, granted and running task of ``principal`` (its grants are
        released; running pipelines see their task cancelled and stop); the ids."""
        out = []
        for task in self.rows.select(principal=principal, states=_LIVE, limit=10**9):
            try:
                self.cancel(task.id, by="revoke", admin=True)
                out.append(task.id)
            except TaskStateError:
                pass  # it finished meanwhile
        return out

    def scheduler_for(self, stream: str) -> str:
        """The spec of the scheduler deciding ``stream``'s QUERY and BUDGET tasks."""
        return self._spec_for("tasks", stream).text

    def set_scheduler(self, stream: str, spec: str) -> None:
        """Decide ``stream``'s QUERY and BUDGET tasks with ``spec`` from now on (stored; its
        waiting tasks move to a fresh pool of the new scheduler).

        Raises:
            InvalidRequestError: a bad spec, or one that cannot serve the stream's accounting.
            UnknownBlockError: an unknown stream.
        """
        parsed = parse_spec(spec)
        accounting = self.platform.stream(stream).accounting
        refuse_strong(stream, accounting)
        parsed.cls.check_serves(accounting, stream=stream)
        with self._lock:
            self.rows.set_override(stream, spec)
            if self._leading:
                self._specs[stream] = spec
                self._rebuild(stream)

    def store_default_scheduler(self) -> None:
        """Record this queue's default scheduler in the database as the service's (a server
        does at start): queues built there without a ``scheduler`` (a local CLI) use it."""
        self.rows.set_default(self.default_spec.text)

    def close(self) -> None:
        """Finish running work and give up the leadership. The queue may be used again
        afterwards (a server's startup may run more than once): its next pump takes the
        leadership back with fresh worker threads."""
        self._executor.shutdown(wait=True)
        self._executor = self._new_executor()
        for fam in self._families.values():
            if hasattr(fam, "close"):
                fam.close()
        with self._lock:
            self._step_down()
        self.leadership.release()

    # --- the decider's hooks ------------------------------------------------------------

    def _spec_for(self, family: str, stream: str) -> SchedulerSpec:
        if family != "tasks":
            return self.pipeline_spec
        if not self._leading:
            self._refresh_default()
        text = self._specs.get(stream) if self._leading else self.rows.overrides().get(stream)
        return self.default_spec if text is None else parse_spec(text)

    def _refresh_default(self) -> bool:
        """Follow the stored default scheduler (a queue built without one); True if it
        changed."""
        if self._explicit:
            return False
        spec = self._stored()
        changed = spec.text != self.default_spec.text
        self.default_spec = spec
        return changed

    def _stored(self) -> SchedulerSpec:
        text = self.rows.stored_default()
        if text is not None:
            try:
                return parse_spec(text)
            except InvalidRequestError:  # stored by another release: not ours to decide with
                log.warning(
                    "stored default scheduler %r is not valid here; using %s",
                    text,
                    DEFAULT_SCHEDULER,
                )
        return parse_spec(DEFAULT_SCHEDULER)

    def _run_query(self, task: Task) -> Mapping[str, Any]:
        from blockbudget.query import from_dict

        assert task.reservation_id is not None and task.work is not None
        query = from_dict(task.work)
        held = self.ledger.reservation(task.reservation_id).cost
        if held != task.demand:  # a partial grant: the query runs at the ε it holds
            query = self._at(query, held, task.demand, task.stream)
        from blockbudget.tasks.work import run_query_on

        with self.platform.grant(
            task.reservation_id,
            holder=task.principal,
            stream=task.stream,
            context=task.context,
            columns=query.columns(),
        ) as grant:
            return run_query_on(grant, query, noise=self.noise).to_dict()

    def _at(self, query: Query, held: Cost, demand: Cost, stream: str) -> Query:
        """The query scaled to a partial grant (Alg. 3 grants ``held`` = f·``demand``): its ε —
        and its δ, for a Gaussian query — times f = held.ε/demand.ε, rounded down, and
        checked to price within ``held`` (group privacy is monotone: k·fε and
        k·e^((k−1)fε)·fδ stay within f·(kε, k·e^((k−1)ε)·δ)).

        Raises:
            InvalidRequestError: the grant is not an (ε, δ) budget, or the scaled query would
                not fit it (the query does not run; nothing is drawn).
        """
        from blockbudget.mechanisms.noise import NoiseKind
        from blockbudget.query import check

        if not (isinstance(held, Budget) and isinstance(demand, Budget)) or not (
            held.epsilon > 0 and demand.epsilon > 0
        ):
            raise InvalidRequestError(f"a partial grant of {held} cannot run a DP query")
        f = held.epsilon / demand.epsilon
        out = replace(query, epsilon=round_down(Decimal(query.epsilon) * f))
        if query.mechanism is NoiseKind.GAUSSIAN:
            out = replace(out, delta=round_down(Decimal(query.delta) * f))
        price = check(self.platform, stream, out).reserve
        if not (
            isinstance(price, Budget)
            and price.epsilon <= held.epsilon
            and price.delta <= held.delta
        ):
            raise InvalidRequestError(
                f"the query scaled to its partial grant {held} would cost {price}: not run"
            )
        return out

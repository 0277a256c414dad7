"""The task routes: submit a task to a stream's scheduler, follow it, cancel it, steer the
scheduler.

Every DP query, budget demand and pipeline can be a *task* (:mod:`blockbudget.tasks`): it says
which blocks it may use (a selector), what it needs, and how long it may wait; the stream's
scheduler chooses blocks and budget on the live ledger, and its grant — one ledger reservation
held by the caller — is what the work spends. A background :class:`Pump` thread per server
advances the queue (grants, query work, deadlines) without a client polling.

Same rules as the rest of the API (:mod:`blockbudget.service.access`): an analyst submits only
on streams it may read, in contexts it is bound to, and sees and cancels only its own tasks;
admins see and cancel every task and set a stream's scheduler. On user and attribute streams an
analyst names and sees blocks by opaque ids (:mod:`blockbudget.service.blocknames`) — in
selectors, ``blocks``, ``why``, notes and results. A refused submission stores nothing and
charges nothing; no text of an exception raised while touching data reaches a caller
(:mod:`blockbudget.service.failures`).
"""

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI, Query

from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.errors import (
    DataError,
    InvalidRequestError,
    TaskStateError,
    UnknownTaskError,
)
from blockbudget.platform import Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import (
    Authenticator,
    require_role,
    require_stream,
    resolve_context,
)
from blockbudget.service.auth import Principal, Role
from blockbudget.service.blocknames import BlockNames, Naming
from blockbudget.service.failures import ConcealedError, failure_of, log, new_reference
from blockbudget.service.params import StreamPath, StreamQuery
from blockbudget.service.task_forms import (
    ACTIVE,
    refusal_json,
    selector_of_wire,
    task_json,
    why_json,
)
from blockbudget.tasks.model import TaskState

if TYPE_CHECKING:
    from blockbudget.tasks.model import Task
    from blockbudget.tasks.queue import TaskQueue
    from blockbudget.tasks.selectors import Selector

#: The longest ``GET /v1/tasks/{id}?wait=`` holds a request.
MAX_WAIT_SECONDS = 60.0


class Pump:
    """A daemon thread calling ``queue.pump()`` every ``seconds`` until :meth:`stop`.

    A failing round is logged (never raised: the next round retries); the pump only decides
    while its process holds the queue's leadership (:class:`blockbudget.tasks.TaskQueue`).

    Args:
        queue: the queue to advance.
        seconds: the pause between rounds.
    """

    def __init__(self, queue: "TaskQueue", *, seconds: float) -> None:
        self.queue = queue
        self.seconds = seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the pump thread; a second start while it runs does nothing, and a start
        after :meth:`stop` starts a new thread (an app's startup may run more than once)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            stop = threading.Event()
            self._stop = stop
            self._thread = threading.Thread(
                target=self._run, args=(stop,), name="task-pump", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current round (waits for it, at most ``timeout`` seconds)."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.seconds):
            try:
                self.queue.pump()
            except Exception:  # a ledger hiccup or a bug: logged, the next round retries
                log.exception("the task pump failed; retrying in %s s", self.seconds)


def task_out(
    t: "Task", naming: Naming, *, why: bool = False, queue: "TaskQueue | None" = None
) -> sc.TaskOut:
    """The public form of a task, its blocks named as ``naming`` says (with ``why`` when asked
    and the task waits, and ``refusal`` once refused when ``queue`` is given)."""
    reason = why_json(queue, t, naming) if why and queue is not None else None
    refused = refusal_json(queue, t, naming) if queue is not None else None
    return sc.TaskOut.model_validate(task_json(t, naming, why=reason, refusal=refused))


# --- a submission's parts -------------------------------------------------------------------------


def selector_of(body: sc.TaskIn, naming: Naming) -> "Selector":
    """The selector a body gives: ``selector``, or the older ``blocks`` / ``last``; named
    blocks resolved from the caller's names.

    Raises:
        InvalidRequestError: none or several ways of choosing blocks (422).
    """
    given = [x for x in (body.selector, body.blocks, body.last) if x is not None]
    if len(given) != 1:
        raise InvalidRequestError("give exactly one of 'selector', 'blocks' and 'last'")
    if body.blocks is not None:
        wire: dict[str, Any] = {"named": body.blocks}
    elif body.last is not None:
        wire = {"newest": body.last}
    else:
        assert body.selector is not None
        wire = body.selector.model_dump(mode="json", exclude_none=True)
    if "named" in wire:
        wire["named"] = naming.resolve(wire["named"])
    return selector_of_wire(wire)


def significance_of(
    body: sc.TaskIn, naming: Naming, *, platform: Platform, stream: str
) -> dict[str, Any] | None:
    """The significance to store: p per block id (resolved from the caller's names, each a
    block of ``stream``), or a provider's spec.

    Raises:
        UnknownBlockError: a name that is no block of ``stream`` (404; on opaque streams the
            same answer as for a guessed id).
    """
    sig = body.significance
    if sig is None:
        return None
    if isinstance(sig, sc.ProviderIn):
        from blockbudget.tasks.significance import refuse_noise_controls

        spec = sig.model_dump()
        refuse_noise_controls(spec)  # a principal never seeds a DP measurement (422)
        return spec
    ids = naming.resolve(list(sig))
    known = platform.select(stream, ids)
    if len(known) != len(ids):  # a key names its window's blocks: only block ids are taken
        raise InvalidRequestError("significance names blocks by id, one value per block")
    return dict(zip(ids, sig.values(), strict=True))


def demand_of(body: sc.TaskIn) -> Cost:
    """A budget task's demand: ``epsilon``/``delta`` or an ``rdp`` curve.

    Raises:
        InvalidRequestError: none or both given (422); InvalidBudgetError: a malformed curve.
    """
    if (body.epsilon is None) == (body.rdp is None):
        raise InvalidRequestError("a budget task gives exactly one of 'epsilon' and 'rdp'")
    if body.rdp is not None:
        return RdpCurve(body.rdp)
    assert body.epsilon is not None
    return Budget(epsilon=body.epsilon, delta=body.delta)


def _refuse_foreign_fields(body: sc.TaskIn) -> None:
    kind = body.kind
    extra = {
        "query": body.query is not None and kind is not sc.TaskKind.QUERY,
        "pipeline": body.pipeline is not None and kind is not sc.TaskKind.PIPELINE,
        "epsilon": body.epsilon is not None and kind is not sc.TaskKind.BUDGET,
        "rdp": body.rdp is not None and kind is not sc.TaskKind.BUDGET,
    }
    bad = sorted(k for k, v in extra.items() if v)
    if bad:
        raise InvalidRequestError(f"a {kind.value} task does not take {bad}")


def submit(
    queue: "TaskQueue", me: Principal, stream: str, context: str, body: sc.TaskIn, naming: Naming
) -> "Task":
    """Hand a checked body to the queue (see the route)."""
    _refuse_foreign_fields(body)
    common: dict[str, Any] = {
        "context": context,
        "principal": me.name,
        "deadline_seconds": body.timeout_seconds,
        "request_id": body.request_id,
    }
    if body.kind is sc.TaskKind.PIPELINE:
        return _submit_pipeline(queue, stream, body, common)
    selector = selector_of(body, naming)
    significance = significance_of(body, naming, platform=queue.platform, stream=stream)
    if body.kind is sc.TaskKind.QUERY:
        from blockbudget.query import from_dict

        if body.query is None:
            raise InvalidRequestError("a query task needs 'query' (the query's JSON form)")
        query = from_dict(body.query)
        return queue.submit_query(
            stream, query, selector=selector, significance=significance, **common
        )
    return queue.submit_budget(
        stream, demand_of(body), selector=selector, significance=significance, **common
    )


def _submit_pipeline(
    queue: "TaskQueue", stream: str, body: sc.TaskIn, common: dict[str, Any]
) -> "Task":
    p = body.pipeline
    if p is None:
        raise InvalidRequestError("a pipeline task needs 'pipeline' (kind, target, ...)")
    given = [
        name
        for name, value in (
            ("selector", body.selector),
            ("blocks", body.blocks),
            ("last", body.last),
            ("significance", body.significance),
        )
        if value is not None
    ]
    if given:
        raise InvalidRequestError(
            f"a pipeline task takes no {given}: its strategy chooses the windows it trains on"
        )
    return queue.submit_pipeline(
        stream,
        kind=p.kind,
        target=p.target,
        epsilon0=p.epsilon0,
        max_epsilon=p.max_epsilon,
        min_window=p.min_window,
        **common,
    )


# --- the routes -----------------------------------------------------------------------------------


def register_queue_routes(
    app: FastAPI,
    *,
    platform: Platform,
    queue: "TaskQueue",
    authenticate: Authenticator,
    names: BlockNames,
    default_scheduler: str,
) -> None:
    """Add the task routes (module docstring) to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    def owned(me: Principal, task_id: str) -> "Task":
        task = queue.task(task_id)
        if me.role is not Role.ADMIN and task.principal != me.name:
            # answered word for word as an unknown id: another principal's task does not exist
            # for the caller (as TaskQueue.cancel answers)
            raise UnknownTaskError(f"no task {task_id!r} in the queue")
        return task

    @app.post("/v1/streams/{stream}/tasks", status_code=201, tags=["tasks"])
    def submit_task(me: Auth, stream: StreamPath, body: sc.TaskIn) -> sc.TaskOut:
        """Submit a task (a DP query, a budget demand or a pipeline) to the stream's scheduler.

        The blocks come from ``selector`` (or the older ``blocks`` / ``last``); the grant is one
        reservation held by the caller that the work spends. A replayed ``request_id`` with the
        same arguments answers with the first task; with other arguments it is a 409."""
        require_stream(me, stream)
        context = resolve_context(me, body.context)
        if context not in platform.contexts():
            raise InvalidRequestError(f"unknown or closed context {context!r}")
        naming = names.naming(me, stream)
        try:  # checks schemas and prices, reads no row; a DataError's text may still quote one
            task = submit(queue, me, stream, context, body, naming)
        except DataError as exc:
            ref = new_reference()
            log.error("task submission failed on data (reference %s)", ref, exc_info=exc)
            raise ConcealedError(failure_of(exc, what="task", ref=ref), status=422) from None
        return task_out(task, naming, queue=queue)

    @app.get("/v1/tasks", tags=["tasks"])
    def list_tasks(
        me: Auth,
        stream: StreamQuery = None,
        state: Annotated[TaskState | None, Query()] = None,
        kind: Annotated[sc.TaskKind | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> sc.QueueOut:
        """Tasks, oldest first: the caller's (admins: everyone's), with state and grant."""
        from blockbudget.tasks.model import WorkKind

        if stream is not None:
            require_stream(me, stream)
        found = queue.tasks(
            principal=None if me.role is Role.ADMIN else me.name,
            stream=stream,
            state=state,
            kind=None if kind is None else WorkKind(kind.value),
            limit=limit,
        )
        lost = access_lost(me)
        return sc.QueueOut(
            scheduler=queue.scheduler_for(stream) if stream is not None else default_scheduler,
            schedulers={s: queue.scheduler_for(s) for s in sorted({t.stream for t in found})},
            tasks=[withheld(task_out(t, names.naming(me, t.stream)), lost(t)) for t in found],
        )

    def access_lost(me: Principal) -> Callable[["Task"], str | None]:
        """Why ``me`` may no longer see a task's result (None: it may), re-read from the key
        store once per (stream, context): an admin sees every result."""
        check = queue.access_check
        if check is None or me.role is Role.ADMIN:
            return lambda _: None
        seen: dict[tuple[str, str], str | None] = {}

        def lost(task: "Task") -> str | None:
            key = (task.stream, task.context)
            if key not in seen:
                seen[key] = check(task)
            return seen[key]

        return lost

    def read_task(me: Principal, task_id: str) -> sc.TaskOut:
        task = owned(me, task_id)
        naming = names.naming(me, task.stream)
        reason = access_lost(me)(task)
        if reason is None:
            return task_out(task, naming, why=True, queue=queue)
        if task.state.value in ACTIVE:  # the principal lost access while it waited or ran
            with contextlib.suppress(InvalidRequestError, TaskStateError):
                task = queue.cancel(task.id, by=f"the service ({reason})", admin=True)
        return withheld(task_out(task, naming), reason)

    def still_active(me: Principal, task_id: str) -> bool:
        return owned(me, task_id).state.value in ("waiting", "running")

    @app.get("/v1/tasks/{task_id}", tags=["tasks"])
    async def get_task(
        me: Auth,
        task_id: str,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False)] = 0.0,
    ) -> sc.TaskOut:
        """One task with ``why`` while it waits and ``result`` once done; ``wait`` seconds
        (at most 60) holds the answer until the task is no longer waiting or running."""
        out = await anyio.to_thread.run_sync(read_task, me, task_id)
        if out.state not in ("waiting", "running") or wait == 0:
            return out
        deadline = anyio.current_time() + wait
        # While it waits, poll the task's state only (one row); the full answer — its ``why``
        # and the access re-check — is built once, when it is decided or the wait ends.
        while anyio.current_time() < deadline:
            await anyio.sleep(min(0.1, max(deadline - anyio.current_time(), 0.0)))
            if not await anyio.to_thread.run_sync(still_active, me, task_id):
                break
        return await anyio.to_thread.run_sync(read_task, me, task_id)

    @app.post("/v1/tasks/{task_id}/cancel", tags=["tasks"])
    def cancel_task(me: Auth, task_id: str) -> sc.TaskOut:
        """Cancel a waiting, granted or running task (its owner or an admin): its reservation
        is released at once, a running pipeline stops. A task already decided is a 409."""
        task = owned(me, task_id)
        refusal = (
            f"task {task_id!r} is already decided: only a waiting, granted or running task "
            "can be cancelled"
        )
        if task.state.value not in ACTIVE:
            raise TaskStateError(f"{refusal} (it is {task.state.value})")
        try:
            done = queue.cancel(task_id, by=me.name, admin=me.role is Role.ADMIN)
        except InvalidRequestError:  # decided between the read and the cancel
            raise TaskStateError(refusal) from None
        return task_out(done, names.naming(me, done.stream))

    def scheduler_out(stream: str) -> sc.SchedulerOut:
        return sc.SchedulerOut(
            stream=stream,
            scheduler=queue.scheduler_for(stream),
            pipeline_scheduler=queue.pipeline_spec.text,
        )

    @app.get("/v1/streams/{stream}/scheduler", tags=["tasks"])
    def get_scheduler(me: Auth, stream: StreamPath) -> sc.SchedulerOut:
        """The scheduler deciding the stream's tasks (any reader)."""
        require_stream(me, stream)
        platform.stream(stream)
        return scheduler_out(stream)

    @app.put("/v1/streams/{stream}/scheduler", tags=["tasks"])
    def put_scheduler(me: Auth, stream: StreamPath, body: sc.SchedulerIn) -> sc.SchedulerOut:
        """Set the stream's scheduler (admins; stored in the database, every server process
        follows it)."""
        require_role(me)
        platform.stream(stream)
        queue.set_scheduler(stream, body.spec)
        return scheduler_out(stream)


def revoke_tasks(queue: "TaskQueue", principal: str, stream: str | None) -> list[str]:
    """Stop what ``principal`` may no longer do: with ``stream``, cancel its active tasks on
    that stream (access to it was revoked); without, every active task of the principal (a key
    was revoked): queued grants are released and running pipelines stop.

    Returns:
        The ids of the cancelled tasks.
    """
    if stream is None:
        return list(queue.revoke(principal))
    found = queue.tasks(principal=principal, stream=stream, limit=1_000_000)
    return _cancel_active(queue, found, by="access revoked")


def unbind_tasks(queue: "TaskQueue", principal: str, contexts: Sequence[str]) -> list[str]:
    """Cancel ``principal``'s active tasks in ``contexts`` (it was unbound from them): their
    queued grants are released and running pipelines stop.

    Returns:
        The ids of the cancelled tasks.
    """
    dropped = set(contexts)
    found = [t for t in queue.tasks(principal=principal, limit=1_000_000) if t.context in dropped]
    return _cancel_active(queue, found, by="context unbound")


def withheld(out: sc.TaskOut, reason: str | None) -> sc.TaskOut:
    """``out`` with its result withheld when its principal lost access (``reason``)."""
    if reason is None:
        return out
    note = f"{out.note}; result withheld: {reason}"
    return out.model_copy(update={"result": None, "why": None, "refusal": None, "note": note})


def _cancel_active(queue: "TaskQueue", tasks: Sequence["Task"], *, by: str) -> list[str]:
    done = []
    for t in tasks:
        if t.state.value in ACTIVE:
            try:
                queue.cancel(t.id, by=by, admin=True)
            except (InvalidRequestError, TaskStateError):
                continue  # it finished meanwhile
            done.append(t.id)
    return done


__all__ = ["Pump", "register_queue_routes", "revoke_tasks", "task_out", "unbind_tasks"]

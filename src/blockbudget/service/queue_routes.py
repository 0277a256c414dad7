"""The scheduler queue's routes: submit a task, list the queue, follow one task.

Same rules as the rest of the API (:mod:`blockbudget.service.access`): an analyst submits only
on streams it may read, in contexts it is bound to, and sees only its own tasks; admins see
every task. On user and attribute streams an analyst names and sees blocks by opaque ids
(:mod:`blockbudget.service.blocknames`). A refused submission stores nothing and charges nothing.
"""

from typing import Annotated

import anyio.to_thread
from fastapi import Depends, FastAPI, Query

from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError
from blockbudget.platform import Last, Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, AuthError, require_stream, resolve_context
from blockbudget.service.auth import Principal, Role
from blockbudget.service.blocknames import BlockNames, Naming
from blockbudget.service.queue import QueuedTask, SchedulerQueue, TaskState, task_fingerprint


def task_out(t: QueuedTask, naming: Naming) -> sc.TaskOut:
    """The public form of a queued task, its blocks named as ``naming`` says."""
    return sc.TaskOut(
        id=t.id,
        principal=t.principal,
        stream=t.stream,
        context=t.context,
        epsilon=str(t.demand.epsilon),
        delta=str(t.demand.delta),
        blocks=naming.show_all(t.blocks),
        significance=None
        if t.significance is None
        else {
            naming.show(b): p
            for b, p in naming.arrange(t.significance.items(), lambda item: item[0])
        },
        submitted_at=t.submitted_at,
        deadline=t.deadline,
        state=t.state.value,
        reservation_id=t.reservation_id,
        decided_at=t.decided_at,
        note=naming.text(t.note),
    )


def register_queue_routes(
    app: FastAPI,
    *,
    platform: Platform,
    queue: SchedulerQueue,
    authenticate: Authenticator,
    names: BlockNames,
) -> None:
    """Add ``POST /v1/streams/{stream}/tasks``, ``GET /v1/tasks`` and ``GET /v1/tasks/{id}``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    @app.post("/v1/streams/{stream}/tasks", status_code=201, tags=["queue"])
    def submit_task(me: Auth, stream: str, body: sc.TaskIn) -> sc.TaskOut:
        """Queue a task: ``epsilon``/``delta`` on each of its blocks, granted (as a reservation
        held by the caller) when the service's scheduler decides. A replayed ``request_id``
        with the same arguments answers with the first task (its current state; nothing new
        is queued, also under concurrent replays); with other arguments it is a 409."""
        require_stream(me, stream)
        context = resolve_context(me, body.context)
        if (body.blocks is None) == (body.last is None):
            raise InvalidRequestError("give exactly one of 'blocks' and 'last'")
        cost = Budget(epsilon=body.epsilon, delta=body.delta)
        naming = names.naming(me, stream)
        fingerprint = task_fingerprint(
            stream=stream,
            context=context,
            demand=cost,
            selection=list(body.blocks) if body.blocks is not None else {"last": body.last},
            significance=body.significance,
            timeout_seconds=body.timeout_seconds,
        )
        if body.request_id is not None:  # a replay answers before the selection is resolved
            done = queue.replay(me.name, body.request_id, fingerprint)
            if done is not None:
                return task_out(done, naming)
        sel: list[str] | Last = (
            naming.resolve(body.blocks) if body.blocks is not None else Last(body.last or 1, False)
        )
        significance = body.significance
        if significance is not None and naming.hidden:
            ids = naming.resolve(list(significance))
            significance = dict(zip(ids, significance.values(), strict=True))
        blocks = list(platform.select(stream, sel, context=context, cost=cost))
        task = queue.submit(
            principal=me.name,
            stream=stream,
            context=context,
            demand=cost,
            blocks=blocks,
            significance=significance,
            timeout_seconds=body.timeout_seconds,
            request_id=body.request_id,
            fingerprint=fingerprint,
        )
        return task_out(task, naming)

    @app.get("/v1/tasks", tags=["queue"])
    async def list_tasks(
        me: Auth,
        stream: str | None = None,
        state: Annotated[TaskState | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> sc.QueueOut:
        """The queue: the caller's tasks (admins: everyone's), oldest first, with state and
        grant."""
        if stream is not None:
            require_stream(me, stream)
        who = None if me.role is Role.ADMIN else me.name

        def read() -> list[QueuedTask]:
            queue.pump()
            return queue.tasks(principal=who, stream=stream, state=state, limit=limit)

        def shown() -> list[sc.TaskOut]:
            return [task_out(t, names.naming(me, t.stream)) for t in read()]

        return sc.QueueOut(
            scheduler=queue.scheduler_spec, tasks=await anyio.to_thread.run_sync(shown)
        )

    @app.get("/v1/tasks/{task_id}", tags=["queue"])
    def get_task(me: Auth, task_id: str) -> sc.TaskOut:
        queue.pump()
        task = queue.task(task_id)
        if me.role is not Role.ADMIN and task.principal != me.name:
            raise AuthError(403, f"task {task_id!r} belongs to another principal")
        return task_out(task, names.naming(me, task.stream))

"""Pipeline jobs over HTTP: ``/v1/streams/{s}/pipelines`` and ``/v1/pipelines[/{id}]``.

A pipeline job is a task of kind ``pipeline`` in the task queue
(:mod:`blockbudget.tasks.pipelines`): the stream's pipeline strategy — Sage's Block/Conserve by
default (seed ``004_2b5d216070ae2ded.txt`` §5.4) — gives it an even share of each new block and
decides its privacy-adaptive runs (§3.3); each run trains on one grant. The job's id is the
task's id, so ``/v1/tasks/{id}`` shows the same job and ``POST /v1/tasks/{id}/cancel`` stops it.

This module keeps the routes' JSON of earlier releases (:func:`job_json`). States:
``queued`` (waiting, no run yet), ``training`` (a run executes), ``waiting`` (runs were made;
it waits for new blocks or budget), ``accepted`` (the model is released), ``rejected``
(the validator rejected it, or the ledger refused a run), ``timed_out`` (its deadline passed),
``failed``, ``cancelled``. A failed job shows a stable code and our own message
(``pipeline_failed_data``, ``pipeline_failed_budget``, ``pipeline_failed_internal``), never the
exception's text (:mod:`blockbudget.failures`). Released models are DP outputs and are
shown; exact row counts are not. :func:`register_pipeline_routes` adds the routes to the app.
The kinds offered are those registered with :mod:`blockbudget.tasks.pipeline_kinds` (the
applications' modules a server loads, ``BLOCKBUDGET_PIPELINES``).
"""

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, FastAPI

from blockbudget.errors import InvalidRequestError, UnknownBlockError
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, AuthError, require_stream, resolve_context
from blockbudget.service.auth import Principal, Role
from blockbudget.service.params import StreamPath
from blockbudget.tasks.model import Task, TaskState, WorkKind

if TYPE_CHECKING:
    from blockbudget.platform import Platform
    from blockbudget.tasks.queue import TaskQueue

__all__ = [
    "job_json",
    "job_state",
    "register_pipeline_routes",
]

_STATES = {
    TaskState.RUNNING: "training",
    TaskState.DONE: "accepted",
    TaskState.REFUSED: "rejected",
    TaskState.EXPIRED: "timed_out",
    TaskState.FAILED: "failed",
    TaskState.CANCELLED: "cancelled",
    TaskState.GRANTED: "training",  # never for a pipeline; shown as in progress
}


def job_state(task: Task) -> str:
    """The job state of earlier releases for a pipeline task (see the module docstring)."""
    if task.state is TaskState.WAITING:
        return "waiting" if _runs(task) else "queued"
    return _STATES[task.state]


def _runs(task: Task) -> list[dict[str, Any]]:
    runs = (task.result or {}).get("runs")
    return list(runs) if isinstance(runs, list) else []


def job_json(task: Task) -> dict[str, Any]:
    """A pipeline task as the pipeline routes show it (``JobOut``).

    Example:
        >>> import time
        >>> from blockbudget.budget import Budget
        >>> from blockbudget.tasks.model import WorkKind
        >>> from blockbudget.tasks.selectors import AnyBlocks
        >>> t = Task(id="t1", principal="ana", stream="s", context="c",
        ...          kind=WorkKind.PIPELINE, selector=AnyBlocks(), demand=Budget(epsilon=1),
        ...          submitted_at=0.0, state=TaskState.WAITING,
        ...          work={"kind": "average-speed", "target": 150.0})
        >>> job_json(t)["state"], job_json(t)["attempts"]
        ('queued', [])
    """
    work = dict(task.work or {})
    result = dict(task.result or {})
    error = result.get("error")
    return {
        "id": task.id,
        "owner": task.principal,
        "stream": task.stream,
        "context": task.context,
        "kind": str(work.get("kind", "")),
        "target": float(work.get("target", 0.0)),
        "state": job_state(task),
        "error": error if isinstance(error, dict) else None,
        "attempts": [
            {k: r[k] for k in ("iteration", "epsilon", "delta", "blocks", "outcome")}
            for r in _runs(task)
        ],
        "model": result.get("model") if task.state is TaskState.DONE else None,
        "submitted_at": task.submitted_at,
    }


def register_pipeline_routes(
    app: FastAPI,
    *,
    platform: "Platform",
    queue: "TaskQueue",
    authenticate: Authenticator,
) -> None:
    """Add the pipeline routes (module docstring) to ``app``: tasks of kind ``pipeline`` of
    the queue's pipeline family."""
    Auth = Annotated[Principal, Depends(authenticate)]

    @app.post("/v1/streams/{stream}/pipelines", status_code=201, tags=["pipelines"])
    def submit_pipeline(me: Auth, stream: StreamPath, body: sc.PipelineIn) -> sc.JobOut:
        """Submit a pipeline: a task of kind ``pipeline`` for the stream's pipeline strategy
        (Sage's Block/Conserve by default); the job's id is the task's id."""
        require_stream(me, stream)
        context = resolve_context(me, body.context)
        if context not in platform.contexts():
            raise InvalidRequestError(f"unknown or closed context {context!r}")
        task = queue.submit_pipeline(
            stream,
            kind=body.kind,
            target=body.target,
            context=context,
            principal=me.name,
            epsilon0=body.epsilon0,
            max_epsilon=body.max_epsilon,
            min_window=body.min_window,
        )
        return sc.JobOut.model_validate(job_json(task))

    @app.get("/v1/pipelines", tags=["pipelines"])
    def list_pipelines(me: Auth) -> list[sc.JobOut]:
        """The caller's pipeline jobs (admins: everyone's), oldest first."""
        found = queue.tasks(
            principal=None if me.role is Role.ADMIN else me.name, kind=WorkKind.PIPELINE
        )
        return [sc.JobOut.model_validate(job_json(t)) for t in found]

    @app.get("/v1/pipelines/{job_id}", tags=["pipelines"])
    def get_pipeline(me: Auth, job_id: str) -> sc.JobOut:
        task = queue.task(job_id)
        if task.kind is not WorkKind.PIPELINE:
            raise UnknownBlockError(f"unknown pipeline job {job_id!r}")
        if me.role is not Role.ADMIN and task.principal != me.name:
            raise AuthError(403, f"pipeline job {job_id!r} belongs to another principal")
        return sc.JobOut.model_validate(job_json(task))

"""The HTTP API: FastAPI over one :class:`~blockbudget.platform.Platform`.

Every route authenticates (:mod:`blockbudget.service.access`), checks role, stream ACL and
context binding *before* calling the platform, and maps platform refusals to 404/409/422 — so a
refused request never reserves or charges anything. No route returns a data row: DP answers,
budgets, block keys, reservations and audit events only; exact row counts go to a stream's
owners and admins only, and so do the keys of user- and attribute-blocked streams (analysts
see opaque ids: :mod:`blockbudget.service.blocknames`). No exception text raised while
touching data reaches a caller (:mod:`blockbudget.service.failures`).

Each resource's routes live in a module of their own, added by its ``register_*_routes(app,
...)`` function: ``service_routes`` (health, stats, the dashboard page), ``admin`` (principals,
keys, ACLs), ``admin_contexts``, ``streams`` (streams and their blocks), ``ingest_routes``,
``reservations``, ``charges``, ``afford``, ``query_routes``, ``pipelines``, ``audit``,
``queue_routes`` (tasks), ``stream_releases``, ``max_ids``, ``dashboard_routes``, ``readiness``
and ``metrics``. :func:`create_app` only builds the shared dependencies, installs the error
handlers and wires those modules. Routes reach data and budgets through
:class:`~blockbudget.platform.Platform`'s methods, never through its ledger or store.

Routes run in FastAPI's thread pool (the platform is synchronous). With ``group_commit`` the
ledger batches concurrent writes of all those threads into single durable transactions
(:mod:`blockbudget.ledger.group`).
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from blockbudget import __version__
from blockbudget.errors import BlockBudgetError
from blockbudget.lowbudget import alert_threshold_from_env
from blockbudget.platform import Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, error_response, internal_error_response
from blockbudget.service.admin import register_principal_routes
from blockbudget.service.afford import register_afford_routes
from blockbudget.service.audit import register_audit_routes
from blockbudget.service.auth import KeyStore, Principal
from blockbudget.service.blocknames import BlockNames
from blockbudget.service.charges import register_charge_routes
from blockbudget.service.dashboard import STATIC_DIR
from blockbudget.service.dashboard_routes import register_dashboard_routes
from blockbudget.service.ingest_routes import register_ingest_routes
from blockbudget.service.metrics import register_metrics
from blockbudget.service.query_routes import register_query_routes
from blockbudget.service.queue_routes import (
    Pump,
    register_queue_routes,
    revoke_tasks,
    unbind_tasks,
)
from blockbudget.service.reservations import register_reservation_routes
from blockbudget.service.service_routes import register_service_routes
from blockbudget.service.standing import task_access
from blockbudget.service.streams import register_stream_routes
from blockbudget.tasks.leader import leadership_for
from blockbudget.tasks.queue import DEFAULT_SCHEDULER, TaskQueue

#: ``serve``'s default pipeline strategy: Sage's Block/Conserve (Lécuyer et al., SOSP'19).
DEFAULT_PIPELINE_SCHEDULER = "sage-block-conserve"

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": sc.ErrorOut, "description": "no, malformed, unknown or revoked API key"},
    403: {"model": sc.ErrorOut, "description": "role, stream ACL or context binding refuses"},
    404: {"model": sc.ErrorOut, "description": "unknown stream, block or reservation"},
    409: {"model": sc.ErrorOut, "description": "budget exceeded, retired, reservation state"},
    422: {"model": sc.ErrorOut, "description": "malformed request"},
    503: {
        "model": sc.ErrorOut,
        "description": "budgets refused: the database is behind the audit log's high-water "
        "mark (run `blockbudget db reconcile`), or the mark cannot be read",
    },
}


def open_platform(
    home: str | Path,
    database_url: str | None,
    *,
    group_commit: bool,
    data_root: str | None = None,
) -> Platform:
    """A platform whose ledger batches concurrent writes when ``group_commit``; its block files
    live under ``data_root`` (a local path or a filesystem URI such as ``s3://bucket/prefix``)
    or, by default, in ``home/blocks``."""
    return Platform(home, database_url=database_url, data_root=data_root, group_commit=group_commit)


def create_app(
    platform: Platform,
    *,
    keys: KeyStore | None = None,
    auth_cache_seconds: float = 2.0,
    threads: int = 128,
    scheduler: str = DEFAULT_SCHEDULER,
    pipeline_scheduler: str = DEFAULT_PIPELINE_SCHEDULER,
    pump_seconds: float = 0.5,
    tasks: TaskQueue | None = None,
    alert_below: float | None = None,
) -> FastAPI:
    """The FastAPI application serving ``platform``: the shared dependencies (key store,
    authenticator, block names, task queue and its pump), the error handlers, and one
    ``register_*_routes`` module per resource.

    Args:
        platform: the platform (its database also holds principals, keys and ACLs).
        keys: the key store (default: in the platform's database).
        auth_cache_seconds: how long a key lookup is cached per process.
        threads: the size of the thread pool that runs the (synchronous) routes.
        scheduler: the default scheduler of every stream's tasks, ``"name[:key=value,...]"``
            (:mod:`blockbudget.tasks`; an admin overrides it per stream).
        pipeline_scheduler: the strategy that gives pipelines their budget.
        pump_seconds: the pause between two rounds of the task pump (grants, query work,
            deadlines), which runs in a thread of its own while the app is up.
        tasks: the task queue (default: a new one on ``platform`` with these schedulers and the
            database's leadership: one process decides at a time).
        alert_below: the dashboard's low-budget alert threshold, a fraction in [0, 1]
            (default: ``BLOCKBUDGET_ALERT_BELOW``, else 0.1).
    """
    keystore = keys if keys is not None else KeyStore(platform.database)
    authenticate = Authenticator(keystore, ttl_seconds=auth_cache_seconds)
    names = BlockNames(platform, platform.database)
    if tasks is None:
        tasks = TaskQueue(
            platform,
            scheduler=scheduler,
            pipeline_scheduler=pipeline_scheduler,
            leadership=leadership_for(platform.database, name="tasks"),
        )
        tasks.store_default_scheduler()  # a local CLI on this database decides with it too
    queue = tasks
    queue.access_check = task_access(keystore)  # re-checked at grant, run and read
    pump = Pump(queue, seconds=pump_seconds)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        pump.start()
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(pump.stop)
            queue.close()

    app = FastAPI(
        title="blockbudget",
        version=__version__,
        description="Per-block differential-privacy budgets for growing datasets, as a service.",
        lifespan=lifespan,
        responses=ERRORS,
        # No OpenTelemetry hooks per request (nothing is configured to receive them; each
        # request would still look the providers up): an operator who wants traces puts the
        # instrumentation in front of the service.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.platform = platform
    app.state.keys = keystore
    app.state.authenticate = authenticate
    app.state.tasks = tasks
    app.state.block_names = names
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _add_error_handlers(app, names)
    _add_routes(
        app,
        platform=platform,
        keys=keystore,
        authenticate=authenticate,
        names=names,
        queue=queue,
        scheduler=scheduler,
        alert_below=alert_below,
    )
    return app


def _add_error_handlers(app: FastAPI, names: BlockNames) -> None:
    """Map platform refusals to their status codes (block names as the caller sees them),
    anything else to a stable code with no exception text, and malformed requests to 422."""

    @app.exception_handler(BlockBudgetError)
    async def on_error(request: Request, exc: BlockBudgetError) -> Any:
        me: Principal | None = getattr(request.state, "principal", None)
        return error_response(exc, describe=names.describer(me))

    @app.exception_handler(Exception)
    async def on_crash(_: Request, exc: Exception) -> Any:
        # Anything else is a bug or a failure deep in a library, whose text may quote data:
        # a stable code for the caller, the traceback for the server log.
        return internal_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(_: Request, exc: RequestValidationError) -> Any:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
            for e in exc.errors()[:5]
        )
        return JSONResponse(
            {"error": "RequestValidationError", "detail": f"malformed request — {problems}"},
            status_code=422,
        )


def _add_routes(
    app: FastAPI,
    *,
    platform: Platform,
    keys: KeyStore,
    authenticate: Authenticator,
    names: BlockNames,
    queue: TaskQueue,
    scheduler: str,
    alert_below: float | None,
) -> None:
    """Wire every resource's routes to the shared dependencies."""
    from blockbudget.service.admin_contexts import register_context_routes
    from blockbudget.service.max_ids import register_max_id_routes
    from blockbudget.service.pipelines import register_pipeline_routes
    from blockbudget.service.readiness import register_readiness_route
    from blockbudget.service.stream_releases import register_stream_release_routes

    p, auth = platform, authenticate
    register_service_routes(app, platform=p, authenticate=auth)
    register_principal_routes(
        app,
        platform=p,
        keys=keys,
        authenticate=auth,
        on_revoke=lambda principal, stream: revoke_tasks(queue, principal, stream),
        on_unbind=lambda principal, contexts: unbind_tasks(queue, principal, contexts),
    )
    register_context_routes(app, platform=p, authenticate=auth)
    register_stream_routes(app, platform=p, keys=keys, authenticate=auth, names=names)
    register_ingest_routes(app, platform=p, authenticate=auth)
    register_reservation_routes(app, platform=p, authenticate=auth, names=names)
    register_charge_routes(app, platform=p, authenticate=auth, names=names)
    register_afford_routes(app, platform=p, authenticate=auth, names=names)
    register_query_routes(app, platform=p, authenticate=auth, names=names)
    register_pipeline_routes(app, platform=p, queue=queue, authenticate=auth)
    register_audit_routes(app, platform=p, authenticate=auth)
    register_queue_routes(
        app,
        platform=p,
        queue=queue,
        authenticate=auth,
        names=names,
        default_scheduler=scheduler,
    )
    register_stream_release_routes(app, platform=p, authenticate=auth)
    register_max_id_routes(app, platform=p, authenticate=auth)
    register_dashboard_routes(
        app,
        platform=p,
        tasks=queue,
        authenticate=auth,
        names=names,
        alert_below=alert_threshold_from_env() if alert_below is None else alert_below,
    )
    register_readiness_route(app, engine=p.database)
    register_metrics(app, alert_below=alert_below)  # reads app.state's platform, keys, tasks


__all__ = ["DEFAULT_PIPELINE_SCHEDULER", "create_app", "open_platform"]

"""The HTTP API: FastAPI over one :class:`~blockbudget.platform.Platform`.

Every route authenticates (:mod:`blockbudget.service.access`), checks role, stream ACL and
context binding *before* calling the platform, and maps platform refusals to 404/409/422 — so a
refused request never reserves or charges anything. No route returns a data row: DP answers,
budgets, block keys, reservations and audit events only; exact row counts go to a stream's
owners and admins only, and so do the keys of user- and attribute-blocked streams (analysts
see opaque ids: :mod:`blockbudget.service.blocknames`). No exception text raised while
touching data reaches a caller (:mod:`blockbudget.service.failures`).

Routes run in FastAPI's thread pool (the platform is synchronous). With ``group_commit`` the
ledger batches concurrent writes of all those threads into single durable transactions
(:mod:`blockbudget.ledger.group`).
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from blockbudget import __version__
from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import (
    BlockBudgetError,
    InvalidRequestError,
    ReservationError,
    StreamExistsError,
)
from blockbudget.ledger import Ledger, Reservation, ReservationState
from blockbudget.lowbudget import alert_threshold_from_env
from blockbudget.platform import Last, Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import (
    Authenticator,
    AuthError,
    error_response,
    internal_error_response,
    require_context,
    require_role,
    require_stream,
    resolve_context,
    visible_contexts,
)
from blockbudget.service.admin import register_principal_routes
from blockbudget.service.afford import register_afford_routes
from blockbudget.service.auth import KeyStore, Permission, Principal, Role
from blockbudget.service.blocknames import BlockNames, Naming
from blockbudget.service.charges import charge_json, register_charge_routes, scoped
from blockbudget.service.dashboard import STATIC_DIR, page
from blockbudget.service.dashboard_routes import (
    block_out,
    register_dashboard_routes,
    sees_every_context,
)
from blockbudget.service.ingest_routes import register_ingest_routes
from blockbudget.service.metrics import register_metrics
from blockbudget.service.queue_routes import (
    Pump,
    register_queue_routes,
    revoke_tasks,
    unbind_tasks,
)
from blockbudget.service.reservation_usage import usage_json
from blockbudget.service.standing import task_access
from blockbudget.store import Blocking, LatePolicy, Unit
from blockbudget.store.model import parse_block_id
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
    platform = Platform(home, database_url=database_url, data_root=data_root)
    if group_commit:
        platform.ledger.dispose()
        platform.ledger = Ledger(platform.database_url, group_commit=True)
    return platform


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
    """The FastAPI application serving ``platform``.

    Args:
        platform: the platform (its database also holds principals, keys and ACLs).
        keys: the key store (default: in the platform's ledger database).
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
    keystore = keys if keys is not None else KeyStore(platform.ledger.engine)
    authenticate = Authenticator(keystore, ttl_seconds=auth_cache_seconds)
    names = BlockNames(platform, platform.ledger.engine)
    if tasks is None:
        tasks = TaskQueue(
            platform,
            scheduler=scheduler,
            pipeline_scheduler=pipeline_scheduler,
            leadership=leadership_for(platform.ledger.engine, name="tasks"),
        )
        tasks.store_default_scheduler()  # a local CLI on this database decides with it too
    queue_of_tasks = tasks
    queue_of_tasks.access_check = task_access(keystore)  # re-checked at grant, run and read
    pump = Pump(queue_of_tasks, seconds=pump_seconds)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = threads
        pump.start()
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(pump.stop)
            queue_of_tasks.close()

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

    Auth = Annotated[Principal, Depends(authenticate)]

    # --- public --------------------------------------------------------------------------------

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/dashboard", response_class=HTMLResponse, tags=["dashboard"])
    def dashboard_page() -> str:
        return page()

    @app.get("/v1/service/stats", tags=["service"])
    def service_stats(me: Auth) -> dict[str, float | int | bool]:
        """This server process's group-commit counters (admins): batches committed and the
        requests in them."""
        require_role(me)
        gc = platform.ledger.group_committer
        return {
            "pid": os.getpid(),
            "group_commit": gc is not None,
            "batches": gc.batches if gc is not None else 0,
            "requests": gc.requests if gc is not None else 0,
        }

    register_principal_routes(
        app,
        platform=platform,
        keys=keystore,
        authenticate=authenticate,
        on_revoke=lambda principal, stream: revoke_tasks(queue_of_tasks, principal, stream),
        on_unbind=lambda principal, contexts: unbind_tasks(queue_of_tasks, principal, contexts),
    )

    from blockbudget.service.admin_contexts import register_context_routes

    register_context_routes(app, platform=platform, authenticate=authenticate)

    # --- streams and blocks --------------------------------------------------------------------

    def stream_out(name: str, me: Principal) -> sc.StreamOut:
        spec = platform.stream(name)
        perm = me.permission(name)
        return sc.StreamOut(
            name=spec.name,
            policy=spec.policy.to_json(),
            accounting=spec.accounting.value,
            unit=spec.blocking.unit.value,
            column=spec.blocking.column,
            blocks=len(names.known(me, name, platform.store.blocks(name), _id)),
            description=spec.description,
            permission=perm.value if perm is not None else None,
        )

    @app.get("/v1/streams", tags=["streams"])
    def list_streams(me: Auth) -> list[sc.StreamOut]:
        names = [s.name for s in platform.streams()]
        if me.role is not Role.ADMIN:
            names = [n for n in names if me.permission(n) is not None]
        return [stream_out(n, me) for n in names]

    @app.post("/v1/streams", status_code=201, tags=["streams"])
    def create_stream(me: Auth, body: sc.StreamIn) -> sc.StreamOut:
        require_role(me, Role.OWNER)
        unit = Unit(body.by)
        if unit is Unit.TIME:
            blocking = Blocking(
                unit=unit, column=body.column, window=timedelta(seconds=body.window_seconds)
            )
        elif unit is Unit.USER:
            blocking = Blocking(
                unit=unit,
                column=body.column,
                ids_per_block=body.ids_per_block,
                rows_per_user=body.rows_per_user,
            )
        else:
            blocking = Blocking(unit=unit, column=body.column)
        late = (
            LatePolicy(body.late_policy)
            if body.late_policy is not None
            else (LatePolicy.DROP if unit is Unit.USER else LatePolicy.NEW_BLOCK)
        )

        def create(*, exclusive: bool) -> None:
            platform.create_stream(
                body.name,
                policy=Budget(epsilon=body.epsilon, delta=body.delta),
                blocking=blocking,
                accounting=Accounting(body.accounting),
                late_policy=late,
                description=body.description,
                exclusive=exclusive,
            )

        if me.role is Role.ADMIN:
            create(exclusive=False)  # idempotent for an identical spec; grants nothing
            return stream_out(body.name, me)
        # An owner becomes the stream's owner only if this very call inserted it (of two
        # concurrent creators exactly one does); a taken name is a 409 that tells nothing more,
        # except to the stream's own owners, for whom an identical spec is a no-op.
        try:
            create(exclusive=True)
        except StreamExistsError:
            if me.permission(body.name) is not Permission.OWN:
                raise StreamExistsError(
                    f"the stream name {body.name!r} is taken; choose another name"
                ) from None
            create(exclusive=False)
            return stream_out(body.name, me)
        me = keystore.grant(me.name, body.name, Permission.OWN)
        authenticate.invalidate()
        return stream_out(body.name, me)

    @app.get("/v1/streams/{stream}", tags=["streams"])
    def get_stream(me: Auth, stream: str) -> sc.StreamOut:
        require_stream(me, stream)
        return stream_out(stream, me)

    register_ingest_routes(app, platform=platform, authenticate=authenticate)

    def contexts_for(me: Principal, asked: list[str] | None, *, owns: bool) -> list[str]:
        # A stream's owners see its budget in every context (they spend none of it); others
        # see the contexts they may use.
        seen = platform.contexts() if owns else visible_contexts(me, platform.contexts())
        registered = platform.ledger.contexts(include_closed=True)
        if asked:
            for c in asked if not owns else ():
                require_context(me, c)
            bad = sorted(set(asked) - set(registered))
            if bad:
                raise InvalidRequestError(f"unknown context(s) {bad}")
            return list(asked)
        return seen

    @app.get("/v1/streams/{stream}/blocks", tags=["streams"])
    def list_blocks(
        me: Auth,
        stream: str,
        context: Annotated[list[str] | None, Query()] = None,
    ) -> list[sc.BlockOut]:
        perm = require_stream(me, stream)
        ctxs = contexts_for(me, context, owns=perm is Permission.OWN)
        with_rows = me.role is Role.ADMIN or perm is Permission.OWN
        naming = names.naming(me, stream)
        views = platform.blocks(stream, contexts=ctxs)
        views = naming.arrange(names.known(me, stream, views, _id), _id)
        every = sees_every_context(me, perm)
        return [block_out(v, with_rows=with_rows, naming=naming, everywhere=every) for v in views]

    @app.post("/v1/streams/{stream}/retire", tags=["streams"])
    def retire_exhausted(me: Auth, stream: str) -> sc.RetireOut:
        require_stream(me, stream, own=True)
        return sc.RetireOut(retired=platform.retire_exhausted(stream))

    # --- reservations and charges --------------------------------------------------------------

    def selection(
        stream: str, body: sc.Selection, *, context: str, cost: Budget, naming: Naming
    ) -> list[str]:
        if (body.blocks is None) == (body.last is None):
            raise InvalidRequestError("give exactly one of 'blocks' and 'last'")
        sel: list[str] | Last = (
            naming.resolve(body.blocks) if body.blocks is not None else Last(body.last or 1)
        )
        return list(platform.select(stream, sel, context=context, cost=cost))

    def naming_of(me: Principal, res: Reservation) -> Naming:
        """How ``me`` names the blocks of a reservation (all of one stream)."""
        return names.naming(me, parse_block_id(res.blocks[0])[0])

    def reservation_out(r: Reservation, naming: Naming) -> sc.ReservationOut:
        return sc.ReservationOut(
            id=r.id,
            blocks=naming.show_all(r.blocks),
            context=r.context,
            cost=r.cost.to_json(),
            state=r.state.value,
            holder=r.holder,
            expires_at=r.expires_at,
            usage=[
                {**u, "block": naming.show(u["block"])}
                for u in usage_json(
                    r.cost,
                    r.remaining,
                    is_open=r.is_open,
                    filter_=platform.filter(parse_block_id(r.blocks[0])[0]),
                )
            ],
        )

    def owned_reservation(me: Principal, rid: str) -> Reservation:
        res = platform.ledger.reservation(rid)
        if me.role is not Role.ADMIN and res.holder != me.name:
            raise AuthError(403, f"reservation {rid!r} belongs to another principal")
        return res

    @app.post("/v1/streams/{stream}/reservations", status_code=201, tags=["budget"])
    def reserve(me: Auth, stream: str, body: sc.ReserveIn) -> sc.ReservationOut:
        require_stream(me, stream)
        context = resolve_context(me, body.context)
        cost = Budget(epsilon=body.epsilon, delta=body.delta)
        naming = names.naming(me, stream)
        blocks = selection(stream, body, context=context, cost=cost, naming=naming)
        res = platform.ledger.reserve(
            blocks,
            cost,
            context=context,
            holder=me.name,
            ttl_seconds=body.ttl_seconds,
            request_id=scoped(me, body.request_id),
        )
        return reservation_out(res, naming).model_copy(update={"replayed": res.replayed})

    @app.get("/v1/reservations/{rid}", tags=["budget"])
    def get_reservation(me: Auth, rid: str) -> sc.ReservationOut:
        res = owned_reservation(me, rid)
        return reservation_out(res, naming_of(me, res))

    @app.post("/v1/reservations/{rid}/charges", tags=["budget"])
    def draw(me: Auth, rid: str, body: sc.DrawIn) -> sc.ChargeOut:
        res = owned_reservation(me, rid)
        require_context(me, res.context)
        # The holder must still read the stream: an ACL revoked after the reservation was made
        # (directly, or granted later by the scheduler queue) stops its spending too.
        require_stream(me, platform.ledger.state(res.blocks[0], res.context).stream)
        if res.state is not ReservationState.OPEN:
            raise ReservationError(f"reservation {rid!r} is {res.state.value}")
        naming = naming_of(me, res)
        receipt = platform.ledger.charge(
            naming.resolve(body.blocks) if body.blocks else list(res.blocks),
            Budget(epsilon=body.epsilon, delta=body.delta),
            context=res.context,
            reservation_id=rid,
            request_id=scoped(me, body.request_id),
        )
        return sc.ChargeOut(**charge_json(receipt, naming))

    @app.post("/v1/reservations/{rid}/release", tags=["budget"])
    def release(me: Auth, rid: str) -> sc.ReservationOut:
        naming = naming_of(me, owned_reservation(me, rid))
        return reservation_out(platform.ledger.release(rid, request_id=f"{rid}/release"), naming)

    register_charge_routes(app, platform=platform, authenticate=authenticate, names=names)
    register_afford_routes(app, platform=platform, authenticate=authenticate, names=names)

    # --- DP queries ----------------------------------------------------------------------------

    def query_place(
        me: Principal, stream: str, body: sc.Selection, context: str | None
    ) -> tuple[Naming, Last | list[str], str]:
        """ACL and context checks, then the selection with opaque block names resolved."""
        from blockbudget.service.queries import selection_of

        require_stream(me, stream)
        ctx = resolve_context(me, context)
        naming = names.naming(me, stream)
        if body.blocks is not None:
            body = body.model_copy(update={"blocks": naming.resolve(body.blocks)})
        return naming, selection_of(body), ctx

    @app.post("/v1/streams/{stream}/query", tags=["queries"])
    def query(me: Auth, stream: str, body: sc.QueryRunIn) -> sc.QueryResultOut:
        from blockbudget.query import from_dict
        from blockbudget.service.queries import run_query

        if body.reservation_id is not None:  # spend the caller's reservation (reserve nothing)
            from blockbudget.service.queries import granted_query_out

            return granted_query_out(platform, names, me, stream, body)
        naming, chosen, ctx = query_place(me, stream, body, body.context)
        q = from_dict(body.query)
        out = run_query(platform, stream, q, selection=chosen, context=ctx).to_dict()
        return sc.QueryResultOut(**{**out, "blocks": naming.show_all(out["blocks"])})

    @app.post("/v1/streams/{stream}/query/price", tags=["queries"])
    def query_price(me: Auth, stream: str, body: sc.QueryRunIn) -> sc.DryRunOut:
        from blockbudget.query import from_dict
        from blockbudget.service.queries import price_query

        if body.reservation_id is not None:
            raise InvalidRequestError(
                "pricing takes 'blocks' or 'last'; a reservation's cover is checked when the "
                "query runs on it"
            )
        naming, chosen, ctx = query_place(me, stream, body, body.context)
        q = from_dict(body.query)
        out = price_query(platform, stream, q, selection=chosen, context=ctx).to_dict()
        return sc.DryRunOut(**{**out, "blocks": naming.show_all(out["blocks"])})

    @app.post("/v1/streams/{stream}/queries/{kind}", tags=["queries"])
    def legacy_query(
        me: Auth,
        stream: str,
        kind: sc.QueryKind,
        body: Annotated[sc.QueryIn, Body()],
    ) -> sc.QueryOut:
        from blockbudget.query import from_dict
        from blockbudget.service.queries import legacy_form, legacy_out, run_query

        naming, chosen, ctx = query_place(me, stream, body, body.context)
        q = from_dict(legacy_form(kind.value, body))
        result = run_query(platform, stream, q, selection=chosen, context=ctx)
        out = legacy_out(kind.value, result)
        return out.model_copy(update={"blocks": naming.show_all(out.blocks)})

    from blockbudget.service.pipelines import register_pipeline_routes

    register_pipeline_routes(
        app, platform=platform, queue=queue_of_tasks, authenticate=authenticate
    )

    # --- audit ---------------------------------------------------------------------------------

    @app.get("/v1/audit/events", tags=["audit"])
    def audit_events(
        me: Auth,
        after_seq: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    ) -> list[sc.EventOut]:
        require_role(me)
        return [
            sc.EventOut(
                seq=e.seq,
                ts=e.ts,
                kind=e.kind.value,
                request_id=e.request_id,
                context=e.context,
                payload=e.payload,
                hash=e.hash,
            )
            for e in platform.ledger.events(after_seq=after_seq, limit=limit)
        ]

    @app.get("/v1/audit/verify", tags=["audit"])
    def audit_verify(me: Auth, full: bool = False) -> sc.VerifyOut:
        require_role(me)
        r = platform.verify(full=full)
        return sc.VerifyOut(
            ok=r.ok,
            events=r.events,
            blocks=r.blocks,
            contexts=r.contexts,
            problems=list(r.problems),
        )

    register_queue_routes(
        app,
        platform=platform,
        queue=queue_of_tasks,
        authenticate=authenticate,
        names=names,
        default_scheduler=scheduler,
    )

    from blockbudget.service.stream_releases import register_stream_release_routes

    register_stream_release_routes(app, platform=platform, authenticate=authenticate)

    from blockbudget.service.max_ids import register_max_id_routes

    register_max_id_routes(app, platform=platform, authenticate=authenticate)

    register_dashboard_routes(
        app,
        platform=platform,
        tasks=queue_of_tasks,
        authenticate=authenticate,
        names=names,
        alert_below=alert_threshold_from_env() if alert_below is None else alert_below,
    )

    from blockbudget.service.readiness import register_readiness_route

    register_readiness_route(app, engine=platform.ledger.engine)
    register_metrics(app, alert_below=alert_below)  # reads app.state's platform, keys, tasks
    return app


def _id(item: Any) -> str:
    """The block id of a block view or block meta."""
    return str(item.block_id)


__all__ = ["DEFAULT_PIPELINE_SCHEDULER", "create_app", "open_platform"]

"""Streams and their blocks over HTTP: list, create and read streams; list a stream's blocks
with their remaining budgets; retire its exhausted blocks.

Anyone lists the streams it may read (admins: all). Owners (and admins) create streams: an
owner becomes the owner of a stream only if its own call created it, so a taken name answers a
409 that tells nothing more, except to the stream's own owners, for whom an identical spec is a
no-op. A block listing shows a stream's budget in the contexts the caller may use (its owners:
every open context); exact row counts go to its owners and admins only, and analysts see the
blocks of user- and attribute-blocked streams by opaque ids
(:mod:`blockbudget.service.blocknames`). Retiring is for the stream's owners.
"""

from datetime import timedelta
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError, StreamExistsError
from blockbudget.platform import Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import (
    Authenticator,
    require_context,
    require_role,
    require_stream,
    visible_contexts,
)
from blockbudget.service.auth import KeyStore, Permission, Principal, Role
from blockbudget.service.blocknames import BlockNames
from blockbudget.service.dashboard_routes import block_out, sees_every_context
from blockbudget.service.params import ContextItem, StreamPath
from blockbudget.store import Blocking, LatePolicy, Unit

__all__ = ["blocking_of", "contexts_for", "register_stream_routes", "stream_json"]


def blocking_of(body: sc.StreamIn) -> tuple[Blocking, LatePolicy]:
    """The blocking and late-row policy a stream creation asks for (a user stream drops late
    rows by default, any other stream opens a new block for them)."""
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
    return blocking, late


def stream_json(platform: Platform, names: BlockNames, name: str, me: Principal) -> sc.StreamOut:
    """A stream as ``me`` sees it (its block count: the blocks ``me`` may know of)."""
    spec = platform.stream(name)
    perm = me.permission(name)
    return sc.StreamOut(
        name=spec.name,
        policy=spec.policy.to_json(),
        accounting=spec.accounting.value,
        unit=spec.blocking.unit.value,
        column=spec.blocking.column,
        blocks=len(names.known(me, name, platform.block_metas(name), _id)),
        description=spec.description,
        permission=perm.value if perm is not None else None,
    )


def contexts_for(
    platform: Platform, me: Principal, asked: list[str] | None, *, owns: bool
) -> list[str]:
    """The contexts a block listing shows: those ``asked`` (each one ``me`` may use, unless
    ``owns``; each registered), else every open context to a stream's owners (they spend none
    of its budget) and the contexts ``me`` may use to anyone else."""
    seen = platform.contexts() if owns else visible_contexts(me, platform.contexts())
    registered = platform.contexts(include_closed=True)
    if asked:
        for c in asked if not owns else ():
            require_context(me, c)
        bad = sorted(set(asked) - set(registered))
        if bad:
            raise InvalidRequestError(f"unknown context(s) {bad}")
        return list(asked)
    return seen


def register_stream_routes(
    app: FastAPI,
    *,
    platform: Platform,
    keys: KeyStore,
    authenticate: Authenticator,
    names: BlockNames,
) -> None:
    """Add ``GET``/``POST /v1/streams``, ``GET /v1/streams/{stream}``,
    ``GET /v1/streams/{stream}/blocks`` and ``POST /v1/streams/{stream}/retire`` to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    def stream_out(name: str, me: Principal) -> sc.StreamOut:
        return stream_json(platform, names, name, me)

    @app.get("/v1/streams", tags=["streams"])
    def list_streams(me: Auth) -> list[sc.StreamOut]:
        shown = [s.name for s in platform.streams()]
        if me.role is not Role.ADMIN:
            shown = [n for n in shown if me.permission(n) is not None]
        return [stream_out(n, me) for n in shown]

    @app.post("/v1/streams", status_code=201, tags=["streams"])
    def create_stream(me: Auth, body: sc.StreamIn) -> sc.StreamOut:
        require_role(me, Role.OWNER)
        blocking, late = blocking_of(body)

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
        me = keys.grant(me.name, body.name, Permission.OWN)
        authenticate.invalidate()
        return stream_out(body.name, me)

    @app.get("/v1/streams/{stream}", tags=["streams"])
    def get_stream(me: Auth, stream: StreamPath) -> sc.StreamOut:
        require_stream(me, stream)
        return stream_out(stream, me)

    @app.get("/v1/streams/{stream}/blocks", tags=["streams"])
    def list_blocks(
        me: Auth,
        stream: StreamPath,
        context: Annotated[list[ContextItem] | None, Query(max_length=64)] = None,
    ) -> list[sc.BlockOut]:
        perm = require_stream(me, stream)
        ctxs = contexts_for(platform, me, context, owns=perm is Permission.OWN)
        with_rows = me.role is Role.ADMIN or perm is Permission.OWN
        naming = names.naming(me, stream)
        views = platform.blocks(stream, contexts=ctxs)
        views = naming.arrange(names.known(me, stream, views, _id), _id)
        every = sees_every_context(me, perm)
        return [block_out(v, with_rows=with_rows, naming=naming, everywhere=every) for v in views]

    @app.post("/v1/streams/{stream}/retire", tags=["streams"])
    def retire_exhausted(me: Auth, stream: StreamPath) -> sc.RetireOut:
        require_stream(me, stream, own=True)
        return sc.RetireOut(retired=platform.retire_exhausted(stream))


def _id(item: Any) -> str:
    """The block id of a block view or block meta."""
    return str(item.block_id)

"""The dashboard's data route: ``GET /v1/dashboard`` (blocks, heatmap, retiring blocks, the
task queue, pipeline jobs and released models) for one stream the caller may see.

An analyst sees only its streams, its contexts and its own tasks and jobs, no row counts, and on
user and attribute streams opaque block ids, sorted, instead of keys
(:mod:`blockbudget.service.blocknames`).
"""

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, FastAPI, Query

from blockbudget.errors import InvalidRequestError
from blockbudget.ledger import AuditEvent
from blockbudget.platform import BlockView, Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, require_stream, visible_contexts
from blockbudget.service.auth import Permission, Principal, Role
from blockbudget.service.blocknames import BlockNames, Naming
from blockbudget.service.dashboard import RETIRING_FRACTION, heatmap
from blockbudget.service.pipelines import job_json
from blockbudget.tasks.model import WorkKind

if TYPE_CHECKING:
    from blockbudget.tasks.queue import TaskQueue


def block_out(v: BlockView, *, with_rows: bool, naming: Naming) -> sc.BlockOut:
    """The public form of a block (row counts only ``with_rows``; id and key as ``naming``
    says)."""
    return sc.BlockOut(
        block_id=naming.show(v.block_id),
        key=naming.key(v.block_id, v.key),
        sealed=v.sealed,
        retired=v.retired,
        remaining_fraction=v.remaining_fraction,
        remaining=v.remaining_exact,
        remaining_display=v.remaining,
        rows=v.rows if with_rows else None,
    )


def _about(event: AuditEvent, stream: str, blocks: set[str]) -> bool:
    """Whether an audit event concerns ``stream`` (one of its ``blocks``, or the stream)."""
    payload = event.payload
    if payload.get("stream") == stream:
        return True
    named = payload.get("blocks")
    if isinstance(named, list):
        return any(b in blocks for b in named)
    return any(b in blocks for b in payload.get("returned", ()))


def register_dashboard_routes(
    app: FastAPI,
    *,
    platform: Platform,
    tasks: "TaskQueue",
    authenticate: Authenticator,
    names: BlockNames,
) -> None:
    """Add ``GET /v1/dashboard`` to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]
    naming_of = names.naming
    names_known = names.known

    @app.get("/v1/dashboard", tags=["dashboard"])
    def dashboard_data(
        me: Auth,
        stream: Annotated[str | None, Query(max_length=256)] = None,
        buckets: Annotated[int, Query(ge=1, le=200)] = 24,
    ) -> sc.DashboardOut:
        names = [s.name for s in platform.streams()]
        if me.role is not Role.ADMIN:
            names = [n for n in names if me.permission(n) is not None]
        if stream is None:
            if not names:
                raise InvalidRequestError("no stream is visible to this principal")
            stream = names[0]
        perm = require_stream(me, stream)
        spec = platform.stream(stream)
        ctxs = visible_contexts(me, platform.contexts())
        with_rows = me.role is Role.ADMIN or perm is Permission.OWN
        naming = naming_of(me, stream)
        # hidden blocks in opaque-id order everywhere (tables, heatmap rows, retiring)
        views = naming.arrange(
            names_known(me, stream, platform.blocks(stream, contexts=ctxs), _view_id), _view_id
        )
        mine = {v.block_id for v in views}
        hm = heatmap(
            # only this stream's events: its time axis then says nothing about when other
            # streams (which the caller may not read) were used
            [e for e in platform.ledger.events() if _about(e, stream, mine)],
            blocks=[v.block_id for v in views],
            contexts=ctxs,
            filter_=platform.filter(stream),
            buckets=buckets,
        )
        retiring = [
            naming.show(v.block_id)
            for v in views
            if not v.retired
            and ctxs
            and all(v.remaining_fraction[c] <= RETIRING_FRACTION for c in ctxs)
        ]
        jobs = [  # pipeline jobs: tasks of kind pipeline (the TaskQueue's pipeline family)
            job_json(t)
            for t in tasks.tasks(
                stream=stream,
                kind=WorkKind.PIPELINE,
                principal=None if me.role is Role.ADMIN else me.name,
            )[-200:]
        ]
        return sc.DashboardOut(
            stream=stream,
            streams=names,
            policy={"epsilon": str(spec.policy.epsilon), "delta": str(spec.policy.delta)},
            blocks=[block_out(v, with_rows=with_rows, naming=naming) for v in views],
            retiring=retiring,
            heatmap=sc.HeatmapOut(
                blocks=naming.show_all(hm.blocks),
                retired=naming.show_all(hm.retired),
                retired_at={
                    naming.show(b): k
                    for b, k in naming.arrange(hm.retired_at.items(), lambda item: item[0])
                },
                times=list(hm.times),
                contexts=hm.cells,
            ),
            extras={
                "scheduler_queue": [
                    {
                        "task": t.id[:12],
                        "principal": t.principal,
                        "context": t.context,
                        "kind": t.kind.value,
                        "demand": str(t.demand),
                        "blocks": len(t.blocks),
                        "state": t.state.value,
                        "grant": t.reservation_id or "-",
                        "note": naming.text(t.note) or "-",
                    }
                    for t in tasks.tasks(
                        stream=stream, principal=None if me.role is Role.ADMIN else me.name
                    )[-200:]
                ],
                "pipelines": [
                    {
                        "job": j["id"],
                        "owner": j["owner"],
                        "kind": j["kind"],
                        "context": j["context"],
                        "state": j["state"],
                        "outcomes": " ".join(a["outcome"] for a in j["attempts"]) or "-",
                    }
                    for j in jobs
                ],
                "released_models": [
                    {"job": j["id"], "kind": j["kind"], "model": j["model"] or ""}
                    for j in jobs
                    if j["state"] == "accepted"
                ],
            },
        )


def _view_id(view: BlockView) -> str:
    return view.block_id

"""The dashboard's data route: ``GET /v1/dashboard`` (blocks, heatmap, remaining budget over
time, retiring blocks, low-budget alerts, the task queue, pipeline jobs and released models) for
one stream the caller may see.

The history comes from the stream's own audit events (:mod:`blockbudget.service.dashboard_index`),
so its cost does not grow with other streams' history. Retiring blocks and alerts use the one
definition of :mod:`blockbudget.lowbudget`, per context: every role counts the same retiring
blocks in the same context. Whether a block is retiring in *every* open context (about to
retire) is shown only to viewers who see every open context — admins and the stream's owners
(:func:`sees_every_context`) — since it tells something of each of them.

An analyst sees only its streams, its contexts and its own tasks and jobs, no row counts, and on
user and attribute streams opaque block ids, sorted, instead of keys
(:mod:`blockbudget.service.blocknames`).
"""

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, FastAPI, Query

from blockbudget.errors import InvalidRequestError
from blockbudget.ledger import AuditEvent, EventKind
from blockbudget.lowbudget import check_threshold
from blockbudget.platform import BlockView, Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, require_stream, visible_contexts
from blockbudget.service.auth import Permission, Principal, Role
from blockbudget.service.blocknames import BlockNames, Naming
from blockbudget.service.dashboard import alerts_from_views, heatmap
from blockbudget.service.dashboard_index import StreamEventIndex
from blockbudget.service.params import StreamQuery
from blockbudget.service.pipelines import job_json
from blockbudget.tasks.model import WorkKind

if TYPE_CHECKING:
    from blockbudget.tasks.queue import TaskQueue


def sees_every_context(me: Principal, permission: Permission | None) -> bool:
    """Whether ``me`` (with ``permission`` on the stream) sees its budget in every open
    context: admins, and the stream's owners (who spend none of it and see all of it)."""
    return me.role is Role.ADMIN or permission is Permission.OWN


def block_out(
    v: BlockView, *, with_rows: bool, naming: Naming, everywhere: bool = False
) -> sc.BlockOut:
    """The public form of a block (row counts only ``with_rows``; id and key as ``naming``
    says; the every-open-context ``retiring`` flag only when the viewer sees them all,
    ``everywhere``)."""
    shown = v.to_json(
        block_id=naming.show(v.block_id),
        key=naming.key(v.block_id, v.key),
        with_rows=with_rows,
        everywhere=everywhere,
    )
    return sc.BlockOut(**shown)


def _touching(events: list[AuditEvent], shown: set[str]) -> list[AuditEvent]:
    """The events that name a shown block: the axis says nothing about blocks a caller may not
    know of (on a user stream, those beyond the released maximum id)."""
    out = []
    for e in events:
        named = [e.payload.get("block")] if e.kind is EventKind.BLOCK_ADDED else e.payload["blocks"]
        if any(b in shown for b in named):
            out.append(e)
    return out


def register_dashboard_routes(
    app: FastAPI,
    *,
    platform: Platform,
    tasks: "TaskQueue",
    authenticate: Authenticator,
    names: BlockNames,
    alert_below: float = 0.1,
) -> None:
    """Add ``GET /v1/dashboard`` to ``app``; ``alert_below`` is the default low-budget alert
    threshold (a caller may pass ``alert_below`` to look at another one)."""
    Auth = Annotated[Principal, Depends(authenticate)]
    default_below = check_threshold(alert_below)
    history = StreamEventIndex(platform.database)
    naming_of = names.naming
    names_known = names.known

    @app.get("/v1/dashboard", tags=["dashboard"])
    def dashboard_data(
        me: Auth,
        stream: StreamQuery = None,
        buckets: Annotated[int, Query(ge=1, le=200)] = 24,
        alert_below: Annotated[float | None, Query(ge=0.0, le=1.0)] = None,
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
        hm = heatmap(
            # only this stream's events: its time axis then says nothing about when other
            # streams (which the caller may not read) were used
            _touching(history.events(stream), {v.block_id for v in views}),
            blocks=[v.block_id for v in views],
            contexts=ctxs,
            filter_=platform.filter(stream),
            buckets=buckets,
        )
        everywhere = sees_every_context(me, perm)
        retiring = {c: [naming.show(v.block_id) for v in views if v.retiring_in[c]] for c in ctxs}
        below = default_below if alert_below is None else alert_below
        alerts = [
            sc.AlertOut(
                stream=a.stream,
                context=a.context,
                below=a.below,
                blocks=naming.show_all(a.blocks),
                lowest=a.lowest,
            )
            for a in alerts_from_views(stream, views, below=below, contexts=ctxs)
        ]
        return sc.DashboardOut(
            stream=stream,
            streams=names,
            policy={"epsilon": str(spec.policy.epsilon), "delta": str(spec.policy.delta)},
            blocks=[
                block_out(v, with_rows=with_rows, naming=naming, everywhere=everywhere)
                for v in views
            ],
            retiring=retiring,
            retiring_everywhere=(
                [naming.show(v.block_id) for v in views if v.retiring] if everywhere else None
            ),
            heatmap=sc.HeatmapOut(
                blocks=naming.show_all(hm.blocks),
                retired=naming.show_all(hm.retired),
                retired_at={
                    naming.show(b): k
                    for b, k in naming.arrange(hm.retired_at.items(), lambda item: item[0])
                },
                times=list(hm.times),
                start=hm.start,
                contexts=hm.cells,
                remaining=hm.remaining,
            ),
            series=sc.SeriesOut(times=list(hm.times), contexts=hm.series),
            alert_below=below,
            alerts=alerts,
            extras=_extras(tasks, stream, None if me.role is Role.ADMIN else me.name, naming),
        )


def _extras(
    tasks: "TaskQueue", stream: str, principal: str | None, naming: Naming
) -> dict[str, list[dict[str, object]]]:
    """The task queue, pipeline jobs and released models of ``stream`` (``principal``'s own
    only, unless None), the newest 200 of each."""
    jobs = [  # pipeline jobs: tasks of kind pipeline (the TaskQueue's pipeline family)
        job_json(t)
        for t in tasks.tasks(stream=stream, kind=WorkKind.PIPELINE, principal=principal)[-200:]
    ]
    return {
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
            for t in tasks.tasks(stream=stream, principal=principal)[-200:]
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
    }


def _view_id(view: BlockView) -> str:
    return view.block_id

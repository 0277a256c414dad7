"""DP queries over HTTP: run a query, price it, or run one of the legacy per-statistic forms.

``POST /v1/streams/{stream}/query`` runs a query (:mod:`blockbudget.query`) on ``blocks`` or the
``last`` live ones, reserving its cost there, or spends the caller's own reservation
(``reservation_id``; :func:`blockbudget.service.queries.run_granted_query`). ``…/query/price``
says what it would cost and which blocks can afford it, reserving nothing.
``…/queries/{kind}`` is the earlier one-statistic form. Each checks the caller's stream ACL and
context binding first; analysts name the blocks of user- and attribute-blocked streams by
opaque ids and get them back so (:mod:`blockbudget.service.blocknames`). The work itself lives
in :mod:`blockbudget.service.queries`.
"""

from typing import Annotated

from fastapi import Body, Depends, FastAPI

from blockbudget.errors import InvalidRequestError
from blockbudget.platform import Last, Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, require_stream, resolve_context
from blockbudget.service.auth import Principal
from blockbudget.service.blocknames import BlockNames, Naming
from blockbudget.service.params import StreamPath
from blockbudget.service.task_forms import dry_run_refusal

__all__ = ["register_query_routes"]


def register_query_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator, names: BlockNames
) -> None:
    """Add ``POST /v1/streams/{stream}/query``, ``…/query/price`` and
    ``…/queries/{kind}`` to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

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
    def query(me: Auth, stream: StreamPath, body: sc.QueryRunIn) -> sc.QueryResultOut:
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
    def query_price(me: Auth, stream: StreamPath, body: sc.QueryRunIn) -> sc.DryRunOut:
        from blockbudget.query import from_dict
        from blockbudget.service.queries import price_query

        if body.reservation_id is not None:
            raise InvalidRequestError(
                "pricing takes 'blocks' or 'last'; a reservation's cover is checked when the "
                "query runs on it"
            )
        naming, chosen, ctx = query_place(me, stream, body, body.context)
        q = from_dict(body.query)
        priced = price_query(platform, stream, q, selection=chosen, context=ctx)
        out = priced.to_dict()
        if not priced.ok:  # what the blocks lack, as a refused task's (RefusalOut)
            out["refusal"] = dry_run_refusal(
                platform, stream, ctx, priced.reserve, list(priced.blocks), naming
            )
        return sc.DryRunOut(**{**out, "blocks": naming.show_all(out["blocks"])})

    @app.post("/v1/streams/{stream}/queries/{kind}", tags=["queries"])
    def legacy_query(
        me: Auth,
        stream: StreamPath,
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

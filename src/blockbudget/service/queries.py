"""DP queries over HTTP: the query's JSON form, run or priced by :mod:`blockbudget.query`.

``POST /v1/streams/{stream}/query`` takes ``{"query": <JSON form>, "context", "blocks" |
"last"}`` and answers the :class:`~blockbudget.query.QueryResult`'s JSON form;
``POST /v1/streams/{stream}/query/price`` answers the :class:`~blockbudget.query.DryRun`'s,
reserving, sealing and charging nothing. The legacy ``POST /v1/streams/{stream}/queries/{kind}``
(count, sum, mean, histogram with flat fields) is translated to the same JSON form and run by the
same code. The JSON form is validated once, by :func:`blockbudget.query.from_dict`.

Each query is one grant: the query is checked from the stream's schema first, so a malformed one
reserves and seals nothing; :meth:`Platform.request` reserves the cost on the chosen blocks (on a
user-level stream the group-privacy cost), the grant's engine computes exact aggregates, the cost
is drawn durably *before* any noise, and closing the grant releases the rest. Only the DP answer
and its public metadata go back. A failure while reading or processing rows is answered with a
stable code (``query_failed_data``) and our own message, never the exception's text, which may
quote a cell (:mod:`blockbudget.service.failures`).

With ``reservation_id`` the query spends the caller's open reservation instead (e.g. what the
scheduler granted its task): nothing is reserved, the reservation's blocks are read, the draw
comes out of it and must fit what it still holds (:func:`run_granted_query`).
"""

from __future__ import annotations

from typing import Any

from blockbudget.errors import InvalidRequestError
from blockbudget.platform import Last, Platform
from blockbudget.query import (
    DryRun,
    Query,
    QueryResult,
    aggregate,
    close_if_spent,
    open_grant,
    open_reserved,
    price,
    release,
    spend,
)
from blockbudget.service import schemas as sc
from blockbudget.service.access import require_context, require_stream
from blockbudget.service.auth import Principal
from blockbudget.service.blocknames import BlockNames
from blockbudget.service.failures import LEDGER_REFUSALS, concealing


def selection_of(body: sc.Selection) -> list[str] | Last:
    """The blocks a body selects: explicit ids (already resolved) or the newest ``last``.

    Raises:
        InvalidRequestError: both or neither given.
    """
    if (body.blocks is None) == (body.last is None):
        raise InvalidRequestError("give exactly one of 'blocks' and 'last'")
    return list(body.blocks) if body.blocks else Last(body.last or 1)


def run_query(
    platform: Platform, stream: str, query: Query, *, selection: list[str] | Last, context: str
) -> QueryResult:
    """Run ``query`` in ``context``, which the caller has resolved
    (:func:`blockbudget.service.access.resolve_context`).

    Raises:
        InvalidRequestError: a query that does not fit the stream, refused by
            :func:`blockbudget.query.check` before anything is reserved or sealed.
        ConcealedError: a failure while reading or computing on rows (a stable code only).
    """
    # Checking and reserving: our own validation and the ledger's refusals go out as they are;
    # reading and computing: anything raised while touching rows is concealed.
    with concealing("query", passing=(*LEDGER_REFUSALS, InvalidRequestError)):
        grant, pricing = open_grant(platform, stream, query, blocks=selection, context=context)
    with grant, concealing("query"):
        partials = aggregate(grant, query, pricing)
        return release(grant, query, partials, pricing)


def run_granted_query(
    platform: Platform,
    me: Principal,
    stream: str,
    query: Query,
    *,
    reservation_id: str,
    context: str | None,
) -> QueryResult:
    """Run ``query`` on the caller's open reservation ``reservation_id``: reserve nothing, draw
    from it (``POST /v1/streams/{s}/query`` with ``reservation_id``).

    Only the reservation's holder may spend it (anyone else, admins included, gets the 404 of
    an unknown reservation: whether it exists does not leak); it must hold budget on blocks of
    ``stream``, in a context the caller is bound to (and, when ``context`` is named, in that
    one); the query's draw must fit what it still holds on every block. Every refusal comes
    before any row is read and charges nothing. The reservation stays open for further draws
    (the holder releases it, or it expires) unless this draw spent all it held: then it is
    closed.

    Raises:
        UnknownReservationError: unknown, or not the caller's (404).
        AuthError: 403 for a stream the caller may not read or a context it is not bound to.
        InvalidRequestError: another stream's or context's reservation, or a query that does
            not fit the stream (422).
        ReservationError: closed or expired, or too little left for the query (409).
        ConcealedError: a failure while reading or computing on rows (a stable code only).
    """
    require_stream(me, stream)
    res = platform.open_reservation(reservation_id, holder=me.name)
    require_context(me, res.context)  # still bound to the context it spends in
    with concealing("query", passing=(*LEDGER_REFUSALS, InvalidRequestError)):
        grant, pricing = open_reserved(
            platform, stream, query, reservation=res.id, holder=me.name, context=context
        )
    with concealing("query"):
        result = spend(grant, query, pricing)
    with concealing("query", passing=(*LEDGER_REFUSALS, InvalidRequestError)):
        close_if_spent(grant)
    return result


def granted_query_out(
    platform: Platform, names: BlockNames, me: Principal, stream: str, body: sc.QueryRunIn
) -> sc.QueryResultOut:
    """``POST /v1/streams/{s}/query`` with ``reservation_id`` (:func:`run_granted_query`),
    its blocks named as the caller may see them.

    Raises:
        InvalidRequestError: ``blocks`` or ``last`` given as well; as
            :func:`run_granted_query`.
    """
    from blockbudget.query import from_dict

    assert body.reservation_id is not None
    if body.blocks is not None or body.last is not None:
        raise InvalidRequestError(
            "a query on a reservation reads the reservation's blocks: give 'reservation_id' "
            "without 'blocks' or 'last'"
        )
    q = from_dict(body.query)
    result = run_granted_query(
        platform, me, stream, q, reservation_id=body.reservation_id, context=body.context
    )
    out = result.to_dict()
    return sc.QueryResultOut(**{**out, "blocks": names.naming(me, stream).show_all(out["blocks"])})


def price_query(
    platform: Platform, stream: str, query: Query, *, selection: list[str] | Last, context: str
) -> DryRun:
    """Price ``query`` (a dry run: no row read, nothing reserved, sealed or charged)."""
    return price(platform, stream, query, blocks=selection, context=context)


#: The fields of the legacy flat body each statistic reads (it ignored the others).
_LEGACY_FIELDS = {
    "count": (),
    "sum": ("column", "lower", "upper"),
    "mean": ("column", "lower", "upper"),
    "histogram": ("column", "categories"),
}


def legacy_form(kind: str, body: sc.QueryIn) -> dict[str, Any]:
    """The JSON form of a legacy ``/queries/{kind}`` body (fields the statistic does not read
    are ignored, as they always were on this route)."""
    form: dict[str, Any] = {"statistic": kind, "epsilon": body.epsilon}
    for name in _LEGACY_FIELDS[kind]:
        value = getattr(body, name)
        if value is not None:
            form[name] = value
    return form


def legacy_out(kind: str, result: QueryResult) -> sc.QueryOut:
    """A result in the legacy answer's shape (histograms as ``{category: count}``)."""
    value: Any = result.value
    if isinstance(value, dict):
        value = {str(c): float(v) for c, v in value.items()}
    return sc.QueryOut(
        kind=kind,
        value=value,
        cost=result.cost.to_json(),
        blocks=list(result.blocks),
        context=result.context,
        noise=result.noise_summary,
        secure_noise=result.secure_noise,
    )

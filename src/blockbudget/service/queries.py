"""The core's DP queries over HTTP: count, sum, mean and histogram on a window of blocks.

Each query is one grant, run by :func:`blockbudget.query.run_query`: every argument is checked
from the stream's schema first (:func:`blockbudget.query.check_query`), so a malformed query
reserves nothing and seals nothing; then :meth:`Platform.request` reserves the cost on the
chosen blocks (on a user-level stream the group-privacy cost), the statistic draws it durably
*before* computing noise (:class:`~blockbudget.grant.Grant`), and closing the grant releases
nothing or the rest. Only the DP answer and its public metadata go back; histogram bins must be
public (given by the caller). A failure while reading or processing rows is answered with a
stable code (``query_failed_data``) and our own message, never the exception's text, which may
quote a cell (:mod:`blockbudget.service.failures`).
"""

from __future__ import annotations

from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms import Histogram
from blockbudget.platform import Last, Platform
from blockbudget.query import QueryKind, QuerySpec, compute, open_query
from blockbudget.service import schemas as sc
from blockbudget.service.failures import LEDGER_REFUSALS, concealing


def spec_of(kind: str, body: sc.QueryIn) -> QuerySpec:
    """The core query a request body asks for."""
    return QuerySpec(
        kind=QueryKind(kind),
        epsilon=body.epsilon,
        column=body.column,
        lower=body.lower,
        upper=body.upper,
        categories=tuple(body.categories) if body.categories is not None else None,
    )


def run_query(platform: Platform, stream: str, kind: str, body: sc.QueryIn) -> sc.QueryOut:
    """Run one DP query (see the module docstring) in ``body.context``, which the caller has
    resolved (see :func:`blockbudget.service.access.resolve_context`).

    Raises:
        InvalidRequestError: a bad selection or no context; a malformed query, refused by
            :func:`blockbudget.query.check_query` before anything is reserved or sealed.
        ConcealedError: a failure while reading or computing on rows (a stable code only).
    """
    if (body.blocks is None) == (body.last is None):
        raise InvalidRequestError("give exactly one of 'blocks' and 'last'")
    if body.context is None:
        raise InvalidRequestError("a query needs a context")
    selection: list[str] | Last = list(body.blocks) if body.blocks else Last(body.last or 1)
    spec = spec_of(kind, body)
    # Checking and reserving (open_query checks the query first, once): our own validation and
    # the ledger's refusals go out as they are; reading and computing: anything raised while
    # touching rows is concealed (service.failures).
    with concealing("query", passing=(*LEDGER_REFUSALS, InvalidRequestError)):
        grant = open_query(platform, stream, spec, blocks=selection, context=body.context)
    with grant, concealing("query"):
        result = compute(grant, spec)
        blocks = list(grant.blocks)
    value: float | list[float] | dict[str, float]
    if isinstance(result.value, Histogram):
        value = {str(c): float(v) for c, v in result.value.as_dict().items()}
    elif isinstance(result.value, tuple):
        value = [float(v) for v in result.value]
    else:
        value = float(result.value)
    return sc.QueryOut(
        kind=kind,
        value=value,
        cost=result.cost.to_json(),
        blocks=blocks,
        context=body.context,
        noise=result.noise_summary,
        secure_noise=result.secure_noise,
    )

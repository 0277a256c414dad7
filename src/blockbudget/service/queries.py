"""The core's DP queries over HTTP: count, sum, mean and histogram on a window of blocks.

Each query is one grant: :meth:`Platform.request` reserves the cost on the chosen blocks (on a
user-level stream the group-privacy cost), the statistic draws it durably *before* computing
noise (:class:`~blockbudget.grant.Grant`), and closing the grant releases nothing or the rest.
Every argument is checked before the request, so a malformed query reserves nothing. Only the
DP answer and its public metadata go back; histogram bins must be public (given by the caller).
A failure while reading or processing rows is answered with a stable code
(``query_failed_data``) and our own message, never the exception's text, which may quote a cell
(:mod:`blockbudget.service.failures`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError, UnknownColumnError
from blockbudget.grant import Grant, group_cost
from blockbudget.mechanisms import DPResult, Histogram
from blockbudget.mechanisms import statistics as stats
from blockbudget.platform import Last, Platform
from blockbudget.service import schemas as sc
from blockbudget.service.failures import LEDGER_REFUSALS, concealing


def check_query(platform: Platform, stream: str, kind: str, body: sc.QueryIn) -> None:
    """Refuse a malformed query before anything is reserved.

    Raises:
        UnknownColumnError: an unknown column.
        InvalidRequestError: a missing column, missing bounds, missing or repeated
            bins, or a bad selection.
    """
    if (body.blocks is None) == (body.last is None):
        raise InvalidRequestError("give exactly one of 'blocks' and 'last'")
    if kind == "count":
        return
    if body.column is None:
        raise InvalidRequestError(f"a DP {kind} needs 'column'")
    schema = platform.store.schema(stream)
    if schema is None or body.column not in schema.names:
        raise UnknownColumnError(stream, [body.column], [] if schema is None else schema.names)
    if kind == "histogram":
        if not body.categories:
            raise InvalidRequestError("a DP histogram needs public 'categories' (its bins)")
        if len(set(body.categories)) != len(body.categories):
            raise InvalidRequestError(
                f"a DP histogram needs distinct 'categories', got {body.categories[:20]}"
            )
        return
    column_type = schema.field(body.column).type
    if not (
        pa.types.is_integer(column_type)
        or pa.types.is_floating(column_type)
        or pa.types.is_boolean(column_type)
    ):
        raise InvalidRequestError(
            f"a DP {kind} needs a numeric column; {body.column!r} of stream {stream!r} holds "
            f"{column_type}"
        )
    if body.lower is None or body.upper is None or not body.lower < body.upper:
        raise InvalidRequestError(
            f"a DP {kind} needs public clipping bounds lower < upper, got "
            f"lower={body.lower!r}, upper={body.upper!r}"
        )


def _compute(grant: Grant, kind: str, body: sc.QueryIn) -> DPResult[Any]:
    """The DP statistic ``kind`` on the grant's rows (each draw charged before its noise)."""
    frame = grant.frame()
    if kind == "count":
        return stats.dp_count(grant, frame, epsilon=body.epsilon)
    if kind == "histogram":
        assert body.column is not None and body.categories is not None
        return stats.dp_histogram(
            grant,
            frame[body.column].astype(str).to_numpy(),
            categories=list(body.categories),
            epsilon=body.epsilon,
        )
    assert body.column is not None and body.lower is not None and body.upper is not None
    values = frame[body.column].dropna().to_numpy(dtype=float)
    fn = stats.dp_sum if kind == "sum" else stats.dp_mean
    return fn(grant, values, epsilon=body.epsilon, lower=body.lower, upper=body.upper)


def run_query(platform: Platform, stream: str, kind: str, body: sc.QueryIn) -> sc.QueryOut:
    """Run one DP query (see the module docstring)."""
    check_query(platform, stream, kind, body)
    cost = Budget(epsilon=body.epsilon)
    k = platform.stream(stream).blocking.rows_per_user or 1
    reserve = group_cost(cost, k)
    selection: list[str] | Last = list(body.blocks) if body.blocks else Last(body.last or 1)
    columns = [body.column] if body.column is not None else None
    # Reserving and reading: the ledger's refusals and our own validation go out as they are;
    # anything raised while reading rows is concealed (service.failures).
    with concealing("query", passing=(*LEDGER_REFUSALS, InvalidRequestError)):
        grant = platform.request(
            stream, blocks=selection, budget=reserve, context=body.context, columns=columns
        )
    with grant, concealing("query"):
        result = _compute(grant, kind, body)
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

"""Checking a query against a stream before anything is reserved or sealed.

:func:`check` refuses, from the stream's schema and the query's public parameters alone: a
column the stream does not have (value, filter or group-by key), a numeric statistic over a
non-numeric column, a literal (filter value, group-by domain value, histogram category) whose
type does not match its column's, and every refusal the release itself would make later — a
noise scale that does not fit in a double, a price the stream's accounting rule refuses, a
group-privacy cost it cannot account (RDP with ``rows_per_user > 1``). Structural errors (no
bounds, reversed bounds, a group-by key without a declared domain) are refused earlier, when
the :class:`~blockbudget.query.spec.Query` is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from blockbudget.budget import Budget, Cost
from blockbudget.engine.plan import Scalar
from blockbudget.errors import InvalidRequestError, UnknownColumnError
from blockbudget.grant import group_cost
from blockbudget.mechanisms.calibration import exact_epsilon
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.source import price as price_parts
from blockbudget.query.parts import perturbations
from blockbudget.query.spec import NUMERIC, Query

if TYPE_CHECKING:
    import pyarrow as pa

    from blockbudget.platform import Platform


@dataclass(frozen=True)
class Pricing:
    """What a checked query will cost on its stream, before any block is chosen.

    Attributes:
        parts: the perturbations, with their noise scales and sensitivities.
        cost: the release's cost under the stream's rule (a Budget; an RdpCurve on RDP).
        charged: what each block is charged (``cost`` under group privacy on a user-level
            stream with ``rows_per_user = k > 1``).
        reserve: what the grant reserves on each block (the group cost of ε, which covers
            ``charged`` under every rule).
    """

    parts: tuple[Perturbation, ...]
    cost: Cost
    charged: Cost
    reserve: Cost


def _kind(type_: pa.DataType) -> str:
    """The literal family of an Arrow type: number, string, boolean, date, timestamp, other."""
    import pyarrow as pa

    t = pa.types
    if t.is_integer(type_) or t.is_floating(type_) or t.is_decimal(type_):
        return "number"
    if t.is_string(type_) or t.is_large_string(type_) or t.is_dictionary(type_):
        return "string"
    if t.is_boolean(type_):
        return "boolean"
    if t.is_date(type_):
        return "date"
    if t.is_timestamp(type_):
        return "timestamp"
    return "other"


def _literal_kind(value: Scalar) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, datetime):
        return "timestamp"
    if isinstance(value, date):
        return "date"
    return "other"


def _check_literals(
    stream: str, column: str, type_: pa.DataType, values: tuple[Any, ...], what: str
) -> None:
    expected = _kind(type_)
    for v in values:
        got = _literal_kind(v)
        if got != expected or expected == "other":
            raise InvalidRequestError(
                f"{what} {v!r} ({got}) does not match column {column!r} of stream {stream!r}, "
                f"which holds {type_} ({expected} literals)"
            )


def check_schema(query: Query, schema: pa.Schema | None, stream: str) -> None:
    """Refuse a query that does not fit the stream's schema (see the module docstring).

    Raises:
        UnknownColumnError: a column the stream does not have.
        InvalidRequestError: a non-numeric column for a numeric statistic, or a literal of the
            wrong type.
    """
    names = [] if schema is None else list(schema.names)
    unknown = [c for c in query.columns() if c not in names]
    if schema is None or unknown:
        raise UnknownColumnError(stream, unknown or list(query.columns()), names)
    if query.column is not None and query.statistic in NUMERIC:
        type_ = schema.field(query.column).type
        if _kind(type_) != "number":
            raise InvalidRequestError(
                f"a DP {query.statistic.value} needs a numeric column; {query.column!r} of "
                f"stream {stream!r} holds {type_}"
            )
    if query.categories is not None:
        assert query.column is not None
        type_ = schema.field(query.column).type
        _check_literals(stream, query.column, type_, query.categories, "category")
    for p in query.filters:
        values = p.value if isinstance(p.value, tuple) else (p.value,)
        literals = tuple(v for v in values if v is not None)
        _check_literals(stream, p.column, schema.field(p.column).type, literals, "filter value")
    for k in query.keys:
        _check_literals(stream, k.column, schema.field(k.column).type, k.domain, "domain value")


def check(platform: Platform, stream: str, query: Query) -> Pricing:
    """Check ``query`` against ``stream`` and price it, before anything is reserved or sealed.

    Returns:
        The query's :class:`Pricing` on this stream.

    Raises:
        UnknownBlockError: an unknown stream.
        UnknownColumnError / InvalidRequestError: see :func:`check_schema`.
        InvalidBudgetError: a noise scale that does not fit in a double, or a cost the
            stream's rule refuses (RDP with ``rows_per_user > 1``).
    """
    spec = platform.stream(stream)  # raises for an unknown stream
    check_schema(query, platform.store.schema(stream), stream)
    parts = perturbations(query)
    cost = price_parts(spec.accounting, epsilon=exact_epsilon(query.epsilon), parts=parts)
    k = spec.blocking.rows_per_user or 1
    charged = group_cost(cost, k)
    reserve = group_cost(Budget(epsilon=query.epsilon), k)
    return Pricing(parts=parts, cost=cost, charged=charged, reserve=reserve)

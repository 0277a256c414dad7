"""Checking a query against a stream before anything is reserved or sealed.

:func:`check` refuses, from the stream's schema and the query's public parameters alone: a
column the stream does not have (value, filter or group-by key), a numeric statistic over a
non-numeric column, a literal (filter value, group-by domain value, histogram category) whose
type does not match its column's or that does not convert to the column's type exactly
(:mod:`blockbudget.query.literals`; the plan carries the converted literals), and every
refusal the release itself would make later — a noise scale that does not fit in a double, a
price the stream's accounting rule refuses, a group-privacy cost it cannot account (RDP with
``rows_per_user > 1``; a Gaussian δ whose group cost k·e^{(k−1)ε}·δ reaches 1). Structural
errors (no bounds, reversed bounds, a group-by key without a declared domain, a Gaussian query
without 0 < δ < 1) are refused earlier, when the :class:`~blockbudget.query.spec.Query` is
built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from blockbudget.budget import Budget, Cost
from blockbudget.engine.plan import Op, Predicate
from blockbudget.errors import InvalidRequestError, UnknownColumnError
from blockbudget.grant import group_cost
from blockbudget.mechanisms.calibration import exact_epsilon
from blockbudget.mechanisms.noise import NoiseKind
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.source import price as price_parts
from blockbudget.query.literals import kind_of_type, typed_literal
from blockbudget.query.parts import aggregates, perturbations, query_delta
from blockbudget.query.spec import Query
from blockbudget.store import Unit

if TYPE_CHECKING:
    import pyarrow as pa

    from blockbudget.accounting import Accounting
    from blockbudget.grant import Grant
    from blockbudget.platform import Platform


@dataclass(frozen=True)
class Pricing:
    """What a checked query will cost on its stream, before any block is chosen.

    Attributes:
        parts: the perturbations, with their noise scales and sensitivities.
        cost: the release's cost under the stream's rule (a Budget; an RdpCurve on RDP).
        charged: what each block is charged (``cost`` under group privacy on a user-level
            stream with ``rows_per_user = k > 1``).
        reserve: what the grant reserves on each block: for Laplace the group cost of ε,
            which covers ``charged`` under every rule; for Gaussian ``charged`` itself (an
            (ε, δ) budget cannot be reserved on an RDP stream, its curve can).
        row_reserve: ``reserve`` before group privacy (ε, or ``cost`` for Gaussian): what
            :meth:`Platform.request <blockbudget.platform.Platform.request>` is asked for,
            since it applies the group itself.
        typed: the query with column-typed literals (:func:`check_schema`): the plan the
            engine runs is built from it; results are labelled with the query's own values.
    """

    parts: tuple[Perturbation, ...]
    cost: Cost
    charged: Cost
    reserve: Cost
    typed: Query
    row_reserve: Cost


def _typed(
    stream: str, column: str, type_: pa.DataType, values: tuple[Any, ...], what: str
) -> tuple[Any, ...]:
    import pyarrow as pa

    try:
        typed = tuple(typed_literal(v, type_, column=column, what=what) for v in values)
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"{exc} (stream {stream!r})") from None
    # Distinct as the column's values, not as Python objects (``fold=1`` and its UTC instant,
    # ``0.1`` and ``Decimal('0.10')``): one row must match at most one declared value.
    base = type_.value_type if pa.types.is_dictionary(type_) else type_
    if len(typed) > 1 and len(pa.array(typed, type=base).unique()) != len(typed):
        raise InvalidRequestError(
            f"the {what} list {list(values)!r} on column {column!r} of stream {stream!r} are not "
            f"distinct as values of its type {type_}"
        )
    return typed


#: An order comparison of an integer column with a non-integral number, as one with an integer
#: that keeps the same rows: ``n < 2.5`` is ``n < 3``, ``n <= 2.5`` is ``n <= 2``.
_ROUND_UP = (Op.LT, Op.GE)
_ROUND_DOWN = (Op.LE, Op.GT)


def _typed_filter(p: Predicate, schema: pa.Schema, stream: str) -> Predicate:
    import pyarrow as pa

    if p.value is None:
        return p
    type_ = schema.field(p.column).type
    if isinstance(p.value, tuple):
        return replace(p, value=_typed(stream, p.column, type_, p.value, "filter value"))
    value = p.value
    fraction = isinstance(value, float | Decimal) and math.isfinite(value) and value % 1 != 0
    if fraction and pa.types.is_integer(type_) and p.op in (*_ROUND_UP, *_ROUND_DOWN):
        assert isinstance(value, float | Decimal)
        value = math.ceil(value) if p.op in _ROUND_UP else math.floor(value)
    return replace(p, value=_typed(stream, p.column, type_, (value,), "filter value")[0])


def check_schema(query: Query, schema: pa.Schema | None, stream: str) -> Query:
    """Refuse a query that does not fit the stream's schema (see the module docstring).

    Returns:
        The query with every literal converted to its column's type
        (:func:`~blockbudget.query.literals.typed_literal`): what the engine's plan carries.

    Raises:
        UnknownColumnError: a column the stream does not have.
        InvalidRequestError: a non-numeric column for a numeric statistic, or a literal of the
            wrong type.
    """
    names = [] if schema is None else list(schema.names)
    unknown = [c for c in query.columns() if c not in names]
    if schema is None or unknown:
        raise UnknownColumnError(stream, unknown or list(query.columns()), names)
    for column in query.statistic.definition.numeric_columns(query):
        type_ = schema.field(column).type
        if kind_of_type(type_) != "number":
            raise InvalidRequestError(
                f"a DP {query.statistic.value} needs a numeric column; {column!r} of "
                f"stream {stream!r} holds {type_}"
            )
    categories = query.categories
    if categories is not None:
        assert query.column is not None
        type_ = schema.field(query.column).type
        categories = _typed(stream, query.column, type_, categories, "category")
    filters = tuple(_typed_filter(p, schema, stream) for p in query.filters)
    keys = tuple(
        replace(
            k,
            domain=_typed(stream, k.column, schema.field(k.column).type, k.domain, "domain value"),
        )
        for k in query.keys
    )
    return replace(query, categories=categories, filters=filters, keys=keys)


#: A sum, mean or variance reads fewer rows than this: the 1e-6 slack of
#: :data:`~blockbudget.mechanisms.statistics.FLOAT_SUM_SLACK` covers the one rounding of the
#: exact integer sum ``S`` to a double only while ``|S| ≤ 4.5·10⁹·max_units``, which fewer rows
#: (each ``|v| ≤ max_units``) guarantee.
MAX_SUM_ROWS = 4_500_000_000


def check_rows(query: Query, rows: int) -> None:
    """Refuse a statistic that sums values (a sum, mean or variance) over ``rows`` stored
    rows (public metadata: the chosen blocks' row counts) of :data:`MAX_SUM_ROWS` or more.

    Raises:
        InvalidRequestError: too many rows for the sum's rounding slack.
    """
    summed = any(agg.fixed is not None for agg in aggregates(query))
    if summed and rows >= MAX_SUM_ROWS:
        raise InvalidRequestError(
            f"a DP {query.statistic.value} reads fewer than {MAX_SUM_ROWS} rows (its "
            f"sensitivity's rounding slack holds below that); the blocks hold {rows}: "
            "choose fewer blocks"
        )


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
    k = (spec.blocking.rows_per_user or 1) if spec.blocking.unit is Unit.USER else 1
    return _priced(query, platform.store.schema(stream), stream, spec.accounting, k)


def check_grant(grant: Grant, query: Query) -> Pricing:
    """:func:`check` against a grant's stream as the grant reads it: its projection's schema,
    its accounting rule and its group size (no I/O: a grant carries all three).

    Raises:
        UnknownColumnError / InvalidRequestError / InvalidBudgetError: as :func:`check`; a
            column outside the grant's projection is unknown to it.
    """
    return _priced(query, grant.schema, grant.stream, grant.accounting, grant.group_size)


def _priced(
    query: Query, schema: pa.Schema | None, stream: str, accounting: Accounting, k: int
) -> Pricing:
    typed = check_schema(query, schema, stream)
    parts = perturbations(query, accounting)
    eps, dl = exact_epsilon(query.epsilon), query_delta(query)
    # the stream's rule prices the release: (ε, δ) as asked, or (RDP, GDP) the parts' noise.
    cost = price_parts(accounting, epsilon=eps, parts=parts, delta=dl)
    charged = group_cost(cost, k, accounting=accounting)
    gaussian = query.mechanism is NoiseKind.GAUSSIAN
    row_reserve = cost if gaussian else Budget(epsilon=query.epsilon)
    reserve = charged if gaussian else group_cost(row_reserve, k, accounting=accounting)
    return Pricing(
        parts=parts,
        cost=cost,
        charged=charged,
        reserve=reserve,
        typed=typed,
        row_reserve=row_reserve,
    )

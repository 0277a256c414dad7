"""One DP query (count, sum, mean or histogram) over a window of blocks, checked before it
spends anything.

:func:`check_query` refuses a malformed query — an unknown column, a non-numeric column for a
sum or mean, missing or reversed clipping bounds, no public bins, a noise scale or price the
mechanism would refuse — from the stream's schema and the mechanism's public parameters
alone, so :func:`run_query` reaches :meth:`Platform.request` (which reserves the budget and
seals the blocks) only for a query that can run. The command line and the HTTP service both run
queries through here: a refused query changes nothing, not even the open block of the day.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError, UnknownColumnError
from blockbudget.grant import group_cost

if TYPE_CHECKING:
    from blockbudget.grant import Grant
    from blockbudget.mechanisms import DPResult, Perturbation
    from blockbudget.platform import Last, Platform


class QueryKind(Enum):
    """The DP statistics a query can ask for."""

    COUNT = "count"
    SUM = "sum"
    MEAN = "mean"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class QuerySpec:
    """What a query computes (not where: the blocks and the context are given to
    :func:`run_query`).

    Attributes:
        kind: the statistic.
        epsilon: ε spent on every block read (keyword-only; > 0).
        column: the value column (every kind but COUNT).
        lower, upper: public clipping bounds, lower < upper (SUM and MEAN).
        categories: the public bins (HISTOGRAM).
    """

    kind: QueryKind
    epsilon: float
    column: str | None = None
    lower: float | None = None
    upper: float | None = None
    categories: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, QueryKind):
            raise InvalidRequestError(f"kind must be a QueryKind, got {self.kind!r}")
        if Budget(epsilon=self.epsilon).epsilon <= 0:  # Budget validates finite and >= 0
            raise InvalidRequestError(f"a DP query needs epsilon > 0, got {self.epsilon!r}")


@dataclass(frozen=True)
class QueryAnswer:
    """A query's DP result and the blocks it read."""

    result: DPResult[Any]
    blocks: tuple[str, ...]


def _numeric(type_: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(type_) or pa.types.is_floating(type_)) or bool(
        pa.types.is_boolean(type_)
    )


def _parts(spec: QuerySpec) -> tuple[Perturbation, ...]:
    """The perturbations the query's mechanism will make, from its public parameters."""
    from blockbudget.mechanisms import statistics as stats

    if spec.kind is QueryKind.COUNT:
        return stats.count_parts(epsilon=spec.epsilon)
    if spec.kind is QueryKind.HISTOGRAM:
        assert spec.categories is not None
        return stats.histogram_parts(epsilon=spec.epsilon, categories=spec.categories)
    assert spec.lower is not None and spec.upper is not None
    parts = stats.sum_parts if spec.kind is QueryKind.SUM else stats.mean_parts
    return parts(epsilon=spec.epsilon, lower=spec.lower, upper=spec.upper)


def _check_price(platform: Platform, stream: str, spec: QuerySpec) -> None:
    """Compute what the release will draw — its noise scales, their price under the stream's
    accounting rule and the group-privacy cost on a user-level stream — exactly as the
    mechanism will, so that every refusal of those steps comes before anything is sealed or
    reserved."""
    from blockbudget.mechanisms.calibration import exact_epsilon
    from blockbudget.mechanisms.source import price

    info = platform.stream(stream)
    cost = price(info.accounting, epsilon=exact_epsilon(spec.epsilon), parts=_parts(spec))
    group_cost(cost, info.blocking.rows_per_user or 1)


def check_query(platform: Platform, stream: str, spec: QuerySpec) -> None:
    """Refuse a malformed query from the stream's schema, before anything is reserved or
    sealed.

    Raises:
        UnknownColumnError: a column the stream does not have (an
            :class:`InvalidRequestError`; the service shows the stream's columns only to its
            owners and admins).
        InvalidRequestError: a missing column, a sum or mean over a non-numeric
            column, missing or non-finite or reversed bounds, or a histogram without bins.
        InvalidBudgetError: a noise scale that does not fit in a double, a price the stream's
            accounting rule refuses, or a group-privacy cost it refuses (RDP with
            ``rows_per_user > 1``) — the mechanism's own checks, run before anything is
            sealed or reserved.
        UnknownBlockError: an unknown stream.
    """
    schema = platform.store.schema(stream)  # raises for an unknown stream
    if spec.kind is QueryKind.COUNT:
        _check_price(platform, stream, spec)
        return
    what = f"a DP {spec.kind.value}"
    if spec.column is None:
        raise InvalidRequestError(f"{what} needs a value column; none was given")
    names = [] if schema is None else list(schema.names)
    if schema is None or spec.column not in names:
        raise UnknownColumnError(stream, [spec.column], names)
    if spec.kind is QueryKind.HISTOGRAM:
        if not spec.categories:
            raise InvalidRequestError(f"{what} needs public categories (its bins); none given")
        if len(set(spec.categories)) != len(spec.categories):
            raise InvalidRequestError(f"{what} needs distinct categories (bins)")
        _check_price(platform, stream, spec)
        return
    column_type = schema.field(spec.column).type
    if not _numeric(column_type):
        raise InvalidRequestError(
            f"{what} needs a numeric column; {spec.column!r} of stream {stream!r} holds "
            f"{column_type}"
        )
    lo, hi = spec.lower, spec.upper
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        raise InvalidRequestError(
            f"{what} needs public finite clipping bounds lower < upper, got lower={lo!r}, "
            f"upper={hi!r}"
        )
    _check_price(platform, stream, spec)


def open_query(
    platform: Platform,
    stream: str,
    spec: QuerySpec,
    *,
    blocks: Sequence[str] | Last,
    context: str,
) -> Grant:
    """Check the query (:func:`check_query`), then reserve its cost on the chosen blocks in
    ``context`` (on a user-level stream the group-privacy cost) and return the grant.

    Raises:
        InvalidRequestError: a malformed query (nothing reserved or sealed).
        BudgetExceededError / UnknownContextError / UnknownBlockError / RetiredBlockError: as
            for :meth:`Platform.request` (nothing reserved or sealed).
    """
    check_query(platform, stream, spec)
    cost = Budget(epsilon=spec.epsilon)
    reserve = group_cost(cost, platform.stream(stream).blocking.rows_per_user or 1)
    columns = [spec.column] if spec.column is not None else None
    return platform.request(stream, blocks=blocks, budget=reserve, context=context, columns=columns)


def compute(grant: Grant, spec: QuerySpec) -> DPResult[Any]:
    """The DP statistic ``spec`` asks for on the grant's rows (each draw charged durably
    before its noise is computed)."""
    from blockbudget.mechanisms import statistics as stats

    if spec.kind is QueryKind.COUNT:
        return stats.dp_count(grant, grant.data, epsilon=spec.epsilon)
    if spec.kind is QueryKind.HISTOGRAM:
        assert spec.column is not None and spec.categories is not None
        values = grant.frame()[spec.column].astype(str).to_numpy()
        return stats.dp_histogram(
            grant, values, categories=list(spec.categories), epsilon=spec.epsilon
        )
    assert spec.column is not None and spec.lower is not None and spec.upper is not None
    numbers = grant.frame()[spec.column].dropna().to_numpy(dtype=float)
    fn = stats.dp_sum if spec.kind is QueryKind.SUM else stats.dp_mean
    return fn(grant, numbers, epsilon=spec.epsilon, lower=spec.lower, upper=spec.upper)


def run_query(
    platform: Platform,
    stream: str,
    spec: QuerySpec,
    *,
    blocks: Sequence[str] | Last,
    context: str,
) -> QueryAnswer:
    """Check the query, reserve its cost (:func:`open_query`), draw it durably and compute the
    DP statistic (:func:`compute`); what was not drawn is released.

    Raises:
        InvalidRequestError: a malformed query (nothing reserved or sealed).
        BudgetExceededError / UnknownContextError / UnknownBlockError / RetiredBlockError: as
            for :meth:`Platform.request` (nothing reserved or sealed).
    """
    with open_query(platform, stream, spec, blocks=blocks, context=context) as grant:
        result = compute(grant, spec)
        used = tuple(grant.blocks)
    return QueryAnswer(result=result, blocks=used)

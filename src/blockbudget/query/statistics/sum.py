"""SUM: Σ clip(x, lower, upper) + noise, as an exact fixed-point integer sum (centre 0).

Example:
    >>> from blockbudget.query import Query
    >>> (part,) = STATISTIC.perturbations(Query.sum("v", epsilon=1, lower=0, upper=4), None)
    >>> part.name, round(part.sensitivity, 4)
    ('sum', 4.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.engine.plan import AggKind, Aggregate, FixedPoint
from blockbudget.query.statistic import Answer, DPStatistic, NoisyGroup, register_statistic

if TYPE_CHECKING:
    from blockbudget.query.spec import Query


def fixed_point(query: Query, *, centred: bool) -> FixedPoint:
    """The value encoding of a bounded statistic: centre 0, or the bounds' midpoint (which
    halves the sum's sensitivity)."""
    assert query.lower is not None and query.upper is not None
    lo, hi = float(query.lower), float(query.upper)
    return FixedPoint(lo, hi, lo / 2.0 + hi / 2.0 if centred else 0.0)


class Sum(DPStatistic):
    """A noisy clipped sum (the whole ε)."""

    name = "sum"
    takes = frozenset({"bounds"})
    example: ClassVar[dict[str, Any]] = {"column": "v", "lower": 0, "upper": 40}

    def aggregates(self, query: Query) -> tuple[Aggregate, ...]:
        fixed = fixed_point(query, centred=False)
        return (Aggregate("sum", AggKind.SUM, query.column, fixed=fixed),)

    def answer(self, query: Query, noisy: NoisyGroup) -> Answer:
        return noisy.scalar_answer("sum")


STATISTIC = register_statistic(Sum())

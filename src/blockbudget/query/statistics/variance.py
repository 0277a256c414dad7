"""VARIANCE: the population variance from a noisy count, centred sum and centred sum of
squares, (ε/3, δ/3) each, clamped into [0, r²] (r the bounds' radius).

Example:
    >>> from blockbudget.query import Query
    >>> q = Query.variance("v", epsilon=3, lower=0, upper=4)
    >>> [p.name for p in STATISTIC.perturbations(q, None)]
    ['count', 'sum', 'sum_squares']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.engine.plan import AggKind, Aggregate
from blockbudget.mechanisms.statistics import clamped_variance
from blockbudget.query.statistic import Answer, DPStatistic, NoisyGroup, register_statistic
from blockbudget.query.statistics.sum import fixed_point

if TYPE_CHECKING:
    from blockbudget.query.spec import Query

#: Variance sums squares of centred values: bounds up to 2**479 keep every square finite.
VARIANCE_BOUND = 2.0**479


class Variance(DPStatistic):
    """Count, centred sum and centred sum of squares at (ε/3, δ/3) each."""

    name = "variance"
    takes = frozenset({"bounds"})
    bound_limit = VARIANCE_BOUND
    split = 3
    example: ClassVar[dict[str, Any]] = {"column": "v", "lower": 0, "upper": 40}

    def aggregates(self, query: Query) -> tuple[Aggregate, ...]:
        fixed, col = fixed_point(query, centred=True), query.column
        return (
            Aggregate("count", AggKind.COUNT, column=col),
            Aggregate("sum", AggKind.SUM, col, fixed=fixed),
            Aggregate("sum_squares", AggKind.SUM_SQUARES, col, fixed=fixed),
        )

    def answer(self, query: Query, noisy: NoisyGroup) -> Answer:
        r = fixed_point(query, centred=True).radius
        n_hat, s_hat = noisy.scalar("count"), noisy.scalar("sum")
        return clamped_variance(n_hat, s_hat, noisy.scalar("sum_squares"), radius=r), None


STATISTIC = register_statistic(Variance())

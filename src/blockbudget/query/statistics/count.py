"""COUNT: rows (or non-null values of a column) + noise — sensitivity 1 under add/remove-one-row.

Example:
    >>> from blockbudget.query import Query
    >>> [p.scale for p in STATISTIC.perturbations(Query.count(epsilon=0.5), None)]
    [2.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.engine.plan import AggKind, Aggregate
from blockbudget.query.statistic import Answer, DPStatistic, NoisyGroup, register_statistic

if TYPE_CHECKING:
    from blockbudget.query.spec import Query


class Count(DPStatistic):
    """A noisy count (the whole ε)."""

    name = "count"
    column_required = False
    example: ClassVar[dict[str, Any]] = {"column": "v"}

    def aggregates(self, query: Query) -> tuple[Aggregate, ...]:
        return (Aggregate("count", AggKind.COUNT, column=query.column),)

    def answer(self, query: Query, noisy: NoisyGroup) -> Answer:
        return noisy.scalar_answer("count")


STATISTIC = register_statistic(Count())

"""HISTOGRAM: one noisy count per declared category, and one for the rest when ``other`` (the
whole ε: one row falls in one cell, parallel composition over cells).

Example:
    >>> from blockbudget.query import Query
    >>> (part,) = STATISTIC.perturbations(Query.histogram("c", ["a", "b"], epsilon=1), None)
    >>> part.size, part.scale
    (2, 1.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.engine.plan import AggKind, Aggregate
from blockbudget.query.statistic import (
    Answer,
    DPStatistic,
    NoisyGroup,
    check_categories,
    register_statistic,
)

if TYPE_CHECKING:
    from blockbudget.query.spec import Query


class Histogram(DPStatistic):
    """Noisy counts over declared categories."""

    name = "histogram"
    takes = frozenset({"categories", "other"})
    example: ClassVar[dict[str, Any]] = {
        "column": "c",
        "categories": ["a", "b", "z"],
        "other": True,
    }

    def check(self, query: Query) -> None:
        check_categories(query)

    def width(self, query: Query) -> int:
        return len(query.categories or ()) + (1 if query.other else 0)

    def aggregates(self, query: Query) -> tuple[Aggregate, ...]:
        cats, col = query.categories, query.column
        return (Aggregate("counts", AggKind.CATEGORIES, col, categories=cats, other=query.other),)

    def answer(self, query: Query, noisy: NoisyGroup) -> Answer:
        cats = list(query.categories or ())
        labels: list[object] = [*cats, None] if query.other else list(cats)
        return {c: float(v) for c, v in zip(labels, noisy.vectors["counts"], strict=True)}, None


STATISTIC = register_statistic(Histogram())

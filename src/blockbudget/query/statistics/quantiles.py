"""QUANTILES: read from a noisy histogram over equal-width public bins between the bounds (the
whole ε: one row falls in one bin, parallel composition over bins).

Example:
    >>> quantiles_from_histogram([0, 10, 10, 0], lower=0, upper=4, probabilities=[0.5])
    {0.5: 2.0}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from blockbudget.engine.plan import AggKind, Aggregate, Bins
from blockbudget.errors import InvalidRequestError
from blockbudget.query.statistic import Answer, DPStatistic, NoisyGroup, register_statistic

if TYPE_CHECKING:
    from blockbudget.query.spec import Query


def quantiles_from_histogram(
    counts: Sequence[float], *, lower: float, upper: float, probabilities: Sequence[float]
) -> dict[float, float]:
    """Quantiles read from a noisy histogram over equal-width bins of ``[lower, upper]``.

    Negative noisy counts are set to 0, which makes the cumulative counts a monotone CDF; the
    p-quantile is the point where it reaches ``p × total``, interpolated linearly inside its
    bin, so the answers are monotone in p. An all-zero histogram answers the midpoint.
    """
    c = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    cdf = np.cumsum(c)
    total = float(cdf[-1]) if c.size else 0.0
    width = (upper - lower) / len(c)
    out: dict[float, float] = {}
    for p in probabilities:
        if total <= 0.0:
            out[p] = lower / 2.0 + upper / 2.0
            continue
        target = p * total
        i = min(int(np.searchsorted(cdf, target, side="left")), len(c) - 1)
        before = float(cdf[i - 1]) if i > 0 else 0.0
        inside = (target - before) / float(c[i]) if c[i] > 0 else 0.0
        point = lower + (i + min(max(inside, 0.0), 1.0)) * width
        out[float(p)] = float(min(max(point, lower), upper))
    return out


def quantile_bins(query: Query) -> Bins:
    """The public bins of a quantile query."""
    assert query.lower is not None and query.upper is not None
    return Bins(float(query.lower), float(query.upper), query.quantile_bins)


class Quantiles(DPStatistic):
    """One noisy count per equal-width bin."""

    name = "quantiles"
    takes = frozenset({"bounds", "probabilities", "bins"})
    example: ClassVar[dict[str, Any]] = {
        "column": "v",
        "lower": 0,
        "upper": 48,
        "quantiles": [0.33, 0.61],
        "bins": 48,
    }

    def check(self, query: Query) -> None:
        probs = query.probabilities
        if not probs or len(probs) > 1000:
            raise InvalidRequestError("quantiles need 1 to 1000 probabilities")
        for p in probs:
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
                raise InvalidRequestError(f"a quantile's probability is in [0, 1], got {p!r}")
        quantile_bins(query)  # checks the count

    def width(self, query: Query) -> int:
        return query.quantile_bins

    def resolution(self, query: Query) -> float | None:
        return quantile_bins(query).width

    def aggregates(self, query: Query) -> tuple[Aggregate, ...]:
        return (Aggregate("bins", AggKind.BINS, query.column, bins=quantile_bins(query)),)

    def answer(self, query: Query, noisy: NoisyGroup) -> Answer:
        b = quantile_bins(query)
        assert query.probabilities is not None
        value = quantiles_from_histogram(
            list(noisy.vectors["bins"]),
            lower=b.lower,
            upper=b.upper,
            probabilities=query.probabilities,
        )
        return value, None


STATISTIC = register_statistic(Quantiles())

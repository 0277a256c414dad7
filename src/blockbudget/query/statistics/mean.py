"""MEAN: a noisy centred sum over a noisy count, (ε/2, δ/2) each, clamped into the bounds.

Example:
    >>> from blockbudget.query import Query
    >>> q = Query.mean("v", epsilon=1, lower=0, upper=4)
    >>> [(p.name, str(p.epsilon)) for p in STATISTIC.perturbations(q, None)]
    [('count', '0.5'), ('sum', '0.5')]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.engine.plan import AggKind, Aggregate
from blockbudget.mechanisms.statistics import clamped_mean
from blockbudget.query.statistic import Answer, DPStatistic, NoisyGroup, register_statistic
from blockbudget.query.statistics.sum import fixed_point

if TYPE_CHECKING:
    from blockbudget.query.spec import Query


def mean_interval(
    n_hat: float,
    s_hat: float,
    *,
    centre: float,
    lower: float,
    upper: float,
    t_n: float,
    t_s: float,
) -> tuple[float, float]:
    """An interval for the clipped mean ``centre + S/n`` given ``|n̂ − n| ≤ t_n`` and
    ``|Ŝ − S| ≤ t_s``: the extremes of S/n over that box (at its corners: S/n is monotone in
    each variable for n > 0), clamped into the bounds; the whole range when n may be ≤ 0.

    Example:
        >>> mean_interval(10, 5, centre=0, lower=-1, upper=1, t_n=0, t_s=0)
        (0.5, 0.5)
    """
    if n_hat - t_n <= 0.0:
        return (lower, upper)
    corners = [(s_hat + ds) / (n_hat + dn) for ds in (-t_s, t_s) for dn in (-t_n, t_n)]
    lo, hi = centre + min(corners), centre + max(corners)
    return (min(max(lo, lower), upper), min(max(hi, lower), upper))


class Mean(DPStatistic):
    """Count and centred sum at (ε/2, δ/2) each."""

    name = "mean"
    takes = frozenset({"bounds"})
    split = 2
    example: ClassVar[dict[str, Any]] = {"column": "v", "lower": 0, "upper": 40}

    def aggregates(self, query: Query) -> tuple[Aggregate, ...]:
        fixed = fixed_point(query, centred=True)
        return (
            Aggregate("count", AggKind.COUNT, column=query.column),
            Aggregate("sum", AggKind.SUM, query.column, fixed=fixed),
        )

    def answer(self, query: Query, noisy: NoisyGroup) -> Answer:
        fixed = fixed_point(query, centred=True)
        lo, hi, m = fixed.lower, fixed.upper, fixed.centre
        n_hat, s_hat = noisy.scalar("count"), noisy.scalar("sum")
        value = clamped_mean(n_hat, s_hat, centre=m, lower=lo, upper=hi)
        # a union bound over the two parts: α/2 each
        t_n, t_s = noisy.half_width("count", share=0.5), noisy.half_width("sum", share=0.5)
        interval = mean_interval(n_hat, s_hat, centre=m, lower=lo, upper=hi, t_n=t_n, t_s=t_s)
        return value, interval


STATISTIC = register_statistic(Mean())

"""From noisy part vectors to answers: post-processing only (Dwork & Roth 2014 Prop. 2.1).

Each function reads the noisy vectors of one group and the query's public parameters — never
an exact aggregate — so nothing here costs privacy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from blockbudget.mechanisms.results import Perturbation
from blockbudget.query.parts import bins as quantile_bins
from blockbudget.query.parts import fixed_point, half_width
from blockbudget.query.result import GroupAnswer, Value
from blockbudget.query.spec import Query, Statistic

FloatVector = np.ndarray


def quantiles_from_histogram(
    counts: Sequence[float], *, lower: float, upper: float, probabilities: Sequence[float]
) -> dict[float, float]:
    """Quantiles read from a noisy histogram over equal-width bins of ``[lower, upper]``.

    Negative noisy counts are set to 0, which makes the cumulative counts a monotone CDF; the
    p-quantile is the point where it reaches ``p × total``, interpolated linearly inside its
    bin, so the answers are monotone in p. An all-zero histogram answers the midpoint.

    Example:
        >>> quantiles_from_histogram([0, 10, 10, 0], lower=0, upper=4, probabilities=[0.5])
        {0.5: 2.0}
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


def _interval(value: float, part: Perturbation, alpha: float) -> tuple[float, float]:
    t = half_width(part, alpha=alpha)
    return (value - t, value + t)


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
    each variable for n > 0), clamped into the bounds; the whole range when n may be ≤ 0."""
    if n_hat - t_n <= 0.0:
        return (lower, upper)
    corners = [(s_hat + ds) / (n_hat + dn) for ds in (-t_s, t_s) for dn in (-t_n, t_n)]
    lo, hi = centre + min(corners), centre + max(corners)
    return (min(max(lo, lower), upper), min(max(hi, lower), upper))


def answer(
    query: Query,
    key: tuple[object, ...],
    noisy: Mapping[str, FloatVector],
    parts: Mapping[str, Perturbation],
    *,
    confidence: float,
) -> GroupAnswer:
    """One group's answer from its noisy vectors (each a slice of one part's output)."""
    s, alpha = query.statistic, 1.0 - confidence
    value: Value
    interval: tuple[float, float] | None = None
    if s is Statistic.COUNT or s is Statistic.SUM:
        name = "count" if s is Statistic.COUNT else "sum"
        value = float(noisy[name][0])
        interval = _interval(value, parts[name], alpha)
    elif s is Statistic.HISTOGRAM:
        cats = list(query.categories or ())
        labels: list[object] = [*cats, None] if query.other else list(cats)
        value = {c: float(v) for c, v in zip(labels, noisy["counts"], strict=True)}
    elif s is Statistic.QUANTILES:
        b = quantile_bins(query)
        assert b is not None and query.probabilities is not None
        value = quantiles_from_histogram(
            list(noisy["bins"]), lower=b.lower, upper=b.upper, probabilities=query.probabilities
        )
    else:
        fixed = fixed_point(query)
        assert fixed is not None
        lo, hi, m = fixed.lower, fixed.upper, fixed.centre
        n_hat, s_hat = float(noisy["count"][0]), float(noisy["sum"][0])
        n = max(n_hat, 1.0)
        if s is Statistic.MEAN:
            value = min(max(m + s_hat / n, lo), hi)
            half = alpha / 2.0  # union bound over the two parts
            t_n = half_width(parts["count"], alpha=half)
            t_s = half_width(parts["sum"], alpha=half)
            interval = mean_interval(n_hat, s_hat, centre=m, lower=lo, upper=hi, t_n=t_n, t_s=t_s)
        else:
            r = fixed.radius
            mean_c = s_hat / n
            var = float(noisy["sum_squares"][0]) / n - mean_c * mean_c
            value = min(max(var, 0.0), r * r) if math.isfinite(var) else r * r
    return GroupAnswer(key=tuple(key), value=value, interval=interval)  # type: ignore[arg-type]

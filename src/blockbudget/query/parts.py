"""From a query to what an engine computes and what the noise is calibrated to.

Everything here is a function of the query's public parameters alone: the exact aggregates of
the engine :class:`~blockbudget.engine.Plan` (:func:`aggregates`), and the Laplace or
Gaussian perturbations that will be added to them (:func:`perturbations`) — so a query is
priced and checked before any row is read.

Sensitivities (add/remove one row; Dwork & Roth 2014 §2.3). Value aggregates are exact integer
sums of fixed-point units (:class:`~blockbudget.engine.FixedPoint`: a clipped, centred value
``x`` becomes ``v = round((clip(x) − c)/q)`` with ``|v| ≤ max_units`` and q a power of two),
so one row moves the integer sum ``S = Σv`` by at most ``max_units`` and ``S₂ = Σv²`` by at
most ``max_units²`` — whatever order an engine sums in (Casacuberta, Shoemate, Vadhan &
Wagaman, "Widespread underestimation of sensitivity in differentially private libraries",
CCS 2022, §3 shows how float sums in arbitrary order break the textbook bound). The released
sum is ``float(S)·q``: multiplying by a power of two is exact, and the one rounding of
``float(S)`` moves a neighbouring pair of sums by at most two half-ulps, i.e. a relative
2⁻⁵³·(|S| + |S'|); the sensitivities ``max_units·q`` and ``max_units²·q²`` are therefore
inflated by :data:`~blockbudget.mechanisms.statistics.FLOAT_SUM_SLACK` (1e-6), which covers
that rounding whenever ``|S| ≤ 4.5·10⁹·max_units`` (e.g. fewer than 4.5 billion rows). Counts
are exact integers below 2⁵³ and have sensitivity 1; so do the cells of a histogram or of the
quantiles' bins (one row falls in one cell).

Budget splits (basic composition, Dwork & Roth 2014 Thm 3.16), each declared by its registered
statistic (:mod:`blockbudget.query.statistic`; one module each in
:mod:`blockbudget.query.statistics`):

=========== =========================================== ===========================
statistic   parts                                       ε per part
=========== =========================================== ===========================
count       n                                           ε
sum         S·q (centre 0)                              ε
mean        n; S·q (centred at the bounds' midpoint)    ε/2, ε/2
variance    n; S·q; S₂·q² (centred)                     ε/3 each
histogram   one count per category (+ other)            ε (parallel over cells)
quantiles   one count per equal-width bin               ε (parallel over bins)
=========== =========================================== ===========================

Group-by costs the same as one group: every row is in at most one group (its key's value, or
none), so the vectors of all groups together have the same L1 sensitivity as one group's
(parallel composition, McSherry 2009 Thm 4); every declared group gets noise.

Gaussian queries (``mechanism=GAUSSIAN``, δ > 0). Under add/remove-one-row, one row moves
exactly one coordinate of each part's vector (its group's count or sum; its category's or bin's
cell; over all groups together), so each part's L2 sensitivity Δ₂ equals the L1 sensitivity
above: 1 for counts, histograms and quantile bins (√2 would be the replace-one relation, which
the platform does not use), ``max_units·q`` and ``max_units²·q²`` (with the slack) for the sums.
On streams whose rule charges (ε, δ), (ε, δ) is split over the parts like ε (ε/k and δ/k each,
basic composition), and each part's σ is the analytic Gaussian mechanism's for its share (Balle &
Wang, "Improving the Gaussian Mechanism for Differential Privacy: Analytical Calibration and
Optimal Denoising", ICML 2018, Thm 8 / Alg. 1;
:func:`~blockbudget.mechanisms.calibration.analytic_gaussian_sigma`); the stream is charged
(ε, δ). On streams whose rule prices the noise (RDP, GDP) every part gets σ_j = z·Δ₂ⱼ with the
smallest z at which the parts' summed price fits an empty (ε, δ) block of the rule — one
conversion for the calibration and the filter — and the stream is charged that price: the sum
of the parts' curves ε(α) = α·Δ₂²/(2σ²) (Mironov 2017, Prop. 7), or μ = √Σ(Δ₂ⱼ/σⱼ)².
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import TYPE_CHECKING

from blockbudget.engine.plan import Aggregate, Plan, ScanSource
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseKind, Selection
from blockbudget.mechanisms.results import Perturbation
from blockbudget.query.statistic import query_delta as query_delta

if TYPE_CHECKING:
    from decimal import Decimal

    from blockbudget.query.spec import Query


def aggregates(query: Query) -> tuple[Aggregate, ...]:
    """The exact aggregates the engine computes for ``query`` (named as their parts): its
    registered statistic's plan."""
    return query.statistic.definition.aggregates(query)


def plan(query: Query, source: ScanSource) -> Plan:
    """The engine plan of ``query`` over the granted blocks' part files: the query's filters
    (and any its statistic adds), its group-by keys and its statistic's aggregates."""
    stat = query.statistic.definition
    return Plan(
        source=source,
        aggregates=stat.aggregates(query),
        predicates=(*query.filters, *stat.predicates(query)),
        group_by=query.keys,
    )


def sensitivities(query: Query) -> dict[str, float]:
    """Each part's sensitivity, by aggregate name: L1 for Laplace, L2 for Gaussian noise —
    the same numbers under add/remove-one-row (see the module docstring).

    Raises:
        InvalidRequestError: bounds so close that q (or q² for a variance) is not a normal
            double — the released sums would underflow.
    """
    return query.statistic.definition.sensitivities(query)


def part_epsilon(query: Query) -> Decimal:
    """The ε share each part is calibrated to (the whole ε, or ε/2, ε/3)."""
    return query.statistic.definition.part_epsilon(query)


def part_delta(query: Query) -> Decimal:
    """The δ share each part of a Gaussian query is calibrated to (δ, δ/2 or δ/3, rounded
    down so that the shares sum to at most δ); 0 for a Laplace query."""
    return query.statistic.definition.part_delta(query)


def perturbations(query: Query, accounting: str | None = None) -> tuple[Perturbation, ...]:
    """The perturbations the query's release makes, from its public parameters and the
    stream's rule alone (its registered statistic's
    :meth:`~blockbudget.query.statistic.DPStatistic.perturbations`). By default: Laplace
    b = Δ₁/ε rounded up; Gaussian under an (ε, δ) rule (or with no rule given), the analytic σ
    of each part's (ε, δ) share (Balle & Wang 2018, Thm 8 / Alg. 1); Gaussian under a rule that
    prices the noise (RDP, GDP), σ_j = z·Δ_j with the smallest z at which all the parts
    together fit an empty (ε, δ) block of that rule
    (:func:`~blockbudget.mechanisms.calibration.fitted_gaussian_scales`) — so a query asking
    for a block's whole budget fits it.

    Raises:
        InvalidBudgetError: a noise scale that does not fit in a double.
        InvalidRequestError: bounds whose fixed-point unit underflows.
    """
    return query.statistic.definition.perturbations(query, accounting)


def half_width(part: Perturbation, *, alpha: float) -> float:
    """The half-width t with P(|noise| > t) = ``alpha`` for one coordinate of ``part``:
    b·ln(1/α) for Laplace(b), σ·Φ⁻¹(1 − α/2) for N(0, σ²), and for a Gumbel top-k the
    half-width of the Gumbel noise on each score (:func:`gumbel_half_width`)."""
    if part.kind is NoiseKind.LAPLACE:
        return laplace_half_width(part.scale, alpha=alpha)
    if isinstance(part.kind, Selection):
        return gumbel_half_width(part.scale, alpha=alpha)
    return gaussian_half_width(part.scale, alpha=alpha)


def gumbel_half_width(scale: float, *, alpha: float) -> float:
    """The half-width t with P(|G| > t) = ``alpha`` for G ~ Gumbel(0, ``scale``), whose CDF is
    exp(−e^{−x/β}): 1 − F(t) + F(−t) decreases in t, so t/β is found by bisection (to 1e-12).

    Example:
        >>> round(gumbel_half_width(1.0, alpha=0.05), 4)
        2.9702
    """
    if not 0.0 < alpha < 1.0:
        raise InvalidRequestError(f"alpha is in (0, 1), got {alpha!r}")

    def tail(u: float) -> float:
        return -math.expm1(-math.exp(-u)) + math.exp(-math.exp(u))

    lo, hi = 0.0, 1.0
    while tail(hi) > alpha:
        hi *= 2.0
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if tail(mid) > alpha else (lo, mid)
    return scale * hi


def gaussian_half_width(sigma: float, *, alpha: float) -> float:
    """The half-width t with P(|N(0, sigma²)| > t) = ``alpha``: ``sigma · Φ⁻¹(1 − alpha/2)``."""
    if not 0.0 < alpha < 1.0:
        raise InvalidRequestError(f"alpha is in (0, 1), got {alpha!r}")
    return sigma * NormalDist().inv_cdf(1.0 - alpha / 2.0)


#: Two-sided Laplace tail: P(|Lap(b)| > b·ln(1/α)) = α.
def laplace_half_width(scale: float, *, alpha: float) -> float:
    """The half-width t with P(|Laplace(scale)| > t) = ``alpha``: ``scale · ln(1/alpha)``."""
    if not 0.0 < alpha < 1.0:
        raise InvalidRequestError(f"alpha is in (0, 1), got {alpha!r}")
    return scale * math.log(1.0 / alpha)

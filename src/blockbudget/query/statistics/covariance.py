"""COVARIANCE: the population covariance and correlation of two bounded numeric columns.

The query names ``column`` (x, clipped to ``[lower, upper]``) and ``column2`` (y, clipped to
``[lower2, upper2]``); rows where either is null or NaN are left out (the statistic adds the two
``is not null`` filters, so all six parts read the same rows). Each value is centred at its
bounds' midpoint and encoded in fixed point (:class:`~blockbudget.engine.FixedPoint`: ``u`` for
x, ``v`` for y, ``|u| ≤ U``, ``|v| ≤ V`` units of ``q``, ``q'``), and six exact integer sums
are released with noise, (ε/6, δ/6) each:

=========== ============ =============================
part        aggregate    sensitivity (add/remove one row)
=========== ============ =============================
count       n            1
sum_x       Σu           U·q
sum_y       Σv           V·q'
sum_xx      Σu²          U²·q²
sum_yy      Σv²          V²·q'²
sum_xy      Σu·v         U·V·q·q'
=========== ============ =============================

Sensitivity: one row added or removed changes each sum by its own term, whose magnitude is at
most the bound in the table — the encoded values are bounded because they are clipped to the
declared public bounds, never by the data (Dwork & Roth 2014 Def. 3.1 for ℓ1 sensitivity; the
fixed point makes the sums exact in any order, Casacuberta et al., CCS 2022, §3). Each
sensitivity is inflated by the float slack of :mod:`blockbudget.query.parts` for the one
rounding of the released sum. Each part is Laplace (Dwork & Roth Thm 3.6) or Gaussian at its
share; the six compose (Thm 3.16). Group-by composes in parallel (one row is in one group).

Answer (post-processing, Prop. 2.1), with n' = max(n̂, 1) and the centred means mx = Σu/n',
my = Σv/n': the covariance Σuv/n' − mx·my (shift-invariant, so centring changes nothing),
clamped into [−rx·ry, rx·ry] (rx, ry the bounds' radii: the largest covariance of values in
the bounds), and the correlation cov/√(var_x·var_y) with the variances Σu²/n' − mx² clamped
into [0, r²], itself clamped into [−1, 1] (0 when a variance is 0). The value maps
``"covariance"`` and ``"correlation"`` to their estimates; no interval is given.

Example:
    >>> from blockbudget.query import Query
    >>> q = Query.of(
    ...     "covariance", "x", lower=0, upper=1, column2="y", lower2=-1, upper2=1, epsilon=6
    ... )
    >>> [(p.name, str(p.epsilon)) for p in STATISTIC.perturbations(q, None)][:2]
    [('count', '1'), ('sum_x', '1')]
    >>> q.columns()
    ('x', 'y')
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.engine.plan import AggKind, Aggregate, FixedPoint, Op, Predicate
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.inputs import check_bounds
from blockbudget.query.statistic import (
    Answer,
    DPStatistic,
    NoisyGroup,
    Param,
    register_statistic,
)
from blockbudget.query.statistics.variance import VARIANCE_BOUND

if TYPE_CHECKING:
    from blockbudget.query.spec import Query


def _encodings(query: Query) -> tuple[FixedPoint, FixedPoint]:
    """The centred fixed points of x and y."""
    assert query.lower is not None and query.upper is not None
    lo, hi = float(query.lower), float(query.upper)
    lo2, hi2 = float(query.param("lower2")), float(query.param("upper2"))
    return FixedPoint(lo, hi, lo / 2 + hi / 2), FixedPoint(lo2, hi2, lo2 / 2 + hi2 / 2)


def _clamp(value: float, bound: float, *, lowest: float) -> float:
    return min(max(value, lowest), bound) if math.isfinite(value) else bound


class Covariance(DPStatistic):
    """Six noisy sums of two bounded columns at (ε/6, δ/6) each."""

    name = "covariance"
    takes = frozenset({"bounds"})
    bound_limit = VARIANCE_BOUND
    split = 6
    example: ClassVar[dict[str, Any]] = {
        "column": "v",
        "lower": 0,
        "upper": 47,
        "column2": "n",
        "lower2": 0,
        "upper2": 4,
    }
    params = (
        Param("column2", str, "the second value column (y)"),
        Param("lower2", float, "public lower clipping bound of column2"),
        Param("upper2", float, "public upper clipping bound of column2"),
    )

    def check(self, query: Query) -> None:
        y = query.param("column2")
        if not isinstance(y, str) or not y or len(y) > 200:
            raise InvalidRequestError(f"column2 must be a name of 1 to 200 characters, got {y!r}")
        if y == query.column:
            raise InvalidRequestError("a DP covariance needs two different columns")
        lo2, hi2 = float(query.param("lower2")), float(query.param("upper2"))
        check_bounds(lo2, hi2, limit=VARIANCE_BOUND, names=("lower2", "upper2"))

    def columns(self, query: Query) -> tuple[str, ...]:
        assert query.column is not None
        return (query.column, str(query.param("column2")))

    def predicates(self, query: Query) -> tuple[Predicate, ...]:
        return tuple(Predicate(c, Op.NOT_NULL) for c in self.columns(query))

    def aggregates(self, query: Query) -> tuple[Aggregate, ...]:
        x, y = self.columns(query)
        fx, fy = _encodings(query)
        return (
            Aggregate("count", AggKind.COUNT),
            Aggregate("sum_x", AggKind.SUM, x, fixed=fx),
            Aggregate("sum_y", AggKind.SUM, y, fixed=fy),
            Aggregate("sum_xx", AggKind.SUM_SQUARES, x, fixed=fx),
            Aggregate("sum_yy", AggKind.SUM_SQUARES, y, fixed=fy),
            Aggregate("sum_xy", AggKind.SUM_PRODUCTS, x, fixed=fx, by=y, by_fixed=fy),
        )

    def answer(self, query: Query, noisy: NoisyGroup) -> Answer:
        fx, fy = _encodings(query)
        rx, ry = fx.radius, fy.radius
        n = max(noisy.scalar("count"), 1.0)
        mx, my = noisy.scalar("sum_x") / n, noisy.scalar("sum_y") / n
        cov = _clamp(noisy.scalar("sum_xy") / n - mx * my, rx * ry, lowest=-rx * ry)
        var_x = _clamp(noisy.scalar("sum_xx") / n - mx * mx, rx * rx, lowest=0.0)
        var_y = _clamp(noisy.scalar("sum_yy") / n - my * my, ry * ry, lowest=0.0)
        spread = math.sqrt(var_x) * math.sqrt(var_y)
        corr = min(max(cov / spread, -1.0), 1.0) if spread > 0.0 else 0.0
        return {"covariance": cov, "correlation": corr}, None


STATISTIC = register_statistic(Covariance())

"""A Gaussian-DP (μ-GDP) block filter, valid under fully adaptive composition.

A block of capacity (ε_g, δ_g) admits charges of μ_i-GDP mechanisms while Σμ_i² ≤ μ_g², where
μ_g is the largest μ whose μ-GDP implies (ε_g, δ_g)-DP.

* Fully adaptive composition. Smith & Thakurta, "Fully Adaptive Composition for Gaussian
  Differential Privacy" (2022, https://arxiv.org/abs/2210.17520), main theorem (§1): when each
  mechanism is μ_i-GDP conditioned on the earlier outputs, μ_i chosen from those outputs, and the
  analyst stops before Σμ_i² exceeds μ², the whole interaction is μ-GDP — the filter loses
  nothing against non-adaptive composition (Dong, Roth & Su 2022, Cor. 3.3: √(Σμ_i²)-GDP).
  The theorem is stated for GDP mechanisms, so a pure ε-DP mechanism enters as the μ(ε)-GDP one
  below. Regehr et al. 2026 (https://arxiv.org/abs/2602.15815) take this "naive GDP filter" as
  the valid baseline that their residue filters refine.
* From μ-GDP to (ε, δ). Dong, Roth & Su, "Gaussian Differential Privacy" (JRSS-B 2022,
  https://arxiv.org/abs/1905.02383), Cor. 2.13: μ-GDP holds iff (ε, δ(ε))-DP for every ε ≥ 0,
  with δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), increasing in μ. So μ_g solves δ(ε_g) = δ_g
  (:func:`gdp_capacity_units`).
* Costs. A Gaussian mechanism of L2 sensitivity Δ and noise σ is exactly (Δ/σ)-GDP (Dong et al.,
  Thm 2.7). A pure ε-DP mechanism (Laplace) is μ(ε)-GDP with μ(ε) = −2Φ⁻¹(1/(1+e^ε))
  (:meth:`GaussianDp.from_pure_dp` proves it). An (ε, δ>0) budget implies no GDP bound (its
  trade-off curve starts at 1−δ < 1) and an RDP curve on a finite order grid does not either
  (RDP, even zCDP for all orders, is weaker than GDP), so both are refused: a Gaussian is priced
  by its σ, not by a curve.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from typing import Any, ClassVar

from blockbudget.accounting.filters import Filter, Vector
from blockbudget.accounting.rule import (
    Accounting,
    AccountingRule,
    Combine,
    Noise,
    Release,
    check_group,
    register_rule,
)
from blockbudget.budget import (
    INF_UNITS,
    UNIT,
    Budget,
    Cost,
    Number,
    RdpCurve,
    canonical_decimal,
    from_units,
    to_decimal,
    units_up,
)
from blockbudget.decimals import shortest_decimal
from blockbudget.errors import InvalidBudgetError

#: The largest ε the exact GDP conversions take (0.5 s at most here): a block's ε_g above it is
#: refused, and a pure ε above it is priced by a closed-form upper bound on μ(ε).
MAX_EXACT_EPSILON = Decimal(1000)

#: Decimal digits of the mpmath evaluations below.
_DPS = 80
#: Relative error allowed for one mpmath evaluation of Φ or exp at :data:`_DPS` digits (1e-76,
#: i.e. 10⁴ ulps: far above what mpmath's guard digits leave), and the relative slack put on
#: inputs read into mpmath.
_REL = Fraction(1, 10 ** (_DPS - 4))


@dataclass(frozen=True, init=False)
class GaussianDp(Cost):
    """A μ-GDP cost: the mechanism's trade-off curve is at least G_μ (Dong, Roth & Su 2022).

    Composition adds μ² (Dong et al., Cor. 3.3); ``a + b`` is √(a.μ² + b.μ²), rounded up.

    Args:
        mu: μ ≥ 0, 0 or of magnitude 1e-100 … 1e30 like every stored budget value.

    Example:
        >>> GaussianDp.gaussian(sigma=10.0).mu
        Decimal('0.1')
        >>> (GaussianDp(mu="0.3") + GaussianDp(mu="0.4")).mu
        Decimal('0.5')
    """

    kind: ClassVar[str] = "gdp"

    mu: Decimal

    def __init__(self, *, mu: Number) -> None:
        value = to_decimal(mu, name="mu")
        if value.is_infinite() or value < 0:
            raise InvalidBudgetError(f"mu must be finite and >= 0, got {mu!r}")
        object.__setattr__(self, "mu", value)

    @classmethod
    def zero(cls) -> GaussianDp:
        """μ = 0: the cost of releasing nothing."""
        return cls(mu=0)

    @classmethod
    def gaussian(cls, *, sigma: Number, sensitivity: Number = 1) -> GaussianDp:
        """The Gaussian mechanism N(0, σ²) on an L2 sensitivity Δ: exactly (Δ/σ)-GDP (Dong,
        Roth & Su 2022, Thm 2.7); Δ/σ is rounded up at 40 digits."""
        s = to_decimal(sigma, name="sigma")
        d = to_decimal(sensitivity, name="sensitivity")
        if not (s.is_finite() and s > 0):
            raise InvalidBudgetError(f"sigma must be finite and > 0, got {sigma!r}")
        if not (d.is_finite() and d >= 0):
            raise InvalidBudgetError(f"sensitivity must be finite and >= 0, got {sensitivity!r}")
        with localcontext() as ctx:
            ctx.prec = 40
            ctx.rounding = ROUND_CEILING
            return cls(mu=_storable_up(d / s))

    @classmethod
    def from_pure_dp(cls, epsilon: Number) -> GaussianDp:
        """The GDP cost of any (ε, 0)-DP mechanism (e.g. Laplace): μ(ε) = −2Φ⁻¹(1/(1+e^ε)),
        rounded up.

        Proof that ε-DP ⇒ μ(ε)-GDP, from the trade-off curves of Dong, Roth & Su 2022.
        ε-DP is f_{ε,0}-DP with f_{ε,0}(α) = max(0, 1 − e^ε α, e^{−ε}(1 − α)) (Wasserman & Zhou
        2010, as restated by Dong et al.), the piecewise-linear curve through (0, 1), (α*, α*) and
        (1, 0), α* = 1/(1+e^ε). G_μ(α) = Φ(Φ⁻¹(1−α) − μ) is convex, G_μ(0) = 1, G_μ(1) = 0, and
        G_μ(α*) = α* iff Φ⁻¹(1−α*) − μ = Φ⁻¹(α*), i.e. μ = −2Φ⁻¹(α*). A convex function lies
        below its chords, so G_μ ≤ f_{ε,0} on [0, α*] and on [α*, 1]: an ε-DP mechanism is at
        least as hard to test as G_μ, i.e. μ-GDP, and so μ'-GDP for every μ' ≥ μ. The value is
        tight (both curves meet at α*). μ(ε) ≈ 1.2533ε for small ε; μ(1) ≈ 1.23204.
        """
        eps = to_decimal(epsilon, name="epsilon")
        if eps < 0 or eps.is_infinite():
            raise InvalidBudgetError(f"epsilon must be finite and >= 0, got {epsilon!r}")
        if eps == 0:
            return cls(mu=0)
        if eps > MAX_EXACT_EPSILON:
            # μ(ε) = −2Φ⁻¹(p), p = 1/(1+e^ε) ≤ ½. The Chernoff tail Φ(−x) ≤ e^{−x²/2} at
            # x = √(2 ln(1/p)) gives Φ(−x) ≤ p, so −Φ⁻¹(p) ≤ √(2 ln(1+e^ε)) ≤ √(2ε + 2): an
            # upper bound in closed form, where the exact search would need e^ε in exact
            # arithmetic (unbounded time and memory).
            with localcontext() as ctx:
                ctx.prec = 40
                ctx.rounding = ROUND_CEILING
                return cls(mu=_storable_up(2 * _sqrt_up(2 * eps + 2)))
        return cls(mu=_pure_dp_mu_up(eps))

    def __add__(self, other: GaussianDp) -> GaussianDp:
        if not isinstance(other, GaussianDp):
            return NotImplemented
        with localcontext() as ctx:
            ctx.prec = 40
            ctx.rounding = ROUND_CEILING
            total = self.mu * self.mu + other.mu * other.mu
        return GaussianDp(mu=_storable_up(_sqrt_up(total)))

    def __radd__(self, other: object) -> GaussianDp:
        if other == 0:
            return self
        if isinstance(other, GaussianDp):
            return other + self
        return NotImplemented

    def __le__(self, other: GaussianDp) -> bool:
        """μ ≤ μ': a μ-GDP mechanism is also μ'-GDP."""
        return self.mu <= other.mu

    def __ge__(self, other: GaussianDp) -> bool:
        return other <= self

    def meet(self, other: Cost) -> GaussianDp:
        """The smaller μ.

        Example:
            >>> GaussianDp(mu="0.3").meet(GaussianDp(mu="0.2")).mu
            Decimal('0.2')
        """
        o: GaussianDp = self.same_kind(other)
        return self if self.mu <= o.mu else o

    def minus(self, other: Cost) -> GaussianDp | None:
        """μ with μ² = μ_self² − μ_other² (μ² composes additively), rounded down at 40 digits;
        0 when less than 1e-90 is left; None when ``other`` exceeds ``self``.

        Example:
            >>> GaussianDp(mu="0.5").minus(GaussianDp(mu="0.3")).mu  # 0.4, rounded down
            Decimal('0.3999999999999999999999999999999999999999')
        """
        o: GaussianDp = self.same_kind(other)
        with localcontext() as ctx:
            ctx.prec = 100  # μ has at most 40 digits: the squares and their difference are exact
            left = self.mu * self.mu - o.mu * o.mu
            if left < 0:
                return None
            if left == 0:
                return GaussianDp(mu=0)
            ctx.prec = 40
            root = left.sqrt().next_minus()  # sqrt rounds half-even: one step down is below
        return GaussianDp(mu=root if root > Decimal("1e-90") else 0)

    def add_up(self, other: Cost) -> GaussianDp:
        """√(μ² + μ'²), rounded up (the composition of :meth:`__add__`)."""
        o: GaussianDp = self.same_kind(other)
        return self + o

    @property
    def is_zero(self) -> bool:
        return self.mu == 0

    def scaled(self, factor: Number) -> GaussianDp:
        """μ times a non-negative exact factor, rounded down (a share never exceeds the whole)."""
        f = to_decimal(factor, name="factor")
        with localcontext() as ctx:
            ctx.prec = 40
            ctx.rounding = ROUND_FLOOR
            return GaussianDp(mu=self.mu * f)

    def to_json(self) -> dict[str, Any]:
        """``{"v": 2, "kind": "gdp", "mu": "<exact decimal>"}``."""
        return {"v": 2, "kind": "gdp", "mu": canonical_decimal(self.mu)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GaussianDp:
        return cls(mu=Decimal(str(data["mu"])))

    def __str__(self) -> str:
        return f"(μ={self.mu:.6g}-GDP)"


class GdpFilter(Filter):
    """μ-GDP block filter: admits charges while Σμ_i² ≤ μ_g² (Smith & Thakurta 2022,
    https://arxiv.org/abs/2210.17520, main theorem; μ_g from Dong, Roth & Su 2022, Cor. 2.13).

    Features: (μ²,) in fixed point, rounded up; the capacity μ_g² is rounded down, so the fit
    test is an exact integer comparison. Costs: :class:`GaussianDp`, or a pure (ε, 0) budget
    converted by :meth:`GaussianDp.from_pure_dp`; (ε, δ>0) budgets and RDP curves are refused.

    Example:
        >>> f = GdpFilter(capacity=Budget(epsilon=1, delta="1e-6"))
        >>> n, used = 0, f.zero()
        >>> while f.fits_with(used, f.features(GaussianDp.gaussian(sigma=10))):
        ...     used, n = (used[0] + f.features(GaussianDp.gaussian(sigma=10))[0],), n + 1
        >>> n  # ⌊μ_g² σ²⌋ = ⌊0.0560289… · 100⌋
        5
    """

    accounting = Accounting.declare("gdp")
    dims = 1

    def __init__(self, *, capacity: Budget) -> None:
        super().__init__(capacity=capacity)
        self._cap = gdp_capacity_units(capacity.epsilon, capacity.delta)

    def features(self, cost: Cost) -> Vector:
        if isinstance(cost, RdpCurve):
            raise InvalidBudgetError(
                "a GDP stream cannot account an RDP curve (RDP on a finite grid implies no "
                "GDP bound); price a Gaussian by its sigma with GaussianDp.gaussian(sigma=...)"
            )
        if isinstance(cost, Budget):
            if not cost.is_pure:
                raise InvalidBudgetError(
                    f"a GDP stream cannot account an (ε, δ) budget with δ > 0 ({cost}): no GDP "
                    "bound follows from it; declare the mechanism's GDP cost instead"
                )
            cost = GaussianDp.from_pure_dp(cost.epsilon)
        if not isinstance(cost, GaussianDp):
            raise InvalidBudgetError(f"a GDP stream cannot account {type(cost).__name__}")
        with localcontext() as ctx:  # μ has at most 40 digits: μ² is exact at 100
            ctx.prec = 100
            ctx.rounding = ROUND_CEILING
            return (units_up(cost.mu * cost.mu),)

    def fits(self, used: Sequence[int]) -> bool:
        return used[0] <= self._cap

    def remaining_fraction(self, used: Sequence[int]) -> float:
        return 0.0 if self._cap <= 0 else max(0.0, (self._cap - used[0]) / self._cap)

    def max_next_mu(self, used: Sequence[int]) -> Decimal:
        """The largest μ of one more charge that fits, exactly (to a unit of 1e-18)."""
        return from_units(_isqrt_units(self._cap - used[0]))

    def describe_remaining(self, used: Sequence[int]) -> str:
        mu = self.max_next_mu(used)
        return f"next Gaussian up to μ={float(mu):.6g} (σ/Δ ≥ {_ratio(mu)})"

    def shortfall(self, used: Sequence[int], candidate: Sequence[int]) -> str:
        over = max(0, used[0] + candidate[0] - self._cap)
        return f"μ² {float(from_units(over)):.6g}"

    def describe(self) -> str:
        return f"μ-GDP filter (Smith & Thakurta 2022) with capacity {self.capacity}"

    def capacity_units(self) -> Vector:
        return (self._cap,)

    def share(self, fraction: float) -> Cost:
        """μ = μ_g·√fraction, so that μ² is ``fraction`` of the capacity μ_g² (rounded down)."""
        with localcontext() as ctx:
            ctx.prec = 40
            ctx.rounding = ROUND_FLOOR
            mu = (from_units(self._cap) * shortest_decimal(fraction)).sqrt()
        return GaussianDp(mu=mu.next_minus() if mu > 0 else mu)


def _sqrt_up(value: Decimal) -> Decimal:
    """√value at 40 digits, never below the exact root: Decimal's sqrt rounds half-even, so a
    root whose square falls below ``value`` is bumped one step (the square of a 40-digit root is
    exact at 100 digits)."""
    with localcontext() as ctx:
        ctx.prec = 40
        ctx.rounding = ROUND_CEILING
        root = value.sqrt()
        ctx.prec = 100
        if root * root < value:
            ctx.prec = 40
            root = root.next_plus()
        return root


def _ratio(mu: Decimal) -> str:
    return "inf" if mu == 0 else f"{1 / float(mu):.6g}"


def _exact(units: int) -> str:
    return "inf" if units >= INF_UNITS else canonical_decimal(from_units(units))


def _isqrt_units(left_units: int) -> int:
    """Largest x (in units) with ⌈x²/UNIT⌉ ≤ left_units, i.e. x² ≤ left_units·UNIT."""
    return math.isqrt(int(left_units * UNIT)) if left_units > 0 else 0


def _storable_up(value: Decimal) -> Decimal:
    """A positive value below the smallest stored magnitude becomes that magnitude (never 0)."""
    if 0 < value < Decimal("1e-100"):
        return Decimal("1e-100")
    return value


def _to_fraction_down(x: Any) -> Fraction:
    """An mpmath value as an exact fraction (mpf values are binary: exact)."""
    import mpmath

    man, exp = mpmath.mpf(x).man_exp
    return Fraction(int(man)) * (Fraction(2) ** int(exp))


def _gdp_delta_upper(mu: Any, eps: Any) -> Fraction:
    """An upper bound on δ_μ(ε) = Φ(x₁) − e^ε Φ(x₂), x₁ = −ε/μ + μ/2, x₂ = −ε/μ − μ/2 (Dong et
    al. Cor. 2.13), from 80-digit mpmath values.

    Error model: each mpmath call (Φ, exp, and each arithmetic step) is within :data:`_REL`
    relative. Rounding x by a relative r moves Φ(x) by at most a relative r·(1 + x²) (for x < 0,
    φ(x)|x| ≤ Φ(x)(1 + x²)), and rounding ε moves e^ε by a relative ε·r. So the computed T₁, T₂
    are within relative ``_REL·(4 + x²)`` and ``_REL·(6 + x² + ε)``; adding those errors (and one
    more ulp for the subtraction) to the computed difference bounds the true δ from above.
    """
    import mpmath

    x1 = -eps / mu + mu / 2
    x2 = -eps / mu - mu / 2
    t1 = _to_fraction_down(mpmath.ncdf(x1))
    t2 = _to_fraction_down(mpmath.exp(eps) * mpmath.ncdf(x2))
    sq1 = _to_fraction_down(x1) ** 2
    sq2 = _to_fraction_down(x2) ** 2
    err = _REL * (t1 * (5 + sq1) + t2 * (7 + sq2 + abs(_to_fraction_down(eps))))
    return t1 - t2 + err


@functools.lru_cache(maxsize=256)
def gdp_capacity_units(epsilon: Decimal, delta: Decimal) -> int:
    """⌊μ_g²⌋ in units (1e-18), never above the exact value, where μ_g is the largest μ whose
    μ-GDP implies (ε_g, δ_g)-DP (Dong, Roth & Su 2022, Cor. 2.13: δ_μ(ε_g) ≤ δ_g).

    Why the rounding is safe. δ_μ(ε) is continuous and strictly increasing in μ (G_μ decreases
    pointwise in μ, Dong et al. §2.1) and decreasing in ε. (1) The inputs are read into mpmath
    moved toward refusing: ε_g lowered and δ_g lowered by a relative 1e-76. (2) A bisection keeps
    ``lo`` only where the *upper bound* of :func:`_gdp_delta_upper` is ≤ δ_g, so the true
    δ_lo(ε_g) ≤ δ_g and lo ≤ μ_g. (3) lo is an exact binary fraction; lo² is floored exactly to
    units. Every step moves down, so the capacity is ≤ ⌊μ_g² · 10^18⌋.

    Args:
        epsilon: ε_g > 0.
        delta: 0 < δ_g < 1.

    Raises:
        InvalidBudgetError: when ε_g ≤ 0 or δ_g ≤ 0 (no μ > 0 gives δ = 0), or ε_g above
            :data:`MAX_EXACT_EPSILON` (the exact search would need e^{ε_g} exactly).

    Example:
        >>> gdp_capacity_units(Decimal(1), Decimal("1e-6"))  # μ_g = 0.2367043806634357…
        56028963825260677
    """
    if epsilon > MAX_EXACT_EPSILON:
        raise InvalidBudgetError(
            f"a GDP block's ε_g is at most {MAX_EXACT_EPSILON} (its capacity is computed "
            f"exactly, which needs e^ε_g); got {epsilon}"
        )
    if epsilon <= 0 or delta <= 0:
        raise InvalidBudgetError(
            f"a GDP filter needs ε_g > 0 and δ_g > 0 (μ-GDP never gives δ = 0); got "
            f"(ε={epsilon}, δ={delta})"
        )
    import mpmath

    with mpmath.workdps(_DPS):
        shrink = 1 - mpmath.mpf(10) ** (4 - _DPS)
        eps = mpmath.mpf(str(epsilon)) * shrink
        target = Fraction(delta) * (1 - _REL)
        lo, hi = mpmath.mpf(0), mpmath.mpf(1)
        while _gdp_delta_upper(hi, eps) <= target:  # δ_μ → 1 as μ → ∞: this ends
            lo, hi = hi, hi * 2
        for _ in range(4 * _DPS):  # ~1e-96 relative width: far below a unit of μ²
            mid = (lo + hi) / 2
            if _gdp_delta_upper(mid, eps) <= target:
                lo = mid
            else:
                hi = mid
        if lo == 0:
            return 0
        root = _to_fraction_down(lo)
    num, den = root.numerator, root.denominator
    return int(num * num * UNIT) // (den * den)  # ⌊lo² · 10^18⌋, exactly


@functools.lru_cache(maxsize=1024)
def _pure_dp_mu_up(eps: Decimal) -> Decimal:
    """μ(ε) = −2Φ⁻¹(1/(1+e^ε)) rounded up to 40 digits (see :meth:`GaussianDp.from_pure_dp`).

    μ(ε) is the root of Φ(−μ/2)(1 + e^ε) = 1, whose left side decreases in μ. A bisection keeps
    ``hi`` only where the computed left side, inflated by its error bound, is ≤ 1; so the true
    left side is ≤ 1 there and hi ≥ μ(ε); hi is then rounded up.
    """
    import mpmath

    with mpmath.workdps(_DPS):
        e = mpmath.mpf(str(eps)) * (1 + mpmath.mpf(10) ** (4 - _DPS))  # ε read upward

        def above(mu: Any) -> bool:
            # Computed within a relative _REL·(6 + μ²/4 + ε) of the true value (the error model
            # of _gdp_delta_upper); accept only where even the inflated value is ≤ 1.
            lhs = _to_fraction_down(mpmath.ncdf(-mu / 2) * (1 + mpmath.exp(e)))
            slack = _REL * (6 + _to_fraction_down(mu) ** 2 / 4 + _to_fraction_down(e))
            return lhs * (1 + slack) <= 1

        lo, hi = mpmath.mpf(0), mpmath.mpf(1)
        while not above(hi):
            lo, hi = hi, hi * 2
        for _ in range(4 * _DPS):
            mid = (lo + hi) / 2
            if above(mid):
                hi = mid
            else:
                lo = mid
        exact = _to_fraction_down(hi)
    with localcontext() as ctx:
        ctx.prec = 40
        ctx.rounding = ROUND_CEILING
        value = Decimal(exact.numerator) / Decimal(exact.denominator)
    return _storable_up(value)


class GdpRule(AccountingRule):
    """μ-GDP accounting (Smith & Thakurta 2022; Dong, Roth & Su 2022): Σμ² ≤ μ_g² per block."""

    name = "gdp"
    title = (
        "Gaussian DP filter (Smith & Thakurta 2022, https://arxiv.org/abs/2210.17520): "
        "Σμ² ≤ μ_g² per block, μ_g the largest μ whose μ-GDP implies (ε_g, δ_g)"
    )
    cost_kind = GaussianDp
    combine = Combine.ALL
    prices_noise = True

    def make(self, *, capacity: Budget, slack_delta: float | None) -> Filter:
        return GdpFilter(capacity=capacity)

    def price(self, release: Release) -> Cost:
        """μ of the release: each Gaussian part is exactly (Δ/σ)-GDP (Dong, Roth & Su 2022,
        Thm 2.7); each Laplace part, and each exponential-mechanism selection (one peel of a
        Gumbel top-k: its GDP bound is that of its pure ε, none tighter being known here), is
        (Δ/b)-DP, so μ(Δ/b)-GDP (:meth:`GaussianDp.from_pure_dp`); parts compose in quadrature
        (Cor. 3.3). A release with no parts is pure ε-DP.

        Raises:
            InvalidBudgetError: a release with no noise parts and δ > 0 (no GDP bound).
        """
        if not release.parts:
            if release.delta != 0:
                raise InvalidBudgetError(
                    f"a GDP stream cannot price a release of ε={release.epsilon}, "
                    f"δ={release.delta} > 0 without its noise: no GDP bound follows from (ε, δ)"
                )
            return GaussianDp.from_pure_dp(release.epsilon)
        costs = []
        for part in release.parts:
            if part.noise is Noise.GAUSSIAN:
                costs.append(GaussianDp.gaussian(sigma=part.scale, sensitivity=part.sensitivity))
            else:  # Laplace, or one exponential-mechanism selection: (Δ/b)-DP, ε rounded up
                costs.append(GaussianDp.from_pure_dp(part.pure_epsilon()))
        total = costs[0]
        for cost in costs[1:]:
            total = total + cost
        return total

    def group_cost(self, cost: Cost, k: int) -> Cost:
        """μ-GDP for one row is kμ-GDP for a group of k rows (Dong, Roth & Su 2022, Thm 2.14).

        Raises:
            InvalidBudgetError: k < 1, or a cost this rule does not account.
        """
        check_group(k)
        own = self.own_kind(cost)  # an (ε, δ>0) budget implies no GDP bound: refused, any k
        if k == 1:
            return cost
        assert isinstance(own, GaussianDp)
        with localcontext() as ctx:  # kμ, rounded up (μ has ≤ 40 digits: exact at 100)
            ctx.prec = 100
            ctx.rounding = ROUND_CEILING
            group = own.mu * k
        return GaussianDp(mu=_storable_up(group))

    def cost_of_features(self, features: Sequence[int]) -> Cost:
        """μ = √(μ² units), rounded up (so its μ² is never below the features)."""
        return GaussianDp(mu=_storable_up(_sqrt_up(from_units(features[0]))))

    def features_json(self, features: Sequence[int]) -> dict[str, str | list[str]]:
        return {"gdp_mu2": _exact(features[0])}


RULE = register_rule(GdpRule())

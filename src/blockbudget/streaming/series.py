"""DPI's converging budget series (seed ``002_e6d4c77f2abb3a16.txt`` §5, Thm 5.1, 5.4, App. B.4).

The dilogarithm (Spence's function) ``Li₂(x) = Σ_{t≥1} x^t / t²`` and its inverse on [0, 1], and the
series DPI spends its total budget ε along.

**Thm 5.1 (cost of one slot).** A slot that reweights with learning rates η^A and η^Q costs
``(2Δ_Q/μ)·[ln((1+2η^A)/(1−2η^A)) + ln((1+2η^Q)/(1−2η^Q))]`` (the paper writes 4/μ for Δ_Q = 2).
With ``α = ½·ln((1+2η)/(1−2η))`` (Alg. 1, line 17) one direction costs ``4·Δ_Q·α/μ``: it is an
exponential mechanism with parameter α over scores of sensitivity ``2Δ_Q/μ`` (the clipped score of
Alg. 1, lines 9–14, has slope 2/μ in the error).

**Thm 5.4 / App. B.4 (the series).** With ``C = Δ_Q/(μζ)`` (Thm 5.4; ``2/(μζ)`` for Δ_Q = 2 in
App. B.4) and ``r = m² = Li₂⁻¹(π²/6 − ε/C)`` (Eq. 12), the t-th term is ``ε_t = C·(1 − r^t)/t²``;
the terms sum to ``C·(Li₂(1) − Li₂(r)) = ε`` (Eq. 10–11). ε_t is what slot t spends in total; it is
halved between the two reweighting directions (Alg. 1, line 5; Fig. 2), and each direction's η_t
follows from Thm 5.1: ``ln((1+2η_t)/(1−2η_t)) = (ε_t/2)·μ/(2Δ_Q)``. The paper states three
different constants for this exponent (Thm 5.4: ``(1−r^t)/(ζt²)``; App. B.4: ``(1−r^t)/(2ζt²)``,
which gives the whole ε_t to one direction; halving per Alg. 1 gives ``(1−r^t)/(4ζt²)``). We take
the one that keeps the accounting of Thm 5.1 exact with both directions charged — the last — and
record the choice in ``docs/dpi.md``.

When ``ε > C·π²/6`` no r ∈ [0, 1] solves the equation: we take r = 0, so the series sums to
``C·π²/6 < ε`` (never more than ε).

**Exactness.** ``π²/6 − Li₂(r)`` cancels badly in floating point when r is near 1 (times C ≈ 500–800
for the :meth:`~blockbudget.streaming.config.DPIConfig.for_horizon` settings, the float sum came out
above ε by up to 5·10⁻¹⁴). So r is found by a bounded bisection on ``S(r) = π²/6 − Li₂(r)``
evaluated through Euler's reflection ``S(r) = Li₂(1 − r) + ln r·ln(1 − r)`` (no cancellation), and
the constant actually used, :attr:`DPISeries.scale`, is C lowered (by ~10⁻¹³ relative at most)
until a rigorous decimal upper bound of ``scale·S(r)`` is ≤ ε. Each term ``term(t)`` is a lower
bound of ``scale·(1 − r^t)/t²`` rounded down to the ledger's 10⁻¹⁸ grid (the machinery of
:mod:`blockbudget.series._exact`), so every prefix sum of terms, and the infinite sum, is ≤ ε in
exact arithmetic, as the accountant adds them.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from decimal import Decimal, DecimalException

import numpy as np
import numpy.typing as npt
from scipy.optimize import brentq
from scipy.special import spence

from blockbudget.decimals import plain_fields, plain_number, shortest_decimal
from blockbudget.errors import InvalidRequestError
from blockbudget.series._exact import CEIL, FLOOR, grid_floor

PI2_6 = math.pi**2 / 6.0
"""Li₂(1) = π²/6."""

_PI_DIGITS = "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899"
_PI_LOW = Decimal(_PI_DIGITS)  # π truncated: a lower bound
_PI_HIGH = FLOOR.add(_PI_LOW, Decimal("1e-80"))
#: Rigorous decimal bounds of π²/6.
PI2_6_LOW = FLOOR.divide(FLOOR.multiply(_PI_LOW, _PI_LOW), 6)
PI2_6_HIGH = CEIL.divide(CEIL.multiply(_PI_HIGH, _PI_HIGH), 6)

#: Relative margin by which a float term is lowered: the float evaluation of C·(1 − r^t)/t² errs
#: by a few ulps (≈1e-15 relative; expm1 is well conditioned for a negative argument), far less.
_FLOAT_MARGIN = 1e-12

#: Decimal digits below which the truncated dilogarithm series stops (its tail is bounded).
_SERIES_CUTOFF = Decimal("1e-70")

FloatArray = npt.NDArray[np.float64]


def dilog(x: float) -> float:
    """Li₂(x) for real x ≤ 1, through SciPy: ``spence(z) = Li₂(1 − z)``, so Li₂(x) = spence(1 − x).

    Raises:
        InvalidRequestError: x > 1 or not finite (Li₂ is complex there).
    """
    if not math.isfinite(x) or x > 1.0:
        raise InvalidRequestError(f"Li2(x) is real for finite x <= 1, got x={x!r}")
    return float(spence(1.0 - x))


def dilog_inverse(y: float, *, xtol: float = 1e-15) -> float:
    """The x ∈ [0, 1] with ``Li₂(x) = y``, for y ∈ [0, π²/6], by Brent's root finding on ``spence``.

    Li₂ is strictly increasing on [0, 1] (Li₂'(x) = −ln(1−x)/x > 0), so the root is unique.

    Raises:
        InvalidRequestError: y outside [0, π²/6].
    """
    if not math.isfinite(y) or y < 0.0 or y > PI2_6 * (1 + 1e-15):
        raise InvalidRequestError(f"Li2^-1(y) on [0, 1] needs 0 <= y <= pi^2/6, got y={y!r}")
    if y == 0.0:
        return 0.0
    if y >= PI2_6:
        return 1.0
    root = brentq(
        lambda x: float(spence(1.0 - x)) - y, 0.0, 1.0, xtol=xtol, rtol=1e-15, maxiter=200
    )
    return float(root)


def log_ratio(eta: float) -> float:
    """``ln((1+2η)/(1−2η)) = 2α`` for a learning rate η ∈ [0, ½) (Alg. 1, line 17)."""
    if not 0.0 <= eta < 0.5:
        raise InvalidRequestError(f"a learning rate eta must lie in [0, 0.5), got {eta!r}")
    return math.log1p(2 * eta) - math.log1p(-2 * eta)


def alpha_from_eta(eta: float) -> float:
    """``α_t = ½·ln((1+2η_t)/(1−2η_t))`` (Alg. 1, line 17)."""
    return 0.5 * log_ratio(eta)


def eta_from_alpha(alpha: float) -> float:
    """The inverse of :func:`alpha_from_eta`: ``η = ½·tanh(α)``."""
    if not math.isfinite(alpha) or alpha < 0.0:
        raise InvalidRequestError(f"alpha must be finite and >= 0, got {alpha!r}")
    return 0.5 * math.tanh(alpha)


def direction_cost(*, alpha: float, sensitivity: float, mu: float) -> float:
    """Thm 5.1, one direction: ``(2Δ_Q/μ)·ln((1+2η)/(1−2η)) = 4·Δ_Q·α/μ``."""
    alpha, sensitivity, mu = plain_number(alpha), plain_number(sensitivity), plain_number(mu)
    return 4.0 * sensitivity * alpha / mu


def alpha_for_cost(*, epsilon: float, sensitivity: float, mu: float) -> float:
    """The α whose one-direction cost (Thm 5.1) is ``epsilon``: ``α = ε·μ/(4·Δ_Q)``."""
    epsilon, sensitivity, mu = plain_number(epsilon), plain_number(sensitivity), plain_number(mu)
    return epsilon * mu / (4.0 * sensitivity)


def series_constant(*, sensitivity: float, mu: float, zeta: float) -> float:
    """``C = Δ_Q/(μζ)`` of Thm 5.4, refusing a value floats cannot represent.

    Raises:
        InvalidRequestError: when μζ overflows or underflows so that C is infinite or 0 (e.g.
            μ = 1e-300 with ζ = 1e-10), or a product is not finite.
    """
    sensitivity, mu, zeta = plain_number(sensitivity), plain_number(mu), plain_number(zeta)
    product = mu * zeta
    constant = sensitivity / product if product > 0 else math.inf
    if not (math.isfinite(product) and math.isfinite(constant) and constant > 0):
        raise InvalidRequestError(
            f"the DPI series constant C = sensitivity/(mu·zeta) must be a finite positive "
            f"float, got sensitivity={sensitivity!r}, mu={mu!r}, zeta={zeta!r} (C={constant!r})"
        )
    return constant


@dataclass(frozen=True)
class DPISeries:
    """The converging budget series of Thm 5.4 / App. B.4: ``ε_t = C·(1 − r^t)/t²``, Σ_t ε_t ≤ ε.

    Attributes:
        epsilon: the total budget ε the series spends (its sum is ε, or C·π²/6 if that is smaller).
        mu: the overfitting margin μ of Alg. 1 (> 0).
        zeta: the decay rate ζ (> 0).
        sensitivity: Δ_Q in ``C = Δ_Q/(μζ)``; the paper's value 2 by default.
    """

    epsilon: float
    mu: float
    zeta: float
    sensitivity: float = 2.0

    def __post_init__(self) -> None:
        plain_fields(self)  # NumPy scalars as Python numbers (``repr`` parses them below)
        for name in ("epsilon", "mu", "zeta", "sensitivity"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidRequestError(f"{name} must be a number, got {type(value).__name__}")
            if not math.isfinite(value) or value <= 0:
                raise InvalidRequestError(f"{name} must be finite and > 0, got {value!r}")
        series_constant(sensitivity=self.sensitivity, mu=self.mu, zeta=self.zeta)
        try:
            r = self._solve_r()
        except (DecimalException, ArithmeticError) as exc:
            raise InvalidRequestError(
                f"the DPI series for epsilon={self.epsilon!r}, mu={self.mu!r}, "
                f"zeta={self.zeta!r} cannot be computed in finite arithmetic"
            ) from exc
        object.__setattr__(self, "_r", r)

    @property
    def ratio(self) -> float:
        """``r = m² = Li₂⁻¹(π²/6 − ε/C)`` (Eq. 12); 0 when ε ≥ C·π²/6."""
        return float(self._r)  # type: ignore[attr-defined]

    def _solve_r(self) -> float:
        """r of Eq. 12 (:func:`solve_ratio`); also sets the C the terms use (:attr:`scale`)."""
        nominal = self.sensitivity / (self.mu * self.zeta)
        r = solve_ratio(epsilon=self.epsilon, scale=nominal)
        eps = shortest_decimal(self.epsilon)
        upper = tail_sum_upper(r)  # ≥ S(r) = Σ_t (1 − r^t)/t²
        coefficient = Decimal(nominal)  # exact value of the float
        if upper > 0:
            coefficient = min(coefficient, FLOOR.divide(eps, upper))
        scale = float(coefficient)
        if Decimal(scale) > coefficient:  # Decimal(float) is exact
            scale = math.nextafter(scale, 0.0)
        object.__setattr__(self, "_scale", scale)
        object.__setattr__(self, "_total", min(CEIL.multiply(Decimal(scale), upper), eps))
        return r

    @property
    def scale(self) -> float:
        """The C of ``ε_t = C·(1 − r^t)/t²``: ``Δ_Q/(μζ)`` (Thm 5.4), lowered where needed (by
        ~1e-13 relative at most) so that ``C·(π²/6 − Li₂(r)) ≤ ε`` holds exactly."""
        return float(self._scale)  # type: ignore[attr-defined]

    @property
    def nominal_scale(self) -> float:
        """``Δ_Q/(μζ)`` as Thm 5.4 states it."""
        return self.sensitivity / (self.mu * self.zeta)

    @property
    def total(self) -> float:
        """An upper bound of ``Σ_t ε_t = C·(π²/6 − Li₂(r))``, exact in decimal: it is ≤ ε."""
        return float(self._total)  # type: ignore[attr-defined]

    def term(self, t: int) -> float:
        """ε_t: :meth:`exact_term` as the largest float whose shortest decimal (what the
        accountant charges) is not above it. Decreasing in t."""
        return float_at_most(self.exact_term(t))

    def exact_term(self, t: int) -> Decimal:
        """ε_t on the ledger's 10⁻¹⁸ grid: a lower bound of ``C·(1 − r^t)/t²`` rounded down, so
        every prefix sum of terms is ≤ ε exactly (see the module docstring)."""
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1:
            raise InvalidRequestError(f"a series index must be an int >= 1, got {t!r}")
        return grid_floor(Decimal(self._term(int(t))))

    def _term(self, t: int) -> float:
        """A float lower bound of ``C·(1 − r^t)/t²`` (the float value lowered by a margin)."""
        r = self.ratio
        one_minus = 1.0 if r == 0.0 else -math.expm1(t * math.log(r))
        return self.scale * one_minus / (float(t) * float(t)) * (1.0 - _FLOAT_MARGIN)

    def terms(self, t: npt.NDArray[np.int64]) -> FloatArray:
        """Vectorised float lower bounds of ``C·(1 − r^t)/t²`` for indices ≥ 1 (not on the grid:
        :meth:`term` is at most 10⁻¹⁸ below; for searching and plotting)."""
        idx = np.asarray(t, dtype=np.float64)
        r = self.ratio
        one_minus = np.ones_like(idx) if r == 0.0 else -np.expm1(idx * math.log(r))
        values = self.scale * one_minus / (idx * idx) * (1.0 - _FLOAT_MARGIN)
        return np.asarray(values, dtype=np.float64)

    def eta(self, t: int, *, sensitivity: float = 2.0) -> float:
        """η_t of one direction when slot t spends ε_t (half per direction): Thm 5.4 / B.4."""
        return eta_from_alpha(self.alpha(t, sensitivity=sensitivity))

    def alpha(self, t: int, *, sensitivity: float = 2.0) -> float:
        """α_t of one direction: ``ε_t/2 = 4·Δ_Q·α_t/μ``."""
        return alpha_for_cost(epsilon=self.term(t) / 2.0, sensitivity=sensitivity, mu=self.mu)

    def index_at_most(self, value: float) -> int:
        """The smallest t ≥ 1 with ε_t <= value (terms strictly decrease).

        A table of the first 2²⁰ terms answers by binary search; past it ``ε_t ≈ C·(1 − r^t)/t²``
        gives a starting point that is corrected exactly with :meth:`term`.
        """
        if not value > 0.0:
            raise InvalidRequestError(f"value must be > 0, got {value!r}")
        negated = self._negated_table()  # increasing: −ε_1 < −ε_2 < ...
        if -value <= negated[-1]:
            # count the terms > value, i.e. the entries of −table below −value.
            return int(np.searchsorted(negated, -value, side="left")) + 1
        term = self._term
        size = len(negated)
        t = max(size + 1, int(math.sqrt(self.scale / value)))
        while term(t) > value:
            t = t + max(1, t // 1_000_000)
        while t > size + 1 and term(t - 1) <= value:
            t -= 1
        return t

    def _negated_table(self) -> FloatArray:
        cached: FloatArray | None = getattr(self, "_cache", None)
        if cached is None:
            cached = -self.terms(np.arange(1, (1 << 20) + 1, dtype=np.int64))
            object.__setattr__(self, "_cache", cached)
        return cached


def float_at_most(value: Decimal) -> float:
    """The largest float whose exact value and shortest decimal (``repr``, what
    :class:`~blockbudget.streaming.accountant.StreamAccountant` charges) are both ≤ ``value``."""
    x = float(value)
    while x > 0.0 and (Decimal(x) > value or Decimal(repr(x)) > value):
        x = math.nextafter(x, 0.0)
    return x


def _tail_sum_float(r: float) -> float:
    """``S(r) = π²/6 − Li₂(r) = Σ_t (1 − r^t)/t²`` in floats, through Euler's reflection
    ``Li₂(r) + Li₂(1 − r) = π²/6 − ln r·ln(1 − r)`` above r = ½ (no cancellation near 1)."""
    if r <= 0.0:
        return PI2_6
    if r >= 1.0:
        return 0.0
    if r <= 0.5:
        return PI2_6 - float(spence(1.0 - r))
    u = 1.0 - r  # exact (Sterbenz)
    return float(spence(r)) + math.log(r) * math.log(u)


def solve_ratio(*, epsilon: float, scale: float) -> float:
    """r of Eq. 12, ``C·(π²/6 − Li₂(r)) = ε``: the smallest float r in [0, 1] whose float sum
    ``C·S(r)`` is ≤ ε (0 when ε ≥ C·π²/6). S is decreasing, so this is a bisection over the bit
    patterns of the non-negative doubles: at most 64 steps."""
    epsilon, scale = plain_number(epsilon), plain_number(scale)
    if scale * PI2_6 <= epsilon:
        return 0.0
    lo, hi = 0, _bits(1.0)  # S(0)·C > ε >= S(1)·C = 0
    for _ in range(70):
        if hi - lo <= 1:
            break
        mid = (lo + hi) // 2
        if scale * _tail_sum_float(_float(mid)) <= epsilon:
            hi = mid
        else:
            lo = mid
    return _float(hi)


def _bits(x: float) -> int:
    return int(struct.unpack("<q", struct.pack("<d", x))[0])


def _float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<q", bits))[0])


def _ln_upper(x: Decimal) -> Decimal:
    """An upper bound of |ln x| for 0 < x < 1 (ln is correctly rounded: one ulp covers it)."""
    value = x.ln(context=FLOOR).copy_negate()  # (unary minus would round to 28 digits)
    return CEIL.add(value, Decimal(1).scaleb(value.adjusted() - FLOOR.prec + 2))


def _dilog_partial(x: Decimal, *, upper: bool) -> Decimal:
    """Σ_{k≥1} x^k/k² for 0 < x ≤ ½: a lower bound (``upper`` False: a partial sum rounded down)
    or an upper bound (a partial sum rounded up plus the tail bound x^{K+1}/((K+1)²(1 − x)))."""
    ctx = CEIL if upper else FLOOR
    total, power, k = Decimal(0), Decimal(1), 0
    while True:
        k += 1
        power = ctx.multiply(power, x)
        total = ctx.add(total, ctx.divide(power, k * k))
        if power < _SERIES_CUTOFF:
            break
    if upper:
        below = FLOOR.multiply((k + 1) ** 2, FLOOR.subtract(Decimal(1), x))
        tail = CEIL.divide(CEIL.multiply(power, x), below)
        total = CEIL.add(total, tail)
    return total


def tail_sum_upper(r: float) -> Decimal:
    """A rigorous decimal upper bound of ``S(r) = π²/6 − Li₂(r) = Σ_t (1 − r^t)/t²`` for a float
    r in [0, 1]: the direct series below ½, Euler's reflection above (Li₂(1 − r) + ln r·ln(1 − r),
    all of it positive there)."""
    if r <= 0.0:
        return PI2_6_HIGH
    if r >= 1.0:
        return Decimal(0)
    x = Decimal(r)  # exact
    if x <= Decimal("0.5"):
        return CEIL.subtract(PI2_6_HIGH, _dilog_partial(x, upper=False))
    u = FLOOR.subtract(Decimal(1), x)  # exact
    return CEIL.add(_dilog_partial(u, upper=True), CEIL.multiply(_ln_upper(x), _ln_upper(u)))


def zeta_for_horizon(*, epsilon: float, slots: int, mu: float, sensitivity: float = 2.0) -> float:
    """The decay rate ζ whose series (Thm 5.4) has its knee at an expected horizon of ``slots``.

    ``ε_t = C·(1 − r^t)/t²`` behaves like ``C·(1 − r)/t`` while ``t ≲ 1/(1 − r)`` and like ``C/t²``
    after, so the first ``1/(1 − r)`` slots share the budget roughly harmonically and the rest get
    only a tail of about ``C/t``. Putting the knee at the horizon, ``1 − r = 1/T``, and solving
    Eq. 10–12 for the scale, ``C = ε/(π²/6 − Li₂(1 − 1/T))``, gives ``ζ = Δ_Q/(μ·C)``. Only the
    shape of the series changes: it still sums to ε (the accountant enforces that whatever ζ is).

    With the paper's default ζ = 0.2 (C = 20 for μ = 0.5) a 365-slot stream at ε = 10 spends most
    of ε in its first few terms (ε_1 = 3.3) and a typical slot gets ≈ 5·10⁻⁴; with the knee at 365,
    ε_1 = 1.45 and a typical slot gets ≈ 6·10⁻³ (see ``docs/results.md``).

    Raises:
        InvalidRequestError: ε, μ or Δ_Q not finite and > 0, or slots not an int >= 2.
    """
    epsilon, mu, sensitivity = plain_number(epsilon), plain_number(mu), plain_number(sensitivity)
    slots = plain_number(slots)
    for name, value in (("epsilon", epsilon), ("mu", mu), ("sensitivity", sensitivity)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidRequestError(f"{name} must be a number, got {type(value).__name__}")
        if not math.isfinite(value) or value <= 0:
            raise InvalidRequestError(f"{name} must be finite and > 0, got {value!r}")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 2:
        raise InvalidRequestError(f"the expected horizon must be an int >= 2 slots, got {slots!r}")
    scale = epsilon / (PI2_6 - dilog(1.0 - 1.0 / slots))
    return sensitivity / (mu * scale)

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
``C·π²/6 < ε`` (never more than ε). The root is taken on the side that makes the sum smaller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import brentq
from scipy.special import spence

from blockbudget.errors import InvalidRequestError

PI2_6 = math.pi**2 / 6.0
"""Li₂(1) = π²/6."""

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
    return 4.0 * sensitivity * alpha / mu


def alpha_for_cost(*, epsilon: float, sensitivity: float, mu: float) -> float:
    """The α whose one-direction cost (Thm 5.1) is ``epsilon``: ``α = ε·μ/(4·Δ_Q)``."""
    return epsilon * mu / (4.0 * sensitivity)


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
        for name in ("epsilon", "mu", "zeta", "sensitivity"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidRequestError(f"{name} must be a number, got {type(value).__name__}")
            if not math.isfinite(value) or value <= 0:
                raise InvalidRequestError(f"{name} must be finite and > 0, got {value!r}")
        object.__setattr__(self, "_r", self._solve_r())

    @property
    def scale(self) -> float:
        """``C = Δ_Q/(μζ)`` (Thm 5.4)."""
        return self.sensitivity / (self.mu * self.zeta)

    @property
    def ratio(self) -> float:
        """``r = m² = Li₂⁻¹(π²/6 − ε/C)`` (Eq. 12); 0 when ε ≥ C·π²/6."""
        return float(self._r)  # type: ignore[attr-defined]

    def _solve_r(self) -> float:
        target = PI2_6 - self.epsilon / self.scale
        if target <= 0.0:
            return 0.0
        r = dilog_inverse(target)
        # Take the root on the side that keeps Σ ε_t = C·(π²/6 − Li₂(r)) <= ε.
        while r < 1.0 and self.scale * (PI2_6 - dilog(r)) > self.epsilon:
            r = math.nextafter(r, 2.0)
        return r

    @property
    def total(self) -> float:
        """``Σ_t ε_t = C·(π²/6 − Li₂(r))`` (≤ ε)."""
        return self.scale * (PI2_6 - dilog(self.ratio))

    def term(self, t: int) -> float:
        """``ε_t = C·(1 − r^t)/t²`` for t ≥ 1 (strictly decreasing in t)."""
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1:
            raise InvalidRequestError(f"a series index must be an int >= 1, got {t!r}")
        return self._term(int(t))

    def _term(self, t: int) -> float:
        r = self.ratio
        one_minus = 1.0 if r == 0.0 else -math.expm1(t * math.log(r))
        return self.scale * one_minus / (float(t) * float(t))

    def terms(self, t: npt.NDArray[np.int64]) -> FloatArray:
        """Vectorised :meth:`term` for an array of indices ≥ 1."""
        idx = np.asarray(t, dtype=np.float64)
        r = self.ratio
        one_minus = np.ones_like(idx) if r == 0.0 else -np.expm1(idx * math.log(r))
        return np.asarray(self.scale * one_minus / (idx * idx), dtype=np.float64)

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
    for name, value in (("epsilon", epsilon), ("mu", mu), ("sensitivity", sensitivity)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidRequestError(f"{name} must be a number, got {type(value).__name__}")
        if not math.isfinite(value) or value <= 0:
            raise InvalidRequestError(f"{name} must be finite and > 0, got {value!r}")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 2:
        raise InvalidRequestError(f"the expected horizon must be an int >= 2 slots, got {slots!r}")
    scale = epsilon / (PI2_6 - dilog(1.0 - 1.0 / slots))
    return sensitivity / (mu * scale)

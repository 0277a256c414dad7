"""RDP of the Alibaba-DP workload's subsampled mechanisms, (ε, δ) from a curve, noise calibration.

Vectorized over the orders :data:`~blockbudget.budget.ALPHAS` so that a workload of thousands
of calibrated tasks is generated in seconds:

* :func:`subsampled_gaussian_rdp` — Mironov, Talwar & Zhang, "Rényi Differential Privacy of the
  Sampled Gaussian Mechanism" (2019), §3.3, exact at integer orders (equal to dp-accounting's
  there, a test checks it);
* :func:`subsampled_laplace_rdp` — Zhu & Wang, "Poisson Subsampled Rényi Differential Privacy"
  (ICML'19), Thm. 6, an upper bound for any mechanism, applied to Laplace (Mironov 2017,
  Prop. 6), capped by amplified pure DP;
* a fractional order takes the next integer order's value — an upper bound, since Rényi
  divergence grows with the order (van Erven & Harremoës 2014, Thm. 3);
* :func:`rdp_to_epsilon` — Canonne, Kamath & Steinke 2020, Prop. 12 (dp-accounting's
  ``compute_epsilon``); :func:`calibrate_noise` — the DPack generator's search for [0.9ε, ε];
* :func:`best_normalized_demand` — the Alibaba-DP filter's quantity.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from blockbudget.budget import ALPHAS, RdpCurve
from blockbudget.decimals import plain_number

__all__ = [
    "best_normalized_demand",
    "calibrate_noise",
    "rdp_to_epsilon",
    "subsampled_gaussian_rdp",
    "subsampled_laplace_rdp",
]

FloatArray = npt.NDArray[np.float64]

#: Noise-multiplier search range and tolerance of the published calibration.
NOISE_RANGE = (1e-3, 1e3)
CALIBRATION_BAND = 0.9
_ORDERS = np.array(ALPHAS, dtype=np.float64)
_INT_ORDERS = np.ceil(_ORDERS).astype(np.int64)  # fractional orders take the next integer's

_UNIQUE_ORDERS = np.unique(_INT_ORDERS)  # 2, 3, 4, 5, 6, 8, 16, 32, 64
_TO_ALPHAS = np.searchsorted(_UNIQUE_ORDERS, _INT_ORDERS)
_K = np.arange(int(_UNIQUE_ORDERS.max()) + 1, dtype=np.float64)  # k = 0 .. max order
_A = _UNIQUE_ORDERS.astype(np.float64)[:, None]
_VALID = _K[None, :] <= _A  # (orders, k)
_LGAMMA = np.array([math.lgamma(x + 1) for x in _K])
#: log C(α, k) per (integer order, k), −inf where k > α.
_LOG_BINOM = np.where(
    _VALID,
    _LGAMMA[_UNIQUE_ORDERS][:, None]
    - _LGAMMA[None, :]
    - np.array([[math.lgamma(max(a - k, 0) + 1) for k in _K] for a in _UNIQUE_ORDERS]),
    -np.inf,
)


def _rowwise_logsumexp(terms: FloatArray) -> FloatArray:
    top = np.max(terms, axis=1, keepdims=True)
    out: FloatArray = (top + np.log(np.sum(np.exp(terms - top), axis=1, keepdims=True)))[:, 0]
    return out


def subsampled_gaussian_rdp(*, sample_rate: float, sigma: float, steps: int) -> FloatArray:
    """RDP at :data:`ALPHAS` of ``steps`` Poisson-subsampled Gaussian releases (noise
    multiplier ``sigma``): Mironov, Talwar & Zhang 2019, §3.3, at integer orders (a fractional
    order takes the next integer's value, an upper bound):
    ε(α) = log Σ_k C(α,k) (1−q)^{α−k} q^k exp((k²−k)/(2σ²)) / (α−1).

    Example:
        >>> float(subsampled_gaussian_rdp(sample_rate=1.0, sigma=1.0, steps=1)[2])  # α = 2
        1.0
    """
    q, sigma, steps = plain_number(sample_rate), plain_number(sigma), plain_number(steps)
    if q >= 1.0:
        full: FloatArray = steps * _INT_ORDERS / (2 * sigma**2)
        return full
    k = _K[None, :]
    with np.errstate(invalid="ignore"):
        terms = (
            _LOG_BINOM + (_A - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * sigma**2)
        )
    terms = np.where(_VALID, terms, -np.inf)
    per = _rowwise_logsumexp(terms) / (_UNIQUE_ORDERS - 1)
    result: FloatArray = steps * np.maximum(per, 0.0)[_TO_ALPHAS]
    return result


def _laplace_integer_rdp(orders: FloatArray, t: float) -> FloatArray:
    """Laplace of ε = t at (integer) orders, Mironov 2017 Prop. 6 in log space, capped at t."""
    tail = (orders - 1) / (2 * orders - 1) * np.exp(-(2 * orders - 1) * t)
    value = t + np.log(orders / (2 * orders - 1) + tail) / (orders - 1)
    out: FloatArray = np.minimum(value, t)
    return out


def subsampled_laplace_rdp(*, sample_rate: float, scale: float, steps: int) -> FloatArray:
    """RDP at :data:`ALPHAS` of ``steps`` Poisson-subsampled Laplace releases (scale ``scale``
    per unit of L1 sensitivity): Zhu & Wang 2019, Thm. 6 (general upper bound), at integer
    orders (fractional orders take the next integer's value), capped at the amplified pure-DP
    ε of one release, log(1 + γ(e^{1/b} − 1)), and at the Laplace's own curve:
    ε(α) ≤ log[(1−γ)^{α−1}(αγ−γ+1) + C(α,2)γ²(1−γ)^{α−2}e^{ε(2)}
    + 3 Σ_{l≥3} C(α,l)(1−γ)^{α−l}γ^l e^{(l−1)ε(l)}] / (α−1).

    Example:
        >>> r = subsampled_laplace_rdp(sample_rate=0.01, scale=1.0, steps=1)
        >>> bool(np.all(r[3:] >= r[2]))  # non-decreasing in the order
        True
    """
    sample_rate, scale, steps = plain_number(sample_rate), plain_number(scale), plain_number(steps)
    t = 1.0 / scale
    if sample_rate >= 1.0:
        full: FloatArray = steps * _laplace_integer_rdp(_INT_ORDERS.astype(np.float64), t)
        return full
    g = sample_rate
    lg, l1g = math.log(g), math.log1p(-g)
    k = _K[None, :]
    eps_k = np.zeros_like(_K)
    eps_k[2:] = _laplace_integer_rdp(_K[2:], t)
    with np.errstate(invalid="ignore"):
        terms = _LOG_BINOM + (_A - k) * l1g + k * lg + (k - 1) * eps_k[None, :] + math.log(3)
    terms[:, 2] -= math.log(3)  # the l = 2 term has no factor 3
    terms[:, :2] = -np.inf
    first = (_UNIQUE_ORDERS - 1) * l1g + np.log(_UNIQUE_ORDERS * g - g + 1)
    terms = np.where(_VALID, terms, -np.inf)
    terms[:, 0] = first
    per = _rowwise_logsumexp(terms) / (_UNIQUE_ORDERS - 1)
    # amplified pure DP, log(1 + γ(e^t − 1)) (Li, Qardaji & Su 2012), bounds every order too,
    # and so does the Laplace without sampling (joint quasi-convexity of Rényi divergence)
    pure = math.log1p(g * math.expm1(t)) if t < 700 else math.log(g) + t
    plain = _laplace_integer_rdp(_UNIQUE_ORDERS.astype(np.float64), t)
    capped = np.minimum(np.minimum(np.maximum(per, 0.0), pure), plain)
    result: FloatArray = steps * capped[_TO_ALPHAS]
    return result


def rdp_to_epsilon(rdp: FloatArray, *, delta: float) -> float:
    """The (ε, δ) implied by a curve at :data:`ALPHAS`: Canonne, Kamath & Steinke 2020,
    Prop. 12, the conversion dp-accounting's ``compute_epsilon`` uses.

    Example:
        >>> round(rdp_to_epsilon(np.array(ALPHAS) * 0.01, delta=1e-5), 3)
        0.548
    """
    r = np.asarray(rdp, dtype=np.float64)
    eps = r + np.log1p(-1 / _ORDERS) - np.log(delta * _ORDERS) / (_ORDERS - 1)
    eps = np.where(delta**2 + np.expm1(-r) > 0, 0.0, eps)
    return max(0.0, float(np.min(eps)))


def calibrate_noise(curve: Callable[[float], FloatArray], *, epsilon: float, delta: float) -> float:
    """The noise multiplier in [1e-3, 1e3] whose composed curve gives ε(δ) in [0.9·ε, ε], as
    the published generator's search (which bisects); the largest noise when even that is above
    ε. ε(δ) falls as the noise grows; the root of log ε(δ) − log(0.95·ε) in log-noise space is
    bracketed and found by regula falsi with the Illinois step (a bisection step where a value
    is not finite), a handful of curve evaluations instead of a bisection's ~30.

    Example:
        >>> from blockbudget.scheduling.mechanism_rdp import subsampled_gaussian_rdp
        >>> def dpsgd(sigma: float) -> FloatArray:
        ...     return subsampled_gaussian_rdp(sample_rate=0.01, sigma=sigma, steps=1000)
        >>> sigma = calibrate_noise(dpsgd, epsilon=1.0, delta=1e-5)
        >>> 0.9 <= rdp_to_epsilon(dpsgd(sigma), delta=1e-5) <= 1.0
        True
    """
    aim = math.log(0.5 * (1 + CALIBRATION_BAND) * epsilon)

    def f(x: float) -> tuple[float, float]:
        got = rdp_to_epsilon(curve(math.exp(x)), delta=delta)
        return got, (math.log(got) - aim if got > 0 else -math.inf)

    lo, hi = math.log(NOISE_RANGE[0]), math.log(NOISE_RANGE[1])
    got_hi, f_hi = f(hi)
    if got_hi > epsilon:
        return math.exp(hi)
    if got_hi >= CALIBRATION_BAND * epsilon:
        return math.exp(hi)
    _, f_lo = f(lo)
    side = 0
    for _ in range(200):
        finite = math.isfinite(f_lo) and math.isfinite(f_hi) and f_lo != f_hi
        x = hi - f_hi * (hi - lo) / (f_hi - f_lo) if finite else (lo + hi) / 2
        if not lo < x < hi:
            x = (lo + hi) / 2
        got, fx = f(x)
        if CALIBRATION_BAND * epsilon <= got <= epsilon:
            return math.exp(x)
        if got > epsilon:  # too little noise: the root is above x
            lo, f_lo = x, fx
            if side == -1:
                f_hi /= 2
            side = -1
        else:
            hi, f_hi = x, fx
            if side == 1:
                f_lo /= 2
            side = 1
    return math.exp(hi)  # ε(δ) ≤ target on this side


def best_normalized_demand(
    rdp: FloatArray | RdpCurve, *, epsilon_g: float, delta_g: float
) -> float:
    """min over orders with positive block capacity of ε(α) / (ε_g − log(1/δ_g)/(α−1)).

    Example:
        >>> c = RdpCurve.gaussian(sigma=10.0)
        >>> round(best_normalized_demand(c, epsilon_g=10.0, delta_g=1e-7), 5)
        0.00419
    """
    values = np.array(rdp.as_floats() if isinstance(rdp, RdpCurve) else rdp, dtype=np.float64)
    cap = epsilon_g - math.log(1 / delta_g) / (_ORDERS - 1)
    usable = cap > 0
    if not np.any(usable):
        return math.inf
    return float(np.min(values[usable] / cap[usable]))

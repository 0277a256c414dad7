"""Noise calibration: from a budget to a noise scale, always rounded toward more noise.

Budgets are exact decimals (:mod:`blockbudget.budget`); samplers take doubles. Every function
here converts in the conservative direction, so the privacy loss a mechanism *delivers* is never
above the one the ledger *accounts*:

* Laplace (Dwork, McSherry, Nissim & Smith 2006; Dwork & Roth 2014, Thm 3.6): the scale is the
  smallest double b ≥ Δ/ε, computed from the exact decimals, so Δ/b ≤ ε.
* Gaussian for (ε, δ) — the *analytic Gaussian mechanism* (Balle & Wang, "Improving the
  Gaussian mechanism for differential privacy", ICML 2018, Theorem 8): N(0, σ²) noise on a
  query of L2 sensitivity Δ is (ε, δ)-DP if and only if

      Φ(Δ/(2σ) − εσ/Δ) − e^ε · Φ(−Δ/(2σ) − εσ/Δ) ≤ δ.

  The left side decreases in σ; :func:`analytic_gaussian_sigma` finds its root with SciPy's
  Brent solver in log σ, then moves up by a relative 1e-9 until the (float) test passes. It is
  never larger than the classical σ = Δ·√(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm A.1, ε < 1).
* Gaussian on streams whose rule prices the noise (RDP, GDP): σ directly, or a target (ε, δ)
  translated by *the rule's own filter* (:func:`fitted_gaussian_multiplier`): the smallest
  noise whose price fits an empty block of capacity (ε, δ) under the stream's rule. One
  conversion serves the filter and the calibration, so anything calibrated to a block's whole
  budget fits that block when it is empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from decimal import ROUND_FLOOR, Context, Decimal, localcontext
from functools import lru_cache

from blockbudget.accounting import Filter, get_rule
from blockbudget.budget import Budget, Number, to_decimal
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidBudgetError

_EXACT = Context(prec=200)

#: Relative step by which a solved σ is moved up until the privacy test passes.
SIGMA_MARGIN = 1e-9


def exact_epsilon(epsilon: Number, *, name: str = "epsilon") -> Decimal:
    """Read ε exactly (floats as their shortest decimal) and require 0 < ε < ∞.

    Raises:
        InvalidBudgetError: for NaN, infinite, zero, negative or non-numeric ε.
    """
    eps = to_decimal(epsilon, name=name)
    if eps.is_infinite() or eps <= 0:
        raise InvalidBudgetError(f"{name} must be finite and > 0, got {epsilon!r}")
    return eps


def exact_delta(delta: Number, *, positive: bool) -> Decimal:
    """Read δ exactly and require 0 ≤ δ < 1 (0 < δ < 1 when ``positive``).

    Raises:
        InvalidBudgetError: when δ is out of range or not a number.
    """
    dl = to_decimal(delta, name="delta")
    low_ok = dl > 0 if positive else dl >= 0
    if dl.is_infinite() or not low_ok or dl >= 1:
        rule = "0 < delta < 1" if positive else "0 <= delta < 1"
        raise InvalidBudgetError(f"delta must satisfy {rule}, got {delta!r}")
    return dl


def check_sensitivity(sensitivity: float, *, name: str = "sensitivity") -> float:
    """Require a finite, positive sensitivity given as a number (not a boolean).

    Raises:
        InvalidBudgetError: otherwise.
    """
    sensitivity = plain_number(sensitivity)
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, (int, float)):
        raise InvalidBudgetError(f"{name} must be a number, got {type(sensitivity).__name__}")
    value = float(sensitivity)
    if not (value > 0 and math.isfinite(value)):
        raise InvalidBudgetError(f"{name} must be finite and > 0, got {sensitivity!r}")
    return value


def float_up(value: Decimal) -> float:
    """The smallest double that is ≥ ``value`` (exact comparison in decimal)."""
    f = float(value)
    if math.isfinite(f) and Decimal(f) < value:
        f = math.nextafter(f, math.inf)
    return f


def float_down(value: Decimal) -> float:
    """The largest double that is ≤ ``value`` (exact comparison in decimal)."""
    f = float(value)
    if math.isfinite(f) and Decimal(f) > value:
        f = math.nextafter(f, -math.inf)
    return f


def laplace_scale(*, sensitivity: float, epsilon: Number) -> float:
    """The Laplace scale for an ε-DP release of an L1-sensitivity-Δ query: Δ/ε rounded up.

    The division is done in 200-digit decimal arithmetic on the exact binary value of Δ and the
    exact decimal ε, and the result is rounded up to the next double (Dwork & Roth 2014,
    Thm 3.6), so ``sensitivity / scale <= epsilon`` holds exactly.

    Args:
        sensitivity: L1 sensitivity Δ > 0.
        epsilon: ε > 0 (any :data:`~blockbudget.budget.Number`, read exactly).

    Returns:
        The smallest double b with b ≥ Δ/ε.

    Raises:
        InvalidBudgetError: for a bad Δ or ε, or when Δ/ε is not a positive finite double.
    """
    delta_1 = Decimal(check_sensitivity(sensitivity))
    eps = exact_epsilon(epsilon)
    with localcontext(_EXACT):
        exact = delta_1 / eps
    scale = float_up(exact)
    if not math.isfinite(scale):
        raise InvalidBudgetError(f"Laplace scale Δ/ε = {exact:.6e} does not fit in a double")
    if scale == 0.0:
        scale = math.nextafter(0.0, 1.0)
    return scale


def split_epsilon(epsilon: Number, parts: int, *, name: str = "epsilon") -> Decimal:
    """An equal share of ε for each of ``parts`` sub-releases, rounded down.

    ``parts × share ≤ ε`` holds exactly (the share is ε/parts rounded down at 50 significant
    digits; halving is exact), so charging the whole ε covers every part by basic composition
    (Dwork & Roth 2014, Thm 3.16).

    The same rule splits a δ > 0 (``name="delta"`` names it in errors).

    Raises:
        InvalidBudgetError: for a bad ε or fewer than one part.
    """
    eps = exact_epsilon(epsilon, name=name)
    if parts < 1:
        raise InvalidBudgetError(f"an epsilon split needs at least one part, got {parts}")
    with localcontext(Context(prec=50, rounding=ROUND_FLOOR)):
        share = eps / parts
    if share * parts > eps:  # cannot happen with ROUND_FLOOR; kept as an explicit guard
        raise InvalidBudgetError(f"could not split {eps} into {parts} parts")
    return share


def _phi(x: float) -> float:
    from scipy.special import ndtr

    return float(ndtr(x))


def _log_phi(x: float) -> float:
    from scipy.special import log_ndtr

    return float(log_ndtr(x))


def analytic_gaussian_delta(*, sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """δ(σ) of the Gaussian mechanism at ε (Balle & Wang 2018, Theorem 8).

    ``Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ)``, with the second term evaluated in log space
    (``log_ndtr``) so that e^ε cannot overflow.

    Raises:
        InvalidBudgetError: for non-positive or non-finite σ, ε or Δ.
    """
    s = check_sensitivity(sigma, name="sigma")
    eps = check_sensitivity(epsilon, name="epsilon")
    d = check_sensitivity(sensitivity)
    v = d / (2.0 * s)
    u = eps * s / d
    second = math.exp(min(0.0, eps + _log_phi(-v - u)))
    return max(0.0, _phi(v - u) - second)


def classical_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The classical Gaussian calibration Δ·√(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm A.1).

    Valid for ε < 1 only; used here as a reference and as the solver's starting point.
    """
    eps = check_sensitivity(epsilon, name="epsilon")
    d = check_sensitivity(sensitivity)
    delta = plain_number(delta)
    if not 0 < delta < 1:
        raise InvalidBudgetError(f"delta must satisfy 0 < delta < 1, got {delta!r}")
    return d * math.sqrt(2.0 * math.log(1.25 / delta)) / eps


def analytic_gaussian_sigma(*, epsilon: Number, delta: Number, sensitivity: float = 1.0) -> float:
    """The smallest σ (up to a relative 1e-9, rounded up) making N(0, σ²) noise (ε, δ)-DP.

    Balle & Wang 2018 (ICML), Theorem 8 and Algorithm 1: the mechanism is (ε, δ)-DP iff
    :func:`analytic_gaussian_delta` ≤ δ. We solve δ(σ) = δ with ``scipy.optimize.brentq`` over
    log σ (rather than the paper's reparametrization) and then step σ up by a relative
    :data:`SIGMA_MARGIN` (doubling it) until the float test passes. ε and δ are first rounded
    *down* to doubles, which can only increase σ.

    Args:
        epsilon: ε > 0.
        delta: 0 < δ < 1.
        sensitivity: L2 sensitivity Δ > 0.

    Returns:
        σ such that the Gaussian mechanism with this σ is (ε, δ)-DP.

    Raises:
        InvalidBudgetError: for bad parameters or if no finite σ is found.
    """
    from scipy.optimize import brentq

    eps = float_down(exact_epsilon(epsilon))
    dl = float_down(exact_delta(delta, positive=True))
    d = check_sensitivity(sensitivity)
    if eps <= 0 or dl <= 0:
        raise InvalidBudgetError("epsilon and delta are too small to be represented as doubles")

    def excess(log_sigma: float) -> float:
        return analytic_gaussian_delta(sigma=math.exp(log_sigma), epsilon=eps, sensitivity=d) - dl

    start = math.log(d * math.sqrt(2.0 * math.log(1.25 / dl)) / eps)
    lo, hi = start, start
    for _ in range(400):
        if excess(lo) > 0:
            break
        lo -= 1.0
    else:
        raise InvalidBudgetError(f"no lower bracket for the analytic Gaussian at ε={eps}, δ={dl}")
    for _ in range(400):
        if excess(hi) <= 0:
            break
        hi += 1.0
    else:
        raise InvalidBudgetError(f"no finite σ makes the Gaussian ({eps}, {dl})-DP")
    root = float(brentq(excess, lo, hi, xtol=1e-13, rtol=1e-15, maxiter=500))
    margin = SIGMA_MARGIN
    for _ in range(80):
        sigma = math.nextafter(math.exp(root) * (1.0 + margin), math.inf)
        if analytic_gaussian_delta(sigma=sigma, epsilon=eps, sensitivity=d) <= dl:
            return sigma
        margin *= 2.0
    raise InvalidBudgetError(f"could not calibrate the analytic Gaussian at ε={eps}, δ={dl}")


def fitted_gaussian_multiplier(
    *, accounting: str, epsilon: Number, delta: Number, parts: int = 1
) -> float:
    """The smallest noise multiplier z (to a relative 1e-12, from above) such that ``parts``
    Gaussian perturbations, each of noise σ_j = z·Δ_j for its L2 sensitivity Δ_j, priced by rule
    ``accounting``, fit an empty block of capacity (ε, δ) under that rule.

    This is how a rule that prices the noise (``prices_noise``: RDP, GDP) turns a target (ε, δ)
    into noise: by its own filter, so the calibration and the admission test are one conversion
    (``rdp2``: Canonne, Kamath & Steinke 2020, Prop. 12 with δ split over the usable orders;
    ``gdp``: Dong, Roth & Su 2022, Cor. 2.13). A Gaussian's privacy depends only on σ/Δ, so the
    answer depends on the number of parts alone (cached); k equal parts cost what one part of
    multiplier z/√k costs under both rules. The search starts just below the analytic Gaussian's
    multiplier for one part of the whole (ε, δ) (Balle & Wang 2018, Thm 8), under which no valid
    accounting can go.

    Example:
        >>> from blockbudget.budget import RdpCurve
        >>> z = fitted_gaussian_multiplier(accounting="rdp2", epsilon=1, delta="1e-6")
        >>> f = get_rule("rdp2").filter(capacity=Budget(epsilon=1, delta="1e-6"))
        >>> f.fits(f.features(RdpCurve.gaussian(sigma=z))), round(z, 2)
        (True, 4.88)
        >>> f.fits(f.features(RdpCurve.gaussian(sigma=z * (1 - 1e-9))))
        False

    Raises:
        InvalidBudgetError: bad ε, δ or number of parts, or no finite noise fits (an (ε, δ)
            at which the rule's filter admits nothing).
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise InvalidBudgetError(f"a Gaussian release has at least one part, got {parts!r}")
    return _fitted(
        get_rule(accounting).name, exact_epsilon(epsilon), exact_delta(delta, positive=True), parts
    )


@lru_cache(maxsize=1024)
def _fitted(accounting: str, eps: Decimal, dl: Decimal, k: int) -> float:
    from blockbudget.accounting import Noise, NoisePart, Release

    rule = get_rule(accounting)
    filt = empty_block_filter(accounting, eps, dl, what="Gaussian noise")

    def fits(z: float) -> bool:
        noise = tuple(NoisePart(Noise.GAUSSIAN, z, 1.0) for _ in range(k))
        return filt.fits(filt.features(rule.price(Release(epsilon=eps, delta=dl, parts=noise))))

    start = analytic_gaussian_sigma(epsilon=eps, delta=dl) * (1 - 1e-6)
    try:
        return smallest_noise(fits, start=start, precision=1e-12, limit=1e150)
    except InvalidBudgetError:
        raise InvalidBudgetError(
            f"no Gaussian noise fits an empty ({eps}, {dl}) block under {accounting} "
            "accounting; pass sigma= or use another rule"
        ) from None


def empty_block_filter(accounting: str, epsilon: Decimal, delta: Decimal, *, what: str) -> Filter:
    """The filter of an empty block of capacity (ε, δ) under rule ``accounting`` — what a
    calibration to (ε, δ) must fit.

    Raises:
        InvalidBudgetError: the rule's filter admits nothing at that capacity (the message
            names ``what`` could not be calibrated).
    """
    filt = get_rule(accounting).filter(capacity=Budget(epsilon=epsilon, delta=delta))
    if not filt.fits(filt.zero()):
        raise InvalidBudgetError(
            f"an empty ({epsilon}, {delta}) block admits nothing under {accounting} accounting, "
            f"so no {what} fits it"
        )
    return filt


def smallest_noise(
    passes: Callable[[float], bool], *, start: float, precision: float, limit: float
) -> float:
    """The smallest noise scale (to ``precision`` relative, from above) at which ``passes``,
    for a test monotone in the scale: doubling from ``start``, then bisection. Whatever it
    returns passes.

    Example:
        >>> round(smallest_noise(lambda s: s >= 3.0, start=1.0, precision=1e-9, limit=1e9), 6)
        3.0

    Raises:
        InvalidBudgetError: nothing up to ``limit`` passes.
    """
    hi = start
    while not passes(hi):
        hi *= 2.0
        if hi > limit:
            raise InvalidBudgetError(f"no noise scale up to {limit:g} meets the target")
    lo = hi / 2.0
    if passes(lo):
        lo = 0.0
    while hi - lo > hi * precision:
        mid = (lo + hi) / 2.0
        if passes(mid):
            hi = mid
        else:
            lo = mid
    return hi


def fitted_gaussian_scales(
    *, accounting: str, epsilon: Number, delta: Number, sensitivities: Sequence[float]
) -> tuple[float, ...] | None:
    """The noise σ_j = z·Δ_j of a Gaussian release of several parts calibrated to (ε, δ) by
    the stream's rule (:func:`fitted_gaussian_multiplier`, each rounded up to the next double),
    or None under a rule that does not price the noise ((ε, δ) rules split (ε, δ) over the
    parts and calibrate each by the analytic Gaussian instead).

    Example:
        >>> fitted_gaussian_scales(accounting="basic", epsilon=1, delta="1e-6",
        ...                        sensitivities=[1.0]) is None
        True
        >>> a, b = fitted_gaussian_scales(accounting="gdp", epsilon=1, delta="1e-6",
        ...                               sensitivities=[1.0, 3.0])
        >>> round(b / a, 9)
        3.0

    Raises:
        InvalidBudgetError: as :func:`fitted_gaussian_multiplier`, or a bad sensitivity.
    """
    if not get_rule(accounting).prices_noise:
        return None
    sens = [check_sensitivity(d) for d in sensitivities]
    z = fitted_gaussian_multiplier(
        accounting=accounting, epsilon=epsilon, delta=delta, parts=len(sens)
    )
    return tuple(math.nextafter(z * d, math.inf) for d in sens)


def rdp_gaussian_sigma(
    *, epsilon: Number, delta: Number, sensitivity: float = 1.0, accounting: str = "rdp2"
) -> float:
    """σ for one Gaussian release that fits an empty (ε, δ) block of an RDP rule
    (:func:`fitted_gaussian_multiplier` times Δ): the ``rdp2`` rule by default.

    Example:
        >>> sigma = rdp_gaussian_sigma(epsilon=1, delta="1e-6", sensitivity=2.0)
        >>> round(sigma / fitted_gaussian_multiplier(accounting="rdp2", epsilon=1,
        ...                                          delta="1e-6"), 9)
        2.0

    Raises:
        InvalidBudgetError: for bad parameters, or when no σ fits.
    """
    d = check_sensitivity(sensitivity)
    z = fitted_gaussian_multiplier(accounting=accounting, epsilon=epsilon, delta=delta)
    return math.nextafter(z * d, math.inf)

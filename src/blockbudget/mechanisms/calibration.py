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
* Gaussian on RDP streams: σ directly (cost α·Δ²/(2σ²), Mironov 2017 Prop. 7), or a target
  (ε, δ) translated through dp-accounting's ``calibrate_dp_mechanism`` with an RDP accountant
  on the platform's order grid :data:`blockbudget.budget.ALPHAS`
  (:func:`rdp_gaussian_sigma`).
"""

from __future__ import annotations

import math
from decimal import ROUND_FLOOR, Context, Decimal, localcontext

from blockbudget.budget import ALPHAS, Number, RdpCurve, to_decimal
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


def rdp_gaussian_sigma(*, epsilon: Number, delta: Number, sensitivity: float = 1.0) -> float:
    """σ for a Gaussian release on an RDP stream whose curve converts to at most (ε, δ).

    dp-accounting's ``calibrate_dp_mechanism`` searches the noise multiplier z with an
    ``RdpAccountant`` on the order grid :data:`~blockbudget.budget.ALPHAS` and a
    ``GaussianDpEvent(z)``; σ = z·Δ. The answer is then checked through the exact path the
    platform uses — ``RdpCurve.gaussian(sigma=σ, sensitivity=Δ).to_dp(delta=δ).epsilon ≤ ε`` —
    refined by bisection to a relative 1e-12 and returned from the side where that holds.

    Note:
        On the grid (largest order 64) the conversion of a Gaussian curve never goes below
        about log(1/δ)/63 − 0.02 until σ is so large that the curve is below δ² and
        dp-accounting's KL bound returns ε = 0. A smaller target ε is therefore met only by an
        enormous σ (ε=0.05, δ=1e-8 gives σ ≈ 8.7e7 where the analytic Gaussian needs ≈ 100);
        for small ε on RDP streams pass ``sigma=`` or use a pure-DP mechanism.

    Raises:
        InvalidBudgetError: for bad parameters, or if dp-accounting finds no σ.
    """
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    eps_dec = exact_epsilon(epsilon)
    dl_dec = exact_delta(delta, positive=True)
    eps = float_down(eps_dec)
    dl = float_down(dl_dec)
    d = check_sensitivity(sensitivity)
    try:
        z = float(
            dp_accounting.calibrate_dp_mechanism(
                lambda: rdp.RdpAccountant(list(ALPHAS)),
                dp_accounting.GaussianDpEvent,
                eps,
                dl,
                bracket_interval=dp_accounting.LowerEndpointAndGuess(1e-12, 1.0),
            )
        )
    except Exception as exc:  # dp-accounting raises its own bracket / value errors
        raise InvalidBudgetError(
            f"no Gaussian noise converts to (ε={eps_dec}, δ={dl_dec}) on the RDP order grid "
            f"{ALPHAS}: {exc}; pass sigma= directly"
        ) from exc

    def fits(sigma: float) -> bool:
        curve = RdpCurve.gaussian(sigma=sigma, sensitivity=d)
        return curve.to_dp(delta=dl).epsilon <= eps_dec

    # Bracket dp-accounting's answer, then bisect on the platform's own conversion so that the
    # returned σ is on the safe side of it (relative precision 1e-12).
    hi = max(z * d, 1e-300)
    for _ in range(200):
        if fits(hi):
            break
        hi *= 2.0
    else:
        raise InvalidBudgetError(f"could not calibrate a Gaussian to (ε={eps_dec}, δ={dl_dec})")
    lo = hi / 2.0
    for _ in range(200):
        if not fits(lo):
            break
        lo /= 2.0
    while hi - lo > hi * 1e-12:
        mid = (lo + hi) / 2.0
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi

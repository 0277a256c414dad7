"""Concentration bounds and DP-noise corrections used by the SLAed validators (pure math).

Everything here is a float formula with no state, cited to seed ``004_2b5d216070ae2ded.txt``
Appendix B (and List. 2 of §3.3). The validators in :mod:`blockbudget.training.validators`
combine them with a union bound; the tests check each one against its distribution.

* :func:`laplace_one_sided` / :func:`laplace_two_sided` — the "correction for DP impact": a
  Laplace(b) draw exceeds ``b·ln(1/(2p))`` with probability p (one side), and its absolute value
  exceeds ``b·ln(1/p)`` with probability p. App. B.1 writes the first with p = η/3 as
  ``(2/ε)·ln(3/(2η))`` for b = 2/ε.
* :func:`bernstein_upper` — Bernstein's inequality for a [0, B] loss (App. B.1, List. 2 l. 23–25).
* :func:`hoeffding_lower` — Hoeffding's lower bound used by the loss REJECT test (App. B.1) and the
  sum-statistic ACCEPT test (App. B.3) in the seed's conservative form ``B·sqrt(ln(1/p)/n)``.
* :func:`clopper_pearson_lower` / :func:`clopper_pearson_upper` — exact one-sided binomial bounds
  (App. B.2's Bin and Bin-bar, "conservatively approximated using a Clopper–Pearson interval").
* :func:`empirical_bernstein_margin` — Maurer & Pontil's empirical Bernstein bound, the drop-in
  App. B.1 and B.3 name for small variances; :func:`variance_upper` turns a corrected DP second
  moment into an upper bound on the sample variance it needs.
"""

from __future__ import annotations

import math

from scipy.stats import beta

from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError


def check_probability(p: float, *, name: str) -> float:
    """``p`` as a float in the open interval (0, 1).

    Raises:
        InvalidRequestError: when ``p`` is not a number strictly between 0 and 1.
    """
    p = plain_number(p)
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise InvalidRequestError(f"{name} must be a number in (0, 1), got {p!r}")
    value = float(p)
    if not (0.0 < value < 1.0):
        raise InvalidRequestError(f"{name} must be in (0, 1), got {p!r}")
    return value


def laplace_one_sided(scale: float, p: float) -> float:
    """t with P(Laplace(scale) > t) = p, for p ≤ 1/2: ``scale·ln(1/(2p))``."""
    check_probability(p, name="p")
    return scale * math.log(1.0 / (2.0 * p)) if p < 0.5 else 0.0


def laplace_two_sided(scale: float, p: float) -> float:
    """t with P(|Laplace(scale)| > t) = p: ``scale·ln(1/p)``."""
    check_probability(p, name="p")
    return scale * math.log(1.0 / p)


def bernstein_upper(mean_loss: float, n: float, *, bound: float, p: float) -> float:
    """Upper bound on the expected loss holding with probability ≥ 1 − p (seed 004 App. B.1,
    List. 2 l. 23–25): ``L + sqrt(2·B·L·ln(1/p)/n) + 4·B·ln(1/p)/n``.

    ``inf`` when n ≤ 0 (nothing can be said). ``mean_loss`` is floored at 0 (losses are ≥ 0, so
    a negative upper estimate can be raised to 0 without losing the guarantee).
    """
    if not n > 0:
        return math.inf
    loss = max(mean_loss, 0.0)
    log_term = math.log(1.0 / p)
    return loss + math.sqrt(2.0 * bound * loss * log_term / n) + 4.0 * bound * log_term / n


def hoeffding_margin(n: float, *, bound: float, p: float) -> float:
    """The seed's Hoeffding margin ``B·sqrt(ln(1/p)/n)`` (App. B.1 REJECT, App. B.3).

    It is √2 larger than the tight one-sided ``B·sqrt(ln(1/p)/(2n))``, so it also covers the
    two-sided deviation at probability p. ``inf`` when n ≤ 0.
    """
    if not n > 0:
        return math.inf
    return bound * math.sqrt(math.log(1.0 / p) / n)


def hoeffding_lower(mean_loss: float, n: float, *, bound: float, p: float) -> float:
    """Lower bound on an expected [0, B] loss with probability ≥ 1 − p (App. B.1 REJECT)."""
    return mean_loss - hoeffding_margin(n, bound=bound, p=p)


def clopper_pearson_lower(k: float, n: float, *, p: float) -> float:
    """One-sided Clopper–Pearson lower bound on a binomial proportion at level p.

    Non-integer (noisy) arguments are rounded conservatively: k down, n up. 0 when k ≤ 0 or
    n ≤ 0 (no evidence).
    """
    kk = math.floor(k)
    nn = math.ceil(n)
    if kk <= 0 or nn <= 0:
        return 0.0
    kk = min(kk, nn)
    return float(beta.ppf(p, kk, nn - kk + 1))


def clopper_pearson_upper(k: float, n: float, *, p: float) -> float:
    """One-sided Clopper–Pearson upper bound on a binomial proportion at level p.

    Rounded conservatively: k up, n down. 1 when n ≤ 0 or k ≥ n (no evidence against).
    """
    nn = math.floor(n)
    kk = max(math.ceil(k), 0)
    if nn <= 0 or kk >= nn:
        return 1.0
    return float(beta.ppf(1.0 - p, kk + 1, nn - kk))


def empirical_bernstein_margin(variance: float, n: float, *, bound: float, p: float) -> float:
    """One-sided empirical Bernstein margin for the mean of n i.i.d. values in [0, B].

    A. Maurer and M. Pontil, "Empirical Bernstein Bounds and Sample Variance Penalization"
    (COLT 2009), Theorem 4, rescaled from [0, 1] to [0, B]: with probability ≥ 1 − p,
    ``E[X] − mean ≤ sqrt(2·V·ln(2/p)/n) + 7·B·ln(2/p)/(3·(n − 1))`` where V is the unbiased
    sample variance. The margin grows with V and shrinks with n, so an upper bound on V and a
    lower bound on n give a valid (larger) margin. ``inf`` when n ≤ 1.

    Example:
        >>> round(empirical_bernstein_margin(0.0, 1001.0, bound=1.0, p=0.05), 5)
        0.00861
    """
    if not n > 1:
        return math.inf
    log_term = math.log(2.0 / p)
    return math.sqrt(2.0 * max(variance, 0.0) * log_term / n) + 7.0 * bound * log_term / (
        3.0 * (n - 1.0)
    )


def variance_upper(second_moment: float, n: float, *, bound: float) -> float:
    """Upper bound on the unbiased sample variance of n values in [0, B] from an upper bound on
    their second moment ``Σ(x − c)²`` about any public centre c, and a lower bound on n.

    ``(n − 1)·V = Σ(x − c)² − n·(x̄ − c)² ≤ Σ(x − c)²``, and V ≤ B²·n/(4·(n − 1)) (Popoviciu),
    both decreasing in n. ``inf`` when n ≤ 1.

    Example:
        >>> variance_upper(9.0, 10.0, bound=1.0)
        0.2777777777777778
    """
    if not n > 1:
        return math.inf
    cap = bound * bound * n / (4.0 * (n - 1.0))
    return min(max(second_moment, 0.0) / (n - 1.0), cap)

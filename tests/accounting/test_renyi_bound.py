"""The Rényi filters' stated bound, checked exactly where the truth is computable.

For identical Gaussian charges the composition is exactly (√n/σ)-GDP, whose δ at ε_g has a
closed form (Dong, Roth & Su 2022, Cor. 2.13; Balle & Wang 2018, Thm 8): whatever number of
charges ``rdp2`` (or ``rdp``) admits on an empty (ε_g, δ_g) block must be (ε_g, δ_g)-DP by that
formula. (The adaptive case is the theorem's; this checks the capacities and the conversion
against the exact privacy curve, with no accountant in between.)
"""

from __future__ import annotations

import math

import mpmath as mp
import pytest

from blockbudget.accounting import get_rule
from blockbudget.budget import Budget, RdpCurve


def _exact_gaussian_delta(mu: float, eps: float) -> mp.mpf:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), at 50 digits."""
    with mp.workdps(50):
        m, e = mp.mpf(mu), mp.mpf(eps)
        return mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2)


def _admitted(rule: str, capacity: Budget, sigma: float) -> int:
    f = get_rule(rule).filter(capacity=capacity)
    step = f.features(RdpCurve.gaussian(sigma=sigma))
    lo, hi = 0, 1
    while f.fits(tuple(hi * x for x in step)):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if f.fits(tuple(mid * x for x in step)) else (lo, mid)
    return lo


@pytest.mark.parametrize("rule", ["rdp2", "rdp"])
@pytest.mark.parametrize("eps", ["0.5", "1", "3", "10"])
@pytest.mark.parametrize("delta", ["1e-7", "1e-6", "1e-5"])
@pytest.mark.parametrize("sigma", [3.0, 30.0])
def test_what_a_renyi_filter_admits_is_within_its_guarantee(
    rule: str, eps: str, delta: str, sigma: float
) -> None:
    capacity = Budget(epsilon=eps, delta=delta)
    n = _admitted(rule, capacity, sigma)
    if n == 0:
        return
    mu = math.sqrt(n) / sigma
    assert _exact_gaussian_delta(mu, float(eps)) <= mp.mpf(delta), (n, mu)


def test_the_bound_is_not_vacuous() -> None:
    # rdp2 admits within 30% of what the exact curve allows at (1, 1e-6), σ = 30: the check
    # above compares against a real limit, not a trivially loose one.
    capacity = Budget(epsilon=1, delta="1e-6")
    n = _admitted("rdp2", capacity, 30.0)
    exact = 0
    while _exact_gaussian_delta(math.sqrt(exact + 1) / 30.0, 1.0) <= mp.mpf("1e-6"):
        exact += 1
    assert 0.7 * exact <= n <= exact

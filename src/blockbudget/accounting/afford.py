"""What a block selection can still afford, computed exactly from the filters' own fit tests.

Every filter's test is monotone in the size of one more charge: a larger ε never fits where a
smaller one does not (the features ε, δ, ε², (e^ε−1)ε/2 and per-order RDP are all
non-decreasing in ε), and a Gaussian charge grows as its noise shrinks. So the largest charge
that fits on every block of a selection is found by bisection on the filter's exact test
(:meth:`~blockbudget.accounting.filters.Filter.fits`) at the ledger's resolution of one
fixed-point unit (1e-18): the ε returned fits on every block, and ε + 1e-18 does not fit on
at least one. The rules tested are those of the filters:

* basic composition (Sage, Lécuyer et al. SOSP'19, §4.3, Theorem 4.3): Σε_i ≤ ε_g and
  Σδ_i ≤ δ_g, so the answer is ε_g − Σε_i on the most spent block;
* strong composition (Sage §A.3, Theorem A.2; Rogers, Roth, Ullman & Vadhan 2016,
  "Privacy Odometers and Filters", Theorem 5.1): the largest ε of one more (ε, δ) charge
  that keeps the filter's inequality (see :class:`~blockbudget.accounting.StrongFilter`);
* Rényi filters (PrivateKube, Luo et al. OSDI'21, §4; Lécuyer 2021, "Practical privacy
  filters and odometers with Rényi DP"): a charge fits while *some* order α keeps
  Σε_i(α) ≤ ε_g − log(1/δ_g)/(α−1). An (ε, 0) budget is priced on an RDP stream as
  min(ε, α·ε²/2) per order (Bun & Steinke 2016, Prop. 1.4) — the largest such ε is the
  ``budget`` answer; the ``gaussian`` answer is the smallest noise multiplier z = σ/Δ whose
  curve α/(2z²) (Mironov 2017, Prop. 7) fits.

Example:
    >>> from blockbudget import Budget
    >>> from blockbudget.accounting import BasicFilter
    >>> f = BasicFilter(capacity=Budget(epsilon=1, delta="1e-6"))
    >>> used = f.features(Budget(epsilon="0.3"))
    >>> str(largest_epsilon(f, [used, f.zero()], delta=0))
    '0.7'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal

from blockbudget.accounting.filters import Filter, add_vectors
from blockbudget.accounting.rule import Noise, NoisePart, Release
from blockbudget.budget import UNIT, Budget, from_units, normalize_exactly, to_decimal

__all__ = [
    "gaussian_release",
    "largest_epsilon",
    "largest_float_at_most",
    "smallest_noise_multiplier",
]

#: Upper limit of the search for a largest ε, in units (1e30 ε: the largest magnitude a budget
#: may have).
_MAX_UNITS = 10**30 * UNIT


def _fits_all(f: Filter, used: Sequence[Sequence[int]], candidate: Sequence[int]) -> bool:
    return all(f.fits(add_vectors(u, candidate)) for u in used)


def largest_epsilon(
    f: Filter, used: Sequence[Sequence[int]], *, delta: int | float | str | Decimal
) -> Decimal | None:
    """The largest ε (a multiple of 1e-18) such that one more (ε, ``delta``) charge fits on
    every block whose summed features are in ``used``; None when not even ε = 0 fits (the δ
    asked for is more than some block has left, or a block is already over its filter).

    Args:
        f: the blocks' filter (one stream: one filter).
        used: per block, charged plus reserved features.
        delta: the δ of the charge (0 on RDP streams, which account pure budgets only).

    Raises:
        InvalidBudgetError: ``delta`` is malformed or does not suit the filter.
    """
    d = to_decimal(delta, name="delta")

    def fits(units: int) -> bool:
        return _fits_all(f, used, f.features(Budget(epsilon=from_units(units), delta=d)))

    if not used or not fits(0):
        return None
    lo, hi = 0, max(1, int(f.capacity.epsilon * UNIT))  # fits(lo); hi is probed next
    while fits(hi):  # the answer is never above ε_g for these filters; this is a guard
        lo, hi = hi, hi * 2
        if hi > _MAX_UNITS:
            return normalize_exactly(from_units(lo))
    while hi - lo > 1:  # invariant: fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return normalize_exactly(from_units(lo))


def largest_float_at_most(value: Decimal) -> Decimal:
    """The largest double whose shortest decimal (Python's ``repr``) is at most ``value``, as
    that decimal.

    The ledger reads a float ε as its shortest round-trip decimal, and the nearest double to an
    18-digit ε may read as slightly more than it: ``float("0.341279519435449196")`` is
    ``0.3412795194354492``. Stepping down one ulp at a time (:func:`math.nextafter`) until the
    shortest decimal is not above ``value`` gives the largest ε a client holding floats can
    request and have fit. Zero and infinities are returned as they are.

    Example:
        >>> str(largest_float_at_most(Decimal("0.341279519435449196")))
        '0.34127951943544915'
        >>> str(largest_float_at_most(Decimal("0.7")))
        '0.7'
    """
    if not value.is_finite() or value == 0:
        return value
    x = float(value)
    while Decimal(repr(x)) > value:
        x = math.nextafter(x, -math.inf)
    return Decimal(repr(x))


def gaussian_release(z: float) -> Release:
    """One Gaussian release of noise multiplier z = σ/Δ (σ = z, Δ = 1), as rules price it.

    Example:
        >>> gaussian_release(2.0).parts[0].scale
        2.0
    """
    return Release(epsilon=Decimal(0), parts=(NoisePart(Noise.GAUSSIAN, z, 1.0),))


def smallest_noise_multiplier(f: Filter, used: Sequence[Sequence[int]]) -> float | None:
    """The smallest noise multiplier z = σ/Δ (to double precision) such that one more
    Gaussian charge, priced by the filter's rule (:func:`gaussian_release`; on RDP as
    :meth:`RdpCurve.gaussian` prices it), fits on every block of a stream whose rule prices the
    noise; None when none does (e.g. every order of some block is spent).

    Args:
        f: the filter of a rule that prices the noise (RDP, GDP).
        used: per block, charged plus reserved features.
    """

    rule = f.rule

    def fits(z: float) -> bool:
        return _fits_all(f, used, f.features(rule.price(gaussian_release(z))))

    hi = 1.0
    while not fits(hi):
        hi *= 2
        if hi > 2.0**200:
            return None
    lo = hi / 2
    while fits(lo):
        hi, lo = lo, lo / 2
        if lo < 2.0**-200:
            return hi
    for _ in range(200):  # invariant: not fits(lo), fits(hi)
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi if math.isfinite(hi) else None

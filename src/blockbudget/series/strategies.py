"""Allocation strategies and their transformations (seed 003 §4.2–4.5, §5.1).

Source: seed ``003_a7fa9cb9080a05af.txt``, §4.2–4.5 and §5.1, Eq. 6–21.

All functions are pure: they take a total ε (keyword-only) or a sequence and return a new
sequence whose terms are rounded down to the 10**-18 grid, so the sum bound ε always holds
exactly (see :mod:`blockbudget.series.sequence`).

* :func:`average` — ε/n each (the baseline, "AVG").
* :func:`geometric` — k_i = (1 − r)r^{i−1} (Eq. 7); infinite unless ``n`` is given;
  :func:`bisection` (r = 1/2) and :func:`cormode` (r = 2^{−1/3}, §7.2.2) are special cases.
* :func:`taylor` — k_i = t(ln 1/t)^{i−1}/(i−1)! (Eq. 12); infinite unless ``n`` is given.
* :func:`ideal_ratio` — r = (n − 1)/n maximizes the n-th term (1 − r)r^{n−1} (Eq. 13–14).
* :func:`ideal_initial_term` — t = e^{1−⌊n/2⌋} maximizes the ⌊n/2⌋-th Taylor term (Eq. 15–16).
* :func:`calibrate` — k*_i = k_i / S_n, so n terms use all of ε (Eq. 17).
* :func:`flip_horizontal` — ε^F_i = ε*_{n−i+1} (Eq. 19–20).
* :func:`flip_vertical` — ε^F_i = (ε − ε_i)/(n − 1) (Eq. 21).
"""

from __future__ import annotations

from decimal import Decimal
from enum import Enum

from blockbudget.budget import Number
from blockbudget.errors import InvalidRequestError
from blockbudget.series._exact import FLOOR, exact_sum, grid_floor
from blockbudget.series.sequence import (
    BudgetSequence,
    FiniteBudgetSequence,
    GeometricSeries,
    InfiniteBudgetSequence,
    TaylorSeries,
    check_count,
    check_epsilon,
    parameter,
)

#: Cormode et al.'s ratio 2^{−1/3}, to 40 digits (rounded down).
CORMODE_RATIO = Decimal("0.7937005259840997373758528196361541301957")


def average(n: int, *, epsilon: Number) -> FiniteBudgetSequence:
    """ε/n for each of n queries (rounded down to the grid), the "AVG" baseline.

    Raises:
        InvalidRequestError: if n < 1.
        InvalidBudgetError: if ε is not finite and > 0.
    """
    n = check_count(n)
    eps = check_epsilon(epsilon)
    term = grid_floor(FLOOR.divide(eps, n))
    return FiniteBudgetSequence(epsilon=eps, terms=(term,) * n, name="AVG")


def ideal_ratio(n: int) -> Decimal:
    """r = (n − 1)/n, the maximizer of k_n(r) = (1 − r)r^{n−1} (seed 003 Eq. 13–14).

    Raises:
        InvalidRequestError: if n < 2 (r must be in (0, 1)).
    """
    n = check_count(n, minimum=2)
    return FLOOR.divide(Decimal(n - 1), Decimal(n))


class TaylorCentre(Enum):
    """Which term the ideal Taylor initial term t centres the wave on (seed 003 §4.4).

    Attributes:
        FLOOR: the ⌊n/2⌋-th term, t = e^{1−⌊n/2⌋} — Eq. 15–16 as printed (needs n ≥ 4).
        MIDDLE: the middle position m = (n+1)/2, t = e^{1−m} = e^{(1−n)/2} (needs n ≥ 2). This
            is what reproduces the paper's own Table 4 (the U_s boundaries of bl-Ty for
            N = 3…14 at ε = 0.3 match to the printed digits only with this t), so the
            experiments use it; for odd n it is the exact middle term.
    """

    FLOOR = "floor"
    MIDDLE = "middle"


def ideal_initial_term(n: int, *, centre: TaylorCentre = TaylorCentre.FLOOR) -> Decimal:
    """The initial term t that maximizes the centre term of the Taylor series.

    k_m(t) = t(ln 1/t)^{m−1}/(m−1)! has derivative zero at ln(1/t) = m − 1, i.e.
    t = e^{1−m} (seed 003 Eq. 15–16 with m = ⌊n/2⌋; see :class:`TaylorCentre` for m = (n+1)/2).

    Raises:
        InvalidRequestError: if t would not be < 1 (n < 4 for FLOOR, n < 2 for MIDDLE).
    """
    if centre is TaylorCentre.FLOOR:
        n = check_count(n, minimum=4)
        return Decimal(1 - n // 2).exp(context=FLOOR)
    if centre is TaylorCentre.MIDDLE:
        n = check_count(n, minimum=2)
        return (Decimal(1 - n) / 2).exp(context=FLOOR)
    raise InvalidRequestError(f"centre must be a TaylorCentre, got {centre!r}")


def geometric(
    *, epsilon: Number, ratio: Number, n: int | None = None
) -> InfiniteBudgetSequence | FiniteBudgetSequence:
    """The geometric series strategy ε_i = ε(1 − r)r^{i−1} (seed 003 §4.2, Eq. 6–7).

    Args:
        epsilon: the total ε.
        ratio: r in (0, 1).
        n: if given, only the first n terms (uncalibrated; see :func:`calibrate`).

    Returns:
        An infinite sequence, or its first n terms.
    """
    seq = InfiniteBudgetSequence(
        epsilon=check_epsilon(epsilon), series=GeometricSeries(_dec(ratio))
    )
    return seq if n is None else seq.first(n)


def taylor(
    *, epsilon: Number, initial: Number, n: int | None = None
) -> InfiniteBudgetSequence | FiniteBudgetSequence:
    """The Taylor series strategy ε_i = ε·t(ln 1/t)^{i−1}/(i−1)! (seed 003 §4.3, Eq. 10–12).

    Args:
        epsilon: the total ε.
        initial: t = k_1 in (0, 1).
        n: if given, only the first n terms (uncalibrated).
    """
    seq = InfiniteBudgetSequence(epsilon=check_epsilon(epsilon), series=TaylorSeries(_dec(initial)))
    return seq if n is None else seq.first(n)


def bisection(
    *, epsilon: Number, n: int | None = None
) -> InfiniteBudgetSequence | FiniteBudgetSequence:
    """Bisection ε/2, ε/4, …: the geometric series with r = 1/2 (seed 003 §4.2)."""
    seq = geometric(epsilon=epsilon, ratio=Decimal("0.5"), n=n)
    return _named(seq, "Bisection")


def cormode(
    *, epsilon: Number, n: int | None = None
) -> InfiniteBudgetSequence | FiniteBudgetSequence:
    """Cormode et al.'s allocation: geometric with ratio 2^{−1/3} (seed 003 §4.2, §7.2.2).

    §7.2.2 writes it for N iterations as ε_i = 2^{(N−i)/3}·ε(2^{1/3} − 1)/(2^{(N+1)/3} − 1),
    a geometric sequence with ratio 2^{−1/3}; after :func:`calibrate` the two coincide.
    """
    seq = geometric(epsilon=epsilon, ratio=CORMODE_RATIO, n=n)
    return _named(seq, "Cormode")


def ideal_geometric(n: int, *, epsilon: Number) -> FiniteBudgetSequence:
    """ "Geo": n terms of the geometric series with r = (n − 1)/n, calibrated (Eq. 14, 17)."""
    seq = geometric(epsilon=epsilon, ratio=ideal_ratio(n), n=n)
    assert isinstance(seq, FiniteBudgetSequence)
    return calibrate(seq).renamed("Geo")


def ideal_taylor(
    n: int, *, epsilon: Number, centre: TaylorCentre = TaylorCentre.FLOOR
) -> FiniteBudgetSequence:
    """ "Ty": n terms of the Taylor series with the ideal t, calibrated (Eq. 16, 17)."""
    seq = taylor(epsilon=epsilon, initial=ideal_initial_term(n, centre=centre), n=n)
    assert isinstance(seq, FiniteBudgetSequence)
    return calibrate(seq).renamed("Ty")


def calibrate(sequence: BudgetSequence, n: int | None = None) -> FiniteBudgetSequence:
    """Scale n terms up so they use the whole ε: k*_i = k_i / S_n (seed 003 §4.5, Eq. 17).

    Computed as ε*_i = ⌊ε·ε_i / S⌋ on the grid, S the exact sum of the n terms, so
    Σ ε*_i ≤ ε exactly (and = ε up to at most n grid units).

    Args:
        sequence: a finite sequence, or an infinite one with ``n`` given.
        n: how many leading terms to calibrate (default: all of a finite sequence).

    Raises:
        InvalidRequestError: if the sequence is infinite and ``n`` is missing, or every term
            is 0.
    """
    if n is None:
        if sequence.length is None:
            raise InvalidRequestError("calibrating an infinite sequence needs n (how many terms)")
        n = sequence.length
    terms = sequence.prefix(check_count(n))
    total = exact_sum(terms)
    if total == 0:
        raise InvalidRequestError("cannot calibrate a sequence whose terms are all 0")
    eps = sequence.epsilon
    scaled = tuple(grid_floor(FLOOR.divide(FLOOR.multiply(eps, t), total)) for t in terms)
    return FiniteBudgetSequence(epsilon=eps, terms=scaled, name=sequence.name)


def flip_horizontal(sequence: FiniteBudgetSequence) -> FiniteBudgetSequence:
    """Reverse the order: ε^F_i = ε*_{n−i+1} (seed 003 §5.1, Eq. 19–20). Same sum."""
    _finite(sequence)
    return FiniteBudgetSequence(
        epsilon=sequence.epsilon, terms=sequence.terms[::-1], name=f"Flip-{sequence.name}"
    )


def flip_vertical(sequence: FiniteBudgetSequence) -> FiniteBudgetSequence:
    """Mirror the values: ε^F_i = (S − ε_i)/(n − 1) (seed 003 §5.1, Eq. 21).

    Eq. 21 writes ε for S because it is applied to a calibrated sequence (S = ε); we use the
    sequence's exact sum S, so the flipped terms sum to S ≤ ε even when calibration left a few
    grid units unspent (with S = ε they would sum to ε + (ε − S)/(n−1)). Peaks become troughs:
    the Taylor wave turns into "Flip-Ty", high at both ends.

    Raises:
        InvalidRequestError: if n < 2.
    """
    _finite(sequence)
    n = check_count(sequence.length, name="sequence length", minimum=2)
    total = sequence.total
    terms = tuple(grid_floor(FLOOR.divide(FLOOR.subtract(total, t), n - 1)) for t in sequence.terms)
    return FiniteBudgetSequence(epsilon=sequence.epsilon, terms=terms, name=f"Flip-{sequence.name}")


def _finite(sequence: object) -> None:
    if not isinstance(sequence, FiniteBudgetSequence):
        raise InvalidRequestError(
            f"a flip needs a finite sequence (take .first(n) of a series), got {sequence!r}"
        )


def _dec(value: Number) -> Decimal:
    return parameter(value, name="series parameter")


def _named(
    seq: InfiniteBudgetSequence | FiniteBudgetSequence, name: str
) -> InfiniteBudgetSequence | FiniteBudgetSequence:
    if isinstance(seq, FiniteBudgetSequence):
        return seq.renamed(name)
    return InfiniteBudgetSequence(epsilon=seq.epsilon, series=seq.series, name=name)


__all__ = [
    "CORMODE_RATIO",
    "TaylorCentre",
    "average",
    "bisection",
    "calibrate",
    "cormode",
    "flip_horizontal",
    "flip_vertical",
    "geometric",
    "ideal_geometric",
    "ideal_initial_term",
    "ideal_ratio",
    "ideal_taylor",
    "taylor",
]

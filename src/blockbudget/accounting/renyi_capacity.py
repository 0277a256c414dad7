"""Per-order capacities of the Rényi filters: the proof, and the arithmetic. Pure math.

A Rényi filter keeps, for every order α of the grid :data:`~blockbudget.budget.ALPHAS`, the sum
Σ_i ε_i(α) of the RDP costs charged to a block, each cost chosen adaptively (after the earlier
releases), and admits a charge while *some* order stays within its capacity c(α). Which
capacities make that rule (ε_g, δ_g)-DP?

**Theorem** (the ``rdp2`` rule). Let Λ ⊆ ALPHAS and shares w_α > 0 with Σ_{α∈Λ} w_α = 1 be
fixed before the first charge, and for α ∈ Λ

    c(α) = ε_g − (ln(1/(w_α·δ_g)) − ln α)/(α−1) + ln(α/(α−1)),

capped at ε_g; orders outside Λ admit nothing. A block that admits a charge only while some
α ∈ Λ keeps Σ_i ε_i(α) ≤ c(α) is (ε_g, δ_g)-DP under fully adaptive choice of mechanisms and
of their costs.

*Proof.* A transcript is everything the block's interaction releases in its lifetime, each
request's decision included (a refusal releases ⊥, a zero-cost mechanism). Let A be the
multi-order filter and, for each α ∈ Λ, A^α the interaction whose filter refuses exactly the
requests that would take Σε_i(α) past c(α) and carries on. By Feldman & Zrnic (NeurIPS 2021,
"Individual privacy accounting via a Rényi filter", Thm 3.1: adaptively chosen mechanisms
whose RDP costs at one fixed order sum to at most B almost surely compose to (α, B)-RDP),
A^α is (α, c(α))-RDP. By Canonne, Kamath & Steinke (NeurIPS 2020, "The discrete Gaussian for
differential privacy", Prop. 12; the same bound is Balle et al., AISTATS 2020, Thm 21), an
(α, τ)-RDP mechanism is (ε, δ)-DP with ε = τ + (ln(1/δ) − ln α)/(α−1) + ln(1 − 1/α); with
τ = c(α) and δ = w_α·δ_g this is ε ≤ ε_g, so A^α is (ε_g, w_α·δ_g)-DP. Now order Λ and let
G_α be the set of transcripts *of A* in which α is the first order of Λ still within c(α) at
the end. A keeps some order within its capacity after every admission, so the G_α partition
A's transcripts; membership is decided by the transcript alone (each cost is a function of the
earlier releases). Along a transcript in G_α, A and A^α decide alike: every request A admitted
kept α within c(α) (its sum only grows, and ends within), and every request A refused fits no
order, α included. So both run the same mechanisms with the same decisions, and
P[A(D) = τ] = P[A^α(D) = τ] for τ ∈ G_α, on every dataset. For neighbouring D, D' and any set
S of transcripts,

    P[A(D) ∈ S] = Σ_α P[A^α(D) ∈ S ∩ G_α] ≤ Σ_α (e^ε_g P[A^α(D') ∈ S ∩ G_α] + w_α·δ_g)
                = Σ_α (e^ε_g P[A(D') ∈ S ∩ G_α] + w_α·δ_g) = e^ε_g P[A(D') ∈ S] + δ_g.  ∎

The same argument covers any capacities at most c(α) — a version-1 ``rdp`` block capped at
min(version 1, c(α)) from now on — provided every order's sum is within the capacity it is
held to at the end (a block whose history already exceeds every proved capacity is outside
the theorem; see :class:`~blockbudget.accounting.rdp.RdpFilter`).

The union bound is the price of choosing the order after the fact: which order survives
depends on the outputs. PrivateKube (Luo et al., OSDI'21, §5.2, Alg. 3) and DPack (Tholoniat
et al., EuroSys'25, §3) use c(α) = ε_g − ln(1/δ_g)/(α−1) (Mironov 2017, Prop. 3) with the whole
δ_g at every order and defer the proof to an extended version; the reference code of Lécuyer
(2021, arXiv 2103.01379) splits δ over the orders in its odometer but not in its filter. We
found no proof of the undivided rule, so it is not what new streams get (docs/accounting.md).

Three things keep the union bound cheap (:func:`proved_shares`; Λ and the shares are a public
function of (ε_g, δ_g), fixed before any charge): Λ holds only the orders whose capacity is
positive at the block's (ε_g, δ_g), so an order that can admit nothing pays no share; the two
orders best for Gaussian-like charges — the limit of many small charges of any kind — take 90%
of δ_g; and the improved conversion gains (ln α)/(α−1) + ln(α/(α−1)) over Mironov's at every
order, more than the ln(1/w_α)/(α−1) the split costs wherever α ≥ 1/w_α.

Every capacity here is computed in decimal with directed rounding and floored to a fixed-point
unit, so it is never above the exact real number.

Example:
    >>> from blockbudget.budget import Budget
    >>> [float(a) for a in proved_orders(Budget(epsilon=1, delta="1e-6"))]
    [16.0, 32.0, 64.0]
    >>> proved = proved_capacities(Budget(epsilon=1, delta="1e-6"))
    >>> legacy = mironov_capacities(Budget(epsilon=1, delta="1e-6"))
    >>> [round(c / 10**18, 4) for c in proved[-3:]], [round(c / 10**18, 4) for c in legacy[-3:]]
    ([0.2751, 0.6721, 0.8259], [0.079, 0.5543, 0.7807])
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

from blockbudget.budget import ALPHAS, Budget, units_down
from blockbudget.errors import InvalidBudgetError

__all__ = [
    "cks_capacities",
    "mironov_capacities",
    "proved_capacities",
    "proved_orders",
    "proved_shares",
]

#: The capacity of an order a filter must never admit at (below any sum of costs, which are ≥ 0).
UNUSABLE = -1

#: Working precision of the logarithms (each correctly rounded to nearest, so within half an ulp
#: of 60 digits), and the relative nudge that turns them into one-sided bounds.
_DIGITS = 60
_NUDGE = -58


def _up(x: Decimal) -> Decimal:
    """An upper bound of a 60-digit, round-to-nearest result (ROUND_CEILING context)."""
    return x + abs(x).scaleb(_NUDGE)


def _down(x: Decimal) -> Decimal:
    """A lower bound of a 60-digit, round-to-nearest result (ROUND_FLOOR context)."""
    return x - abs(x).scaleb(_NUDGE)


def _orders() -> tuple[Decimal, ...]:
    return tuple(Decimal(repr(a)) for a in ALPHAS)


def _check(capacity: Budget) -> None:
    if not isinstance(capacity, Budget) or capacity.delta <= 0:
        raise InvalidBudgetError(f"an RDP filter needs δ_g > 0, got {capacity}")


def _floor_difference(epsilon: Decimal, term: Decimal) -> int:
    """⌊(ε_g − term)·UNIT⌋ with the difference computed exactly (both have < 200 digits)."""
    with localcontext() as ctx:
        ctx.prec = 400
        ctx.rounding = ROUND_FLOOR
        return units_down(epsilon - term)


def mironov_capacities(capacity: Budget) -> tuple[int, ...]:
    """ε_g − ln(1/δ_g)/(α−1) per order, in units, never above the exact value: the capacities of
    the version-1 ``rdp`` rule (Mironov 2017, Prop. 3, the whole δ_g at every order).

    ln(1/δ_g) is evaluated at 60 digits and raised by a relative 1e-58, divided by α−1 rounding
    up, and subtracted from the exact ε_g rounding down.

    Raises:
        InvalidBudgetError: δ_g ≤ 0.
    """
    _check(capacity)
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        log_inv = -capacity.delta.ln()
        ctx.rounding = ROUND_CEILING
        log_inv = _up(log_inv)
        terms = [log_inv / (alpha - 1) for alpha in _orders()]
    return tuple(_floor_difference(capacity.epsilon, t) for t in terms)


def _log_bound(x: Decimal, *, upper: bool) -> Decimal:
    """An upper (or lower) bound of ln x (x > 0), at 60 digits."""
    with localcontext() as ctx:
        ctx.prec = _DIGITS
        value = x.ln()
        ctx.rounding = ROUND_CEILING if upper else ROUND_FLOOR
        return _up(value) if upper else _down(value)


def _log_up(x: Decimal) -> Decimal:
    return _log_bound(x, upper=True)


def _log_down(x: Decimal) -> Decimal:
    return _log_bound(x, upper=False)


def _conversion_terms(delta: Decimal, shares: Sequence[Fraction]) -> list[Decimal | None]:
    """Per order, an upper bound of (ln(1/(w_α·δ)) − ln α)/(α−1) − ln(α/(α−1)) for the share
    w_α of δ (None where w_α = 0), floored at 0 so that no capacity exceeds ε_g."""
    log_inv_delta = -_log_down(delta)
    out: list[Decimal | None] = []
    for alpha, share in zip(_orders(), shares, strict=True):
        if share <= 0:
            out.append(None)
            continue
        with localcontext() as ctx:
            ctx.prec = _DIGITS
            ctx.rounding = ROUND_CEILING
            # ln(1/w) = ln(den) − ln(num), each bounded on the side that raises the term
            top = log_inv_delta + _log_up(Decimal(share.denominator))
            top -= _log_down(Decimal(share.numerator))
            with localcontext() as low:
                low.prec, low.rounding = _DIGITS, ROUND_FLOOR
                ratio = alpha / (alpha - 1)  # rounded down, so its log bound stays below
            term = (top - _log_down(alpha)) / (alpha - 1) - _log_down(ratio)
        out.append(max(term, Decimal(0)))
    return out


def cks_capacities(capacity: Budget, share: Fraction) -> tuple[int, ...]:
    """ε_g − (ln(1/(w·δ_g)) − ln α)/(α−1) + ln(α/(α−1)) per order, in units, never above the
    exact value: the largest RDP at α that Canonne, Kamath & Steinke 2020, Prop. 12 converts to
    (ε_g, w·δ_g), for one share w of δ_g at every order (at most ε_g).

    ``share = 1`` gives every order the whole δ_g — sound for an order fixed before the first
    charge, not for the exists-α rule (benchmarks use it as a reference).

    Raises:
        InvalidBudgetError: δ_g ≤ 0, or a share outside (0, 1].
    """
    _check(capacity)
    if not 0 < share <= 1:
        raise InvalidBudgetError(f"a share of δ_g is in (0, 1], got {share}")
    terms = _conversion_terms(capacity.delta, [share] * len(ALPHAS))
    return tuple(_floor_difference(capacity.epsilon, t) for t in terms if t is not None)


#: The share of δ_g the two orders best for Gaussian-like charges take together; the other
#: usable orders share the rest evenly. Part of ``rdp2``'s definition, as the grid is: the
#: theorem needs a block's shares fixed before its first charge, and they are recomputed from
#: these constants whenever a filter is built, so changing either is a new rule name
#: (tests/accounting/test_rdp_capacity.py pins the shares).
FAVOURED_SHARE = Fraction(9, 10)


def proved_shares(capacity: Budget) -> tuple[Fraction, ...]:
    """The share w_α of δ_g each order gets (0 outside Λ); they sum to 1 when Λ is not empty.

    Λ is the set of orders whose capacity is positive when all 12 share δ_g evenly. When Λ has
    more than two orders, the two at which identical Gaussian charges get the most — the
    largest c(α)/α with the whole δ_g, ties to the smaller order — take :data:`FAVOURED_SHARE`
    (half each) and the others share the rest evenly; otherwise Λ shares δ_g evenly. Many small
    charges of any kind compose like Gaussians (their optimal order depends on (ε_g, δ_g)
    alone), so this spends the union bound where charges need it; any fixed weights are valid.

    Example:
        >>> [str(w) for w in proved_shares(Budget(epsilon=1, delta="1e-6"))[-3:]]
        ['9/20', '9/20', '1/10']

    Raises:
        InvalidBudgetError: δ_g ≤ 0.
    """
    _check(capacity)
    n = len(ALPHAS)
    first = cks_capacities(capacity, Fraction(1, n))
    usable = [i for i in range(n) if first[i] > 0]
    shares = [Fraction(0)] * n
    if len(usable) <= 2:
        for i in usable:
            shares[i] = Fraction(1, len(usable))
        return tuple(shares)
    whole = cks_capacities(capacity, Fraction(1))
    orders = _orders()
    ranked = sorted(usable, key=lambda i: (-(Decimal(whole[i]) / orders[i]), orders[i]))
    for i in usable:
        shares[i] = (1 - FAVOURED_SHARE) / (len(usable) - 2)
    for i in ranked[:2]:
        shares[i] = FAVOURED_SHARE / 2
    return tuple(shares)


def _proved(capacity: Budget) -> list[int]:
    terms = _conversion_terms(capacity.delta, proved_shares(capacity))
    caps = [UNUSABLE if t is None else _floor_difference(capacity.epsilon, t) for t in terms]
    return [c if c > 0 else UNUSABLE for c in caps]


def proved_orders(capacity: Budget) -> tuple[Decimal, ...]:
    """Λ: the orders of the grid at which a block of ``capacity`` can admit anything under the
    proved rule (empty when none can: the block then admits no charge at all).

    Raises:
        InvalidBudgetError: δ_g ≤ 0.
    """
    _check(capacity)
    caps = _proved(capacity)
    return tuple(a for a, c in zip(_orders(), caps, strict=True) if c != UNUSABLE)


def proved_capacities(capacity: Budget) -> tuple[int, ...]:
    """The per-order capacities of the theorem above, in units (never above the exact value);
    :data:`UNUSABLE` outside Λ.

    Raises:
        InvalidBudgetError: δ_g ≤ 0.
    """
    _check(capacity)
    return tuple(_proved(capacity))

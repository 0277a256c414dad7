"""Per-block privacy filters: pure functions of a block's charge history and a candidate charge.

A filter decides whether one more adaptively chosen charge keeps a block within its global
guarantee (ε_g, δ_g). Each filter maps a cost to a vector of *additive features* in fixed point
(rounded up, see :mod:`blockbudget.budget`), so a block's whole history is summarized by one
integer vector — the ledger stores exactly that, for charges and for reservations separately —
and ``fits`` is a pure predicate on the summed vector. ``accepts(history, candidate)`` is the
history form of the same rule.

Reservations are counted as if charged. This is sound for every filter here because each
feature is a superadditive function of epsilon (ε, ε², (e^ε−1)ε/2, per-order RDP): spending a
reservation in several smaller charges never adds more than the reservation itself.

Filters:
    * :class:`BasicFilter` — Sage basic block composition (seed ``004_2b5d216070ae2ded.txt``,
      §4.3, Theorem 4.3; proof §A.2): Σε_i ≤ ε_g and Σδ_i ≤ δ_g per block.
    * :class:`StrongFilter` — strong adaptive block composition (seed 004, §A.3, Theorem A.2,
      after Rogers, Roth, Ullman & Vadhan 2016, Theorem 5.1).
    * :class:`RdpFilter` — Rényi filter over the order grid with capacity
      ε_g − log(1/δ_g)/(α−1) per order; a charge fits while *some* order stays within capacity
      (PrivateKube, OSDI'21 §4; DPack, EuroSys'25 §3; validity of the "exists α" rule:
      Lécuyer 2021, "Practical privacy filters and odometers with Rényi DP").
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from enum import Enum
from typing import Any

from blockbudget.budget import (
    ALPHAS,
    INF_UNITS,
    UNIT,
    Budget,
    Cost,
    RdpCurve,
    canonical_decimal,
    from_units,
    units_down,
    units_up,
)
from blockbudget.errors import InvalidBudgetError

Vector = tuple[int, ...]

#: Multiplicative margin applied when a filter's test needs floating-point transcendental
#: functions: the left-hand side is inflated by this factor (toward refusing).
FLOAT_MARGIN = 1.0 + 1e-9


class Accounting(Enum):
    """The accounting rule of a stream: which filter guards each of its blocks."""

    BASIC = "basic"
    STRONG = "strong"
    RDP = "rdp"


def add_vectors(a: Sequence[int], b: Sequence[int]) -> Vector:
    """Elementwise sum of two feature vectors (exact integers)."""
    if len(a) != len(b):
        raise InvalidBudgetError(f"feature vectors of different lengths {len(a)} and {len(b)}")
    return tuple(x + y for x, y in zip(a, b, strict=True))


def sub_vectors(a: Sequence[int], b: Sequence[int]) -> Vector:
    """Elementwise difference of two feature vectors (exact integers)."""
    if len(a) != len(b):
        raise InvalidBudgetError(f"feature vectors of different lengths {len(a)} and {len(b)}")
    return tuple(x - y for x, y in zip(a, b, strict=True))


class Filter(ABC):
    """The contract every per-block filter implements.

    Attributes:
        accounting: which rule this is.
        capacity: the block's global budget (ε_g, δ_g).
        dims: the length of a feature vector.
    """

    accounting: Accounting
    dims: int

    def __init__(self, *, capacity: Budget) -> None:
        if not isinstance(capacity, Budget):
            raise InvalidBudgetError("a filter's capacity must be a Budget (ε_g, δ_g)")
        self.capacity = capacity

    def zero(self) -> Vector:
        """The feature vector of an empty history."""
        return (0,) * self.dims

    @abstractmethod
    def features(self, cost: Cost) -> Vector:
        """The additive fixed-point contribution of one charge, rounded up.

        Raises:
            InvalidBudgetError: when this filter cannot account this kind of cost.
        """

    @abstractmethod
    def fits(self, used: Sequence[int]) -> bool:
        """Whether a block whose summed features are ``used`` is within its guarantee."""

    @abstractmethod
    def remaining_fraction(self, used: Sequence[int]) -> float:
        """How much of the block is left, in [0, 1] (for display; 0 means nothing can fit)."""

    @abstractmethod
    def describe_remaining(self, used: Sequence[int]) -> str:
        """A human-readable statement of what remains."""

    @abstractmethod
    def shortfall(self, used: Sequence[int], candidate: Sequence[int]) -> str:
        """By how much ``candidate`` exceeds what remains after ``used`` (human-readable)."""

    def total(self, history: Sequence[Cost]) -> Vector:
        """Summed features of a history of charges."""
        acc = self.zero()
        for cost in history:
            acc = add_vectors(acc, self.features(cost))
        return acc

    def accepts(self, history: Sequence[Cost], candidate: Cost) -> bool:
        """Whether the block still satisfies the filter after ``candidate`` joins ``history``."""
        return self.fits(add_vectors(self.total(history), self.features(candidate)))

    def fits_with(self, used: Sequence[int], candidate: Sequence[int]) -> bool:
        """Whether ``candidate`` features fit on top of ``used``."""
        return self.fits(add_vectors(used, candidate))

    def describe(self) -> str:
        return f"{self.accounting.value} composition with capacity {self.capacity}"

    def features_json(self, features: Sequence[int]) -> dict[str, str | list[str]]:
        """A feature vector (e.g. what a reservation holds) as exact decimal strings:
        ``{"epsilon", "delta"}`` for (ε, δ) filters, ``{"rdp": [...]}`` per order for RDP."""
        return {"epsilon": _exact(features[0]), "delta": _exact(features[-1])}

    def remaining_json(self, used: Sequence[int]) -> dict[str, str | list[str]]:
        """What remains after ``used``, as exact decimal strings (the form of
        :meth:`features_json`; for strong composition the largest ε of one more pure charge,
        see :func:`blockbudget.accounting.afford.largest_epsilon`)."""
        return self.features_json(
            tuple(max(0, c - u) for c, u in zip(self._capacity_vector(), used, strict=True))
        )

    def shortfall_json(
        self, used: Sequence[int], candidate: Sequence[int]
    ) -> dict[str, str | list[str]]:
        """By how much ``candidate`` exceeds what remains after ``used``, as exact decimal
        strings (the form of :meth:`features_json`; zero where it does not exceed)."""
        return self.features_json(
            tuple(
                max(0, u + d - c)
                for u, d, c in zip(used, candidate, self._capacity_vector(), strict=True)
            )
        )

    def _capacity_vector(self) -> Vector:
        raise NotImplementedError  # each filter with a per-feature capacity overrides it


class BasicFilter(Filter):
    """Sage basic block composition (seed 004, §4.3, Theorem 4.3):
    Σε_i ≤ ε_g and Σδ_i ≤ δ_g over the charges that read the block.

    Features: (ε, δ) in fixed point, rounded up. Accepts only (ε, δ) budgets.
    """

    accounting = Accounting.BASIC
    dims = 2

    def __init__(self, *, capacity: Budget) -> None:
        super().__init__(capacity=capacity)
        self._cap = (units_down(capacity.epsilon), units_down(capacity.delta))

    def features(self, cost: Cost) -> Vector:
        if not isinstance(cost, Budget):
            raise InvalidBudgetError(
                "basic composition accounts (ε, δ) budgets; convert an RDP curve first "
                "with RdpCurve.to_dp(delta=...)"
            )
        return (units_up(cost.epsilon), units_up(cost.delta))

    def fits(self, used: Sequence[int]) -> bool:
        return used[0] <= self._cap[0] and used[1] <= self._cap[1]

    def remaining_fraction(self, used: Sequence[int]) -> float:
        fractions = [
            max(0.0, (cap - u) / cap) for cap, u in zip(self._cap, used, strict=True) if cap > 0
        ]
        return min(fractions) if fractions else 0.0

    def remaining_budget(self, used: Sequence[int]) -> Budget:
        """What remains, exactly, as a budget."""
        return Budget(
            epsilon=from_units(max(0, self._cap[0] - used[0])),
            delta=from_units(max(0, self._cap[1] - used[1])),
        )

    def describe_remaining(self, used: Sequence[int]) -> str:
        return str(self.remaining_budget(used))

    def _capacity_vector(self) -> Vector:
        return self._cap

    def shortfall(self, used: Sequence[int], candidate: Sequence[int]) -> str:
        over_e = used[0] + candidate[0] - self._cap[0]
        over_d = used[1] + candidate[1] - self._cap[1]
        return str(Budget(epsilon=from_units(max(0, over_e)), delta=from_units(max(0, over_d))))


class StrongFilter(Filter):
    """Strong adaptive block composition (seed 004, §A.3, Theorem A.2; Rogers, Roth, Ullman &
    Vadhan 2016, Theorem 5.1).

    With slack δ̃ (default δ_g/2), a block accepts charges while ``Σδ_i ≤ δ_g − δ̃`` and

        Σ (e^{ε_i}−1)ε_i/2
        + sqrt( 2 (Σε_i² + ε_g²/(28.04 L_H)) ·
                (1 + ½ log(28.04 L_H Σε_i²/ε_g² + 1)) · L )  ≤  ε_g

    holds for *both* published readings of the constants: Rogers et al.'s COMP_{ε_g, δ_g}
    (L_H = log(1/δ_c) with δ_c = 2δ̃, L = log(2/δ_c)) and Sage's Theorem A.2 as printed
    (L_H = L = log(1/δ̃)). They differ only in L_H, and Sage's is slightly more conservative
    (it fits 14,751 rather than 14,799 charges of 0.001 at (1, 1e-6)); requiring both keeps the
    filter valid whichever is right. Rogers et al. need δ_c < 1/e. The seed's OCR drops the
    Σε_i² inside the logarithm; the form here is the cited theorem's. Features: (ε, ε²,
    (e^ε−1)ε/2, δ), each rounded up; the test inflates its left side by :data:`FLOAT_MARGIN`.
    """

    accounting = Accounting.STRONG
    dims = 4

    def __init__(self, *, capacity: Budget, slack_delta: float | None = None) -> None:
        super().__init__(capacity=capacity)
        eps_g, delta_g = capacity.as_floats()
        if delta_g <= 0 or eps_g <= 0:
            raise InvalidBudgetError(
                f"strong composition needs ε_g > 0 and δ_g > 0 (it trades δ for ε); got {capacity}"
            )
        slack = delta_g / 2 if slack_delta is None else slack_delta
        if not (0 < slack < delta_g):
            raise InvalidBudgetError(f"slack δ̃ must be in (0, δ_g), got {slack!r}")
        self.slack_delta = slack
        self._eps_g = eps_g
        with localcontext() as ctx:  # exact difference, rounded down if it ever needed rounding
            ctx.prec = 200
            ctx.rounding = ROUND_FLOOR
            self._delta_cap = units_down(capacity.delta - Decimal(repr(slack)))
        delta_c = 2 * slack
        if delta_c >= math.exp(-1):
            raise InvalidBudgetError(
                f"strong composition (Rogers et al. 2016, Thm 5.1) needs 2δ̃ < 1/e; got δ̃={slack!r}"
            )
        self._next_memo: dict[Vector, int] = {}
        log_slack = math.log(1 / slack)
        # (L_H, L) for Rogers et al.'s reading and for Sage Thm A.2 as printed.
        self._forms = ((math.log(1 / delta_c), log_slack), (log_slack, log_slack))

    def features(self, cost: Cost) -> Vector:
        if not isinstance(cost, Budget):
            raise InvalidBudgetError(
                "strong composition accounts (ε, δ) budgets; convert an RDP curve first"
            )
        eps = cost.epsilon
        if eps > 100:  # (e^ε−1)ε/2 > 1e45: no capacity can hold it; skip the huge exp()
            return (units_up(eps), units_up(eps * eps), INF_UNITS, units_up(cost.delta))
        with localcontext() as ctx:
            # Every operation rounds up, so ε² and (e^ε−1)ε/2 are never below their true
            # values; exp() alone rounds to nearest (half an ulp at 60 digits, relative 5e-60),
            # so g is inflated by a relative 1e-58 on top.
            ctx.prec = 60
            ctx.rounding = ROUND_CEILING
            sq = eps * eps
            g = (eps.exp() - 1) * eps / 2
            g += g.scaleb(-58)
        # +1 unit on g covers what the 60 digits of exp(ε) − 1 lose for a tiny ε (e.g. e^ε − 1
        # computes to 0 below ε ≈ 1e-60): the true g is then below one unit.
        g_units = units_up(g) + (1 if eps > 0 else 0)
        return (units_up(eps), units_up(sq), g_units, units_up(cost.delta))

    def _lhs(self, sq_units: int, g_units: int) -> float:
        s2 = sq_units / UNIT
        g = g_units / UNIT
        eg2 = self._eps_g * self._eps_g
        worst = 0.0
        for log_h, log_out in self._forms:
            a = s2 + eg2 / (28.04 * log_h)
            b = 1.0 + 0.5 * math.log(28.04 * log_h * s2 / eg2 + 1.0)
            worst = max(worst, g + math.sqrt(2.0 * a * b * log_out))
        return worst * FLOAT_MARGIN

    def fits(self, used: Sequence[int]) -> bool:
        if used[3] > self._delta_cap:
            return False
        return self._lhs(used[1], used[2]) <= self._eps_g

    def max_next_epsilon(self, used: Sequence[int]) -> float:
        """The largest ε of one more pure charge that still fits (bisection; conservative)."""
        if not self.fits(used):
            return 0.0
        lo, hi = 0.0, self._eps_g
        for _ in range(60):
            mid = (lo + hi) / 2
            if self.fits(add_vectors(used, self.features(Budget(epsilon=mid)))):
                lo = mid
            else:
                hi = mid
        return lo

    def remaining_fraction(self, used: Sequence[int]) -> float:
        first = self.max_next_epsilon(self.zero())
        return 0.0 if first <= 0 else min(1.0, self.max_next_epsilon(used) / first)

    def describe_remaining(self, used: Sequence[int]) -> str:
        left_delta = from_units(max(0, self._delta_cap - used[3]))
        return f"next charge up to ε={self.max_next_epsilon(used):.6g}, δ≤{float(left_delta):.3g}"

    def shortfall(self, used: Sequence[int], candidate: Sequence[int]) -> str:
        want = candidate[0] / UNIT
        return f"ε {max(0.0, want - self.max_next_epsilon(used)):.6g}"

    def _next_epsilon_units(self, used: Sequence[int]) -> int:
        """The largest ε of one more pure charge, in units (a search of ~60 fit tests, so
        remembered per used vector: many blocks share one, e.g. the untouched)."""
        key = tuple(used)
        found = self._next_memo.get(key)
        if found is None:
            from blockbudget.accounting.afford import largest_epsilon

            best = largest_epsilon(self, [used], delta=0)
            found = 0 if best is None else units_down(best)
            if len(self._next_memo) >= 4096:
                self._next_memo.clear()
            self._next_memo[key] = found
        return found

    def remaining_json(self, used: Sequence[int]) -> dict[str, str | list[str]]:
        left_delta = max(0, self._delta_cap - used[3])
        return {"epsilon": _exact(self._next_epsilon_units(used)), "delta": _exact(left_delta)}

    def shortfall_json(
        self, used: Sequence[int], candidate: Sequence[int]
    ) -> dict[str, str | list[str]]:
        over_delta = max(0, used[3] + candidate[3] - self._delta_cap)
        over_eps = max(0, candidate[0] - self._next_epsilon_units(used))
        return {"epsilon": _exact(over_eps), "delta": _exact(over_delta)}


class RdpFilter(Filter):
    """Rényi-DP block filter over :data:`ALPHAS` (PrivateKube OSDI'21 §4, DPack EuroSys'25 §3).

    Capacity per order: ε_g − log(1/δ_g)/(α−1) (rounded down; negative orders are unusable).
    A block stays valid while *some* order's summed RDP is within its capacity; by the RDP
    conversion this keeps the block (ε_g, δ_g)-DP. Features: per-order RDP, rounded up. A pure
    (ε, 0) budget is converted with :meth:`RdpCurve.from_pure_dp`; (ε, δ>0) budgets are refused.
    """

    accounting = Accounting.RDP
    dims = len(ALPHAS)

    def __init__(self, *, capacity: Budget) -> None:
        super().__init__(capacity=capacity)
        if capacity.delta <= 0:
            raise InvalidBudgetError(f"an RDP filter needs δ_g > 0, got {capacity}")
        self.order_capacity: Vector = rdp_order_capacities(capacity)

    def features(self, cost: Cost) -> Vector:
        if isinstance(cost, Budget):
            if not cost.is_pure:
                raise InvalidBudgetError(
                    f"an RDP stream cannot account an (ε, δ) budget with δ > 0 ({cost}); "
                    "declare the mechanism's RDP curve instead"
                )
            cost = RdpCurve.from_pure_dp(cost.epsilon)
        return tuple(units_up(v) for v in cost.epsilons)

    def fits(self, used: Sequence[int]) -> bool:
        return any(u <= c for u, c in zip(used, self.order_capacity, strict=True))

    def remaining_fraction(self, used: Sequence[int]) -> float:
        best = 0.0
        for u, c in zip(used, self.order_capacity, strict=True):
            if c > 0:
                best = max(best, (c - u) / c)
        return max(0.0, min(1.0, best))

    def best_order(self, used: Sequence[int]) -> int:
        """Index of the order with the largest remaining fraction of its capacity."""
        scores = [
            ((c - u) / c if c > 0 else -math.inf)
            for u, c in zip(used, self.order_capacity, strict=True)
        ]
        return max(range(len(scores)), key=lambda i: scores[i])

    def describe_remaining(self, used: Sequence[int]) -> str:
        i = self.best_order(used)
        left = max(0, self.order_capacity[i] - used[i])
        return f"RDP ε={float(from_units(left)):.6g} at α={ALPHAS[i]:g}"

    def shortfall(self, used: Sequence[int], candidate: Sequence[int]) -> str:
        excess = min(
            (u + d - c for u, d, c in zip(used, candidate, self.order_capacity, strict=True)),
            default=INF_UNITS,
        )
        return f"RDP ε {float(from_units(max(0, excess))):.6g} at the best order"

    def _capacity_vector(self) -> Vector:
        return self.order_capacity

    def features_json(self, features: Sequence[int]) -> dict[str, str | list[str]]:
        return rdp_json(features)


def _exact(units: int) -> str:
    """Fixed-point units as an exact decimal string ("inf" beyond any capacity)."""
    return "inf" if units >= INF_UNITS else canonical_decimal(from_units(units))


def vector_json(features: Sequence[int]) -> dict[str, str | list[str]]:
    """A feature vector of any filter here, told apart by its length (basic: 2, strong: 4,
    RDP: one per order), as exact decimal strings — :meth:`Filter.features_json` for callers
    that hold the vector but not its filter.

    Example:
        >>> vector_json((300_000_000_000_000_000, 0))
        {'epsilon': '0.3', 'delta': '0'}
    """
    if len(features) == len(ALPHAS):
        return rdp_json(features)
    return {"epsilon": _exact(features[0]), "delta": _exact(features[-1])}


def rdp_json(features: Sequence[int]) -> dict[str, Any]:
    """An RDP feature vector (one value per order of :data:`ALPHAS`) as JSON: ``rdp``, exact
    decimal strings, and ``orders``, the order α of each (so the array reads on its own).

    Example:
        >>> doc = rdp_json([0] * len(ALPHAS))
        >>> doc["orders"][:3], doc["rdp"][:2]
        ([1.5, 1.75, 2], ['0', '0'])
    """
    return {
        "rdp": [_exact(v) for v in features],
        "orders": [int(a) if float(a).is_integer() else a for a in ALPHAS],
    }


def exact_text(form: dict[str, str | list[str]]) -> str:
    """The text of an exact budget form (:meth:`Filter.features_json`): ``ε=0.3, δ=0`` or
    ``RDP ε(α)=[1.5: 0.1, …]``.

    Example:
        >>> exact_text({"epsilon": "0.3", "delta": "0"})
        'ε=0.3, δ=0'
    """
    if "rdp" in form:
        pairs = zip(form.get("orders", ALPHAS), form["rdp"], strict=True)
        return "RDP ε(α)=[" + ", ".join(f"{a:g}: {v}" for a, v in pairs) + "]"
    return f"ε={form['epsilon']}, δ={form['delta']}"


def rdp_order_capacities(capacity: Budget) -> Vector:
    """Per-order RDP capacity ε_g − ln(1/δ_g)/(α−1) in fixed-point units, never above the exact.

    Computed in decimal with directed rounding: ln(1/δ_g) is evaluated at 60 digits (correctly
    rounded to nearest, so within half an ulp) and raised by a relative 1e-58, divided by α−1
    rounding up, and subtracted from the exact ε_g rounding down; the result is floored to a
    unit. A float formula here could round *up* by an ulp of ε_g when the subtraction cancels.

    Args:
        capacity: the block's global budget (ε_g, δ_g) with δ_g > 0.

    Raises:
        InvalidBudgetError: when δ_g is not positive.
    """
    if capacity.delta <= 0:
        raise InvalidBudgetError(f"an RDP filter needs δ_g > 0, got {capacity}")
    with localcontext() as ctx:
        ctx.prec = 60
        log_inv = -capacity.delta.ln()  # > 0, since 0 < δ_g < 1; half an ulp off at most
        ctx.rounding = ROUND_CEILING
        log_inv += log_inv.scaleb(-58)
        terms = [log_inv / (Decimal(repr(alpha)) - 1) for alpha in ALPHAS]
        ctx.prec = 400  # ε_g and the terms have < 200 significant digits: the difference is exact
        ctx.rounding = ROUND_FLOOR
        return tuple(units_down(capacity.epsilon - term) for term in terms)


def make_filter(
    accounting: Accounting, *, capacity: Budget, slack_delta: float | None = None
) -> Filter:
    """Build the filter for an accounting rule."""
    if accounting is Accounting.BASIC:
        return BasicFilter(capacity=capacity)
    if accounting is Accounting.STRONG:
        return StrongFilter(capacity=capacity, slack_delta=slack_delta)
    if accounting is Accounting.RDP:
        return RdpFilter(capacity=capacity)
    raise InvalidBudgetError(f"unknown accounting rule {accounting!r}")

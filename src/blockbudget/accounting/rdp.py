"""The Rényi-DP block filter (PrivateKube, OSDI'21 §4; DPack, EuroSys'25 §3).

Capacity per order α of :data:`~blockbudget.budget.ALPHAS`: ε_g − log(1/δ_g)/(α−1); a charge
fits while *some* order stays within its capacity (validity of the "exists α" rule: Lécuyer
2021, "Practical privacy filters and odometers with Rényi DP"). Mechanisms are priced by their
own curves at the noise actually used: Laplace (Mironov 2017, Prop. 6), Gaussian (Prop. 7),
summed per order (Prop. 1); a pure ε-DP mechanism by its pure-DP curve.

Example:
    >>> from decimal import Decimal
    >>> from blockbudget.accounting.rule import NoisePart, Noise, Release, get_rule
    >>> cost = get_rule("rdp").price(
    ...     Release(epsilon=Decimal(1), parts=(NoisePart(Noise.GAUSSIAN, 2.0, 1.0),)))
    >>> round(float(cost.epsilons[2]), 9)  # α = 2: α·Δ²/(2σ²) = 0.25, bumped up by 1e-12
    0.25
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

from blockbudget.accounting.filters import Filter, Vector, rdp_json
from blockbudget.accounting.rule import (
    Accounting,
    AccountingRule,
    Combine,
    Noise,
    Release,
    check_group,
    register_rule,
)
from blockbudget.budget import (
    ALPHAS,
    INF_UNITS,
    UNIT,
    Budget,
    Cost,
    RdpCurve,
    from_units,
    units_down,
    units_up,
)
from blockbudget.errors import InvalidBudgetError


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
        if not isinstance(cost, RdpCurve):
            raise InvalidBudgetError(f"an RDP stream cannot account a cost of kind {cost.kind}")
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

    def capacity_units(self) -> Vector:
        return self.order_capacity

    def share(self, fraction: float) -> Cost:
        """A curve of ``fraction`` times each usable order's capacity (0 where an order's
        capacity is not positive)."""
        return RdpCurve(
            [v if v > 1e-90 else 0.0 for v in (c / UNIT * fraction for c in self.order_capacity)]
        )


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


class RdpRule(AccountingRule):
    """Rényi-DP accounting over the order grid (PrivateKube §4)."""

    name = "rdp"
    title = (
        "Rényi filter (PrivateKube §4): some order α keeps Σε(α) ≤ ε_g − log(1/δ_g)/(α−1) per block"
    )
    cost_kind = RdpCurve
    combine = Combine.ANY
    prices_noise = True

    def make(self, *, capacity: Budget, slack_delta: float | None) -> Filter:
        return RdpFilter(capacity=capacity)

    def price(self, release: Release) -> Cost:
        """The summed curve of the release's parts at their actual scales; a release with no
        parts is pure ε-DP (its δ must be 0).

        Raises:
            InvalidBudgetError: a release with no noise parts and δ > 0.
        """
        if not release.parts:
            if release.delta != 0:
                raise InvalidBudgetError(
                    f"an RDP stream cannot price a release of ε={release.epsilon}, "
                    f"δ={release.delta} > 0 without its noise; declare the noise parts"
                )
            return RdpCurve.from_pure_dp(release.epsilon)
        total = RdpCurve.zero()
        for part in release.parts:
            if part.noise is Noise.LAPLACE:
                total = total + RdpCurve.laplace(scale=part.scale, sensitivity=part.sensitivity)
            else:
                total = total + RdpCurve.gaussian(sigma=part.scale, sensitivity=part.sensitivity)
        return total

    def group_cost(self, cost: Cost, k: int) -> Cost:
        """Only k = 1: RDP curves compose over groups only at a loss of order (Mironov 2017,
        Prop. 11 needs α·2^c), so a group of k > 1 rows is refused.

        Raises:
            InvalidBudgetError: k < 1 or k > 1.
        """
        check_group(k)
        if k == 1:
            return cost
        raise InvalidBudgetError(
            "user-level streams with rows_per_user > 1 account (ε, δ) budgets only: group "
            "privacy for RDP curves is not supported; use rows_per_user=1 or basic accounting"
        )

    def cost_of_features(self, features: Sequence[int]) -> Cost:
        """The curve whose per-order values are ``features`` (INF_UNITS and beyond: inf)."""
        return RdpCurve(Decimal("inf") if u >= INF_UNITS else from_units(u) for u in features)

    def features_json(self, features: Sequence[int]) -> dict[str, str | list[str]]:
        return rdp_json(features)


RULE = register_rule(RdpRule())

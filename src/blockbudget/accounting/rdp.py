"""The Rényi-DP block filters: ``rdp2`` (proved) and ``rdp`` (version 1, kept for its streams).

Both keep one running sum per order α of :data:`~blockbudget.budget.ALPHAS` and admit a charge
while *some* order stays within its capacity; they differ only in the capacities
(:mod:`blockbudget.accounting.renyi_capacity` holds the proof and the arithmetic):

* ``rdp2`` — the proved filter: δ_g split over the usable orders Λ (a union bound, since which
  order survives depends on the outputs), each order's budget from Feldman & Zrnic (NeurIPS
  2021, Thm 3.1) converted by Canonne, Kamath & Steinke (NeurIPS 2020, Prop. 12).
* ``rdp`` — PrivateKube's rule (OSDI'21 §5.2, Alg. 3), ε_g − ln(1/δ_g)/(α−1) at every order
  with the whole δ_g, for which no proof was found. Its blocks keep working, but no capacity
  grows: each order admits at most min(the version-1 capacity, the proved one), so whatever
  it admits from now on is covered by the theorem; a block whose history already exceeds the
  proved capacities at every order admits nothing more, is reported by ``audit verify`` and
  retires at the next sweep.

Mechanisms are priced by their own curves at the noise actually used: Laplace (Mironov 2017,
Prop. 6), Gaussian (Prop. 7), an exponential-mechanism selection by its bounded-range curve
min(ε, α·ε²/8) (Cesar & Rogers 2021, Lemma 3.2), summed per order (Prop. 1); a pure ε-DP
mechanism by its pure-DP curve.

Example:
    >>> from decimal import Decimal
    >>> from blockbudget.accounting.rule import NoisePart, Noise, Release, get_rule
    >>> cost = get_rule("rdp2").price(
    ...     Release(epsilon=Decimal(1), parts=(NoisePart(Noise.GAUSSIAN, 2.0, 1.0),)))
    >>> round(float(cost.epsilons[2]), 9)  # α = 2: α·Δ²/(2σ²) = 0.25, bumped up by 1e-12
    0.25
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal

from blockbudget.accounting.filters import Filter, Vector, rdp_json
from blockbudget.accounting.renyi_capacity import mironov_capacities, proved_capacities
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
    units_up,
)
from blockbudget.errors import InvalidBudgetError


class RdpFilter(Filter):
    """The version-1 Rényi filter (``rdp``) over :data:`ALPHAS`, capped at the proved capacities.

    Capacity per order: min(ε_g − ln(1/δ_g)/(α−1), the ``rdp2`` capacity) in units, rounded
    down; an order whose capacity is negative admits nothing. A block stays valid while *some*
    order's summed RDP is within its capacity. Features: per-order RDP, rounded up. A pure
    (ε, 0) budget is converted with :meth:`RdpCurve.from_pure_dp`; (ε, δ>0) budgets are refused.

    Attributes:
        order_capacity: the capacity per order, in units.
        legacy_capacity: the version-1 capacities, which the audit replay reads history by
            (:meth:`fits_before_proof`).
    """

    accounting = Accounting.RDP
    dims = len(ALPHAS)

    def __init__(self, *, capacity: Budget) -> None:
        super().__init__(capacity=capacity)
        self.legacy_capacity: Vector = mironov_capacities(capacity)
        proved = proved_capacities(capacity)
        self.order_capacity: Vector = tuple(
            min(a, b) for a, b in zip(self.legacy_capacity, proved, strict=True)
        )

    def fits_before_proof(self, used: Sequence[int]) -> bool:
        """Whether ``used`` fits the version-1 capacities (what this rule admitted before it
        was capped at the proved ones): the audit replay reports such history as over the
        proved bound rather than as an overspend."""
        return any(u <= c for u, c in zip(used, self.legacy_capacity, strict=True))

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


class RdpRule(AccountingRule):
    """Rényi-DP accounting over the order grid, version 1 (PrivateKube OSDI'21 §5.2), capped
    at the proved capacities of ``rdp2``; kept so that its streams keep their meaning."""

    name = "rdp"
    title = (
        "Rényi filter, version 1 (PrivateKube §5.2; superseded by rdp2): some order α keeps "
        "Σε(α) ≤ min(ε_g − log(1/δ_g)/(α−1), the rdp2 capacity) per block"
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
            elif part.noise is Noise.EXPONENTIAL:
                # one selection is (Δ/b)-bounded-range: ε²/8-zCDP (Cesar & Rogers 2021, Lemma 3.2)
                total = total + RdpCurve.bounded_range(part.pure_epsilon())
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

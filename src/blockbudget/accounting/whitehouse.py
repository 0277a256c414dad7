"""The advanced-composition privacy filter of Whitehouse, Ramdas, Rogers & Wu (ICML 2023).

Whitehouse, Ramdas, Rogers & Wu, "Fully-Adaptive Composition in Differential Privacy", ICML 2023
(PMLR 202, https://arxiv.org/abs/2203.05481), Theorem 2 of the ICML version (the
advanced-composition filter, §3 of arXiv v3): let each A_n be (ε_n, δ_n)-DP conditioned on the
earlier outputs, with (ε_n, δ_n) chosen from them; fix a target ε > 0 and δ = δ' + δ'' with
δ' > 0. Stop before the first n at which

    ε < sqrt( 2 log(1/δ') Σ_{m≤n} ε_m² ) + ½ Σ_{m≤n} ε_m²    or    δ'' < Σ_{m≤n} δ_m .

The stopped interaction is (ε, δ)-DP. This is the advanced composition bound with its constants
(the ε-part is the zCDP conversion ρ + 2√(ρ log(1/δ')) at ρ = Σε_m²/2, Bun & Steinke 2016,
Prop. 1.3 and 1.4), where Rogers, Roth, Ullman & Vadhan 2016 (Thm 5.1, our StrongFilter) pay a
constant 28.04 and a larger log: at (1, 1e-6) the first charge may be ε ≤ 0.18255 here and
≈ 0.12 there, and 33,323 charges of 0.001 fit where StrongFilter fits 14,751.

Exact form. The ε-condition depends on Σε_m² only and its left side grows with it, so with
L = log(1/δ') it holds iff u = √(Σε_m²) satisfies u²/2 + √(2L)·u ≤ ε, i.e. (positive root)

    Σ ε_m²  ≤  S(ε, δ') = 2(√(L + ε) − √L)² = 2ε² / (√(L + ε) + √L)² .

The filter stores Σε_m² and Σδ_m in fixed point and compares them with S (rounded down, see
:func:`advanced_capacity_units`) and δ'' exactly: no floating point at fit time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

from blockbudget.accounting.basic import BudgetRule
from blockbudget.accounting.filters import Filter, Vector
from blockbudget.accounting.rule import Accounting, Combine, register_rule
from blockbudget.budget import (
    INF_UNITS,
    UNIT,
    Budget,
    Cost,
    canonical_decimal,
    from_units,
    units_down,
    units_up,
)
from blockbudget.errors import InvalidBudgetError


def advanced_capacity_units(epsilon: Decimal, slack_delta: Decimal) -> int:
    """S(ε, δ') = 2ε²/(√(log(1/δ') + ε) + √log(1/δ'))² in units (1e-18), never above the exact.

    Rounding (every step moves S down): log(1/δ') is computed at 60 digits (correctly rounded,
    so within half an ulp) and raised by a relative 1e-58; each square root (correctly rounded
    half-even by :mod:`decimal`) is raised to the next representable value above; the
    denominator is rounded up and the quotient down. S decreases in log(1/δ'), so an upper
    bound on the log gives a lower bound on S.

    Args:
        epsilon: ε_g > 0.
        slack_delta: δ' in (0, 1).

    Example:
        >>> advanced_capacity_units(Decimal(1), Decimal("5e-7"))  # S = 0.0333233533903162…
        33323353390316231
    """
    if epsilon <= 0 or not (0 < slack_delta < 1):
        raise InvalidBudgetError(
            f"the advanced-composition filter needs ε_g > 0 and 0 < δ' < 1; got ε={epsilon}, "
            f"δ'={slack_delta}"
        )
    with localcontext() as ctx:
        ctx.prec = 60
        log_inv = -slack_delta.ln()  # > 0; half an ulp off at most
        ctx.rounding = ROUND_CEILING
        log_inv += log_inv.scaleb(-58)
        a = (log_inv + epsilon).sqrt().next_plus()
        b = log_inv.sqrt().next_plus()
        denominator = (a + b) * (a + b)
        ctx.rounding = ROUND_FLOOR
        return units_down(2 * epsilon * epsilon / denominator)


class WhitehouseFilter(Filter):
    """Advanced-composition filter valid under fully adaptive composition (Whitehouse, Ramdas,
    Rogers & Wu, ICML 2023, Thm 2, https://arxiv.org/abs/2203.05481).

    With slack δ' (default δ_g/2; δ' = δ_g leaves δ'' = 0, for pure charges only), a block
    accepts charges while Σε_i² ≤ S(ε_g, δ') (the exact
    form of the theorem's √(2 log(1/δ') Σε_i²) + ½Σε_i² ≤ ε_g, see the module docstring) and
    Σδ_i ≤ δ_g − δ'. Features: (ε, ε², δ), each rounded up (ε for display). Accepts (ε, δ)
    budgets only.

    Example:
        >>> f = WhitehouseFilter(capacity=Budget(epsilon=1, delta="1e-6"))
        >>> f.max_next_epsilon(f.zero())  # the first charge's cap; StrongFilter's is ≈ 0.12
        Decimal('0.182546852589455047')
    """

    accounting = Accounting.declare("whitehouse")
    dims = 3

    def __init__(self, *, capacity: Budget, slack_delta: float | str | None = None) -> None:
        super().__init__(capacity=capacity)
        if capacity.epsilon <= 0 or capacity.delta <= 0:
            raise InvalidBudgetError(
                f"the advanced-composition filter needs ε_g > 0 and δ_g > 0; got {capacity}"
            )
        with localcontext() as ctx:  # δ'' = δ_g − δ' rounded down; δ' is the value L uses
            ctx.prec = 400
            ctx.rounding = ROUND_FLOOR
            slack = capacity.delta / 2 if slack_delta is None else Decimal(str(slack_delta))
            if not (0 < slack <= capacity.delta):  # the theorem needs δ' > 0; δ'' may be 0
                raise InvalidBudgetError(f"slack δ' must be in (0, δ_g], got {slack_delta!r}")
            self._delta_cap = units_down(capacity.delta - slack)
        self.slack_delta = slack
        self._sq_cap = advanced_capacity_units(capacity.epsilon, slack)

    def features(self, cost: Cost) -> Vector:
        if not isinstance(cost, Budget):
            raise InvalidBudgetError(
                "the advanced-composition filter accounts (ε, δ) budgets; convert an RDP curve "
                "first with RdpCurve.to_dp(delta=...)"
            )
        eps = cost.epsilon
        with localcontext() as ctx:  # ε has < 200 digits: ε² is exact at 400
            ctx.prec = 400
            ctx.rounding = ROUND_CEILING
            sq = eps * eps
        return (units_up(eps), units_up(sq), units_up(cost.delta))

    def fits(self, used: Sequence[int]) -> bool:
        return used[1] <= self._sq_cap and used[2] <= self._delta_cap

    def remaining_fraction(self, used: Sequence[int]) -> float:
        parts = [
            max(0.0, (cap - u) / cap)
            for cap, u in ((self._sq_cap, used[1]), (self._delta_cap, used[2]))
            if cap > 0
        ]
        return min(parts) if parts else 0.0

    def max_next_epsilon(self, used: Sequence[int]) -> Decimal:
        """The largest ε of one more pure charge that fits, exactly to a unit (1e-18): the
        largest x with ⌈x²⌉ ≤ S − Σε_i² in units."""
        left = self._sq_cap - used[1]
        if left < 0 or used[2] > self._delta_cap:
            return Decimal(0)
        return from_units(math.isqrt(int(left * UNIT)))

    def describe_remaining(self, used: Sequence[int]) -> str:
        left_delta = from_units(max(0, self._delta_cap - used[2]))
        eps = self.max_next_epsilon(used)
        return f"next charge up to ε={float(eps):.6g}, δ≤{float(left_delta):.3g}"

    def shortfall(self, used: Sequence[int], candidate: Sequence[int]) -> str:
        over = max(0, candidate[0] - units_up(self.max_next_epsilon(used)))
        over_delta = max(0, used[2] + candidate[2] - self._delta_cap)
        return f"ε {float(from_units(over)):.6g}, δ {float(from_units(over_delta)):.3g}"

    def capacity_units(self) -> Vector:
        """Per-feature capacity: the ε column is display only (unbounded); Σε² ≤ S, Σδ ≤ δ''.
        The filter is linear: fits iff every feature is within its capacity."""
        return (INF_UNITS, self._sq_cap, self._delta_cap)

    def share(self, fraction: float) -> Cost:
        """ε = √(fraction·S), δ = fraction·δ'': ``fraction`` of each capped feature."""
        eps = math.sqrt(self._sq_cap / UNIT * fraction) * (1 - 1e-12)
        return Budget(epsilon=eps, delta=self._delta_cap / UNIT * fraction)

    def describe(self) -> str:
        return f"advanced composition filter (Whitehouse et al. 2023) with capacity {self.capacity}"

    def remaining_json(self, used: Sequence[int]) -> dict[str, str | list[str]]:
        left_delta = max(0, self._delta_cap - used[2])
        return {
            "epsilon": _exact(units_up(self.max_next_epsilon(used))),
            "delta": _exact(left_delta),
        }

    def shortfall_json(
        self, used: Sequence[int], candidate: Sequence[int]
    ) -> dict[str, str | list[str]]:
        over = max(0, candidate[0] - units_up(self.max_next_epsilon(used)))
        over_delta = max(0, used[2] + candidate[2] - self._delta_cap)
        return {"epsilon": _exact(over), "delta": _exact(over_delta)}


def _exact(units: int) -> str:
    return "inf" if units >= INF_UNITS else canonical_decimal(from_units(units))


class WhitehouseRule(BudgetRule):
    """Advanced composition as a filter (Whitehouse et al., ICML 2023, Thm 2)."""

    name = "whitehouse"
    title = (
        "advanced-composition filter (Whitehouse, Ramdas, Rogers & Wu, ICML 2023, Thm 2, "
        "https://arxiv.org/abs/2203.05481): Σε² ≤ 2ε_g²/(√(L+ε_g)+√L)², L = log(1/δ'), "
        "and Σδ ≤ δ_g − δ'"
    )
    combine = Combine.ALL
    takes_slack = True

    def make(self, *, capacity: Budget, slack_delta: float | None) -> Filter:
        return WhitehouseFilter(capacity=capacity, slack_delta=slack_delta)


RULE = register_rule(WhitehouseRule())

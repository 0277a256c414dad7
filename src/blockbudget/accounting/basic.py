"""Sage basic block composition: the (ε, δ) rule that sums.

Seed ``004_2b5d216070ae2ded.txt`` (Sage), §4.3, Theorem 4.3 (proof §A.2): a block stays
(ε_g, δ_g)-DP under adaptively chosen charges while Σε_i ≤ ε_g and Σδ_i ≤ δ_g over the charges
that read it. Group privacy (:func:`dp_group_cost`): Dwork & Roth 2014, Thm 2.2; Vadhan 2017,
Lemma 2.2 for δ > 0.

Example:
    >>> from blockbudget.accounting.rule import get_rule
    >>> f = get_rule("basic").filter(capacity=Budget(epsilon=1))
    >>> f.fits(f.features(Budget(epsilon="0.4")) ), f.capacity_units()
    (True, (1000000000000000000, 0))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, localcontext

from blockbudget.accounting.filters import Filter, Vector
from blockbudget.accounting.rule import (
    Accounting,
    AccountingRule,
    Combine,
    Release,
    check_group,
    register_rule,
)
from blockbudget.budget import Budget, Cost, from_units, units_down, units_up
from blockbudget.errors import InvalidBudgetError


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

    def capacity_units(self) -> Vector:
        return self._cap

    def shortfall(self, used: Sequence[int], candidate: Sequence[int]) -> str:
        over_e = used[0] + candidate[0] - self._cap[0]
        over_d = used[1] + candidate[1] - self._cap[1]
        return str(Budget(epsilon=from_units(max(0, over_e)), delta=from_units(max(0, over_d))))


class BudgetRule(AccountingRule):
    """What every (ε, δ) rule shares: it charges the requested (ε, δ) of a release as is, and
    group privacy multiplies it (:func:`dp_group_cost`)."""

    cost_kind = Budget

    def price(self, release: Release) -> Cost:
        return release.budget

    def group_cost(self, cost: Cost, k: int) -> Cost:
        return dp_group_cost(self.check_cost(cost), k)


class BasicRule(BudgetRule):
    """Sage basic composition (seed 004, §4.3, Theorem 4.3): Σε ≤ ε_g and Σδ ≤ δ_g per block."""

    name = "basic"
    title = "basic composition (Sage §4.3, Thm 4.3): Σε ≤ ε_g and Σδ ≤ δ_g per block"
    combine = Combine.ALL

    def make(self, *, capacity: Budget, slack_delta: float | None) -> Filter:
        return BasicFilter(capacity=capacity)


def dp_group_cost(cost: Cost, k: int) -> Budget:
    """The (ε, δ) cost for a group of ``k`` rows of a mechanism that is ``cost`` per row.

    (ε, δ)-DP for one row is (kε, k·e^{(k−1)ε}·δ)-DP for k rows (Dwork & Roth 2014, Thm 2.2;
    Vadhan 2017, Lemma 2.2 for δ > 0). ε is multiplied exactly, δ rounded up.

    Raises:
        InvalidBudgetError: k < 1, a cost that is not a Budget, or a group δ that reaches 1.

    Example:
        >>> dp_group_cost(Budget(epsilon="0.1"), 3)
        Budget(epsilon='0.3', delta='0')
    """
    check_group(k)
    if not isinstance(cost, Budget):
        raise InvalidBudgetError(
            f"group privacy is computed here for (ε, δ) budgets, not for costs of kind {cost.kind}"
        )
    if k == 1:
        return cost
    with localcontext() as ctx:  # exact product, rounded up if it ever needed rounding
        ctx.prec = 200
        ctx.rounding = ROUND_CEILING
        eps = cost.epsilon * k
    if cost.delta == 0:
        return Budget(epsilon=eps, delta=0)
    # log of k·e^{(k−1)ε}·δ, compared in log space so that nothing overflows.
    log_delta = math.log(k) + (k - 1) * float(cost.epsilon) + math.log(float(cost.delta))
    if log_delta >= -1e-12:
        raise InvalidBudgetError(
            f"the group-privacy cost of {cost} for {k} rows per user has δ ≥ 1; "
            "lower δ or rows_per_user"
        )
    delta = math.nextafter(math.exp(log_delta) * (1 + 1e-12), math.inf)  # float: round up
    return Budget(epsilon=eps, delta=min(delta, math.nextafter(1.0, 0.0)))


RULE = register_rule(BasicRule())

"""Strong adaptive block composition (seed 004, §A.3, Theorem A.2; Rogers, Roth, Ullman &
Vadhan 2016, Theorem 5.1): the only non-linear rule, so the scheduler pool asks the filter.

Example:
    >>> from blockbudget.accounting.rule import get_rule
    >>> f = get_rule("strong").filter(capacity=Budget(epsilon=1, delta="1e-6"))
    >>> round(f.max_next_epsilon(f.zero()), 4), f.capacity_units() is None
    (0.1214, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, localcontext

from blockbudget.accounting.basic import BudgetRule
from blockbudget.accounting.filters import FLOAT_MARGIN, Filter, Vector, add_vectors, exact_units
from blockbudget.accounting.rule import Accounting, Combine, register_rule
from blockbudget.budget import INF_UNITS, UNIT, Budget, Cost, from_units, units_down, units_up
from blockbudget.decimals import shortest_decimal
from blockbudget.errors import InvalidBudgetError


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
            self._delta_cap = units_down(capacity.delta - shortest_decimal(slack))
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
        return {
            "epsilon": exact_units(self._next_epsilon_units(used)),
            "delta": exact_units(left_delta),
        }

    def shortfall_json(
        self, used: Sequence[int], candidate: Sequence[int]
    ) -> dict[str, str | list[str]]:
        over_delta = max(0, used[3] + candidate[3] - self._delta_cap)
        over_eps = max(0, candidate[0] - self._next_epsilon_units(used))
        return {"epsilon": exact_units(over_eps), "delta": exact_units(over_delta)}


class StrongRule(BudgetRule):
    """Strong composition with slack δ̃ (seed 004, §A.3, Theorem A.2)."""

    name = "strong"
    title = (
        "strong composition (Sage §A.3, Thm A.2; Rogers et al. 2016, Thm 5.1); superseded by "
        "whitehouse, which admits more in every measured case (docs/accounting.md)"
    )
    combine = Combine.FILTER
    takes_slack = True

    def make(self, *, capacity: Budget, slack_delta: float | None) -> Filter:
        return StrongFilter(capacity=capacity, slack_delta=slack_delta)


RULE = register_rule(StrongRule())

"""An in-memory budget source for simulations: a metered, capped stand-in for a Grant.

Real pipelines draw on a platform :class:`~blockbudget.grant.Grant`, whose every draw is a
durable ledger charge. Simulations of thousands of validations (the validator guarantees, the
Tab. 2 experiment) need the same :class:`~blockbudget.mechanisms.BudgetSource` contract without a
database: :class:`MeteredSource` records each draw, sums it exactly, and refuses a draw that would
exceed its cap, exactly as a grant refuses one beyond its reservation. It guards no real data.
"""

from __future__ import annotations

from blockbudget.accounting import Accounting
from blockbudget.budget import Cost
from blockbudget.errors import InvalidBudgetError, InvalidRequestError, ReservationError


class MeteredSource:
    """A BudgetSource that meters draws in memory, optionally up to a cap.

    Args:
        accounting: the rule whose cost kind it takes (its ``cost_kind``: a Budget under the
            (ε, δ) rules, an RdpCurve under RDP, ...).
        cap: the most it lets be drawn in total (None: unlimited), of the rule's cost kind
            (compared per component: ε and δ, or per order).

    Raises:
        InvalidRequestError: a cap of the wrong kind for the accounting rule.
    """

    def __init__(self, accounting: Accounting = Accounting.BASIC, *, cap: Cost | None = None):
        if not isinstance(accounting, Accounting):
            raise InvalidRequestError(f"accounting must be an Accounting, got {accounting!r}")
        rule = accounting.rule
        want = rule.cost_kind
        if cap is not None and not isinstance(cap, want):
            raise InvalidRequestError(
                f"a {accounting.value} source needs a {want.__name__} cap, got {cap!r}"
            )
        self._accounting = accounting
        self.cap = cap
        self.draws: list[tuple[str, Cost]] = []
        self.spent: Cost = rule.pure(0)

    @property
    def accounting(self) -> Accounting:
        """The accounting rule."""
        return self._accounting

    def draw(self, cost: Cost, *, label: str) -> None:
        """Record ``cost``; refuse (nothing recorded) when it would pass the cap.

        A pure budget drawn from a source whose rule charges another kind counts as that
        rule's price of a pure ε-DP mechanism (e.g. its RDP curve).

        Raises:
            InvalidRequestError: a cost of the wrong kind.
            ReservationError: the draw would exceed the cap.
        """
        if type(cost) is not type(self.spent):
            try:
                cost = self._accounting.rule.own_kind(cost)
            except InvalidBudgetError:
                raise InvalidRequestError(
                    f"a {self._accounting.value} source takes {type(self.spent).__name__} "
                    f"costs, got {type(cost).__name__}"
                ) from None
        total: Cost = self.spent + cost
        if self.cap is not None and not total <= self.cap:
            raise ReservationError(
                f"draw {label!r} of {cost} exceeds the source's cap {self.cap}: "
                f"already spent {self.spent}"
            )
        self.spent = total
        self.draws.append((label, cost))

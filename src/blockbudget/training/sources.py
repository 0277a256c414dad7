"""An in-memory budget source for simulations: a metered, capped stand-in for a Grant.

Real pipelines draw on a platform :class:`~blockbudget.grant.Grant`, whose every draw is a
durable ledger charge. Simulations of thousands of validations (the validator guarantees, the
Tab. 2 experiment) need the same :class:`~blockbudget.mechanisms.BudgetSource` contract without a
database: :class:`MeteredSource` records each draw, sums it exactly, and refuses a draw that would
exceed its cap, exactly as a grant refuses one beyond its reservation. It guards no real data.
"""

from __future__ import annotations

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.errors import InvalidRequestError, ReservationError


class MeteredSource:
    """A BudgetSource that meters draws in memory, optionally up to a cap.

    Args:
        accounting: the rule whose cost kind it takes (BASIC/STRONG: Budget; RDP: RdpCurve).
        cap: the most it lets be drawn in total (None: unlimited); a Budget for BASIC/STRONG,
            an RdpCurve for RDP.

    Raises:
        InvalidRequestError: a cap of the wrong kind for the accounting rule.
    """

    def __init__(self, accounting: Accounting = Accounting.BASIC, *, cap: Cost | None = None):
        if not isinstance(accounting, Accounting):
            raise InvalidRequestError(f"accounting must be an Accounting, got {accounting!r}")
        want = RdpCurve if accounting is Accounting.RDP else Budget
        if cap is not None and not isinstance(cap, want):
            raise InvalidRequestError(
                f"a {accounting.value} source needs a {want.__name__} cap, got {cap!r}"
            )
        self._accounting = accounting
        self.cap = cap
        self.draws: list[tuple[str, Cost]] = []
        self.spent: Cost = want.zero()

    @property
    def accounting(self) -> Accounting:
        """The accounting rule."""
        return self._accounting

    def draw(self, cost: Cost, *, label: str) -> None:
        """Record ``cost``; refuse (nothing recorded) when it would pass the cap.

        Raises:
            InvalidRequestError: a cost of the wrong kind.
            ReservationError: the draw would exceed the cap.
        """
        if isinstance(self.spent, RdpCurve) and isinstance(cost, Budget):
            cost = RdpCurve.from_pure_dp(cost.epsilon)
        if type(cost) is not type(self.spent):
            raise InvalidRequestError(
                f"a {self._accounting.value} source takes {type(self.spent).__name__} costs, "
                f"got {type(cost).__name__}"
            )
        total: Cost
        over: bool
        if isinstance(self.spent, RdpCurve) and isinstance(cost, RdpCurve):
            total = self.spent + cost
            over = isinstance(self.cap, RdpCurve) and not total <= self.cap
        elif isinstance(self.spent, Budget) and isinstance(cost, Budget):
            total = self.spent + cost
            over = isinstance(self.cap, Budget) and not total <= self.cap
        else:  # pragma: no cover - excluded by the kind check above
            raise InvalidRequestError("mixed cost kinds")
        if over:
            raise ReservationError(
                f"draw {label!r} of {cost} exceeds the source's cap {self.cap}: "
                f"already spent {self.spent}"
            )
        self.spent = total
        self.draws.append((label, cost))

"""The DPI stream's privacy accountant: Thm 5.1's sum, checked before every slot.

Seed ``002_e6d4c77f2abb3a16.txt`` §5.1, Thm 5.1: DPI's loss after t slots is the sum of the per-slot
costs. :class:`StreamAccountant` keeps that sum in exact fixed-point units of 10⁻¹⁸ (the ledger's
units, :mod:`blockbudget.budget`): each cost is rounded *up* to a unit, the capacity ε is rounded
*down*, so the integer comparison can only refuse too early, never
too late. A slot whose cost would take the sum past ε is refused before anything is sampled
(nothing is charged), so the total never exceeds ε, for any number of slots.

:func:`charge_stream_total` is the path to the platform's ledger: a DPI stream's *whole* user-level
budget ε is drawn from a :class:`~blockbudget.grant.Grant` (so ``Ledger.charge`` records it,
durably,
before the first slot samples anything); the local accountant then caps the slots at that ε.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from blockbudget.budget import (
    Cost,
    from_units,
    to_decimal,
    units_down,
    units_up,
)
from blockbudget.decimals import plain_number, shortest_decimal
from blockbudget.errors import BudgetExceededError, InvalidRequestError

if TYPE_CHECKING:
    from blockbudget.grant import Grant


class StreamAccountant:
    """Exact running sum of a stream's per-slot ε (pure DP, basic composition).

    Args:
        epsilon: the stream's total user-level budget ε (> 0).
        name: a label for error messages (the stream's name).
    """

    def __init__(self, *, epsilon: float | Decimal | str, name: str = "dpi") -> None:
        target = to_decimal(epsilon, name="epsilon")
        if not target.is_finite() or target <= 0:
            raise InvalidRequestError(f"a DPI stream needs a finite epsilon > 0, got {epsilon!r}")
        self.name = name
        self.target = target
        self._capacity = units_down(target)
        self._spent = 0
        self._slots = 0
        self._refused = 0

    @staticmethod
    def units(cost: float) -> int:
        """A float cost as ledger units, rounded up (the float read as its shortest decimal, the
        project's convention; the mechanism's own noise scale is nudged up so that what it spends
        never exceeds that value — see :func:`~blockbudget.streaming.selection.scale_for`)."""
        if not cost >= 0.0 or cost == float("inf"):
            raise InvalidRequestError(f"a slot cost must be finite and >= 0, got {cost!r}")
        if cost == 0.0:
            return 0
        return max(1, units_up(shortest_decimal(cost)))

    def can_afford(self, cost: float) -> bool:
        """Whether a slot of this cost fits in what remains."""
        return self._spent + self.units(cost) <= self._capacity

    def charge(self, cost: float) -> None:
        """Add one slot's cost to the sum, or refuse it (nothing charged).

        Raises:
            BudgetExceededError: the slot would take the total past ε.
        """
        units = self.units(cost)
        if self._spent + units > self._capacity:
            self._refused += 1
            raise BudgetExceededError(
                blocks=[self.name],
                requested=f"epsilon={from_units(units)}",
                remaining=[f"epsilon={self.remaining}"],
                difference=[str(from_units(self._spent + units - self._capacity))],
                context="dpi-stream",
                rule="DPI Thm 5.1 (sum of per-slot costs <= epsilon)",
            )
        self._spent += units
        self._slots += 1

    def try_charge(self, cost: float) -> bool:
        """:meth:`charge` that answers False instead of raising."""
        try:
            self.charge(cost)
        except BudgetExceededError:
            return False
        return True

    def restore(self, spent_units: int) -> None:
        """Resume a fresh accountant at a total saved earlier (:attr:`spent_units`).

        Raises:
            InvalidRequestError: this accountant already charged, or the total is not an int in
                ``[0, capacity]``.
        """
        if self._spent or self._slots:
            raise InvalidRequestError("only a fresh accountant can be restored")
        spent_units = plain_number(spent_units)
        if isinstance(spent_units, bool) or not isinstance(spent_units, int):
            raise InvalidRequestError(f"spent_units must be an int, got {spent_units!r}")
        if not 0 <= spent_units <= self._capacity:
            raise InvalidRequestError(
                f"a saved total must lie in [0, {self._capacity}] units, got {spent_units}"
            )
        self._spent = spent_units

    @property
    def spent(self) -> Decimal:
        """The exact total charged (≥ the true total of the charged floats)."""
        return from_units(self._spent)

    @property
    def remaining(self) -> Decimal:
        """ε minus what was charged (rounded down)."""
        return from_units(self._capacity - self._spent)

    @property
    def spent_units(self) -> int:
        """:attr:`spent` in 10⁻¹⁸ units."""
        return self._spent

    @property
    def capacity_units(self) -> int:
        """ε in 10⁻¹⁸ units, rounded down."""
        return self._capacity

    @property
    def slots(self) -> int:
        """Slots charged so far."""
        return self._slots

    @property
    def refused(self) -> int:
        """Slots refused so far."""
        return self._refused


def charge_stream_total(grant: Grant, *, epsilon: float, stream: str) -> StreamAccountant:
    """Charge a DPI stream's total budget ε to the platform ledger through ``grant`` and return
    the accountant that caps its slots at that ε.

    The whole ε is drawn up front (conservative: it is the bound on the stream's loss over all its
    slots, and charging it first means no slot can ever run on budget the ledger did not record).
    The charge is the stream's rule's price of an ε-DP mechanism
    (:meth:`~blockbudget.accounting.rule.AccountingRule.pure`): ``Budget(ε)`` under an (ε, δ)
    rule, on an RDP stream the curve of an ε-DP mechanism (min(ε, αε²/2) at every order).

    Raises:
        ReservationError / BudgetExceededError: the grant cannot pay ε (nothing is charged).
    """
    accountant = StreamAccountant(epsilon=epsilon, name=stream)
    cost: Cost = grant.accounting.rule.pure(accountant.target)
    grant.draw(cost, label=f"dpi stream {stream!r}: total user-level epsilon")
    return accountant

"""Splitting a grant's budget over the iterations of an iterative DP algorithm.

Source: seed ``003_a7fa9cb9080a05af.txt``, §4.1 (Theorem 4) and Theorem 2.

An iterative algorithm (k-means, boosting, a stream of time slots) spends ε in rounds. A
:class:`SplitSource` wraps any :class:`~blockbudget.mechanisms.BudgetSource` — in the platform a
:class:`~blockbudget.grant.Grant` — together with a :class:`~blockbudget.series.BudgetSequence`:
:meth:`SplitSource.next_iteration` (or iterating :meth:`SplitSource.iterations`) moves to
iteration i and returns ε_i; the mechanisms of that iteration draw on the SplitSource, which
forwards every draw to the grant (so each one is a durable ledger charge *before* noise, as
always) after checking that the iteration's draws stay within ε_i.

Seed 003 Theorem 4 and sequential composition (its Theorem 2): the iterations' draws total at
most Σ ε_i ≤ ε, so reserving ε on the grant covers the whole run; the grant and the ledger, not
this wrapper, enforce the privacy guarantee — the wrapper enforces the *allocation*.

Per-iteration cap: for BASIC/STRONG streams the draws' ε within iteration i must total at most
ε_i (exact decimals; δ is not split and passes through). Under a rule with another cost kind
(RDP, GDP, ...) the drawn costs of an iteration must stay below the rule's cost of a generic
ε_i-DP mechanism (:meth:`~blockbudget.accounting.AccountingRule.pure`, e.g.
:meth:`~blockbudget.budget.RdpCurve.from_pure_dp` (ε_i)), up to a relative 1e-9 that absorbs
the upward rounding of computed costs (the ledger still charges the exact costs). Budget left
unspent in an iteration is not carried forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal, localcontext

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Cost, Number
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidBudgetError, InvalidRequestError, ReservationError
from blockbudget.mechanisms.source import BudgetSource, source_accounting
from blockbudget.series._exact import CEIL, FLOOR, grid_floor
from blockbudget.series.plan import Strategy, parse_strategy
from blockbudget.series.sequence import BudgetSequence

#: Relative tolerance of the RDP per-iteration cap (see the module docstring).
RDP_CAP_TOLERANCE = Decimal("1e-9")


class SplitSource:
    """A BudgetSource that hands iteration i its budget ε_i from a sequence.

    Example::

        plan = parse_strategy("Flip-Geo").build(10, epsilon=0.3)
        with platform.request("points", blocks=last(7), budget=Budget(epsilon=0.3),
                              context="analytics") as grant:
            split = SplitSource(grant, plan)
            for eps_i in split.iterations():
                dp_count(split, grant.frame(), epsilon=eps_i)

    Args:
        source: where the budget is charged (a Grant in the platform).
        sequence: the budgets ε_1, ε_2, … (finite or infinite).
        label: prefix of the charge labels (``"<label> i/n: <mechanism label>"``).

    Raises:
        InvalidRequestError: if ``source`` is not a BudgetSource or ``sequence`` not a sequence.
    """

    def __init__(self, source: BudgetSource, sequence: BudgetSequence, *, label: str = "iteration"):
        self._accounting = source_accounting(source)
        if not isinstance(label, str):
            raise InvalidRequestError(f"label must be a string, got {label!r}")
        if not isinstance(sequence, BudgetSequence):
            raise InvalidRequestError(
                f"sequence must be a BudgetSequence, got {type(sequence).__name__}"
            )
        self.source = source
        self.sequence = sequence
        self.label = label
        self._index = 0
        self._epsilon = Decimal(0)
        self._spent_eps = Decimal(0)
        self._spent_cost: Cost | None = None
        self.history: list[tuple[int, Decimal, str, Cost]] = []

    @classmethod
    def named(
        cls,
        source: BudgetSource,
        strategy: str | Strategy,
        n: int,
        *,
        epsilon: Number,
        noise_bound: Number | None = None,
        label: str = "iteration",
    ) -> SplitSource:
        """Split ε over n iterations by a named strategy, e.g. ``"AC-Flip-Geo"``.

        Args:
            source: the grant (reserve at least ε on it).
            strategy: a :class:`~blockbudget.series.plan.Strategy` or a name for
                :func:`~blockbudget.series.plan.parse_strategy`.
            n: the number of iterations.
            epsilon: the total ε to split.
            noise_bound: U_s for an "AC-" name.
            label: prefix of the charge labels.
        """
        recipe = (
            strategy
            if isinstance(strategy, Strategy)
            else parse_strategy(strategy, noise_bound=noise_bound)
        )
        return cls(source, recipe.build(n, epsilon=epsilon), label=label)

    # --- iterations ----------------------------------------------------------------------------

    @property
    def index(self) -> int:
        """The current iteration (1-based; 0 before the first)."""
        return self._index

    @property
    def epsilon(self) -> Decimal:
        """ε_i of the current iteration (0 before the first)."""
        return self._epsilon

    @property
    def remaining(self) -> Decimal:
        """What the current iteration may still draw (ε; BASIC/STRONG bookkeeping)."""
        with localcontext(FLOOR):
            return self._epsilon - self._spent_eps

    def shares(self, parts: int) -> tuple[Decimal, ...]:
        """The current ε_i cut into ``parts`` equal shares on the 10**-18 grid (rounded down).

        Draw with these rather than ε_i/2 etc.: the ledger rounds an off-grid charge *up* to
        its 10**-18 unit, so two off-grid halves could together cost one unit more than ε_i.

        Raises:
            InvalidRequestError: if ``parts`` < 1 or before the first iteration.
        """
        parts = plain_number(parts)
        if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
            raise InvalidRequestError(f"parts must be a positive integer, got {parts!r}")
        if self._index == 0:
            raise InvalidRequestError("call next_iteration() before asking for shares")
        share = grid_floor(FLOOR.divide(self._epsilon, parts))
        return (share,) * parts

    def has_next(self) -> bool:
        """Whether the sequence has another term."""
        n = self.sequence.length
        return n is None or self._index < n

    def next_iteration(self) -> Decimal:
        """Move to the next iteration and return its budget ε_i.

        Raises:
            InvalidRequestError: when a finite sequence has no more terms.
        """
        if not self.has_next():
            raise InvalidRequestError(
                f"the budget sequence {self.sequence.name!r} has only {self.sequence.length} "
                "terms; no budget is left for another iteration"
            )
        self._index += 1
        self._epsilon = self.sequence.term(self._index)
        self._spent_eps = Decimal(0)
        self._spent_cost = None
        return self._epsilon

    def iterations(self, limit: int | None = None) -> Iterator[Decimal]:
        """Yield ε_i for each remaining iteration (at most ``limit`` of them)."""
        count = 0
        while self.has_next() and (limit is None or count < limit):
            yield self.next_iteration()
            count += 1

    # --- the BudgetSource contract -------------------------------------------------------------

    @property
    def accounting(self) -> Accounting:
        """The wrapped source's accounting rule."""
        return self._accounting

    def draw(self, cost: Cost, *, label: str) -> None:
        """Charge ``cost`` to the wrapped source if it fits in the current iteration's ε_i.

        Raises:
            InvalidRequestError: before the first iteration.
            ReservationError: the draw would exceed ε_i (nothing is charged).
            BudgetExceededError / ReservationError: from the wrapped source.
        """
        if self._index == 0:
            raise InvalidRequestError("call next_iteration() before drawing from a SplitSource")
        where = f"{self.label} {self._index}"
        if self.sequence.length is not None:
            where += f"/{self.sequence.length}"
        rule = self._accounting.rule
        if isinstance(cost, Budget) and rule.cost_kind is Budget:
            # (ε, δ) semantics, not a kind switch: ε_i caps the draws' ε and δ is not split
            with localcontext(CEIL):  # a sum rounded up never lets a draw pass ε_i
                after_eps = self._spent_eps + cost.epsilon
            if after_eps > self._epsilon:
                raise ReservationError(
                    f"{where}: draw {label!r} of epsilon {cost.epsilon} exceeds the iteration's "
                    f"budget {self._epsilon} (already drawn {self._spent_eps})"
                )
            self.source.draw(cost, label=f"{where}: {label}")
            self._spent_eps = after_eps
        else:  # one running total in the rule's own kind: a pure budget counts as its price
            try:
                mine = rule.own_kind(cost)
                after = mine if self._spent_cost is None else self._spent_cost.add_up(mine)
            except InvalidBudgetError as exc:
                raise InvalidRequestError(
                    f"cost must be a Budget or a cost of kind {rule.cost_kind.kind}, got {cost!r}"
                ) from exc
            cap = rule.pure(self._epsilon).scaled(1 + RDP_CAP_TOLERANCE)
            if not after <= cap:
                raise ReservationError(
                    f"{where}: draw {label!r} exceeds the {rule.name.upper()} curve of an "
                    f"epsilon_i = {self._epsilon} mechanism"
                )
            self.source.draw(cost, label=f"{where}: {label}")
            self._spent_cost = after
        self.history.append((self._index, self._epsilon, label, cost))

"""Random budget allocation over DPI's series (seed ``002_e6d4c77f2abb3a16.txt`` §4.4, App. D).

* :class:`RandomBudgetAllocation` — Alg. 3: draw ``S ~ Exp(Λ)`` (rate Λ, mean 1/Λ) and spend the
  unused term of the series nearest to S; that term is then used up.
* :class:`RangeBudgetAllocation` — Alg. 4: split the term indices into a large, a medium and a small
  range (three queues), pick a queue at random and spend its next term.

Each term is spent at most once, so whatever the draws, the spent total is at most the series' sum
(≤ ε). The draws are data-independent: they cost no privacy, and the accountant still checks every
slot (see :mod:`blockbudget.streaming.accountant`). The randomness is a numpy ``Generator``: from
OS entropy by default, seeded only when a test or experiment passes one (it never touches data).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError
from blockbudget.streaming.series import DPISeries, float_at_most

if TYPE_CHECKING:
    from blockbudget.series import BudgetSequence


class TermSeries(Protocol):
    """What the allocators need of a series: strictly decreasing positive terms ε_1 > ε_2 > …,
    whose sum is at most the stream's ε."""

    def term(self, t: int) -> float:
        """ε_t for t ≥ 1."""

    def index_at_most(self, value: float) -> int:
        """The smallest t with ε_t <= value."""


class SequenceTerms:
    """The positive terms of a seed-003 budget sequence (:mod:`blockbudget.series`, e.g.
    ``InfiniteBudgetSequence(epsilon, GeometricSeries(...))``), sorted into decreasing order so
    that Alg. 3 can pick by value. Each term is the sequence's own 10⁻¹⁸-grid value read as the
    largest float not above it, whose shortest decimal (what the accountant charges) is not above
    it either, so any set of distinct terms sums to at most the sequence's total.

    Args:
        sequence: a :class:`~blockbudget.series.BudgetSequence`.
        limit: how many leading terms to take from an infinite sequence (its later terms are 0 on
            the grid, or negligible).
    """

    def __init__(self, sequence: BudgetSequence, *, limit: int = 100_000) -> None:
        n = sequence.length if sequence.length is not None else limit
        values = []
        for i in range(1, n + 1):
            dec = sequence.term(i)
            if dec <= 0:
                continue
            values.append(float_at_most(dec))
        if not values:
            raise InvalidRequestError("the sequence has no positive term")
        # distinct values, decreasing (equal terms are nudged apart downwards: still <= the term)
        ordered = sorted(values, reverse=True)
        for j in range(1, len(ordered)):
            if ordered[j] >= ordered[j - 1]:
                ordered[j] = math.nextafter(ordered[j - 1], 0.0)
        self.name = getattr(sequence, "name", "")
        self._terms = ordered
        self._negated = -np.asarray(ordered)

    def __len__(self) -> int:
        return len(self._terms)

    def term(self, t: int) -> float:
        if not 1 <= t <= len(self._terms):
            return 0.0
        return self._terms[t - 1]

    def index_at_most(self, value: float) -> int:
        return int(np.searchsorted(self._negated, -value, side="left")) + 1


@dataclass(frozen=True)
class Allocation:
    """One slot's budget: the series index it took and its value ε_t."""

    index: int
    epsilon: float


class BudgetAllocator(ABC):
    """The interface every allocator follows: ``next()`` gives the next slot's term, never reusing
    one. ``used`` counts the terms handed out."""

    series: TermSeries

    @abstractmethod
    def next(self) -> Allocation:
        """The term slot t spends (removed from the available terms)."""

    @property
    @abstractmethod
    def used(self) -> int:
        """How many terms were handed out."""


class _Skip:
    """Nearest unused index ≥ i (``up``) or ≤ i (``down``) with path-compressed jump pointers."""

    def __init__(self) -> None:
        self._up: dict[int, int] = {}
        self._down: dict[int, int] = {}

    def _find(self, table: dict[int, int], i: int) -> int:
        path = []
        while i in table:
            path.append(i)
            i = table[i]
        for p in path:
            table[p] = i
        return i

    def up(self, i: int) -> int:
        return self._find(self._up, i)

    def down(self, i: int) -> int:
        """Unused index ≤ i, or 0 when none (index 0 is a sentinel, never a term)."""
        return self._find(self._down, i)

    def take(self, i: int) -> None:
        self._up[i] = i + 1
        self._down[i] = i - 1


class RandomBudgetAllocation(BudgetAllocator):
    """Alg. 3 (RBA): ``S ~ Exp(Λ)``; ``ε_t = argmin_{unused ε ∈ series} |ε − S|``.

    Args:
        series: the budget series (terms decrease in t, so the nearest term lies next to S's
            position; found by bisection, then the nearest unused neighbour on either side).
        rate: Λ (> 0). The paper uses Λ = 10⁸ ("astronomically large"): every draw is tiny and the
            budget lasts for ever but each slot spends ~1/Λ. A smaller Λ spends faster.
        rng: a numpy Generator; OS entropy when None.
    """

    def __init__(
        self,
        series: DPISeries | TermSeries,
        *,
        rate: float = 1e8,
        rng: np.random.Generator | None = None,
    ) -> None:
        rate = plain_number(rate)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)):
            raise InvalidRequestError(f"rate must be a number, got {type(rate).__name__}")
        if not math.isfinite(rate) or rate <= 0:
            raise InvalidRequestError(f"the exponential rate Lambda must be > 0, got {rate!r}")
        self.series: TermSeries = series
        self.rate = float(rate)
        self._rng = rng if rng is not None else np.random.default_rng()
        self._skip = _Skip()
        self._used = 0

    @property
    def used(self) -> int:
        return self._used

    def pick(self, sample: float) -> Allocation:
        """Spend the unused term nearest to ``sample`` (ties go to the larger index: the smaller
        term)."""
        if not sample > 0.0:
            sample = math.ulp(0.0)
        t = self.series.index_at_most(sample)  # term(t) <= sample < term(t-1)
        above = self._skip.up(t)
        if self.series.term(above) <= 0.0 and self._skip.down(t - 1) < 1:
            raise InvalidRequestError(
                "every term of the series has been used"
            )  # smallest unused index >= t: term <= sample
        below = self._skip.down(t - 1)  # largest unused index <= t-1: term > sample (0 = none)
        term_above = self.series.term(above)
        if below >= 1 and (
            term_above <= 0.0 or self.series.term(below) - sample < sample - term_above
        ):
            chosen = below
        else:
            chosen = above
        self._skip.take(chosen)
        self._used += 1
        return Allocation(index=chosen, epsilon=self.series.term(chosen))

    def next(self) -> Allocation:
        return self.pick(float(self._rng.exponential(1.0 / self.rate)))


class RangeBudgetAllocation(BudgetAllocator):
    """Alg. 4 (App. D): three queues of term indices — large ``[1, medium_from)``, medium
    ``[medium_from, small_from)`` and small ``[small_from, ∞)`` — a uniformly chosen queue gives its
    next term; an empty queue is skipped (the while loop of Alg. 4). The small queue never empties.
    """

    def __init__(
        self,
        series: DPISeries | TermSeries,
        *,
        medium_from: int = 10,
        small_from: int = 100,
        rng: np.random.Generator | None = None,
    ) -> None:
        if not (isinstance(medium_from, int) and isinstance(small_from, int)):
            raise InvalidRequestError("range boundaries must be ints")
        if not 1 < medium_from < small_from:
            raise InvalidRequestError(
                f"need 1 < medium_from < small_from, got {medium_from} and {small_from}"
            )
        self.series: TermSeries = series
        self._next = [1, medium_from, small_from]
        self._end = [medium_from, small_from, None]
        self._rng = rng if rng is not None else np.random.default_rng()
        self._used = 0

    @property
    def used(self) -> int:
        return self._used

    def next(self) -> Allocation:
        while True:
            q = int(self._rng.integers(0, 3))
            end = self._end[q]
            if end is None or self._next[q] < end:
                index = self._next[q]
                self._next[q] += 1
                self._used += 1
                return Allocation(index=index, epsilon=self.series.term(index))

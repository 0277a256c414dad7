"""Per-block privacy filters: pure functions of a block's charge history and a candidate charge.

A filter decides whether one more adaptively chosen charge keeps a block within its global
guarantee (ε_g, δ_g). Each filter maps a cost to a vector of *additive features* in fixed point
(rounded up, see :mod:`blockbudget.budget`), so a block's whole history is summarized by one
integer vector — the ledger stores exactly that, for charges and for reservations separately —
and ``fits`` is a pure predicate on the summed vector. ``accepts(history, candidate)`` is the
history form of the same rule.

Reservations are counted as if charged. This is sound for every filter here because each
feature is a superadditive function of epsilon (ε, ε², (e^ε−1)ε/2, per-order RDP): spending a
reservation in several smaller charges never adds more than the reservation itself.

This module holds the contract (:class:`Filter`) and the helpers every filter shares. Each
filter lives in its rule's module, beside the :class:`~blockbudget.accounting.rule.AccountingRule`
that builds it (:mod:`~blockbudget.accounting.basic`, :mod:`~blockbudget.accounting.strong`,
:mod:`~blockbudget.accounting.rdp`, :mod:`~blockbudget.accounting.gdp`,
:mod:`~blockbudget.accounting.whitehouse`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from blockbudget.accounting.rule import Accounting, Combine, get_rule
from blockbudget.budget import (
    ALPHAS,
    INF_UNITS,
    Budget,
    Cost,
    canonical_decimal,
    from_units,
)
from blockbudget.errors import InvalidBudgetError

if TYPE_CHECKING:
    from blockbudget.accounting.rule import AccountingRule

Vector = tuple[int, ...]

#: Multiplicative margin applied when a filter's test needs floating-point transcendental
#: functions: the left-hand side is inflated by this factor (toward refusing).
FLOAT_MARGIN = 1.0 + 1e-9


def add_vectors(a: Sequence[int], b: Sequence[int]) -> Vector:
    """Elementwise sum of two feature vectors (exact integers)."""
    if len(a) != len(b):
        raise InvalidBudgetError(f"feature vectors of different lengths {len(a)} and {len(b)}")
    return tuple(x + y for x, y in zip(a, b, strict=True))


def sub_vectors(a: Sequence[int], b: Sequence[int]) -> Vector:
    """Elementwise difference of two feature vectors (exact integers)."""
    if len(a) != len(b):
        raise InvalidBudgetError(f"feature vectors of different lengths {len(a)} and {len(b)}")
    return tuple(x - y for x, y in zip(a, b, strict=True))


class Filter(ABC):
    """The contract every per-block filter implements.

    Attributes:
        accounting: which rule this is.
        capacity: the block's global budget (ε_g, δ_g).
        dims: the length of a feature vector.
    """

    accounting: Accounting
    dims: int

    def __init__(self, *, capacity: Budget) -> None:
        if not isinstance(capacity, Budget):
            raise InvalidBudgetError("a filter's capacity must be a Budget (ε_g, δ_g)")
        self.capacity = capacity

    def zero(self) -> Vector:
        """The feature vector of an empty history."""
        return (0,) * self.dims

    @abstractmethod
    def features(self, cost: Cost) -> Vector:
        """The additive fixed-point contribution of one charge, rounded up.

        Raises:
            InvalidBudgetError: when this filter cannot account this kind of cost.
        """

    @abstractmethod
    def fits(self, used: Sequence[int]) -> bool:
        """Whether a block whose summed features are ``used`` is within its guarantee."""

    @abstractmethod
    def remaining_fraction(self, used: Sequence[int]) -> float:
        """How much of the block is left, in [0, 1] (for display; 0 means nothing can fit)."""

    @abstractmethod
    def describe_remaining(self, used: Sequence[int]) -> str:
        """A human-readable statement of what remains."""

    @abstractmethod
    def shortfall(self, used: Sequence[int], candidate: Sequence[int]) -> str:
        """By how much ``candidate`` exceeds what remains after ``used`` (human-readable)."""

    def fits_before_proof(self, used: Sequence[int]) -> bool:
        """Whether ``used`` fits the test this rule applied before it was capped at its proved
        bound — history the audit replay reports as a note, not as an overspend. False for
        every rule that was proved from its first charge (all but ``rdp``, see
        :class:`~blockbudget.accounting.rdp.RdpFilter`)."""
        return False

    def total(self, history: Sequence[Cost]) -> Vector:
        """Summed features of a history of charges."""
        acc = self.zero()
        for cost in history:
            acc = add_vectors(acc, self.features(cost))
        return acc

    def accepts(self, history: Sequence[Cost], candidate: Cost) -> bool:
        """Whether the block still satisfies the filter after ``candidate`` joins ``history``."""
        return self.fits(add_vectors(self.total(history), self.features(candidate)))

    def fits_with(self, used: Sequence[int], candidate: Sequence[int]) -> bool:
        """Whether ``candidate`` features fit on top of ``used``."""
        return self.fits(add_vectors(used, candidate))

    def describe(self) -> str:
        return f"{self.accounting.value} composition with capacity {self.capacity}"

    @property
    def rule(self) -> AccountingRule:
        """The registered rule this filter belongs to."""
        return get_rule(self.accounting)

    @property
    def combine(self) -> Combine:
        """The shape of :meth:`fits` (what the scheduler pool's vectorised test assumes)."""
        return self.rule.combine

    def capacity_units(self) -> Vector | None:
        """The capacity per feature in fixed-point units (rounded down), for linear filters
        (:attr:`Combine.ALL` / :attr:`Combine.ANY`): a feature vector ``used`` fits iff all
        (resp. some) ``used[i] <= capacity_units()[i]``. None when the test is not linear."""
        return None

    def share(self, fraction: float) -> Cost:
        """A cost whose features are at most ``fraction`` of this filter's capacity, feature
        by feature (Sage's even split, DPF's unlocking). The default, for (ε, δ) filters, is
        (fraction·ε_g, fraction·δ_g) — which a non-linear filter may not fit whole."""
        eps, delta = self.capacity.as_floats()
        return Budget(epsilon=eps * fraction, delta=delta * fraction)

    def features_json(self, features: Sequence[int]) -> dict[str, str | list[str]]:
        """A feature vector (e.g. what a reservation holds) as exact decimal strings:
        ``{"epsilon", "delta"}`` for (ε, δ) filters, ``{"rdp": [...]}`` per order for RDP
        (the rule's :meth:`~blockbudget.accounting.rule.AccountingRule.features_json`)."""
        return self.rule.features_json(features)

    def remaining_json(self, used: Sequence[int]) -> dict[str, str | list[str]]:
        """What remains after ``used``, as exact decimal strings (the form of
        :meth:`features_json`; for strong composition the largest ε of one more pure charge,
        see :func:`blockbudget.accounting.afford.largest_epsilon`)."""
        return self.features_json(
            tuple(max(0, c - u) for c, u in zip(self._capacity_or_fail(), used, strict=True))
        )

    def shortfall_json(
        self, used: Sequence[int], candidate: Sequence[int]
    ) -> dict[str, str | list[str]]:
        """By how much ``candidate`` exceeds what remains after ``used``, as exact decimal
        strings (the form of :meth:`features_json`; zero where it does not exceed)."""
        return self.features_json(
            tuple(
                max(0, u + d - c)
                for u, d, c in zip(used, candidate, self._capacity_or_fail(), strict=True)
            )
        )

    def _capacity_or_fail(self) -> Vector:
        caps = self.capacity_units()
        if caps is None:  # a non-linear filter overrides remaining_json and shortfall_json
            raise NotImplementedError(f"{type(self).__name__} has no per-feature capacity")
        return caps


def exact_units(units: int) -> str:
    """Fixed-point units as an exact decimal string ("inf" beyond any capacity)."""
    return "inf" if units >= INF_UNITS else canonical_decimal(from_units(units))


def vector_json(accounting: str, features: Sequence[int]) -> dict[str, str | list[str]]:
    """A feature vector of rule ``accounting`` as exact decimal strings —
    :meth:`Filter.features_json` for callers that hold the vector and the rule's name but not a
    filter (every filter's JSON form is independent of its capacity).

    Example:
        >>> vector_json("basic", (300_000_000_000_000_000, 0))
        {'epsilon': '0.3', 'delta': '0'}
    """
    return get_rule(accounting).features_json(features)


def rdp_json(features: Sequence[int]) -> dict[str, Any]:
    """An RDP feature vector (one value per order of :data:`ALPHAS`) as JSON: ``rdp``, exact
    decimal strings, and ``orders``, the order α of each (so the array reads on its own).

    Example:
        >>> doc = rdp_json([0] * len(ALPHAS))
        >>> doc["orders"][:3], doc["rdp"][:2]
        ([1.5, 1.75, 2], ['0', '0'])
    """
    return {
        "rdp": [exact_units(v) for v in features],
        "orders": [int(a) if float(a).is_integer() else a for a in ALPHAS],
    }


def exact_text(form: dict[str, str | list[str]]) -> str:
    """The text of an exact budget form (:meth:`Filter.features_json`): ``ε=0.3, δ=0`` or
    ``RDP ε(α)=[1.5: 0.1, …]``.

    Example:
        >>> exact_text({"epsilon": "0.3", "delta": "0"})
        'ε=0.3, δ=0'
    """
    if "rdp" in form:
        pairs = zip(form.get("orders", ALPHAS), form["rdp"], strict=True)
        return "RDP ε(α)=[" + ", ".join(f"{a:g}: {v}" for a, v in pairs) + "]"
    if "epsilon" in form and "delta" in form:
        return f"ε={form['epsilon']}, δ={form['delta']}"
    return ", ".join(f"{key}={value}" for key, value in form.items())  # another rule's form

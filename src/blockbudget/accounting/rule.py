"""Accounting rules as registered objects: one home for everything that depends on the rule.

An :class:`AccountingRule` is a stateless object that owns, for one composition rule:

* its **name** (what the ledger and the catalog store) and a one-line **title** with the theorem
  it rests on;
* how each **mechanism is priced** under it — mechanisms are data (:class:`Release`, as
  dp_accounting's ``DpEvent``) and each rule prices them (:meth:`AccountingRule.price`);
* its **filter**, the per-block object with the exact feature vector and fit test the ledger
  uses (:meth:`AccountingRule.filter`), and the **shape** of that test (:class:`Combine`), which
  is all the scheduler pool needs for its vectorised capacity and fit tests;
* **group privacy** (:meth:`AccountingRule.group_cost`);
* the **versioned JSON** of its costs (:meth:`AccountingRule.cost_from_json`; the cost kinds of
  :mod:`blockbudget.budget` write a version and, for RDP, their order grid).

Rules are found by name through a registry, as schedulers are: :func:`get_rule`,
:func:`rule_names`, :func:`rules`. A rule module defines its filter, its rule, and registers
the rule (:func:`register_rule`), and :data:`RULE_MODULES` lists the modules the registry
imports, so a new rule is one new module plus its name there. No module outside
``accounting/`` asks which rule it holds: it asks the rule.

:class:`Accounting` is the *name* of a registered rule — a ``str`` that is interned (``is``
compares), validated against the registry, and iterable over the registered rules, so stored
names (``"basic"``, ``"strong"``, ``"rdp"``, …) read back unchanged.

Example:
    >>> from blockbudget.accounting import Accounting, get_rule
    >>> from blockbudget.budget import Budget
    >>> rule = get_rule("basic")
    >>> rule.combine, rule.price(Release(epsilon=Decimal("0.5")))
    (<Combine.ALL: 'all'>, Budget(epsilon='0.5', delta='0'))
    >>> Accounting("rdp") is Accounting.RDP, Accounting.RDP.rule.name
    (True, 'rdp')
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from blockbudget.budget import Budget, Cost, Number, cost_from_json, shown, to_decimal
from blockbudget.errors import InvalidBudgetError, InvalidRequestError
from blockbudget.registered import RegisteredName, RegistryType

if TYPE_CHECKING:
    from blockbudget.accounting.filters import Filter


class Combine(Enum):
    """The shape of a filter's fit test on its summed feature vector.

    Attributes:
        ALL: linear, every feature within its capacity (basic, GDP, advanced composition).
        ANY: linear per feature, some feature within its capacity (RDP: some order α).
        FILTER: not linear; only the filter's own :meth:`~Filter.fits` decides (strong).
    """

    ALL = "all"
    ANY = "any"
    FILTER = "filter"


class Noise(Enum):
    """The noise distribution of one part of a release (for pricing).

    Attributes:
        LAPLACE: Laplace noise of scale b on a vector of L1 sensitivity Δ: (Δ/b)-DP.
        GAUSSIAN: Gaussian noise of standard deviation σ on a vector of L2 sensitivity Δ.
        EXPONENTIAL: one selection by the exponential mechanism ∝ exp(score/scale) on scores
            that one row moves by at most Δ, all in one direction (one peel of a Gumbel top-k):
            (Δ/scale)-DP and (Δ/scale)-bounded-range.
    """

    LAPLACE = "laplace"
    GAUSSIAN = "gaussian"
    EXPONENTIAL = "exponential"


@dataclass(frozen=True)
class NoisePart:
    """One perturbation of a release: its distribution, the scale the sampler is given
    (Laplace b, Gaussian σ, or the exponential mechanism's temperature) and the sensitivity
    (L1 for Laplace, L2 for Gaussian, the scores' for a selection) that scale was calibrated
    to."""

    noise: Noise
    scale: float
    sensitivity: float

    def pure_epsilon(self) -> Decimal:
        """Δ/scale as an exact decimal, rounded up: the ε of a Laplace part or of one
        exponential-mechanism selection.

        The larger of the quotients of the doubles' exact binary values (what the sampler draws
        with) and of their shortest decimals (what the caller wrote), as
        :meth:`~blockbudget.budget.RdpCurve.laplace` reads them: a scale's shortest decimal can
        be above its double (3.3333333333333335 is, for the scale 1/0.3 rounded up), and the
        quotient of the decimals alone was then up to an ulp below the ε the sampler delivers.

        Example:
            >>> NoisePart(Noise.EXPONENTIAL, 4.0, 1.0).pure_epsilon()
            Decimal('0.25')
        """
        from decimal import ROUND_CEILING, localcontext

        from blockbudget.decimals import shortest_decimal

        with localcontext() as ctx:
            ctx.prec = 40
            ctx.rounding = ROUND_CEILING
            return max(
                Decimal(float(self.sensitivity)) / Decimal(float(self.scale)),
                shortest_decimal(self.sensitivity) / shortest_decimal(self.scale),
            )


@dataclass(frozen=True)
class Release:
    """A DP release described as data, for a rule to price (cf. dp_accounting's ``DpEvent``).

    Attributes:
        epsilon: the exact total ε the caller asked for (what (ε, δ) rules charge as is).
        delta: the exact total δ the caller asked for.
        parts: the perturbations the release makes, at their actual scales (what RDP and GDP
            price). Empty for a mechanism known only by its (ε, δ), e.g. the exponential
            mechanism or a sparse-vector comparison: rules that price noise then convert the
            pure ε (and refuse δ > 0).

    Example:
        >>> Release(epsilon=Decimal(1)).pure
        True
    """

    epsilon: Decimal
    delta: Decimal = Decimal(0)
    parts: tuple[NoisePart, ...] = field(default=())

    @classmethod
    def of(cls, *, epsilon: Number, delta: Number = 0, parts: Sequence[NoisePart] = ()) -> Release:
        """A release from exact numbers (validated like a :class:`Budget`)."""
        budget = Budget(epsilon=epsilon, delta=delta)
        return cls(epsilon=budget.epsilon, delta=budget.delta, parts=tuple(parts))

    @property
    def pure(self) -> bool:
        """True when the release declares no noise and δ = 0 (priced from ε alone)."""
        return not self.parts and self.delta == 0

    @property
    def budget(self) -> Budget:
        """The requested (ε, δ)."""
        return Budget(epsilon=self.epsilon, delta=self.delta)


class AccountingRule(ABC):
    """The contract of an accounting rule (see the module docstring).

    Attributes:
        name: the stored name; unique in the registry and never reused for another layout.
        title: one line stating the rule with its theorem (shown by ``afford`` and the docs).
        cost_kind: the kind of cost :meth:`price` returns.
        combine: the shape of the filter's fit test.
        takes_slack: whether the rule has a slack δ̃ parameter (stored with the block).
        prices_noise: whether :meth:`price` reads the noise parts (RDP, GDP) rather than the
            requested (ε, δ) — i.e. whether a σ chosen directly can be charged.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    cost_kind: ClassVar[type[Cost]]
    combine: ClassVar[Combine]
    takes_slack: ClassVar[bool] = False
    prices_noise: ClassVar[bool] = False

    @abstractmethod
    def make(self, *, capacity: Budget, slack_delta: float | None) -> Filter:
        """Build this rule's filter for one block (``slack_delta`` only if it takes slack)."""

    def filter(self, *, capacity: Budget, slack_delta: float | None = None) -> Filter:
        """The filter guarding one block of capacity (ε_g, δ_g).

        ``slack_delta`` is ignored by rules that take none (as the stored column is empty).

        Raises:
            InvalidBudgetError: the capacity (or slack) is unusable under this rule.
        """
        return self.make(capacity=capacity, slack_delta=self.slack(slack_delta))

    def slack(self, slack_delta: float | None) -> float | None:
        """The slack this rule keeps of a requested one (None for rules without slack)."""
        return slack_delta if self.takes_slack else None

    @abstractmethod
    def price(self, release: Release) -> Cost:
        """The cost of ``release`` under this rule.

        Raises:
            InvalidBudgetError: the rule cannot price this release (names rule and release).
        """

    def pure(self, epsilon: Number) -> Cost:
        """The cost of a pure ε-DP mechanism under this rule."""
        return self.price(Release(epsilon=to_decimal(epsilon, name="epsilon")))

    def group_cost(self, cost: Cost, k: int) -> Cost:
        """The cost for a group of ``k`` rows of a mechanism that costs ``cost`` per row.

        The default supports only k = 1.

        Raises:
            InvalidBudgetError: k < 1, or group privacy is not supported by this rule.
        """
        check_group(k)
        if k == 1:
            return cost
        raise InvalidBudgetError(
            f"user-level streams with rows_per_user > 1 are not supported under {self.name} "
            f"accounting: group privacy for its costs is not implemented (k={k}); use "
            "rows_per_user=1 or basic accounting"
        )

    def cost_of_features(self, features: Sequence[int]) -> Cost:
        """A cost of this rule's kind whose features are at least ``features`` (fixed-point
        units): how the live task pool describes, in its decision log, a feature vector it
        copied from the ledger. The default serves (ε, δ) rules, whose first feature is ε and
        last δ; a rule with its own cost kind overrides it.

        Raises:
            NotImplementedError: a rule with its own cost kind that does not override it.
        """
        if self.cost_kind is not Budget:
            raise NotImplementedError(f"{self.name} accounting must define cost_of_features")
        from blockbudget.budget import from_units

        return Budget(epsilon=from_units(features[0]), delta=from_units(features[-1]))

    def features_json(self, features: Sequence[int]) -> dict[str, str | list[str]]:
        """A feature vector of this rule as exact decimal strings (independent of capacity).

        The default, for (ε, δ) rules whose first feature is ε and last δ:
        ``{"epsilon", "delta"}``.
        """
        from blockbudget.accounting.filters import exact_units

        return {"epsilon": exact_units(features[0]), "delta": exact_units(features[-1])}

    def cost_from_json(self, data: dict[str, Any]) -> Cost:
        """A stored cost (any version) read for this rule.

        Raises:
            InvalidBudgetError: an unknown kind or grid, or a kind this rule never charges.
        """
        cost = cost_from_json(data)
        self.check_cost(cost)
        return cost

    def check_cost(self, cost: Cost) -> Cost:
        """``cost`` if this rule's filter accounts its kind.

        Raises:
            InvalidBudgetError: it does not (the message says which kinds it does).
        """
        accepted = self.accepts
        if not isinstance(cost, accepted):
            names = ", ".join(k.kind for k in accepted)
            raise InvalidBudgetError(
                f"{self.name} accounting takes costs of kind {names}, not {cost.kind}"
            )
        return cost

    def own_kind(self, cost: Cost) -> Cost:
        """``cost`` in this rule's own kind: itself if already of it, a pure (ε, 0) budget as
        :meth:`pure` prices it.

        Raises:
            InvalidBudgetError: any other cost (the message names the rule and both kinds).

        Example:
            >>> get_rule("rdp").own_kind(Budget(epsilon=1)) == get_rule("rdp").pure(1)
            True
        """
        if isinstance(cost, self.cost_kind):
            return cost
        if isinstance(cost, Budget) and cost.is_pure:
            return self.pure(cost.epsilon)
        shown_cost = (
            f"an (ε, δ) budget with δ > 0 ({cost})"
            if isinstance(cost, Budget)
            else (f"a cost of kind {cost.kind}")
        )
        raise InvalidBudgetError(
            f"{self.name} accounting cannot read {shown_cost} as a cost of its kind "
            f"{self.cost_kind.kind}"
        )

    @property
    def accepts(self) -> tuple[type[Cost], ...]:
        """The cost kinds this rule's filter accounts (its own kind and pure budgets)."""
        return (self.cost_kind,) if self.cost_kind is Budget else (self.cost_kind, Budget)

    def __repr__(self) -> str:
        return f"<accounting rule {self.name!r}>"


def check_group(k: int) -> None:
    """Refuse a group of fewer than one row."""
    if k < 1:
        raise InvalidBudgetError(f"a group has at least one row, got k={k}")


# --- the registry ---------------------------------------------------------------------------

#: The modules of ``blockbudget.accounting`` that define and register a rule, in the order the
#: registry lists them. Registering a new rule: its module, and its name here.
RULE_MODULES: tuple[str, ...] = ("basic", "strong", "rdp", "gdp", "whitehouse", "rdp2")

_RULES: dict[str, AccountingRule] = {}
_ORDERED: list[dict[str, AccountingRule]] = []


def register_rule(rule: AccountingRule) -> AccountingRule:
    """Add a rule to the registry (idempotent for the same class); a rule module calls it at
    import time (``RULE = register_rule(MyRule())``).

    Raises:
        TypeError: another rule class already holds the name.
    """
    known = _RULES.get(rule.name)
    if known is not None and _full_name(type(known)) != _full_name(type(rule)):
        raise TypeError(f"accounting rule {rule.name!r} is already {type(known).__qualname__}")
    _RULES[rule.name] = rule
    _ORDERED.clear()
    return rule


def _full_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _loaded() -> dict[str, AccountingRule]:
    if not _ORDERED:
        from importlib import import_module

        for module in RULE_MODULES:
            import_module(f"blockbudget.accounting.{module}")
        first = {name: _RULES[name] for name in RULE_MODULES if name in _RULES}
        _ORDERED.append({**first, **_RULES})  # rules registered from elsewhere come last
    return _ORDERED[0]


def rule_names() -> tuple[str, ...]:
    """The registered rules' names, in registration order.

    Example:
        >>> rule_names()[:3]
        ('basic', 'strong', 'rdp')
    """
    return tuple(_loaded())


def rules() -> tuple[AccountingRule, ...]:
    """Every registered rule."""
    return tuple(_loaded().values())


def get_rule(name: str) -> AccountingRule:
    """The rule registered under ``name``.

    Raises:
        InvalidRequestError: no such rule (the message lists the registered ones).
    """
    found = _loaded().get(str(name)) if isinstance(name, str) else None
    if found is None:
        raise InvalidRequestError(
            f"unknown accounting rule {shown(name)}; registered: {', '.join(_loaded())}"
        )
    return found


class Accounting(RegisteredName, metaclass=RegistryType):
    """The name of a registered accounting rule: the accounting of a stream.

    A ``str`` (it stores, compares and serialises as its name), interned so that ``is``
    compares, and validated: ``Accounting("nope")`` raises
    :class:`~blockbudget.errors.InvalidRequestError` (a ``ValueError``). Iterating the class
    yields every registered rule's name. :attr:`rule` is the rule object.

    Example:
        >>> Accounting("basic") is Accounting.BASIC, Accounting.BASIC.value
        (True, 'basic')
        >>> [a.value for a in Accounting][:3]
        ['basic', 'strong', 'rdp']
    """

    __slots__ = ()

    BASIC: ClassVar[Accounting]
    STRONG: ClassVar[Accounting]
    RDP: ClassVar[Accounting]

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return rule_names()

    def __new__(cls, value: object) -> Accounting:
        if isinstance(value, Accounting):
            return value
        found = cls._interned.get(value) if isinstance(value, str) else None
        if isinstance(found, Accounting) and found in _loaded():  # declared: once registered
            return found
        return cls._intern(get_rule(value).name)  # type: ignore[arg-type]

    @classmethod
    def declare(cls, name: str) -> Accounting:
        """The name a rule module declares for its filter class, before the rule is
        registered (``accounting = Accounting.declare("gdp")``)."""
        return cls._intern(name)

    @property
    def rule(self) -> AccountingRule:
        """The registered rule of this name."""
        return get_rule(str(self))


Accounting.BASIC = Accounting._intern("basic")
Accounting.STRONG = Accounting._intern("strong")
Accounting.RDP = Accounting._intern("rdp")


def rule_of(accounting: str | AccountingRule) -> AccountingRule:
    """The rule of a name, or the rule itself."""
    return accounting if isinstance(accounting, AccountingRule) else get_rule(accounting)

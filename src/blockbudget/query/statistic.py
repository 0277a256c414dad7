"""One home per DP statistic: the interface every statistic implements, and its registry.

A statistic is one registered object (as an accounting rule is, :mod:`blockbudget.accounting.
rule`): a subclass of :class:`DPStatistic` in its own module of
:mod:`blockbudget.query.statistics`, ending with ``STATISTIC = register_statistic(MyStat())``,
and one line — the module's name and a summary — in :data:`blockbudget.query.catalog.
STATISTICS`. The object holds everything the query path
needs from it, each a function of the query's public parameters alone:

* its **parameters**: which of the query's shared fields it takes (:attr:`DPStatistic.takes`:
  clipping bounds, categories, ``other``, quantile probabilities and bins), its own parameters
  (:attr:`DPStatistic.params`, written flat in the JSON form), and their checks
  (:meth:`DPStatistic.check`);
* its **plan** for the engines: the exact aggregates (:meth:`DPStatistic.aggregates`) and any
  filter it adds (:meth:`DPStatistic.predicates`) — DuckDB, Arrow and Ray run the same plan;
* the **perturbations** it releases, as data (:meth:`DPStatistic.perturbations`): each noisy
  part's noise, scale, sensitivity and share of (ε, δ) — which the stream's accounting rule
  prices (:meth:`~blockbudget.accounting.rule.AccountingRule.price` of a
  :class:`~blockbudget.accounting.rule.Release`); by default each aggregate is one part, with
  (ε, δ) split evenly over the :attr:`DPStatistic.split` parts (basic composition, Dwork & Roth
  2014 Thm 3.16) and calibrated as :mod:`blockbudget.query.parts` describes;
* its **answer** and **interval**: post-processing of one group's noisy parts
  (:meth:`DPStatistic.answer`; Dwork & Roth 2014 Prop. 2.1).

:class:`Statistic` is the name of a registered statistic (a ``str``, interned; iterating the
class lists the registry), which :class:`~blockbudget.query.spec.Query`, the JSON form, the CLI
and the HTTP API ask for.

Example:
    >>> Statistic("mean") is Statistic.MEAN, Statistic.MEAN.value
    (True, 'mean')
    >>> [s.value for s in Statistic][:3]
    ['count', 'sum', 'mean']
    >>> get_statistic("variance").split
    3
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from blockbudget.engine.plan import AggKind, Aggregate, Predicate, Scalar, check_scalar
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.calibration import (
    analytic_gaussian_sigma,
    exact_delta,
    exact_epsilon,
    fitted_gaussian_scales,
    laplace_scale,
    split_epsilon,
)
from blockbudget.mechanisms.noise import NoiseKind
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.statistics import sum_sensitivity
from blockbudget.query.catalog import STATISTICS
from blockbudget.registered import RegisteredName, RegistryType

if TYPE_CHECKING:
    from blockbudget.query.result import Value
    from blockbudget.query.spec import Query

#: The shared fields of a query a statistic may take (:attr:`DPStatistic.takes`).
SHARED_FIELDS = frozenset({"bounds", "categories", "other", "probabilities", "bins"})

#: What one group's answer is: its value and its interval (None when the statistic gives none).
Answer = tuple["Value", tuple[float, float] | None]


@dataclass(frozen=True)
class NoisyGroup:
    """What a statistic answers one group from: the group's slice of every noisy part vector,
    the parts' perturbations, and the α of its (1 − α) interval.

    Attributes:
        vectors: by part name, the group's noisy coordinates.
        parts: by part name, the perturbation (noise, scale, sensitivity).
        alpha: the interval's miss probability.
    """

    vectors: Mapping[str, np.ndarray]
    parts: Mapping[str, Perturbation]
    alpha: float

    def scalar(self, name: str) -> float:
        """The one noisy number of a one-cell part."""
        return float(self.vectors[name][0])

    def half_width(self, name: str, *, share: float = 1.0) -> float:
        """The half-width of a part's noise at a miss probability of ``share``·α (a union
        bound over parts takes shares)."""
        from blockbudget.query.parts import half_width

        return half_width(self.parts[name], alpha=self.alpha * share)

    def scalar_answer(self, name: str) -> Answer:
        """A one-part answer: its noisy number ± the noise's (1 − α) half-width."""
        value, t = self.scalar(name), self.half_width(name)
        return value, (value - t, value + t)


@dataclass(frozen=True)
class Param:
    """One parameter a statistic adds to the query (a flat field of the JSON form).

    Attributes:
        name: the field's name (unique over the registry's parameters and the shared fields).
        kind: its JSON type: ``int``, ``float`` or ``str``.
        help: one line, for ``--help`` and the docs.
        default: the value when the field is left out (None: required).
    """

    name: str
    kind: type
    help: str
    default: int | float | str | None = None

    def read(self, value: Any, *, statistic: str) -> int | float | str:
        """``value`` checked against :attr:`kind` (an int is a float too; no bools)."""
        ok = isinstance(value, self.kind) and not isinstance(value, bool)
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                ok, value = True, float(value)
            except OverflowError:  # an integer beyond the doubles is a bad value, not a bug
                raise InvalidRequestError(
                    f"a DP {statistic}'s {self.name!r} must be a float within the doubles' "
                    f"range, got an integer of {len(str(abs(value)))} digits"
                ) from None
        if not ok:
            raise InvalidRequestError(
                f"a DP {statistic}'s {self.name!r} must be {self.kind.__name__}, got {value!r}"
            )
        return value  # type: ignore[no-any-return]


class DPStatistic(ABC):
    """The contract of a DP statistic (see the module docstring).

    Attributes:
        name: the registry name (the JSON form's ``statistic``).
        column_required: whether a value column is required (COUNT's is optional).
        takes: the shared fields of :data:`SHARED_FIELDS` it takes.
        bound_limit: the largest clipping bound's magnitude (None: the default limit).
        params: its own parameters.
        split: how many parts share the query's (ε, δ) (basic composition).
        mechanisms: the query mechanisms it accepts.
        example: an example query's JSON form, without ``epsilon``, over a table with numeric
            columns ``v`` (values in [0, 47], some null) and ``n`` (integers in [0, 4]) and a
            string column ``c`` (``"a"`` to ``"d"``): the contract suite every statistic runs
            (``tests/query/test_statistic_contract.py``) queries it.
    """

    name: ClassVar[str]
    column_required: ClassVar[bool] = True
    takes: ClassVar[frozenset[str]] = frozenset()
    bound_limit: ClassVar[float | None] = None
    params: ClassVar[tuple[Param, ...]] = ()
    split: ClassVar[int] = 1
    mechanisms: ClassVar[frozenset[NoiseKind]] = frozenset({NoiseKind.LAPLACE, NoiseKind.GAUSSIAN})
    example: ClassVar[dict[str, Any]]

    # --- parameters ----------------------------------------------------------------------------

    def check(self, query: Query) -> None:
        """Checks of the statistic's own parameters beyond the shared ones (default: none).

        Raises:
            InvalidRequestError: a parameter out of its domain.
        """
        return

    def width(self, query: Query) -> int:
        """Noisy cells per group of the widest part (default 1)."""
        return 1

    def columns(self, query: Query) -> tuple[str, ...]:
        """The value columns it reads (default: the query's column, if any)."""
        return () if query.column is None else (query.column,)

    def numeric_columns(self, query: Query) -> tuple[str, ...]:
        """The columns that must be numeric (default: the value column of a bounded one)."""
        return self.columns(query) if "bounds" in self.takes else ()

    def resolution(self, query: Query) -> float | None:
        """The answer's resolution, when it is read from bins (default None)."""
        return None

    # --- the plan ------------------------------------------------------------------------------

    @abstractmethod
    def aggregates(self, query: Query) -> tuple[Aggregate, ...]:
        """The exact aggregates the engines compute, named as the statistic's parts."""

    def predicates(self, query: Query) -> tuple[Predicate, ...]:
        """Filters the statistic adds to the query's own (default none)."""
        return ()

    # --- the perturbations ---------------------------------------------------------------------

    def sensitivities(self, query: Query) -> dict[str, float]:
        """Each part's sensitivity (L1 for Laplace, L2 for Gaussian: the same numbers under
        add/remove-one-row), by aggregate name: :func:`value_sensitivity` for a sum, 1 for a
        count (one row is in one cell)."""
        name = query.statistic.value
        return {agg.name: value_sensitivity(agg, name) for agg in self.aggregates(query)}

    def part_epsilon(self, query: Query) -> Decimal:
        """The ε share each part is calibrated to (ε/:attr:`split`, rounded down)."""
        eps = exact_epsilon(query.epsilon)
        return eps if self.split == 1 else split_epsilon(eps, self.split)

    def part_delta(self, query: Query) -> Decimal:
        """The δ share each part of a Gaussian query is calibrated to; 0 for Laplace."""
        dl = query_delta(query)
        return dl if self.split == 1 or dl == 0 else split_epsilon(dl, self.split, name="delta")

    def perturbations(self, query: Query, accounting: str | None) -> tuple[Perturbation, ...]:
        """The perturbations of the release (see :func:`blockbudget.query.parts.perturbations`
        for the calibration of the default: one Laplace or Gaussian part per aggregate)."""
        return calibrated_parts(self, query, accounting)

    # --- the answer ----------------------------------------------------------------------------

    @abstractmethod
    def answer(self, query: Query, noisy: NoisyGroup) -> Answer:
        """One group's value and (1 − α) interval from its noisy part vectors: post-processing
        only."""


def query_delta(query: Query) -> Decimal:
    """The query's δ, exactly (0 for a Laplace query)."""
    if query.mechanism is NoiseKind.LAPLACE:
        return Decimal(0)
    return exact_delta(query.delta, positive=True)


def value_sensitivity(agg: Aggregate, statistic: str) -> float:
    """The add/remove-one-row sensitivity of one aggregate's release: ``max_units·q`` for a
    sum, ``max_units²·q²`` for a sum of squares, ``max_units·q·max_units'·q'`` for a sum of
    products of two encoded columns (inflated by :data:`FLOAT_SUM_SLACK` and rounded
    up: :func:`~blockbudget.mechanisms.statistics.sum_sensitivity`), 1 for a count of any kind.

    Raises:
        InvalidRequestError: bounds so close that q (or q²) is not a normal double.
    """
    fixed = agg.fixed
    if fixed is None:
        return 1.0
    other = agg.by_fixed if agg.kind is AggKind.SUM_PRODUCTS else None
    if agg.kind is AggKind.SUM_SQUARES:
        other = fixed
    units = fixed.max_units * (1 if other is None else other.max_units)
    scale = decode_unit(agg)
    if scale < sys.float_info.min:
        raise InvalidRequestError(
            f"clipping bounds [{fixed.lower}, {fixed.upper}] are too close for a "
            f"{statistic}: its fixed-point unit underflows"
        )
    return sum_sensitivity(float(units) * scale)


def decode_unit(agg: Aggregate) -> float:
    """What one integer of ``agg`` is worth: q for a sum, q² for a sum of squares, q·q' for a
    sum of products, else 1."""
    if agg.fixed is None:
        return 1.0
    q = agg.fixed.quantum
    if agg.kind is AggKind.SUM_SQUARES:
        return q * q
    return q * agg.by_fixed.quantum if agg.by_fixed is not None else q


def calibrated_parts(
    stat: DPStatistic, query: Query, accounting: str | None
) -> tuple[Perturbation, ...]:
    """One Laplace or Gaussian part per aggregate of ``stat``, calibrated to its share of
    (ε, δ) (see :func:`blockbudget.query.parts.perturbations`)."""
    eps, dl = stat.part_epsilon(query), stat.part_delta(query)
    aggs = stat.aggregates(query)
    sens = stat.sensitivities(query)
    kind = query.mechanism
    fitted = (
        fitted_gaussian_scales(
            accounting=accounting,
            epsilon=exact_epsilon(query.epsilon),
            delta=query_delta(query),
            sensitivities=[sens[agg.name] for agg in aggs],
        )
        if kind is NoiseKind.GAUSSIAN and accounting is not None
        else None
    )
    out = []
    for i, agg in enumerate(aggs):
        delta = sens[agg.name]
        if fitted is not None:
            scale = fitted[i]
        elif kind is NoiseKind.GAUSSIAN:
            # Balle & Wang 2018 (ICML), Thm 8 / Alg. 1: the smallest σ with
            # Φ(Δ/2σ − εσ/Δ) − e^ε·Φ(−Δ/2σ − εσ/Δ) ≤ δ, rounded up.
            scale = analytic_gaussian_sigma(epsilon=eps, delta=dl, sensitivity=delta)
        else:
            scale = laplace_scale(sensitivity=delta, epsilon=eps)
        out.append(Perturbation(agg.name, kind, scale, delta, query.groups * agg.width, eps))
    return tuple(out)


def check_categories(query: Query) -> tuple[Scalar, ...]:
    """The query's categories, refused unless non-empty, distinct and plain scalars."""
    cats = query.categories or ()
    if not cats or len(set(cats)) != len(cats):
        raise InvalidRequestError(
            f"a DP {query.statistic.value} needs distinct public categories (its bins)"
        )
    for c in cats:
        check_scalar(c)
    return cats


# --- the registry ----------------------------------------------------------------------------

#: The modules of ``blockbudget.query.statistics`` that define and register a statistic, in the
#: order the registry lists them: the names of :data:`blockbudget.query.catalog.STATISTICS`.
STATISTIC_MODULES: tuple[str, ...] = tuple(name for name, _ in STATISTICS)

_STATISTICS: dict[str, DPStatistic] = {}
_ORDERED: list[dict[str, DPStatistic]] = []


def register_statistic(stat: DPStatistic) -> DPStatistic:
    """Add a statistic to the registry (idempotent for the same class); a statistic's module
    calls it at import time (``STATISTIC = register_statistic(MyStat())``).

    Raises:
        TypeError: another class already holds the name, or a parameter clashes with a shared
            field or another statistic's parameter of a different kind.
    """
    known = _STATISTICS.get(stat.name)
    if known is not None and _full_name(type(known)) != _full_name(type(stat)):
        raise TypeError(f"statistic {stat.name!r} is already {type(known).__qualname__}")
    unknown = stat.takes - SHARED_FIELDS
    if unknown:
        raise TypeError(f"statistic {stat.name!r} takes unknown shared fields {sorted(unknown)}")
    for p in stat.params:
        for other in _STATISTICS.values():
            for q in other.params:
                if q.name == p.name and q.kind is not p.kind:
                    raise TypeError(f"parameter {p.name!r} is a {q.kind.__name__} elsewhere")
    _STATISTICS[stat.name] = stat
    _ORDERED.clear()
    Statistic._intern(stat.name)
    return stat


def _full_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _loaded() -> dict[str, DPStatistic]:
    if not _ORDERED:
        from importlib import import_module

        for module in STATISTIC_MODULES:
            import_module(f"blockbudget.query.statistics.{module}")
        first = {n: _STATISTICS[n] for n in STATISTIC_MODULES if n in _STATISTICS}
        _ORDERED.append({**first, **_STATISTICS})  # registered from elsewhere come last
    return _ORDERED[0]


def statistic_names() -> tuple[str, ...]:
    """The registered statistics' names, in registration order."""
    return tuple(_loaded())


def statistics() -> tuple[DPStatistic, ...]:
    """Every registered statistic."""
    return tuple(_loaded().values())


def get_statistic(name: str) -> DPStatistic:
    """The statistic registered under ``name``.

    Raises:
        InvalidRequestError: no such statistic (the message lists the registered ones).
    """
    found = _loaded().get(str(name)) if isinstance(name, str) else None
    if found is None:
        known = [s for s in _loaded()]
        raise InvalidRequestError(f"statistic must be one of {known}, got {name!r}")
    return found


def all_params() -> dict[str, Param]:
    """Every registered statistic's own parameters, by name."""
    return {p.name: p for stat in statistics() for p in stat.params}


def takers(field: str) -> str:
    """The statistics that take a shared field, as words ("a histogram or a top_k")."""
    return " or ".join(f"a {s.name}" for s in statistics() if field in s.takes)


class Statistic(RegisteredName, metaclass=RegistryType):
    """The name of a registered statistic: what a query computes.

    A ``str`` (it stores, compares and serialises as its name), interned so that ``is``
    compares, and validated: ``Statistic("median")`` raises
    :class:`~blockbudget.errors.InvalidRequestError` (a ``ValueError``). Iterating the class
    yields every registered statistic's name; :attr:`definition` is the registered object.
    """

    __slots__ = ()

    COUNT: ClassVar[Statistic]
    SUM: ClassVar[Statistic]
    MEAN: ClassVar[Statistic]
    VARIANCE: ClassVar[Statistic]
    QUANTILES: ClassVar[Statistic]
    HISTOGRAM: ClassVar[Statistic]

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return statistic_names()

    def __new__(cls, value: object) -> Statistic:
        if isinstance(value, Statistic):
            return value
        return cls._intern(get_statistic(value).name)  # type: ignore[arg-type]

    @property
    def definition(self) -> DPStatistic:
        """The registered statistic of this name."""
        return get_statistic(str(self))


Statistic.COUNT = Statistic._intern("count")
Statistic.SUM = Statistic._intern("sum")
Statistic.MEAN = Statistic._intern("mean")
Statistic.VARIANCE = Statistic._intern("variance")
Statistic.QUANTILES = Statistic._intern("quantiles")
Statistic.HISTOGRAM = Statistic._intern("histogram")

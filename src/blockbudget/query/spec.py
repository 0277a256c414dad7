"""The declarative query: one DP statistic over a stream, independent of blocks and context.

A :class:`Query` says *what* to compute — an optional row filter (:class:`~blockbudget.engine.
Predicate`, a stable transformation), an optional group-by over public keys with declared
domains (:class:`~blockbudget.engine.GroupKey`), and one statistic with its public parameters
(clipping bounds, categories, quantile bins) and its ε. *Where* (the blocks) and *who pays*
(the context) are given when it is priced or run (:func:`blockbudget.query.price`,
:func:`blockbudget.query.run`). The structure is validated here, on construction, from the
query alone; what needs the stream's schema (unknown columns, column and literal types) is
checked by :func:`blockbudget.query.check`.

Example:
    >>> q = (
    ...     Query.count(epsilon=0.1)
    ...     .where("dest", "==", "BOS")
    ...     .group_by("origin", ["EWR", "JFK", "LGA"])
    ... )
    >>> q.statistic.value, q.groups
    ('count', 3)
    >>> Query.mean("dep_delay", epsilon=0.5, lower=-60, upper=300).column
    'dep_delay'
    >>> g = Query.count(epsilon=0.5, delta=1e-6, mechanism=Mechanism.GAUSSIAN)
    >>> g.mechanism.value, g.delta
    ('gaussian', 1e-06)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from blockbudget.budget import Budget
from blockbudget.decimals import plain_fields, plain_number
from blockbudget.engine.plan import GroupKey, Op, Predicate, Scalar, check_scalar
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.inputs import check_bounds
from blockbudget.mechanisms.noise import NoiseKind
from blockbudget.query.statistic import Statistic as Statistic
from blockbudget.query.statistic import takers

#: One statistic-specific parameter of a query: its name and value (see
#: :attr:`~blockbudget.query.statistic.DPStatistic.params`).
ParamValue = int | float | str

#: The noise a query adds: :attr:`Mechanism.LAPLACE` (pure ε-DP, the default) or
#: :attr:`Mechanism.GAUSSIAN` ((ε, δ)-DP with δ > 0; the analytic Gaussian mechanism, see
#: :mod:`blockbudget.query.parts`). The same enum as the samplers' noise kind.
Mechanism = NoiseKind

#: Bins of the noisy histogram a quantile query reads, unless it says otherwise.
DEFAULT_QUANTILE_BINS = 64

#: The most noisy coordinates one query may release (groups × cells per group): the noise is
#: sampled on the driver, one secure draw per coordinate.
MAX_CELLS = 1_000_000

#: At most this many filters and group-by keys.
MAX_FILTERS = 64
MAX_KEYS = 8


def parse_op(op: Op | str) -> Op:
    """An :class:`Op` from itself or its text (``==``, ``in``, ``is null`` …)."""
    if isinstance(op, Op):
        return op
    try:
        return Op(op)
    except ValueError:
        known = [o.value for o in Op]
        raise InvalidRequestError(f"unknown filter operator {op!r}; known: {known}") from None


def parse_mechanism(mechanism: Mechanism | str) -> Mechanism:
    """A :data:`Mechanism` from itself or its text (``laplace``, ``gaussian``)."""
    known = (NoiseKind.LAPLACE, NoiseKind.GAUSSIAN)
    if isinstance(mechanism, NoiseKind) and mechanism in known:
        return mechanism
    for kind in known:
        if mechanism == kind.value:
            return kind
    names = [m.value for m in known]
    raise InvalidRequestError(f"unknown mechanism {mechanism!r}; known: {names}")


def make_predicate(column: str, op: Op | str, value: Any = None) -> Predicate:
    """A filter ``column op value`` with its literal(s) checked (no containers, no NaN).

    Raises:
        InvalidRequestError: an unknown operator or an unusable literal.
    """
    kind = parse_op(op)
    literal: Scalar | tuple[Scalar, ...] | None
    if kind in (Op.IN, Op.NOT_IN):
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise InvalidRequestError(f"{kind.value!r} needs a list of values, got {value!r}")
        literal = tuple(check_scalar(v) for v in value)
    elif value is None:
        literal = None
    else:
        literal = check_scalar(value)
    return Predicate(column=_name(column, "filter column"), op=kind, value=literal)


def make_group_key(column: str, domain: Iterable[Any]) -> GroupKey:
    """A group-by key with its declared (public) domain.

    Raises:
        InvalidRequestError: no domain (an undeclared key), an empty or duplicated one, or an
            unusable value.
    """
    if domain is None or isinstance(domain, str | bytes) or not isinstance(domain, Iterable):
        raise InvalidRequestError(
            f"group-by key {column!r} needs a declared domain (a list of its public values): "
            "the groups released must not depend on the data"
        )
    return GroupKey(
        column=_name(column, "group-by column"), domain=tuple(map(check_scalar, domain))
    )


def _name(column: Any, what: str) -> str:
    if not isinstance(column, str) or not column or len(column) > 200:
        raise InvalidRequestError(f"{what} must be a name of 1 to 200 characters, got {column!r}")
    return column


@dataclass(frozen=True, kw_only=True)
class Query:
    """One DP statistic, declared (see the module docstring). Build it with the class methods
    (:meth:`count`, :meth:`sum`, :meth:`mean`, :meth:`variance`, :meth:`quantiles`,
    :meth:`histogram`) and refine it with :meth:`where` and :meth:`group_by`; every step
    returns a new frozen query.

    Attributes:
        statistic: what to compute.
        epsilon: ε charged on every block read (> 0; on a user-level stream the group-privacy
            cost of it): a float (read as its shortest decimal) or an exact ``Decimal``.
        mechanism: the noise, :attr:`Mechanism.LAPLACE` (the default) or
            :attr:`Mechanism.GAUSSIAN`.
        delta: δ of a Gaussian query (0 < δ < 1, split over its parts like ε); 0 for Laplace.
        column: the value column (optional for COUNT: without it rows are counted, with it
            non-null values).
        lower, upper: public clipping bounds (SUM, MEAN, VARIANCE, QUANTILES).
        categories: the histogram's declared categories (HISTOGRAM).
        other: also release a noisy count of values outside ``categories`` (HISTOGRAM).
        probabilities: the quantiles wanted, each in [0, 1] (QUANTILES).
        bins: equal-width bins between the bounds of the noisy histogram that quantiles are
            read from (QUANTILES; the answer's resolution is ``(upper − lower) / bins``).
        filters: rows kept must pass every predicate.
        keys: the group-by keys, each with its declared domain.
        params: the statistic's own parameters (:attr:`~blockbudget.query.statistic.
            DPStatistic.params`), as ``(name, value)`` pairs sorted by name.
    """

    statistic: Statistic
    epsilon: float | Decimal
    mechanism: Mechanism = NoiseKind.LAPLACE
    delta: float | Decimal = 0.0
    column: str | None = None
    lower: float | None = None
    upper: float | None = None
    categories: tuple[Scalar, ...] | None = None
    other: bool = False
    probabilities: tuple[float, ...] | None = None
    bins: int | None = None
    filters: tuple[Predicate, ...] = ()
    keys: tuple[GroupKey, ...] = ()
    params: tuple[tuple[str, ParamValue], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.statistic, Statistic):
            raise InvalidRequestError(f"statistic must be a Statistic, got {self.statistic!r}")
        plain_fields(self)  # NumPy scalars as Python numbers
        if isinstance(self.probabilities, tuple):
            probabilities = tuple(plain_number(p) for p in self.probabilities)
            object.__setattr__(self, "probabilities", probabilities)
        eps = self.epsilon
        if isinstance(eps, bool) or not isinstance(eps, int | float | Decimal):
            raise InvalidRequestError(f"epsilon must be a number, got {eps!r}")
        if Budget(epsilon=eps).epsilon <= 0:  # Budget checks finite and >= 0
            raise InvalidRequestError(f"a DP query needs epsilon > 0, got {eps!r}")
        self._check_noise()
        if self.column is not None:
            _name(self.column, "column")
        self._check_parameters()
        self._check_shape()

    def _check_noise(self) -> None:
        dl = self.delta
        if not isinstance(self.mechanism, NoiseKind):
            raise InvalidRequestError(f"mechanism must be a Mechanism, got {self.mechanism!r}")
        if self.mechanism not in self.statistic.definition.mechanisms:
            raise InvalidRequestError(
                f"a DP {self.statistic.value} does not take mechanism={self.mechanism.value!r}"
            )
        if isinstance(dl, bool) or not isinstance(dl, int | float | Decimal):
            raise InvalidRequestError(f"delta must be a number, got {dl!r}")
        if self.mechanism is NoiseKind.GAUSSIAN:
            if not 0.0 < dl < 1.0:  # also refuses NaN
                raise InvalidRequestError(
                    f"a Gaussian query needs 0 < delta < 1 (it is (ε, δ)-DP), got delta={dl!r}"
                )
        elif dl != 0:
            raise InvalidRequestError(
                f"a Laplace query is pure ε-DP and takes delta=0, got delta={dl!r}; "
                "pass mechanism=Mechanism.GAUSSIAN for an (ε, δ) query"
            )

    def _check_parameters(self) -> None:
        stat, what = self.statistic.definition, f"a DP {self.statistic.value}"
        if stat.column_required and self.column is None:
            raise InvalidRequestError(f"{what} needs a value column; none was given")
        if "bounds" in stat.takes:
            if self.lower is None or self.upper is None:
                raise InvalidRequestError(
                    f"{what} needs public clipping bounds lower < upper, got lower="
                    f"{self.lower!r}, upper={self.upper!r}"
                )
            if stat.bound_limit is None:
                check_bounds(self.lower, self.upper)
            else:
                check_bounds(self.lower, self.upper, limit=stat.bound_limit)
        elif self.lower is not None or self.upper is not None:
            raise InvalidRequestError(f"{what} takes no clipping bounds")
        if ("categories" in stat.takes) != (self.categories is not None):
            raise InvalidRequestError(
                f"categories are given for (and only for) {takers('categories')}"
            )
        if self.other and "other" not in stat.takes:
            raise InvalidRequestError(f"'other' applies to {takers('other')} only")
        if "probabilities" not in stat.takes and (
            self.probabilities is not None or self.bins is not None
        ):
            raise InvalidRequestError("probabilities and bins are for quantiles only")
        self._check_params()
        stat.check(self)

    def _check_params(self) -> None:
        stat = self.statistic.definition
        if not isinstance(self.params, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in self.params
        ):
            raise InvalidRequestError("params must be (name, value) pairs")
        given = dict(self.params)
        own = {p.name: p for p in stat.params}
        extra = sorted(set(given) - set(own))
        if extra:
            raise InvalidRequestError(f"a DP {stat.name} takes no {extra}; its own: {sorted(own)}")
        checked: dict[str, ParamValue] = {}
        for name, param in own.items():
            value = given.get(name, param.default)
            if value is None:
                raise InvalidRequestError(f"a DP {stat.name} needs {name!r} ({param.help})")
            checked[name] = param.read(plain_number(value), statistic=stat.name)
        object.__setattr__(self, "params", tuple(sorted(checked.items())))

    def param(self, name: str) -> ParamValue:
        """The value of one of the statistic's own parameters (its default when not given).

        Raises:
            InvalidRequestError: the statistic has no such parameter.
        """
        found = dict(self.params)
        if name not in found:
            raise InvalidRequestError(f"a DP {self.statistic.value} has no parameter {name!r}")
        return found[name]

    def _check_shape(self) -> None:
        if len(self.filters) > MAX_FILTERS or len(self.keys) > MAX_KEYS:
            raise InvalidRequestError(
                f"a query takes at most {MAX_FILTERS} filters and {MAX_KEYS} group-by keys"
            )
        if not all(isinstance(p, Predicate) for p in self.filters):
            raise InvalidRequestError("filters must be engine Predicates")
        for p in self.filters:  # NaN and containers are refused as literals
            values = p.value if isinstance(p.value, tuple) else (p.value,)
            for v in values:
                if v is not None:
                    check_scalar(v)
        if not all(isinstance(k, GroupKey) for k in self.keys):
            raise InvalidRequestError("group-by keys must be GroupKeys with declared domains")
        names = [k.column for k in self.keys]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"a group-by key appears twice in {names}")
        if self.groups * self.width > MAX_CELLS:
            raise InvalidRequestError(
                f"a query releases at most {MAX_CELLS} noisy values (groups × cells), got "
                f"{self.groups} × {self.width}"
            )

    # --- derived -------------------------------------------------------------------------------

    @property
    def quantile_bins(self) -> int:
        """The bins of a quantile query (:data:`DEFAULT_QUANTILE_BINS` unless given)."""
        return DEFAULT_QUANTILE_BINS if self.bins is None else self.bins

    @property
    def groups(self) -> int:
        """How many groups the answer has (1 without group-by)."""
        return math.prod(len(k.domain) for k in self.keys)

    @property
    def width(self) -> int:
        """Noisy cells per group of the widest part (categories, bins, or 1)."""
        return self.statistic.definition.width(self)

    def columns(self) -> tuple[str, ...]:
        """Every column the query reads (value, filters, keys), without repeats, in order."""
        seen: dict[str, None] = {}
        for name in (
            self.column,
            *self.statistic.definition.columns(self),
            *(p.column for p in self.filters),
            *(k.column for k in self.keys),
        ):
            if name is not None:
                seen.setdefault(name, None)
        return tuple(seen)

    # --- the fluent builder --------------------------------------------------------------------

    @classmethod
    def count(
        cls,
        column: str | None = None,
        *,
        epsilon: float,
        delta: float = 0.0,
        mechanism: Mechanism | str = NoiseKind.LAPLACE,
    ) -> Query:
        """Rows (or non-null values of ``column``) + Laplace(1/ε), or + N(0, σ²) with the
        analytic Gaussian σ for (ε, δ) when ``mechanism`` is GAUSSIAN."""
        return cls(
            statistic=Statistic.COUNT,
            epsilon=epsilon,
            column=column,
            delta=delta,
            mechanism=parse_mechanism(mechanism),
        )

    @classmethod
    def sum(
        cls,
        column: str,
        *,
        epsilon: float,
        lower: float,
        upper: float,
        delta: float = 0.0,
        mechanism: Mechanism | str = NoiseKind.LAPLACE,
    ) -> Query:
        """Σ clip(x, lower, upper) + noise (see :mod:`blockbudget.query.parts`)."""
        return cls(
            statistic=Statistic.SUM,
            epsilon=epsilon,
            column=column,
            lower=lower,
            upper=upper,
            delta=delta,
            mechanism=parse_mechanism(mechanism),
        )

    @classmethod
    def mean(
        cls,
        column: str,
        *,
        epsilon: float,
        lower: float,
        upper: float,
        delta: float = 0.0,
        mechanism: Mechanism | str = NoiseKind.LAPLACE,
    ) -> Query:
        """Noisy centred sum / noisy count, (ε/2, δ/2) each, clamped into the bounds."""
        return cls(
            statistic=Statistic.MEAN,
            epsilon=epsilon,
            column=column,
            lower=lower,
            upper=upper,
            delta=delta,
            mechanism=parse_mechanism(mechanism),
        )

    @classmethod
    def variance(
        cls,
        column: str,
        *,
        epsilon: float,
        lower: float,
        upper: float,
        delta: float = 0.0,
        mechanism: Mechanism | str = NoiseKind.LAPLACE,
    ) -> Query:
        """Population variance from a noisy count, sum and sum of squares, (ε/3, δ/3) each."""
        return cls(
            statistic=Statistic.VARIANCE,
            epsilon=epsilon,
            column=column,
            lower=lower,
            upper=upper,
            delta=delta,
            mechanism=parse_mechanism(mechanism),
        )

    @classmethod
    def quantiles(
        cls,
        column: str,
        probabilities: Sequence[float],
        *,
        epsilon: float,
        lower: float,
        upper: float,
        bins: int | None = None,
        delta: float = 0.0,
        mechanism: Mechanism | str = NoiseKind.LAPLACE,
    ) -> Query:
        """Quantiles read from a noisy histogram over ``bins`` equal-width public bins."""
        return cls(
            statistic=Statistic.QUANTILES,
            epsilon=epsilon,
            column=column,
            lower=lower,
            upper=upper,
            probabilities=tuple(probabilities),
            bins=bins,
            delta=delta,
            mechanism=parse_mechanism(mechanism),
        )

    @classmethod
    def histogram(
        cls,
        column: str,
        categories: Sequence[Any],
        *,
        epsilon: float,
        other: bool = False,
        delta: float = 0.0,
        mechanism: Mechanism | str = NoiseKind.LAPLACE,
    ) -> Query:
        """One noisy count per declared category (and one for the rest when ``other``)."""
        if isinstance(categories, str | bytes):
            raise InvalidRequestError("categories must be a list of values, not one string")
        return cls(
            statistic=Statistic.HISTOGRAM,
            epsilon=epsilon,
            column=column,
            categories=tuple(check_scalar(c) for c in categories),
            other=other,
            delta=delta,
            mechanism=parse_mechanism(mechanism),
        )

    @classmethod
    def of(
        cls,
        statistic: Statistic | str,
        column: str | None = None,
        *,
        epsilon: float | Decimal,
        delta: float | Decimal = 0.0,
        mechanism: Mechanism | str = NoiseKind.LAPLACE,
        lower: float | None = None,
        upper: float | None = None,
        categories: Sequence[Any] | None = None,
        other: bool = False,
        probabilities: Sequence[float] | None = None,
        bins: int | None = None,
        **params: ParamValue,
    ) -> Query:
        """Any registered statistic by name, with the shared fields it takes and its own
        parameters as keywords (e.g. ``Query.of("top_k", "c", categories=[...], k=2,
        epsilon=1)``)."""
        if isinstance(categories, str | bytes):
            raise InvalidRequestError("categories must be a list of values, not one string")
        return cls(
            statistic=Statistic(statistic),
            epsilon=epsilon,
            column=column,
            delta=delta,
            mechanism=parse_mechanism(mechanism),
            lower=lower,
            upper=upper,
            categories=None if categories is None else tuple(map(check_scalar, categories)),
            other=other,
            probabilities=None if probabilities is None else tuple(probabilities),
            bins=bins,
            params=tuple(sorted(params.items())),
        )

    def where(self, column: str, op: Op | str, value: Any = None) -> Query:
        """This query with one more filter ``column op value`` (``op`` an :class:`Op` or its
        text: ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``, ``is null``,
        ``is not null``)."""
        return replace(self, filters=(*self.filters, make_predicate(column, op, value)))

    def group_by(self, column: str, domain: Iterable[Any]) -> Query:
        """This query grouped by one more public key, whose groups are its declared
        ``domain`` (each released, with noise, even when empty; rows outside it are dropped)."""
        return replace(self, keys=(*self.keys, make_group_key(column, domain)))

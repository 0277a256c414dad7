"""Query plans: what an engine computes over block files, exactly, before any noise.

A :class:`Plan` names the part files of the granted blocks (:class:`ScanSource`), row filters
(:class:`Predicate`, a stable transformation: one row added or removed changes at most one row
of the output), public group-by keys with their declared domains (:class:`GroupKey`), and the
aggregates to compute (:class:`Aggregate`). An engine returns :class:`Partials`: **exact
integers**, one vector per aggregate — the DP layer (:mod:`blockbudget.query`) adds noise once,
on the driver, after the grant has been charged.

Exact sums (fixed point). Summing floats in any order a parallel engine likes underestimates
the sum's sensitivity (Casacuberta, Shoemate, Vadhan & Wagaman, "Widespread underestimation of
sensitivity in differentially private libraries", CCS 2022). Every value aggregate therefore
sums **integers**: a value ``x`` is clipped to public bounds ``[lower, upper]``, shifted by a
public ``centre`` and divided by a power-of-two ``quantum`` q, then rounded half up::

    v(x) = floor((min(max(x, lower), upper) − centre) / q + 0.5)

with the same IEEE-754 double operations in every engine (:meth:`FixedPoint.encode` is the
reference; the DuckDB engine writes the identical SQL), so DuckDB, Ray and the reference engine
return the same integers. Integer sums are exact in any order, so a row's contribution to
``Σ v`` is at most :attr:`FixedPoint.max_units` and to ``Σ v²`` at most its square — the
sensitivities the DP layer uses are those bounds times q (resp. q²), with no floating-point
slack needed for the sum itself.

Every engine implements the same semantics (checked by one contract test suite):

* contribution bounding first (on a user-level source: the first ``rows_per_user`` rows of each
  user in stored order — block order, then part-file order, then row order), then the
  predicates, then grouping;
* a NaN cell reads as null everywhere below (SQL engines order NaN above every number and
  call it equal to itself; IEEE-754 does neither, so the contract removes NaN instead);
* a predicate's comparison with a null cell is false (``IS_NULL`` is true for it);
* a group key value outside its declared domain (or null) drops the row;
* a value aggregate (SUM, SUM_SQUARES, BINS, COUNT with a column) reads only rows whose value
  is neither null nor NaN; SUM_PRODUCTS only rows where both its values are neither; COUNT
  without a column counts rows;
* CATEGORIES counts rows whose value equals one of the declared categories (plus an "other"
  count of every other non-null value when asked).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

#: A literal a predicate or a domain may hold.
Scalar = str | int | float | bool | date | datetime | Decimal

#: Bits of resolution of a fixed-point value over its radius: ``|v| ≤ 2**FIXED_POINT_BITS``.
#: 20 bits keep ``v²`` below 2**40, so a batch of up to 2**23 rows sums ``v²`` in int64
#: without overflow, and the quantisation error is at most 2**-21 of the radius per row.
FIXED_POINT_BITS = 20

#: The smallest positive double (a power of two): the least quantum.
_SMALLEST_DOUBLE = math.ldexp(1.0, -1074)


class Op(Enum):
    """A predicate's comparison."""

    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    IN = "in"
    NOT_IN = "not in"
    IS_NULL = "is null"
    NOT_NULL = "is not null"


_SET_OPS = (Op.IN, Op.NOT_IN)
_UNARY_OPS = (Op.IS_NULL, Op.NOT_NULL)


@dataclass(frozen=True)
class Predicate:
    """One row filter ``column op value``; a plan keeps rows that pass all of them.

    A comparison with a null (or NaN) cell is false (SQL semantics), so ``NE`` and ``NOT_IN``
    drop nulls too, and ``IS_NULL`` holds for null and NaN cells. Filters are stable
    transformations: they never increase any row's influence.

    Attributes:
        column: the column compared.
        op: the comparison.
        value: a scalar (comparisons), a tuple of scalars (``IN``/``NOT_IN``) or None
            (``IS_NULL``/``NOT_NULL``).
    """

    column: str
    op: Op
    value: Scalar | tuple[Scalar, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.op, Op):
            raise InvalidRequestError(f"op must be an Op, got {self.op!r}")
        if self.op in _UNARY_OPS:
            if self.value is not None:
                raise InvalidRequestError(f"{self.op.value!r} takes no value")
        elif self.op in _SET_OPS:
            if not isinstance(self.value, tuple) or not self.value:
                raise InvalidRequestError(f"{self.op.value!r} needs a non-empty tuple of values")
        elif self.value is None or isinstance(self.value, tuple):
            raise InvalidRequestError(f"{self.op.value!r} needs one scalar value")


@dataclass(frozen=True)
class GroupKey:
    """A public group-by key: a column and its declared domain (the groups released).

    Declaring the domain is what makes a group-by DP: the set of groups released must not
    depend on the data, so groups are the domain's values, each released (with noise) even
    when no row has it, and rows with any other value are dropped.
    """

    column: str
    domain: tuple[Scalar, ...]

    def __post_init__(self) -> None:
        if not self.domain:
            raise InvalidRequestError(f"group key {self.column!r} needs a non-empty domain")
        if any(v is None for v in self.domain):
            raise InvalidRequestError(f"group key {self.column!r}: null is not a domain value")
        if len(set(self.domain)) != len(self.domain):
            raise InvalidRequestError(f"group key {self.column!r} has duplicate domain values")


def _power_of_two_at_least(x: float) -> float:
    """The smallest power of two ≥ x (x > 0, finite)."""
    mantissa, exponent = math.frexp(x)  # x = mantissa · 2**exponent, 0.5 ≤ mantissa < 1
    return math.ldexp(1.0, exponent - 1) if mantissa == 0.5 else math.ldexp(1.0, exponent)


@dataclass(frozen=True)
class FixedPoint:
    """The fixed-point encoding of a clipped value (see the module docstring).

    Attributes:
        lower, upper: public clipping bounds, finite, lower < upper.
        centre: subtracted after clipping (0 for a plain sum; the midpoint for mean and
            variance, which halves the sum's sensitivity).
    """

    lower: float
    upper: float
    centre: float = 0.0

    def __post_init__(self) -> None:
        lo, hi, c = self.lower, self.upper, self.centre
        if not all(math.isfinite(v) for v in (lo, hi, c)) or lo >= hi:
            raise InvalidRequestError(
                f"fixed point needs finite bounds lower < upper and a finite centre, got "
                f"lower={lo!r}, upper={hi!r}, centre={c!r}"
            )

    @property
    def radius(self) -> float:
        """A bound on ``|fl(clip(x) − centre)|`` (rounding is monotone, so the extremes bound
        every difference)."""
        return max(abs(self.upper - self.centre), abs(self.lower - self.centre))

    @property
    def quantum(self) -> float:
        """q: a power of two with ``radius / q ≤ 2**FIXED_POINT_BITS``."""
        r = self.radius
        if r == 0.0:
            return 1.0
        # never below the smallest subnormal 2**-1074 (a tiny radius would round q to 0)
        return max(math.ldexp(_power_of_two_at_least(r), -FIXED_POINT_BITS), _SMALLEST_DOUBLE)

    @property
    def max_units(self) -> int:
        """The largest ``|v(x)|`` any value can encode to — computed with the same float
        operations as :meth:`encode`, which are monotone, so no row exceeds it."""
        q = self.quantum
        return max(
            abs(math.floor((self.upper - self.centre) / q + 0.5)),
            abs(math.floor((self.lower - self.centre) / q + 0.5)),
        )

    def encode(self, values: NDArray[np.float64]) -> NDArray[np.int64]:
        """The reference encoding, elementwise (values must hold no NaN)."""
        clipped = np.minimum(np.maximum(values, self.lower), self.upper)
        return np.floor((clipped - self.centre) / self.quantum + 0.5).astype(np.int64)

    def decode(self, units: int) -> float:
        """``units · q`` rounded once to the nearest double (q is a power of two)."""
        return float(units) * self.quantum


@dataclass(frozen=True)
class Bins:
    """Equal-width public bins over ``[lower, upper]`` for a numeric column.

    A value is clipped to the bounds and falls in bin
    ``min(floor((clip(x) − lower) / width), count − 1)`` with ``width = (upper − lower) /
    count`` — the same double operations in every engine.
    """

    lower: float
    upper: float
    count: int

    def __post_init__(self) -> None:
        lo, hi = self.lower, self.upper
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
            raise InvalidRequestError(f"bins need finite lower < upper, got {lo!r}, {hi!r}")
        if not isinstance(self.count, int) or not 1 <= self.count <= 100_000:
            raise InvalidRequestError(f"bins need 1 ≤ count ≤ 100000, got {self.count!r}")

    @property
    def width(self) -> float:
        return (self.upper - self.lower) / self.count

    def index(self, values: NDArray[np.float64]) -> NDArray[np.int64]:
        """The reference bin index, elementwise (values must hold no NaN)."""
        clipped = np.minimum(np.maximum(values, self.lower), self.upper)
        raw = np.floor((clipped - self.lower) / self.width).astype(np.int64)
        return np.minimum(raw, self.count - 1)

    def edges(self) -> tuple[float, ...]:
        """The ``count + 1`` bin edges."""
        return (*tuple(self.lower + i * self.width for i in range(self.count)), self.upper)


class AggKind(Enum):
    """What an aggregate computes per group (all exact integers)."""

    COUNT = "count"  # rows (or non-null values of ``column``)
    SUM = "sum"  # Σ v(x) under ``fixed``
    SUM_SQUARES = "sum_squares"  # Σ v(x)² under ``fixed``
    SUM_PRODUCTS = (
        "sum_products"  # Σ v(x)·w(y): ``column`` under ``fixed``, ``by`` under ``by_fixed``
    )
    CATEGORIES = "categories"  # one count per declared category (+ "other")
    BINS = "bins"  # one count per bin of ``bins``


@dataclass(frozen=True)
class Aggregate:
    """One exact aggregate of a plan.

    Attributes:
        name: unique within the plan; keys :class:`Partials`.
        kind: what to compute.
        column: the value column (optional for COUNT, required otherwise).
        fixed: the encoding (SUM, SUM_SQUARES).
        categories: the declared categories (CATEGORIES).
        other: also count non-null values outside ``categories`` (CATEGORIES).
        bins: the bins (BINS).
        by, by_fixed: the second column and its encoding (SUM_PRODUCTS: each row adds the
            product of its two encoded values, ``|v·w| ≤ max_units·by_fixed.max_units``).
    """

    name: str
    kind: AggKind
    column: str | None = None
    fixed: FixedPoint | None = None
    categories: tuple[Scalar, ...] | None = None
    other: bool = False
    bins: Bins | None = None
    by: str | None = None
    by_fixed: FixedPoint | None = None

    def __post_init__(self) -> None:
        k = self.kind
        if not isinstance(k, AggKind):
            raise InvalidRequestError(f"kind must be an AggKind, got {k!r}")
        if k is not AggKind.COUNT and self.column is None:
            raise InvalidRequestError(f"a {k.value} aggregate needs a column")
        if (k in (AggKind.SUM, AggKind.SUM_SQUARES, AggKind.SUM_PRODUCTS)) != (
            self.fixed is not None
        ):
            raise InvalidRequestError("sums (and only they) take a FixedPoint")
        paired = self.by is not None and self.by_fixed is not None
        if (k is AggKind.SUM_PRODUCTS) != paired or (self.by is None) != (self.by_fixed is None):
            raise InvalidRequestError("sum_products (and only it) takes 'by' and 'by_fixed'")
        if (k is AggKind.CATEGORIES) != (self.categories is not None):
            raise InvalidRequestError("categories (and only it) takes declared categories")
        if k is AggKind.CATEGORIES:
            cats = self.categories or ()
            if not cats or len(set(cats)) != len(cats) or any(c is None for c in cats):
                raise InvalidRequestError("categories must be non-empty, distinct, not null")
        if (k is AggKind.BINS) != (self.bins is not None):
            raise InvalidRequestError("bins (and only it) takes Bins")

    @property
    def width(self) -> int:
        """Integers per group: 1, or one per category (+1 for other), or one per bin."""
        if self.kind is AggKind.CATEGORIES:
            assert self.categories is not None
            return len(self.categories) + (1 if self.other else 0)
        if self.kind is AggKind.BINS:
            assert self.bins is not None
            return self.bins.count
        return 1


@dataclass(frozen=True)
class BlockFiles:
    """One block's part files, in stored order (root-relative paths)."""

    block_id: str
    paths: tuple[str, ...]
    rows: int


@dataclass(frozen=True, eq=False)
class ScanSource:
    """Where a plan's rows live: the granted blocks' part files on one filesystem.

    Attributes:
        blocks: the blocks, in order, each with its part files.
        base: the root the paths are relative to (a local directory or a bucket/prefix path
            on ``filesystem``).
        filesystem: the pyarrow filesystem (None: the local filesystem).
        uri: the data root as the user gave it (``/data/blocks``, ``s3://bucket/prefix``), for
            engines that open files themselves (e.g. in other processes).
        columns: every column of the stream's schema, in order.
        user_column: on a user-level stream, the user-id column bounding contributions.
        rows_per_user: at most this many rows per user are read (with ``user_column``).
    """

    blocks: tuple[BlockFiles, ...]
    base: str
    columns: tuple[str, ...]
    filesystem: pafs.FileSystem | None = None
    uri: str = ""
    user_column: str | None = None
    rows_per_user: int | None = None

    def full_paths(self) -> list[str]:
        """Every part file's path on :attr:`filesystem`, in stored order."""
        prefix = f"{self.base}/" if self.base else ""
        return [f"{prefix}{p}" for b in self.blocks for p in b.paths]

    @property
    def rows(self) -> int:
        """Rows stored in the blocks (public metadata; before bounding and filtering)."""
        return sum(b.rows for b in self.blocks)


@dataclass(frozen=True)
class Plan:
    """What to compute: filters, public groups and exact aggregates over a source.

    The output of every aggregate is indexed by group (row-major over the group keys' domains,
    in the order given; one group when there is no key) and then by the aggregate's own
    :attr:`Aggregate.width`.
    """

    source: ScanSource
    aggregates: tuple[Aggregate, ...]
    predicates: tuple[Predicate, ...] = ()
    group_by: tuple[GroupKey, ...] = ()

    def __post_init__(self) -> None:
        names = [a.name for a in self.aggregates]
        if not names or len(set(names)) != len(names):
            raise InvalidRequestError("a plan needs aggregates with distinct names")
        keys = [g.column for g in self.group_by]
        if len(set(keys)) != len(keys):
            raise InvalidRequestError("a group-by key appears twice")
        known = set(self.source.columns)
        used = {p.column for p in self.predicates} | set(keys)
        used |= {c for a in self.aggregates for c in (a.column, a.by) if c is not None}
        unknown = sorted(used - known)
        if unknown:
            raise InvalidRequestError(f"unknown column(s) {unknown}")

    @property
    def groups(self) -> int:
        """How many groups the output has (the product of the domains' sizes)."""
        return math.prod(len(g.domain) for g in self.group_by)

    def columns(self) -> tuple[str, ...]:
        """The columns an engine must read (projection), in schema order."""
        used = {p.column for p in self.predicates} | {g.column for g in self.group_by}
        used |= {c for a in self.aggregates for c in (a.column, a.by) if c is not None}
        if self.source.user_column is not None:
            used.add(self.source.user_column)
        return tuple(c for c in self.source.columns if c in used)


@dataclass(frozen=True)
class Partials:
    """Exact integer results of a plan: per aggregate, ``groups × width`` integers, row-major
    (group first). Python ints, so no sum can overflow."""

    values: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def of(self, name: str) -> tuple[int, ...]:
        return tuple(self.values[name])

    def __add__(self, other: Partials) -> Partials:
        """Element-wise sum (combining the partials of disjoint sets of rows)."""
        if not self.values:
            return other
        if not other.values:
            return self
        if set(self.values) != set(other.values):
            raise InvalidRequestError("partials of different plans cannot be added")
        return Partials(
            {
                k: tuple(a + b for a, b in zip(v, other.values[k], strict=True))
                for k, v in self.values.items()
            }
        )


def zero_partials(plan: Plan) -> Partials:
    """All-zero partials of ``plan`` (the result over no rows)."""
    return Partials({a.name: (0,) * (plan.groups * a.width) for a in plan.aggregates})


def check_scalar(value: Any) -> Scalar:
    """Refuse a literal that is not a plain scalar (no containers, no NaN)."""
    if isinstance(value, bool | int | str | date | datetime):
        return value
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidRequestError(f"a decimal literal must be finite, got {value!r}")
        return value
    if isinstance(value, float):
        if math.isnan(value):
            raise InvalidRequestError("NaN is not a usable literal")
        return value
    raise InvalidRequestError(f"unsupported literal {value!r} ({type(value).__name__})")


def flat_group_index(key_codes: Sequence[NDArray[np.int64]], domains: Sequence[int]) -> Any:
    """Row-major group index from per-key domain codes (each code in ``[0, domain)``)."""
    index = np.zeros(len(key_codes[0]) if key_codes else 0, dtype=np.int64)
    for codes, size in zip(key_codes, domains, strict=True):
        index = index * size + codes
    return index

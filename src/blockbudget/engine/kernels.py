"""Batch kernels of the reference semantics: predicates, group mapping and exact aggregates.

Used by the Arrow engine and by the Ray engine's workers, so that both compute, batch by batch,
exactly what :mod:`blockbudget.engine.plan` specifies:

* a predicate's comparison with a null or NaN cell is false (``IS_NULL`` is true for both);
* a group key value outside the declared domain, null or NaN drops the row;
* value aggregates read only cells that are neither null nor NaN, through
  :meth:`~blockbudget.engine.plan.FixedPoint.encode` and
  :meth:`~blockbudget.engine.plan.Bins.index`.

Integer sums are taken in int64 within a window of at most :data:`FLUSH_ROWS` rows (where no
sum can overflow: ``|v| ≤ 2**20`` so ``v² ≤ 2**40``) and then added to Python ints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from blockbudget.engine.plan import FIXED_POINT_BITS, AggKind, Op, Partials, flat_group_index
from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    from blockbudget.engine.plan import Aggregate, Plan, Predicate, Scalar, ScanSource

#: Rows summed in int64 before the sums move to Python ints: 2**22 · (2**20)² < 2**63.
FLUSH_ROWS = 1 << (62 - 2 * FIXED_POINT_BITS)

_COMPARE = {
    Op.EQ: pc.equal,
    Op.NE: pc.not_equal,
    Op.LT: pc.less,
    Op.LE: pc.less_equal,
    Op.GT: pc.greater,
    Op.GE: pc.greater_equal,
}


def _nan_mask(column: pa.Array) -> pa.Array | None:
    """True where a float cell is NaN (None for a non-float column)."""
    if not pa.types.is_floating(column.type):
        return None
    return pc.fill_null(pc.is_nan(column), False)


def _true_and_not_nan(result: pa.Array, column: pa.Array) -> pa.Array:
    """``result`` with null read as false and NaN cells of ``column`` false."""
    out = pc.fill_null(result, False)
    nan = _nan_mask(column)
    return out if nan is None else pc.and_(out, pc.invert(nan))


def _canonical(column: pa.Array) -> pa.Array:
    """A float column with ``-0.0`` read as ``0.0``: IEEE-754 calls them equal, but the hash
    lookups of ``is_in``/``index_in`` compare bits (SQL engines compare values)."""
    if not pa.types.is_floating(column.type):
        return column
    return pc.add(column, pa.scalar(0.0, column.type))


def _value_set(column: pa.Array, values: Sequence[Scalar], what: str) -> pa.Array:
    """``values`` as an array of the column's type (for ``is_in``/``index_in``; ``-0.0`` as
    ``0.0``, see :func:`_canonical`)."""
    try:
        return _canonical(pa.array(list(values), type=column.type))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        raise InvalidRequestError(
            f"{what}: values {list(values)[:5]!r} do not fit the column's type {column.type}"
        ) from None


def exact_scalar(value: Any, type_: pa.DataType) -> Any:
    """``value`` as a scalar of the column type ``type_`` when it converts exactly (a checked
    query's literals do), else ``value`` itself. With a Python int Arrow casts a uint64 column
    to int64, failing only when some row holds ``2**63`` or more (a bit about the data); and
    ``pa.scalar`` truncates silently (``-3.5`` -> ``-3``), hence the round trip."""
    base = type_.value_type if pa.types.is_dictionary(type_) else type_
    try:
        scalar = pa.scalar(value, type=base)
        same = bool(scalar.as_py() == value)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return value
    return scalar if same else value


def predicate_mask(batch: pa.RecordBatch, predicate: Predicate) -> pa.Array:
    """The rows of ``batch`` that pass ``predicate`` (a non-null boolean array)."""
    column = batch.column(predicate.column)
    op = predicate.op
    if op is Op.IS_NULL:
        nan = _nan_mask(column)
        nulls = pc.is_null(column)
        return nulls if nan is None else pc.or_(nulls, nan)
    if op is Op.NOT_NULL:
        return _true_and_not_nan(pc.is_valid(column), column)
    if op in (Op.IN, Op.NOT_IN):
        assert isinstance(predicate.value, tuple)
        values = _value_set(column, predicate.value, f"predicate on {predicate.column!r}")
        member = pc.is_in(_canonical(column), value_set=values)
        if op is Op.NOT_IN:
            member = pc.and_(pc.invert(member), pc.is_valid(column))
        return _true_and_not_nan(member, column)
    try:
        result = _COMPARE[op](column, exact_scalar(predicate.value, column.type))
    except (pa.ArrowException, TypeError) as exc:
        raise InvalidRequestError(
            f"predicate {predicate.column!r} {op.value} {predicate.value!r} does not fit the "
            f"column's type {column.type} ({type(exc).__name__})"
        ) from None
    return _true_and_not_nan(result, column)


def filter_batch(batch: pa.RecordBatch, predicates: Sequence[Predicate]) -> pa.RecordBatch:
    """The rows of ``batch`` that pass every predicate, in order."""
    if not predicates or not batch.num_rows:
        return batch
    mask = predicate_mask(batch, predicates[0])
    for predicate in predicates[1:]:
        mask = pc.and_(mask, predicate_mask(batch, predicate))
    return batch.filter(mask)


def output_columns(
    source: ScanSource,
    columns: Sequence[str] | None,
    predicates: Sequence[Predicate],
    batch_rows: int,
) -> list[str]:
    """Check the arguments of :meth:`~blockbudget.engine.base.Engine.batches`; the columns
    to return (default: every column of the source, in schema order).

    Raises:
        InvalidRequestError: no column, a column twice, an unknown column or ``batch_rows < 1``.
    """
    out = list(source.columns) if columns is None else list(columns)
    if not out:
        raise InvalidRequestError("batches need at least one column")
    if len(set(out)) != len(out):
        raise InvalidRequestError(f"a column is asked for twice: {out}")
    unknown = sorted((set(out) | {p.column for p in predicates}) - set(source.columns))
    if unknown:
        raise InvalidRequestError(f"unknown column(s) {unknown}")
    if batch_rows < 1:
        raise InvalidRequestError(f"batch_rows must be at least 1, got {batch_rows}")
    return out


def _codes(column: pa.Array, value_set: pa.Array) -> pa.Array:
    """Each cell's index in ``value_set`` (null: not there, null or NaN)."""
    codes = pc.index_in(_canonical(column), value_set=value_set)
    nan = _nan_mask(column)
    if nan is not None:
        codes = pc.if_else(nan, pa.scalar(None, codes.type), codes)
    return codes


def _floats(column: pa.Array, name: str) -> NDArray[np.float64]:
    """A non-null column as float64 (CAST(x AS DOUBLE): ints round to nearest)."""
    try:
        cast = pc.cast(column, pa.float64(), safe=False)
    except (pa.ArrowException, TypeError):
        raise InvalidRequestError(
            f"column {name!r} of type {column.type} has no numeric value to aggregate"
        ) from None
    return np.asarray(cast.to_numpy(zero_copy_only=False), dtype=np.float64)


class Accumulator:
    """Adds batches of rows (already bounded and filtered) into a plan's exact partials."""

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._groups = plan.groups
        self._domains = [len(g.domain) for g in plan.group_by]
        self._sets: dict[str, pa.Array] = {}
        self._totals: dict[str, list[int]] = {
            a.name: [0] * (self._groups * a.width) for a in plan.aggregates
        }
        self._window: dict[str, NDArray[np.int64]] = {}
        self._window_rows = 0

    def _set(self, key: str, column: pa.Array, values: Sequence[Scalar], what: str) -> pa.Array:
        cached = self._sets.get(key)
        if cached is None or cached.type != column.type:
            cached = self._sets[key] = _value_set(column, values, what)
        return cached

    def add(self, batch: pa.RecordBatch) -> None:
        """Add a batch (any size: it is cut into windows where int64 cannot overflow)."""
        for start in range(0, batch.num_rows, FLUSH_ROWS):
            part = batch.slice(start, FLUSH_ROWS)
            if self._window_rows + part.num_rows > FLUSH_ROWS:
                self._flush()
            self._window_rows += part.num_rows
            self._add_window(part)

    def result(self) -> Partials:
        """The exact partials of every row added."""
        self._flush()
        return Partials({k: tuple(v) for k, v in self._totals.items()})

    def _flush(self) -> None:
        for name, window in self._window.items():
            total = self._totals[name]
            for i, value in enumerate(window.tolist()):
                if value:
                    total[i] += value
        self._window = {}
        self._window_rows = 0

    def _add_window(self, batch: pa.RecordBatch) -> None:
        group = np.zeros(batch.num_rows, dtype=np.int64)
        if self._plan.group_by:
            codes = [
                _codes(
                    batch.column(g.column),
                    self._set(f"g:{g.column}", batch.column(g.column), g.domain, "group key"),
                )
                for g in self._plan.group_by
            ]
            keep = pc.is_valid(codes[0])
            for c in codes[1:]:
                keep = pc.and_(keep, pc.is_valid(c))
            batch = batch.filter(keep)
            arrays = [np.asarray(c.filter(keep).to_numpy(), dtype=np.int64) for c in codes]
            group = flat_group_index(arrays, self._domains)
        if not batch.num_rows:
            return
        for agg in self._plan.aggregates:
            counts = self._aggregate(agg, batch, group)
            window = self._window.get(agg.name)
            self._window[agg.name] = counts if window is None else window + counts

    def _aggregate(
        self, agg: Aggregate, batch: pa.RecordBatch, group: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        size = self._groups * agg.width
        if agg.column is None:
            return np.bincount(group, minlength=size).astype(np.int64)
        column = batch.column(agg.column)
        if agg.kind is AggKind.CATEGORIES:
            return self._categories(agg, column, group)
        valid = _present(column)
        if agg.kind is AggKind.SUM_PRODUCTS:
            return self._products(agg, batch, valid, group)
        present = np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool)
        gv = group[present]
        if agg.kind is AggKind.COUNT:
            return np.bincount(gv, minlength=size).astype(np.int64)
        values = _floats(column.filter(valid), agg.column)
        if agg.kind is AggKind.BINS:
            assert agg.bins is not None
            cells = gv * agg.width + agg.bins.index(values)
            return np.bincount(cells, minlength=size).astype(np.int64)
        assert agg.fixed is not None
        units = agg.fixed.encode(values)
        if agg.kind is AggKind.SUM_SQUARES:
            units = units * units
        return _group_sum(gv, units, size)

    def _products(
        self, agg: Aggregate, batch: pa.RecordBatch, valid: pa.Array, group: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """Σ v(x)·w(y) over rows where both values are present (each ``|v·w| ≤ 2**40``)."""
        assert agg.column is not None and agg.by is not None
        assert agg.fixed is not None and agg.by_fixed is not None
        other = batch.column(agg.by)
        both = pc.and_(valid, _present(other))
        rows = np.asarray(both.to_numpy(zero_copy_only=False), dtype=bool)
        x = agg.fixed.encode(_floats(batch.column(agg.column).filter(both), agg.column))
        y = agg.by_fixed.encode(_floats(other.filter(both), agg.by))
        return _group_sum(group[rows], x * y, self._groups * agg.width)

    def _categories(
        self, agg: Aggregate, column: pa.Array, group: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        assert agg.categories is not None
        size = self._groups * agg.width
        assert agg.column is not None
        codes = _codes(column, self._set(f"c:{agg.name}", column, agg.categories, "categories"))
        if agg.other:
            other = pc.is_valid(column)
            nan = _nan_mask(column)
            if nan is not None:
                other = pc.and_(other, pc.invert(nan))
            codes = pc.if_else(pc.and_(other, pc.is_null(codes)), agg.width - 1, codes)
        found = np.asarray(pc.is_valid(codes).to_numpy(zero_copy_only=False), dtype=bool)
        index = np.asarray(codes.filter(pc.is_valid(codes)).to_numpy(), dtype=np.int64)
        return np.bincount(group[found] * agg.width + index, minlength=size).astype(np.int64)


def _present(column: pa.Array) -> pa.Array:
    """Where a cell is neither null nor NaN."""
    valid = pc.is_valid(column)
    nan = _nan_mask(column)
    return valid if nan is None else pc.and_(valid, pc.invert(nan))


def _group_sum(group: NDArray[np.int64], units: NDArray[np.int64], size: int) -> NDArray[np.int64]:
    """Exact per-group sums of int64 units (``|u| ≤ 2**40``) over at most :data:`FLUSH_ROWS`
    rows.

    ``np.bincount`` adds float64 weights; a float sum is exact while every partial sum is an
    integer below 2**53. Each unit is therefore split into 20-bit limbs (``u = hi·2**20 + lo``,
    ``|lo| < 2**20``, ``|hi| ≤ 2**20``), whose sums over 2**22 rows stay below 2**42.
    """
    if size == 1:
        return np.array([int(units.sum())], dtype=np.int64)
    hi, lo = np.divmod(units, 1 << FIXED_POINT_BITS)
    high = np.bincount(group, weights=hi.astype(np.float64), minlength=size)
    low = np.bincount(group, weights=lo.astype(np.float64), minlength=size)
    return (high.astype(np.int64) << FIXED_POINT_BITS) + low.astype(np.int64)

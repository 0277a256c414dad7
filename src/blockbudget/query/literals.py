"""A query's literals converted to their columns' own types, exactly, before any row is read.

Every literal a query holds — filter values, ``in`` lists, group-by domains, histogram
categories — is converted to its column's Arrow type by :func:`typed_literal`, and the plan
the engines run carries the converted values. A conversion that would lose information is
refused, from the schema and the literal alone:

* a float literal on an integer column must be integral (``2.0`` becomes ``2``; ``1.5`` and
  ``inf`` are refused), and an integer must lie in the column's range (an order comparison
  with a non-integral number is first rewritten with the integer that keeps the same rows,
  :func:`blockbudget.query.checks.check_schema`: ``n < 2.5`` is ``n < 3``);
* a literal on a ``float32`` column must be a float32 exactly (``0.5`` is; ``0.1`` is not),
  and an integer on a float column must be exact in it (``2**53 + 1`` is not on float64);
* a literal on a decimal column becomes a :class:`~decimal.Decimal` (a float through its
  shortest repr, ``0.1`` -> ``Decimal('0.1')``) and must fit the column's precision and
  scale exactly; it is written at the column's scale (``1.0`` on ``decimal(38, 0)`` is
  ``Decimal('1')``), so no engine widens the column to the literal's own scale;
* a datetime on a timestamp column must be time-zone aware exactly when the column is (an
  aware literal against a naive column has no defined instant), and must fit the column's
  unit (no sub-second literal on a ``timestamp[s]`` column, no nanosecond part on any
  column: engines bind literals at microsecond precision); an aware literal becomes the same
  instant in UTC (two literals unequal in Python — ``fold=1`` in a zone and that instant in
  UTC — can be one Arrow timestamp, so distinct values are checked after conversion);
* ``-0.0`` becomes ``0.0`` (IEEE-754 calls them equal; a hash lookup would not).

Why this matters for privacy: when engines compare a literal with cells only after an implicit
conversion, whether a comparison (or the query) fails, and which group a row lands in, can
depend on the data and differ between engines. With column-typed literals every engine
compares values of one type, exactly.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from decimal import Context, Decimal, Inexact, InvalidOperation
from typing import TYPE_CHECKING, Any

from blockbudget.decimals import shortest_decimal
from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    import pyarrow as pa

    from blockbudget.engine.plan import Scalar


def kind_of_type(type_: pa.DataType) -> str:
    """The literal family of an Arrow type: number, string, boolean, date, timestamp, other."""
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(type_):
        return kind_of_type(type_.value_type)
    if t.is_integer(type_) or t.is_floating(type_) or t.is_decimal(type_):
        return "number"
    if t.is_string(type_) or t.is_large_string(type_):
        return "string"
    if t.is_boolean(type_):
        return "boolean"
    if t.is_date(type_):
        return "date"
    if t.is_timestamp(type_):
        return "timestamp"
    return "other"


def kind_of_literal(value: Any) -> str:
    """The literal family of a Python value (see :func:`kind_of_type`)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, datetime):
        return "timestamp"
    if isinstance(value, date):
        return "date"
    return "other"


#: More digits than any Arrow decimal holds (decimal256: 76).
_MAX_DIGITS = 80


class _Refused(Exception):
    """A literal that does not convert exactly (the reason)."""


def typed_literal(value: Scalar, type_: pa.DataType, *, column: str, what: str) -> Scalar:
    """``value`` as a value of the Arrow type ``type_``, exactly (see the module docstring).

    Raises:
        InvalidRequestError: a literal of another family, or one that does not convert exactly.

    Example:
        >>> import pyarrow as pa
        >>> typed_literal(2.0, pa.int64(), column="n", what="filter value")
        2
        >>> typed_literal(-0.0, pa.float64(), column="x", what="filter value")
        0.0
        >>> typed_literal(0.1, pa.decimal128(5, 2), column="d", what="domain value")
        Decimal('0.10')
        >>> typed_literal(0.5, pa.float32(), column="f", what="filter value")
        0.5
        >>> typed_literal(0.1, pa.float32(), column="f", what="filter value")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        blockbudget.errors.InvalidRequestError: filter value 0.1 does not fit column 'f' ...
    """
    import pyarrow as pa

    expected, got = kind_of_type(type_), kind_of_literal(value)
    if got != expected or expected == "other":
        raise InvalidRequestError(
            f"{what} {value!r} ({got}) does not match column {column!r}, which holds "
            f"{type_} ({expected} literals)"
        )
    base = type_.value_type if pa.types.is_dictionary(type_) else type_
    try:
        if expected == "number":
            return _number(value, base)
        if expected == "timestamp":
            assert isinstance(value, datetime)
            return _timestamp(value, base)
    except _Refused as exc:
        raise InvalidRequestError(
            f"{what} {value!r} does not fit column {column!r} ({type_}) exactly: {exc}"
        ) from None
    return value


def _number(value: Any, type_: pa.DataType) -> Scalar:
    import numpy as np
    import pyarrow as pa

    t = pa.types
    if isinstance(value, float) and math.isnan(value):
        raise _Refused("NaN")
    if t.is_integer(type_):
        if isinstance(value, float | Decimal):
            if not (math.isfinite(value) and value == int(value)):
                raise _Refused("not an integer")
            value = int(value)
        try:
            pa.scalar(value, type=type_)
        except (OverflowError, pa.ArrowException) as exc:
            raise _Refused("out of the column's range") from exc
        return int(value)
    if t.is_floating(type_):
        exact = float(value)
        if math.isfinite(exact) and Decimal(exact) != Decimal(value):
            raise _Refused("not exact as a double")
        if t.is_float32(type_) and math.isfinite(exact) and float(np.float32(exact)) != exact:
            raise _Refused("not a float32")
        if t.is_float16(type_):
            raise _Refused("half-precision columns take no literal")
        return exact + 0.0  # -0.0 -> 0.0
    # decimal
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused("not finite")
        value = shortest_decimal(value)
    strict = Context(prec=2 * _MAX_DIGITS, traps=[Inexact, InvalidOperation])
    try:
        number = strict.plus(strict.quantize(Decimal(value), Decimal(1).scaleb(-type_.scale)))
        pa.scalar(number, type=type_)
    except (InvalidOperation, Inexact, OverflowError, pa.ArrowException) as exc:
        raise _Refused("more digits than its precision or scale") from exc
    return number  # at the column's scale; Decimal('-0') -> Decimal('0')


def _timestamp(value: datetime, type_: pa.DataType) -> datetime:
    import pyarrow as pa

    aware = value.tzinfo is not None and value.utcoffset() is not None
    if aware != (type_.tz is not None):
        raise _Refused(
            "a time-zone-aware literal against a naive column (or the reverse) names no "
            "instant; write the literal as the column holds it"
        )
    probe = pa.array([value], type=pa.timestamp("us", tz=type_.tz))
    try:
        probe.cast(type_, safe=True)
    except pa.ArrowException as exc:
        raise _Refused(f"not representable in {type_}") from exc
    if getattr(value, "nanosecond", 0):
        raise _Refused("a nanosecond part (engines bind literals at microsecond precision)")
    return value.astimezone(UTC) if aware else value

"""Input handling shared by the DP statistics: conversion, missing values, categories.

Accepted inputs: numpy arrays, pandas Series, pyarrow Arrays / ChunkedArrays and plain
sequences. Numeric data becomes a float64 vector with missing entries (NaN, None, pandas NA,
pyarrow null) as NaN; the :class:`NanPolicy` then decides what happens to them.

Neighbouring datasets differ by adding or removing one row (unbounded DP, Dwork & Roth 2014
§2.3). Every per-row transformation here — dropping a missing row, clipping a value, mapping a
key to a category or dropping it — is a function of that row alone, so it never increases the
sensitivity of what follows.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from blockbudget.decimals import plain_number
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.noise import FloatArray


class NanPolicy(Enum):
    """What a statistic does with missing values (NaN, None, NA, null) in its input.

    DROP (the default) removes the row before anything else — a per-row filter, so the
    sensitivity analysis is unchanged, and nothing about the data shows outside the DP output.
    REJECT raises :class:`~blockbudget.errors.DataError` before any budget is drawn. Note that
    REJECT's exception itself depends on the private data (it reveals that some row is missing a
    value), so use it on data that was already validated, as a guard against pipeline bugs.
    """

    DROP = "drop"
    REJECT = "reject"


class Unmatched(Enum):
    """What :func:`~blockbudget.mechanisms.statistics.dp_histogram` does with a value that is not
    one of the public categories: DROP it (default), or count it in an extra OTHER bin. Either
    way one row still changes at most one bin by one (L1 sensitivity 1)."""

    DROP = "drop"
    OTHER = "other"


def _is_arrow(data: object) -> bool:
    return type(data).__module__.split(".")[0] == "pyarrow"


def to_float_array(data: Any, *, name: str) -> FloatArray:
    """A 1-D float64 copy of ``data`` with missing entries as NaN.

    Raises:
        DataError: for non-numeric data, or data that is not one-dimensional.
    """
    if isinstance(data, (str, bytes)) or np.isscalar(data):
        raise DataError(f"{name} must be a 1-D array of numbers, got a scalar {data!r}")
    try:
        if _is_arrow(data):
            import pyarrow as pa

            if not isinstance(data, (pa.Array, pa.ChunkedArray)):
                raise DataError(f"{name}: expected a pyarrow Array, got {type(data).__name__}")
            arr = np.asarray(data.cast(pa.float64()).to_numpy(zero_copy_only=False))
        elif isinstance(data, pd.Series):
            arr = data.to_numpy(dtype=np.float64, na_value=np.nan)
        elif isinstance(data, np.ndarray) and data.dtype.kind in "biuf":
            arr = data.astype(np.float64)
        else:
            seq = data if isinstance(data, np.ndarray) else list(data)
            arr = pd.Series(seq, dtype=object).to_numpy(dtype=np.float64, na_value=np.nan)
    except DataError:
        raise
    except Exception as exc:  # incl. pyarrow's ArrowInvalid / ArrowNotImplementedError
        # The message never quotes the offending value: it is a private record.
        raise DataError(
            f"{name} must contain numbers; got {_kind_of(data)} that cannot be read as floats "
            f"({type(exc).__name__})"
        ) from None
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 1:
        raise DataError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def _kind_of(data: object) -> str:
    """A description of an input's type, without any of its values."""
    dtype = getattr(data, "dtype", None) or getattr(data, "type", None)
    return f"{type(data).__name__} of {dtype}" if dtype is not None else type(data).__name__


def apply_nan_policy(values: FloatArray, policy: NanPolicy, *, name: str) -> FloatArray:
    """``values`` without NaN rows (DROP) or unchanged after checking there are none (REJECT).

    Raises:
        DataError: under REJECT when a value is NaN.
        InvalidRequestError: when ``policy`` is not a :class:`NanPolicy`.
    """
    policy = check_enum(policy, NanPolicy, name="on_nan")
    missing = np.isnan(values)
    if not missing.any():
        return values
    if policy is NanPolicy.REJECT:
        raise DataError(
            f"{name} contains missing values and on_nan=NanPolicy.REJECT; "
            "drop them upstream or pass on_nan=NanPolicy.DROP"
        )
    return values[~missing]


def check_enum(value: Any, enum_type: type[Any], *, name: str) -> Any:
    """``value`` if it is a member of ``enum_type``.

    Raises:
        InvalidRequestError: otherwise (modes are enums, not strings or booleans).
    """
    if not isinstance(value, enum_type):
        members = ", ".join(f"{enum_type.__name__}.{m.name}" for m in enum_type)
        raise InvalidRequestError(f"{name} must be one of {members}, got {value!r}")
    return value


#: The largest magnitude of a clipping bound. A sum of up to 2**63 values clipped to
#: [-2**960, 2**960] stays below 2**1023, so no sum of clipped values can overflow a double:
#: an overflow would be a failure that depends on the data, i.e. a release nobody paid for.
MAX_BOUND = 2.0**960


def check_bounds(
    lower: float,
    upper: float,
    *,
    limit: float = MAX_BOUND,
    names: tuple[str, str] = ("lower", "upper"),
) -> tuple[float, float]:
    """Clipping bounds: finite numbers with lower < upper and |bound| ≤ ``limit``.

    Args:
        lower: public lower clipping bound.
        upper: public upper clipping bound.
        limit: the largest magnitude allowed (:data:`MAX_BOUND` by default; statistics that
            sum squares ask for its square root).
        names: the two bounds' names in errors (a second column's ``lower2``, ``upper2``).

    Raises:
        InvalidRequestError: otherwise (an integer too large for a double included).
    """
    out = []
    for label, given in zip(names, (lower, upper), strict=True):
        bound = plain_number(given)
        if isinstance(bound, bool) or not isinstance(bound, (int, float)):
            raise InvalidRequestError(f"{label} must be a number, got {type(bound).__name__}")
        if isinstance(bound, float) and not math.isfinite(bound):
            raise InvalidRequestError(f"{label} must be finite, got {bound!r}")
        if abs(bound) > limit:
            raise InvalidRequestError(
                f"{label} must be within ±{limit:.4g}, so that no sum of clipped values can "
                f"overflow, got {bound!r}"
            )
        out.append(float(bound))
    if not out[0] < out[1]:
        raise InvalidRequestError(f"clipping bounds need lower < upper, got [{lower}, {upper}]")
    return out[0], out[1]


def check_categories(categories: Sequence[Hashable]) -> tuple[Hashable, ...]:
    """Public categories: a non-empty sequence of distinct, hashable, non-missing values.

    Raises:
        InvalidRequestError: for an empty, duplicated or missing category.
    """
    if isinstance(categories, (str, bytes)):
        raise InvalidRequestError("categories must be a sequence of values, not a string")
    try:
        cats = tuple(categories)
    except TypeError as exc:
        raise InvalidRequestError(f"categories must be a sequence, got {categories!r}") from exc
    if not cats:
        raise InvalidRequestError("categories must not be empty")
    try:
        if len(set(cats)) != len(cats):
            raise InvalidRequestError("categories must be distinct")
    except TypeError as exc:
        raise InvalidRequestError(f"categories must be hashable: {exc}") from exc
    for cat in cats:
        if cat is None or (isinstance(cat, float) and math.isnan(cat)) or cat is pd.NA:
            raise InvalidRequestError("categories must not contain a missing value")
    return cats


def key_codes(keys: Any, categories: tuple[Hashable, ...], *, name: str) -> NDArray[np.intp]:
    """Index of each key in ``categories``: −1 for a value outside them, −2 for a missing key.

    Raises:
        DataError: if ``keys`` is not one-dimensional.
    """
    if isinstance(keys, (str, bytes)) or np.isscalar(keys):
        raise DataError(f"{name} must be a 1-D array, got a scalar {keys!r}")
    if _is_arrow(keys):
        series = keys.to_pandas()
    elif isinstance(keys, pd.Series):
        series = keys
    else:
        arr = keys if isinstance(keys, np.ndarray) else None
        if arr is not None and arr.ndim != 1:
            raise DataError(f"{name} must be one-dimensional, got shape {arr.shape}")
        series = pd.Series(list(keys) if arr is None else arr)
    index = pd.Index(list(categories), dtype=object)
    codes = np.asarray(index.get_indexer(pd.Index(series.to_numpy(), dtype=object)), np.intp)
    codes[np.asarray(pd.isna(series), dtype=bool)] = -2
    return codes


def row_count(data: Any, *, name: str = "data") -> int:
    """The number of rows of ``data`` (any sized table or array).

    Raises:
        DataError: if ``data`` has no length.
    """
    if _is_arrow(data) and hasattr(data, "num_rows"):
        return int(data.num_rows)
    try:
        return len(data)
    except TypeError as exc:
        raise DataError(f"{name} must be a sized collection of rows: {exc}") from exc

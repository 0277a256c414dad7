"""Argument checks shared by the training package's value types (clear errors for bad input).

Each returns the checked value and raises :class:`~blockbudget.errors.InvalidRequestError` with
the rule and the bad value; booleans are refused where a number is expected.
"""

from __future__ import annotations

import math

from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError


def check_int(value: object, *, name: str, low: int = 1) -> int:
    """An ``int`` (not a bool) that is ≥ ``low``.

    Raises:
        InvalidRequestError: otherwise.
    """
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidRequestError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def check_number(
    value: object,
    *,
    name: str,
    low: float = 0.0,
    high: float = math.inf,
    low_open: bool = True,
    high_open: bool = False,
) -> float:
    """A finite real number (not a bool) within the given interval (open at ``low`` by default).

    Raises:
        InvalidRequestError: otherwise.
    """
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequestError(f"{name} must be a number, got {value!r}")
    x = float(value)
    above = x > low if low_open else x >= low
    below = x < high if high_open else x <= high
    if not (math.isfinite(x) and above and below):
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        raise InvalidRequestError(
            f"{name} must be finite and in {left}{low}, {high}{right}, got {value!r}"
        )
    return x

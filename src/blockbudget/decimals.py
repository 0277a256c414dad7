"""Exact decimal numbers for privacy budgets: fixed-point units, directed rounding, and the
one text form of every stored value.

Budgets are kept as :class:`decimal.Decimal` and stored as integers in units of 10**-18
(:data:`UNIT`): a charge rounds *up* (:func:`units_up`), a capacity *down* (:func:`units_down`).
The contexts below make every sum exact or refuse it (:data:`EXACT_CONTEXT`), or round in the
stated direction. :mod:`blockbudget.budget` builds the cost kinds on them.
"""

from __future__ import annotations

import math
import re
import sys
from decimal import (
    ROUND_CEILING,
    ROUND_FLOOR,
    Context,
    Decimal,
    Inexact,
    InvalidOperation,
    Overflow,
    Underflow,
    localcontext,
)
from typing import Any, TypeAlias

from blockbudget.errors import InvalidBudgetError

#: Fixed-point resolution of stored budgets: 1 unit = 1e-18 of epsilon or delta.
UNIT_EXPONENT = 18
UNIT = 10**UNIT_EXPONENT

#: Stand-in for an infinite RDP value in fixed point: larger than any capacity.
INF_UNITS = 10**60

#: Relative bump applied to values computed with floating-point formulas.
FLOAT_SAFETY = 1e-12


#: Budget values are 0 or between these magnitudes, so that every sum and difference of stored
#: values is exact at 200 digits (and Decimal never overflows or underflows).
MIN_MAGNITUDE = Decimal("1e-100")
MAX_MAGNITUDE = Decimal("1e30")

# Exact arithmetic: an operation that would have to round raises instead of rounding silently.
EXACT_CONTEXT = Context(prec=200, traps=[InvalidOperation, Inexact, Overflow, Underflow])
CEIL_CONTEXT = Context(prec=200, rounding=ROUND_CEILING, traps=[InvalidOperation, Overflow])
FLOOR_CONTEXT = Context(prec=200, rounding=ROUND_FLOOR, traps=[InvalidOperation, Overflow])
# Prices computed in decimal round up, at a precision that keeps stored values short (a sum of
# stored values must stay exact in EXACT_CONTEXT).
PRICE_CONTEXT = Context(prec=40, rounding=ROUND_CEILING, traps=[InvalidOperation, Overflow])

Number: TypeAlias = int | float | str | Decimal

#: The text of an exact budget number: ASCII digits, an optional sign, point and exponent
#: (``0.5``, ``-.25``, ``1e-9``), or an infinity; no spaces, underscores or other digits.
DECIMAL_TEXT = re.compile(
    r"[+-]?(?:[0-9]++(?:\.[0-9]*+)?|\.[0-9]++)(?:[eE][+-]?[0-9]++)?|[+-]?(?:inf|infinity)",
    re.IGNORECASE,
)


def shown(value: object, *, limit: int = 40) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for error messages about input text.

    Example:
        >>> shown("9" * 100)
        "'9999999999999999999999999999999999999…(102 characters)"
    """
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 2]}…({len(text)} characters)"


def check_decimal_text(text: str, *, name: str) -> str:
    """``text`` if it is an exact budget number (:data:`DECIMAL_TEXT`).

    Raises:
        InvalidBudgetError: anything else (``"１"``, ``" 1"``, ``"1_0"``, ``"0x1"``).

    Example:
        >>> check_decimal_text("1e-9", name="epsilon")
        '1e-9'
    """
    if not DECIMAL_TEXT.fullmatch(text):
        raise InvalidBudgetError(
            f"{name} must be a decimal number of ASCII digits ([+-]digits[.digits][e[+-]digits],"
            f" no spaces), got {shown(text)}"
        )
    return text


def plain_number(value: Any) -> Any:
    """A NumPy scalar as the Python number it holds (``numpy.bool_`` → bool, an integer → int,
    a floating-point scalar → float, exactly: a float32 as its exact binary value); anything
    else unchanged.

    Every numeric parameter goes through this before it is checked or parsed, so that a NumPy
    scalar means what the same Python number means: ``numpy.float64`` is a ``float`` whose
    ``repr`` (``np.float64(2.0)``) is no decimal, and ``numpy.float32`` and ``numpy.int64`` are
    neither ``float`` nor ``int``. A NumPy boolean becomes a bool, which numbers refuse. NumPy
    is looked up, never imported: a value cannot be a NumPy scalar unless NumPy is loaded.

    Example:
        >>> import numpy as np
        >>> plain_number(np.float64(2.0)), plain_number(np.int64(3)), plain_number(np.True_)
        (2.0, 3, True)
        >>> plain_number(np.float32(0.5)), plain_number("0.5")
        (0.5, '0.5')
    """
    np = sys.modules.get("numpy")
    if np is None or not isinstance(value, np.generic):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def shortest_decimal(value: float) -> Decimal:
    """A float as its shortest round-trip decimal (what ``repr`` shows of a Python float), an
    int exactly; a NumPy scalar as the Python number it holds (``repr`` of ``numpy.float64(2)``
    is ``np.float64(2.0)``, no decimal: parse numbers with this, never ``Decimal(repr(x))``).

    Example:
        >>> import numpy as np
        >>> shortest_decimal(0.1), shortest_decimal(np.float64(2.0)), shortest_decimal(np.int64(3))
        (Decimal('0.1'), Decimal('2.0'), Decimal('3'))
    """
    value = plain_number(value)
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def plain_fields(obj: Any) -> None:
    """Replace each field of the dataclass ``obj`` that holds a NumPy scalar by the Python
    number (:func:`plain_number`), frozen dataclasses too: the first line of a
    ``__post_init__``, so that the checks after it and every later use (``repr``, JSON) see
    what the same Python number would give."""
    import dataclasses

    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        plain = plain_number(value)
        if plain is not value:
            object.__setattr__(obj, f.name, plain)


def to_decimal(value: Number, *, name: str) -> Decimal:
    """Read a number exactly; floats as their shortest round-trip decimal, text only in the
    ASCII form :data:`DECIMAL_TEXT`; a NumPy scalar as the Python number it holds
    (:func:`plain_number`).

    Raises:
        InvalidBudgetError: for booleans, NaN, or text that is not a number.
    """
    value = plain_number(value)
    if isinstance(value, bool):
        raise InvalidBudgetError(f"{name} must be a number, got the boolean {value!r}")
    try:
        if isinstance(value, float):
            dec = Decimal(repr(value))
        elif isinstance(value, (int, Decimal)):
            dec = Decimal(value)
        elif isinstance(value, str):
            dec = Decimal(check_decimal_text(value, name=name))
        else:
            raise InvalidBudgetError(f"{name} must be a number, got {type(value).__name__}")
    except InvalidOperation as exc:
        raise InvalidBudgetError(f"{name} must be a number, got {shown(value)}") from exc
    if dec.is_nan():
        raise InvalidBudgetError(f"{name} must not be NaN")
    # adjusted() needs no arithmetic context, so huge exponents cannot overflow here.
    if dec.is_finite() and dec != 0 and not (-100 <= dec.adjusted() <= 30 and abs(dec) <= 10**30):
        raise InvalidBudgetError(
            f"{name} must be 0 or of magnitude between {MIN_MAGNITUDE} and {MAX_MAGNITUDE}, "
            f"got {shown(value)}"
        )
    return dec


def units_up(value: Decimal) -> int:
    """Fixed-point units of ``value``, rounded up (for charges). Infinity maps to INF_UNITS."""
    if value.is_infinite():
        return INF_UNITS if value > 0 else -INF_UNITS
    with localcontext(CEIL_CONTEXT):
        return int((value.scaleb(UNIT_EXPONENT)).to_integral_value(rounding=ROUND_CEILING))


def units_down(value: Decimal) -> int:
    """Fixed-point units of ``value``, rounded down (for capacities)."""
    if value.is_infinite():
        return INF_UNITS if value > 0 else -INF_UNITS
    with localcontext(FLOOR_CONTEXT):
        return int((value.scaleb(UNIT_EXPONENT)).to_integral_value(rounding=ROUND_FLOOR))


def from_units(units: int) -> Decimal:
    """The exact decimal value of a fixed-point amount."""
    if units >= INF_UNITS:
        return Decimal("Infinity")
    if units <= -INF_UNITS:
        return Decimal("-Infinity")
    with localcontext(EXACT_CONTEXT):
        return Decimal(units).scaleb(-UNIT_EXPONENT)


def clamp_up(x: float) -> Decimal:
    """A computed non-negative value as a storable decimal, never smaller than it: tiny positive
    values become MIN_MAGNITUDE, huge ones infinity."""
    if math.isinf(x):
        return Decimal("Infinity")
    return clamp_decimal_up(Decimal(repr(x)))


def clamp_decimal_up(value: Decimal) -> Decimal:
    """A non-negative price as a storable decimal, never below it: a positive value under
    :data:`MIN_MAGNITUDE` becomes MIN_MAGNITUDE (which the ledger charges as one 1e-18 unit, see
    :func:`units_up`), one over :data:`MAX_MAGNITUDE` becomes infinity. Zero stays zero: only a
    cost whose true value is 0 may be free."""
    if value > MAX_MAGNITUDE:
        return Decimal("Infinity")
    if 0 < value < MIN_MAGNITUDE:
        return MIN_MAGNITUDE
    return value


def bump_up(x: float) -> float:
    """A float computed by a formula, nudged up so that its rounding errors cannot undercount."""
    if math.isinf(x) or x == 0.0:
        return x
    return math.nextafter(x + abs(x) * FLOAT_SAFETY, math.inf)


def sum_up(a: Decimal, b: Decimal) -> Decimal:
    """a + b for two non-negative values whose exact sum needs more than 200 digits: the next
    double above the float sum (0 kept, tiny values lifted to 1e-90), raised until it is at
    least the exact sum."""
    if a.is_infinite() or b.is_infinite():
        return Decimal("Infinity")
    x = float(a) + float(b)
    if x <= 0:
        return Decimal(0)
    up = max(math.nextafter(x, math.inf), 1e-90)
    with localcontext(CEIL_CONTEXT):
        exact = a + b
    if Decimal(repr(up)) < exact:  # the stored value is the shortest round-trip decimal
        up = float(exact)
        while Decimal(repr(up)) < exact:
            up = math.nextafter(up, math.inf)
    return Decimal(repr(up))


def diff_down(a: Decimal, b: Decimal) -> Decimal:
    """max(a − b, 0), as the double just below the float difference and never above the exact
    difference; 0 when less than 1e-90 is left."""
    if a.is_infinite():
        return a if b.is_finite() else Decimal(0)
    y = math.nextafter(float(a) - float(b), -math.inf)
    if not y > 1e-90:
        return Decimal(0)
    with localcontext(FLOOR_CONTEXT):
        exact = a - b
    if Decimal(repr(y)) > exact:
        y = float(exact)
        while Decimal(repr(y)) > exact:
            y = math.nextafter(y, -math.inf)
    return Decimal(repr(y)) if y > 1e-90 else Decimal(0)


def fmt_decimal(d: Decimal) -> str:
    if d.is_infinite():
        return "inf"
    text = format(d.normalize(), "f") if abs(d) >= Decimal("1e-4") or d == 0 else f"{float(d):.3g}"
    return text


def normalize_exactly(value: Decimal) -> Decimal:
    """``value.normalize()`` without rounding: trailing zeros stripped, every digit kept.

    ``Decimal.normalize()`` rounds to the context's precision (28 digits by default), so two
    different values could share one normal form; this one never does (Inexact is trapped).
    For values of at most 28 digits it equals ``normalize()``, so texts built from it match
    those stored before.
    """
    if value == 0:
        return Decimal(0)  # also for -0 and 0E-5: one form for zero
    if not value.is_finite():
        return value
    prec = max(28, len(value.as_tuple().digits))
    return value.normalize(Context(prec=prec, Emax=10**6, Emin=-(10**6), traps=[Inexact]))


def canonical_decimal(value: Decimal) -> str:
    """One exact string per decimal value: no trailing zeros, integers without exponent.

    ``Decimal(canonical_decimal(v)) == v`` always holds.
    """
    if value == 0:
        return "0"
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite: Budget and RdpCurve refuse NaN and infinities
    kept = list(digits)
    while exponent < 0 and len(kept) > 1 and kept[-1] == 0:  # exact: no context rounding
        kept.pop()
        exponent += 1
    reduced = Decimal((sign, tuple(kept), exponent))
    if exponent >= 0:
        return str(int(reduced))
    return str(reduced)

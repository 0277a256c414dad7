"""Directed-rounding decimal arithmetic shared by the series package.

Every budget term is a non-negative multiple of :data:`GRID` (10**-18, the ledger's unit, see
:data:`blockbudget.budget.UNIT_EXPONENT`), obtained by rounding *down*. A term on the grid is
charged by the ledger exactly (its ``units_up`` is the term itself), so a prefix sum of terms is
exactly what the ledger records, and rounding down can only make a sum smaller.

Intermediate quantities are computed in the :data:`FLOOR` context (every operation rounds toward
−∞), so that a product or quotient of positive lower bounds is again a lower bound; quantities
that must not be underestimated (a required minimum budget, a compounding factor α) use
:data:`CEIL`.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, InvalidOperation, Overflow

from blockbudget.budget import UNIT_EXPONENT

#: Resolution of every budget term: the ledger's unit, 1e-18.
GRID = Decimal(1).scaleb(-UNIT_EXPONENT)

#: Precision of intermediate arithmetic (digits). Budgets are at most 1e30, so a term on the
#: grid has at most 48 significant digits; 90 digits leave room for exact products.
PRECISION = 90

FLOOR = Context(
    prec=PRECISION,
    rounding=ROUND_FLOOR,
    Emin=-(10**9),
    Emax=10**9,
    traps=[InvalidOperation, Overflow],
)
CEIL = Context(
    prec=PRECISION,
    rounding=ROUND_CEILING,
    Emin=-(10**9),
    Emax=10**9,
    traps=[InvalidOperation, Overflow],
)


def grid_floor(value: Decimal) -> Decimal:
    """``value`` rounded down to the grid (never negative: negative input gives 0)."""
    if value <= 0:
        return Decimal(0)
    return value.quantize(GRID, rounding=ROUND_FLOOR, context=FLOOR)


def grid_ceil(value: Decimal) -> Decimal:
    """``value`` rounded up to the grid."""
    return value.quantize(GRID, rounding=ROUND_CEILING, context=CEIL)


def exact_sum(values: tuple[Decimal, ...] | list[Decimal]) -> Decimal:
    """The exact sum of grid values (a grid sum below 1e40 is exact at :data:`PRECISION`)."""
    total = Decimal(0)
    for v in values:
        total = FLOOR.add(total, v)
    return total

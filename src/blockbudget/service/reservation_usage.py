"""What a reservation has drawn and has left, per block, as exact decimal strings.

The ledger keeps, per block of a reservation, the features still drawable (fixed point,
:mod:`blockbudget.accounting.filters`); what was reserved is the features of the reservation's
cost. So while a reservation is open, ``drawn = reserved − left`` exactly, in the terms of the
stream's accounting: ``{"epsilon", "delta"}`` for basic and strong composition, ``{"rdp": [...]}``
(one value per order of :data:`~blockbudget.budget.ALPHAS`) for RDP. A released or expired
reservation has nothing left (its rest went back to the blocks) and ``drawn`` is None: the
ledger does not keep it per reservation (the ``released``/``expired`` audit event says what was
returned).

Example:
    >>> from decimal import Decimal
    >>> from blockbudget.budget import Budget, units_up
    >>> cost = Budget(epsilon=Decimal("0.5"), delta=Decimal(0))
    >>> usage = block_usage(cost, (units_up(Decimal("0.2")), 0), is_open=True)
    >>> usage["drawn"], usage["left"]
    ({'epsilon': '0.3', 'delta': '0'}, {'epsilon': '0.2', 'delta': '0'})
"""

from __future__ import annotations

from typing import Any

from blockbudget.budget import (
    ALPHAS,
    Budget,
    Cost,
    RdpCurve,
    canonical_decimal,
    from_units,
    units_up,
)

__all__ = ["block_usage", "usage_json"]

Vector = tuple[int, ...]


def _reserved(cost: Cost, dims: int) -> Vector:
    if dims == len(ALPHAS):  # RDP accounting: a pure budget counts as its RDP curve
        curve = cost if isinstance(cost, RdpCurve) else RdpCurve.from_pure_dp(cost.epsilon)
        return tuple(units_up(e) for e in curve.epsilons)
    assert isinstance(cost, Budget)  # basic (ε, δ) or strong (ε, ε², ∞, δ) features
    return (units_up(cost.epsilon), units_up(cost.delta))


def _shown(vec: Vector, dims: int) -> dict[str, Any]:
    if dims == len(ALPHAS):
        from blockbudget.accounting.filters import rdp_json

        return rdp_json(vec)
    return {
        "epsilon": canonical_decimal(from_units(vec[0])),
        "delta": canonical_decimal(from_units(vec[-1])),
    }


def block_usage(cost: Cost, left: Vector, *, is_open: bool) -> dict[str, Any]:
    """One block's ``drawn`` and ``left`` (exact decimal strings) for a reservation of
    ``cost`` whose stored drawable features are ``left``."""
    dims = len(left)
    reserved = _reserved(cost, dims)
    rest = left if dims == len(ALPHAS) else (left[0], left[-1])
    if not is_open:
        return {"drawn": None, "left": _shown(tuple(0 for _ in rest), dims)}
    drawn = tuple(r - x for r, x in zip(reserved, rest, strict=True))
    return {"drawn": _shown(drawn, dims), "left": _shown(rest, dims)}


def usage_json(
    cost: Cost, remaining: tuple[tuple[str, Vector], ...], *, is_open: bool
) -> list[dict[str, Any]]:
    """Per block (in the reservation's order): ``block``, ``drawn``, ``left``."""
    return [{"block": b, **block_usage(cost, v, is_open=is_open)} for b, v in remaining]

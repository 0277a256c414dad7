"""What a reservation has drawn and has left, per block, as exact decimal strings.

The ledger keeps, per block of a reservation, the features still drawable (fixed point,
:mod:`blockbudget.accounting.filters`); what was reserved is the features of the reservation's
cost under the stream's filter. So while a reservation is open, ``drawn = reserved − left``
exactly, in the terms of the stream's rule (its filter's
:meth:`~blockbudget.accounting.filters.Filter.features_json`): ``{"epsilon", "delta"}`` for the
(ε, δ) rules, ``{"rdp": [...]}`` (one value per order of :data:`~blockbudget.budget.ALPHAS`) for
RDP, ``{"gdp_mu2"}`` for GDP. A released or expired reservation has nothing left (its rest went
back to the blocks) and ``drawn`` is None: the ledger does not keep it per reservation (the
``released``/``expired`` audit event says what was returned).

Example:
    >>> from decimal import Decimal
    >>> from blockbudget.accounting import make_filter
    >>> from blockbudget.budget import Budget, units_up
    >>> f = make_filter("basic", capacity=Budget(epsilon=1))
    >>> cost = Budget(epsilon=Decimal("0.5"), delta=Decimal(0))
    >>> usage = block_usage(cost, (units_up(Decimal("0.2")), 0), is_open=True, filter_=f)
    >>> usage["drawn"], usage["left"]
    ({'epsilon': '0.3', 'delta': '0'}, {'epsilon': '0.2', 'delta': '0'})
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blockbudget.accounting import Filter
    from blockbudget.budget import Cost

__all__ = ["block_usage", "usage_json"]

Vector = tuple[int, ...]


def block_usage(cost: Cost, left: Vector, *, is_open: bool, filter_: Filter) -> dict[str, Any]:
    """One block's ``drawn`` and ``left`` (exact decimal strings) for a reservation of
    ``cost`` on a stream whose filter is ``filter_`` and whose stored drawable features are
    ``left``."""
    if not is_open:
        return {"drawn": None, "left": filter_.features_json(filter_.zero())}
    reserved = filter_.features(cost)
    drawn = tuple(r - x for r, x in zip(reserved, left, strict=True))
    return {"drawn": filter_.features_json(drawn), "left": filter_.features_json(left)}


def usage_json(
    cost: Cost, remaining: tuple[tuple[str, Vector], ...], *, is_open: bool, filter_: Filter
) -> list[dict[str, Any]]:
    """Per block (in the reservation's order): ``block``, ``drawn``, ``left``."""
    return [
        {"block": b, **block_usage(cost, v, is_open=is_open, filter_=filter_)} for b, v in remaining
    ]

"""The proved Rényi filter, ``rdp2``: the rule new RDP streams should use.

Capacities from :func:`~blockbudget.accounting.renyi_capacity.proved_capacities` — δ_g split over
the orders that can admit anything (:func:`~blockbudget.accounting.renyi_capacity.proved_shares`),
each order's sum bounded by Feldman & Zrnic (NeurIPS 2021, Thm 3.1) and converted by Canonne,
Kamath & Steinke (NeurIPS 2020, Prop. 12); the theorem and its proof are in
:mod:`~blockbudget.accounting.renyi_capacity`. Costs, pricing and group privacy
are those of ``rdp`` (:class:`~blockbudget.accounting.rdp.RdpRule`); only the capacities differ.

Example:
    >>> from blockbudget.accounting import get_rule
    >>> from blockbudget.budget import RdpCurve
    >>> f = get_rule("rdp2").filter(capacity=Budget(epsilon=1, delta="1e-6"))
    >>> f.fits(f.features(RdpCurve.gaussian(sigma=5.0)))  # ρ = 0.02: one fits, rdp's does not
    True
    >>> g = get_rule("rdp").filter(capacity=Budget(epsilon=1, delta="1e-6"))
    >>> g.fits(g.features(RdpCurve.gaussian(sigma=5.0)))
    False
"""

from __future__ import annotations

from collections.abc import Sequence

from blockbudget.accounting.filters import Filter, Vector
from blockbudget.accounting.rdp import RdpFilter, RdpRule
from blockbudget.accounting.renyi_capacity import proved_capacities
from blockbudget.accounting.rule import Accounting, register_rule
from blockbudget.budget import Budget

__all__ = ["Rdp2Filter", "Rdp2Rule"]


class Rdp2Filter(RdpFilter):
    """The proved Rényi filter (``rdp2``): the capacities of
    :func:`~blockbudget.accounting.renyi_capacity.proved_capacities`: δ_g split over the usable
    orders by fixed shares w_α, each converted by Canonne, Kamath & Steinke 2020, Prop. 12.

    Example:
        >>> from blockbudget.budget import RdpCurve
        >>> f = Rdp2Filter(capacity=Budget(epsilon=1, delta="1e-6"))
        >>> f.fits(f.features(RdpCurve.gaussian(sigma=7.0))), f.fits_before_proof(f.zero())
        (True, False)
    """

    accounting = Accounting.declare("rdp2")

    def __init__(self, *, capacity: Budget) -> None:
        Filter.__init__(self, capacity=capacity)
        self.order_capacity: Vector = proved_capacities(capacity)
        self.legacy_capacity: Vector = self.order_capacity

    def fits_before_proof(self, used: Sequence[int]) -> bool:
        """Always False: this rule was proved from its first charge."""
        return False


class Rdp2Rule(RdpRule):
    """The proved Rényi filter (:mod:`blockbudget.accounting.renyi_capacity`): the rule new RDP
    streams should use."""

    name = "rdp2"
    title = (
        "Rényi filter, proved (Feldman & Zrnic 2021, Thm 3.1; Canonne, Kamath & Steinke 2020, "
        "Prop. 12; δ_g split over the usable orders Λ by fixed shares w_α): some α ∈ Λ keeps "
        "Σε(α) ≤ ε_g − (ln(1/(w_α·δ_g)) − ln α)/(α−1) + ln(α/(α−1)) per block"
    )

    def make(self, *, capacity: Budget, slack_delta: float | None) -> Filter:
        return Rdp2Filter(capacity=capacity)


RULE = register_rule(Rdp2Rule())

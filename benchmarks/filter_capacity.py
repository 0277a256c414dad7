"""How many Gaussian charges one block admits under each accounting rule.

One block at (ε_g, δ_g) = (1, 1e-6); identical Gaussian mechanisms of noise multiplier σ/Δ.
Printed as JSON lines, one per (σ, rule):

* ``gdp`` — :class:`~blockbudget.accounting.GdpFilter`: each costs μ = Δ/σ; ⌊μ_g²σ²⌋ fit.
* ``rdp`` — :class:`~blockbudget.accounting.RdpFilter` with ``RdpCurve.gaussian(sigma=σ)``.
* ``basic``, ``strong``, ``whitehouse`` — (ε, δ) filters: a Gaussian is priced as (ε_i, δ_i)
  with ε_i the analytic Gaussian's ε at δ_i (Balle & Wang 2018, Thm 8, through
  :func:`~blockbudget.mechanisms.calibration.analytic_gaussian_delta`). For n charges δ_i is
  the charges' whole δ share split evenly, δ_i = ⌊(δ_g − δ')/n⌋ (δ' = 0 for basic, the filter's
  slack otherwise), and n is the largest count that fits; the slack δ' is the best of a grid of
  fractions of δ_g (the row says which, and the count at the default δ_g/2).

    PYTHONPATH=src python benchmarks/filter_capacity.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from decimal import Decimal

from blockbudget.accounting import (
    BasicFilter,
    GaussianDp,
    GdpFilter,
    RdpFilter,
    StrongFilter,
    WhitehouseFilter,
)
from blockbudget.accounting.filters import Filter
from blockbudget.budget import Budget, RdpCurve, from_units, units_down
from blockbudget.mechanisms.calibration import analytic_gaussian_delta

CAPACITY = Budget(epsilon=1, delta="1e-6")
#: σ/Δ of DP statistics (5–20) and of DP-SGD-like many-step releases (50–100); 1000 shows where
#: advanced composition overtakes basic (beyond about 2·log(1/δ') ≈ 29 charges).
SIGMAS = (1, 2, 5, 10, 20, 50, 100, 1000)
SLACKS = (Decimal("0.05"), Decimal("0.1"), Decimal("0.25"), Decimal("0.5"), Decimal("0.75"))
MAX_CHARGES = 1 << 22


def gaussian_epsilon(sigma: float, delta: float) -> float:
    """The smallest ε (up to a relative 1e-9, rounded up) at which N(0, σ²) on a sensitivity-1
    query is (ε, δ)-DP (Balle & Wang 2018, Thm 8): δ(ε) decreases in ε; bisection."""
    lo, hi = 0.0, 1.0
    while analytic_gaussian_delta(sigma=sigma, epsilon=hi) > delta:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if analytic_gaussian_delta(sigma=sigma, epsilon=mid) > delta:
            lo = mid
        else:
            hi = mid
    return math.nextafter(hi * (1 + 1e-9), math.inf)


def largest_fitting(fits: Callable[[int], bool]) -> int:
    """The largest n in [0, MAX_CHARGES] with fits(n), for a monotone fits (fits(0) holds)."""
    lo, hi = 0, 1
    while hi <= MAX_CHARGES and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def identical_charges(f: Filter, step: tuple[int, ...]) -> int:
    """How many copies of a charge of features ``step`` the filter admits (n copies sum to n
    times the features)."""
    return largest_fitting(lambda n: f.fits(tuple(n * x for x in step)))


def split_charges(make: Callable[[], Filter], sigma: float, share_units: int) -> int:
    """The largest n such that n Gaussians each priced (ε(σ, δ_i), δ_i), δ_i = ⌊share/n⌋, fit."""
    f = make()

    def fits(n: int) -> bool:
        if n == 0:
            return True
        delta_units = share_units // n
        if delta_units == 0:
            return False
        delta = from_units(delta_units)
        eps = gaussian_epsilon(sigma, float(delta))
        step = f.features(Budget(epsilon=eps, delta=delta))
        return f.fits(tuple(n * x for x in step))

    return largest_fitting(fits)


def rows(sigmas: tuple[int, ...], slacks: tuple[Decimal, ...]) -> list[dict[str, object]]:
    delta_g = CAPACITY.delta
    out: list[dict[str, object]] = []
    for sigma in sigmas:
        base = {"bench": "filter_capacity", "epsilon_g": 1, "delta_g": 1e-6, "sigma": sigma}
        gdp_filter = GdpFilter(capacity=CAPACITY)
        gdp = identical_charges(gdp_filter, gdp_filter.features(GaussianDp.gaussian(sigma=sigma)))
        out.append({**base, "rule": "gdp", "charges": gdp, "mu": 1 / sigma})
        rdp_filter = RdpFilter(capacity=CAPACITY)
        rdp = identical_charges(rdp_filter, rdp_filter.features(RdpCurve.gaussian(sigma=sigma)))
        out.append({**base, "rule": "rdp", "charges": rdp})
        basic = split_charges(lambda: BasicFilter(capacity=CAPACITY), sigma, units_down(delta_g))
        out.append({**base, "rule": "basic", "charges": basic, "slack_fraction": 0})
        for rule, cls in (("strong", StrongFilter), ("whitehouse", WhitehouseFilter)):
            counts: dict[str, int] = {}
            for frac in slacks:
                slack = delta_g * frac

                def make(cls: type[Filter] = cls, slack: Decimal = slack) -> Filter:
                    return cls(capacity=CAPACITY, slack_delta=float(slack))  # type: ignore[call-arg]

                counts[str(frac)] = split_charges(make, sigma, units_down(delta_g - slack))
            best = max(counts, key=lambda k: (counts[k], k == "0.5"))
            out.append(
                {
                    **base,
                    "rule": rule,
                    "charges": counts[best],
                    "slack_fraction": float(best),
                    "charges_at_half_slack": counts.get("0.5"),
                }
            )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="σ ∈ {10, 100}, slack δ_g/2 only")
    args = parser.parse_args(argv)
    sigmas = (10, 100) if args.quick else SIGMAS
    slacks = (Decimal("0.5"),) if args.quick else SLACKS
    for row in rows(sigmas, slacks):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

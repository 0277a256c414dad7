"""benchmarks/filter_capacity.py --quick runs; its counts match the closed forms of each rule."""

from __future__ import annotations

import math

from bench_support import run_quick

from blockbudget.accounting import RdpFilter
from blockbudget.budget import ALPHAS, Budget


def test_filter_capacity_benchmark_quick() -> None:
    rows = run_quick("filter_capacity.py")
    got = {(r["sigma"], r["rule"]): r["charges"] for r in rows if r["bench"] == "filter_capacity"}
    assert set(got) == {(s, r) for s in (10, 100) for r in ("gdp", "rdp", "basic", "strong",
                                                            "whitehouse")}  # fmt: skip
    # GDP: ⌊μ_g² σ²⌋ with μ_g² = 0.0560289638… (Dong, Roth & Su 2022, Cor. 2.13 at (1, 1e-6)).
    assert got[(10, "gdp")] == 5
    assert got[(100, "gdp")] == 560
    # RDP: the best order's ⌊capacity / (α/(2σ²))⌋ (Mironov 2017, Prop. 7).
    caps = RdpFilter(capacity=Budget(epsilon=1, delta="1e-6")).order_capacity
    for sigma in (10, 100):
        best = max(
            math.floor(c / 1e18 / (a / (2 * sigma**2)) * (1 - 1e-9))
            for a, c in zip(ALPHAS, caps, strict=True)
            if c > 0
        )
        assert got[(sigma, "rdp")] == best
    # Where charges are many, the tighter rule admits at least as many.
    assert got[(100, "gdp")] > got[(100, "rdp")] > got[(100, "basic")]
    assert got[(100, "whitehouse")] > got[(100, "strong")]

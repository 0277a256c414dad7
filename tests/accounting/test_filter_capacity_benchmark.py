"""benchmarks/filter_capacity.py --quick runs; its counts match each rule's closed form where
there is one, the orderings that must hold hold, and no rule admits more than the tight count;
the reference rows that decompose rdp2's gap to it are ordered as they must be and stay under it
too."""

from __future__ import annotations

import math
from typing import Any

from bench_support import run_quick

from blockbudget.accounting import RdpFilter, get_rule
from blockbudget.budget import ALPHAS, UNIT, Budget
from blockbudget.training.dpsgd import pld_epsilon

KINDS = ("gaussian", "laplace", "dpsgd", "mixed")
RULES = ("basic", "strong", "whitehouse", "rdp", "rdp2", "gdp")
REFERENCES = ("cks-whole-delta", "best-fixed-order", "best-real-order")
CAPACITY = Budget(epsilon=1, delta="1e-6")


def rdp_closed_form(rule: str, sigma: int) -> int:
    """The best order's ⌊capacity / (α/(2σ²))⌋ (Mironov 2017, Prop. 7), the cost rounded up."""
    f = get_rule(rule).filter(capacity=CAPACITY)
    assert isinstance(f, RdpFilter)  # rdp2's filter is one too, with its own capacities
    return max(
        math.floor(c / 1e18 / (a / (2 * sigma**2)) * (1 - 1e-9))
        for a, c in zip(ALPHAS, f.order_capacity, strict=True)
        if c > 0
    )


def sgd_pld_epsilon(steps: int) -> float:
    """ε(1e-6) of DP-SGD steps (q = 0.01, σ = 1.5) by the pessimistic PLD at 1e-4."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4
    )
    step = dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.5))
    accountant.compose(step, steps)
    return float(accountant.get_epsilon(1e-6))


def test_filter_capacity_benchmark_quick() -> None:
    rows = [r for r in run_quick("filter_capacity.py") if r["bench"] == "filter_capacity"]
    got: dict[tuple[str, str], dict[str, Any]] = {(r["kind"], r["rule"]): r for r in rows}
    assert len(got) == len(rows)
    assert set(got) == {(k, r) for k in KINDS for r in (*RULES, *REFERENCES)}
    assert all(r["reference"] is (r["rule"] in REFERENCES) for r in rows)
    assert {r["epsilon_g"] for r in rows} == {1} and {r["delta_g"] for r in rows} == {1e-6}
    assert {r["sigma"] for r in rows if r["kind"] == "gaussian"} == {100}
    assert {r["epsilon_i"] for r in rows if r["kind"] == "laplace"} == {0.1}
    charges = {key: r["charges"] for key, r in got.items()}
    tight = {kind: got[(kind, "basic")]["tight"] for kind in KINDS}
    for r in rows:  # one tight count per kind, and the fraction is charges / tight
        assert r["tight"] == tight[r["kind"]]
        if r["charges"] is not None:
            assert r["fraction"] == round(r["charges"] / r["tight"], 4)

    # Gaussians: the GDP count ⌊μ_g²σ²⌋ is exact (μ_g² = 0.0560289638…, Dong, Roth & Su 2022,
    # Cor. 2.13 at (1, 1e-6)), so it is the tight count; the pessimistic PLD agrees or is lower.
    gdp_cap = get_rule("gdp").filter(capacity=CAPACITY).capacity_units()
    assert gdp_cap is not None
    assert charges[("gaussian", "gdp")] == gdp_cap[0] * 100**2 // UNIT == 560
    assert tight["gaussian"] == charges[("gaussian", "gdp")]
    assert got[("gaussian", "gdp")]["tight_pld"] <= tight["gaussian"]
    # RDP: the best order's closed form, under both capacities.
    for rule in ("rdp", "rdp2"):
        assert charges[("gaussian", rule)] == rdp_closed_form(rule, 100)
    # Laplace under basic composition: ⌊ε_g·b⌋.
    assert charges[("laplace", "basic")] == math.floor(1 * 10) == 10

    # The DP-SGD tight count is what the PLD says: 10n steps fit, 10(n+1) do not; the platform's
    # pld_epsilon, at its coarser discretisation, agrees on its own count and admits no more.
    n = tight["dpsgd"]
    assert sgd_pld_epsilon(10 * n) <= 1 < sgd_pld_epsilon(10 * (n + 1))
    m = got[("dpsgd", "basic")]["tight_pld_epsilon"]
    assert pld_epsilon(1.5, 0.01, 10 * m, 1e-6) <= 1 < pld_epsilon(1.5, 0.01, 10 * (m + 1), 1e-6)
    assert m <= n
    # GDP cannot price a subsampled Gaussian: the row says so rather than counting.
    assert charges[("dpsgd", "gdp")] is None and got[("dpsgd", "gdp")]["refused"]

    for kind in KINDS:
        # The proved Rényi filter's capacities are at least rdp's (rdp is capped at them).
        assert charges[(kind, "rdp2")] >= charges[(kind, "rdp")]
        # Whitehouse et al.'s constants dominate Rogers et al.'s.
        assert charges[(kind, "whitehouse")] >= charges[(kind, "strong")]
        for rule in ("strong", "whitehouse"):  # --quick tries the default slack only
            row = got[(kind, rule)]
            assert row["slack_fraction"] == 0.5
            assert row["charges_by_slack"] == {"0.5": row["charges"]}
            assert row["charges_at_default_slack"] == row["charges"]
        # No rule admits more than the tight count (a lower bound on the truly tight one).
        for rule in RULES:
            if charges[(kind, rule)] is not None:
                assert charges[(kind, rule)] <= tight[kind], (kind, rule)
                assert got[(kind, rule)]["fraction"] <= 1

    # Where charges are many, the tighter rule admits more.
    assert (
        charges[("gaussian", "gdp")]
        > charges[("gaussian", "rdp2")]
        > charges[("gaussian", "basic")]
    )
    assert charges[("dpsgd", "rdp2")] > charges[("dpsgd", "basic")]

    # The reference rows (not rules): where rdp2's gap to the tight count goes.
    for kind in KINDS:
        ref = {name: got[(kind, name)] for name in REFERENCES}
        n = {name: row["charges"] for name, row in ref.items()}
        # Their float RDP curves agree with the ones rdp2 charges (which are bumped up 1e-12).
        assert all(row["curve_check"] < 1e-8 for row in ref.values()), kind
        # Dropping the union bound only raises the capacities.
        assert charges[(kind, "rdp2")] <= n["cks-whole-delta"], kind
        # For identical charges the exists-α rule admits n iff some one order does, so it is
        # the best fixed order of the grid (computed independently, in float).
        assert n["cks-whole-delta"] == n["best-fixed-order"], kind
        assert ref["best-fixed-order"]["alpha"] in ALPHAS
        # The real orders include the grid.
        assert n["best-real-order"] >= n["best-fixed-order"], kind
        assert 1 < ref["best-real-order"]["alpha"] <= 1024
        # A fixed order's RDP bound is sound for a fixed workload, so none exceeds the tight
        # count (unless the pessimistic PLD lost more than RDP does: none here).
        for name in REFERENCES:
            assert n[name] <= tight[kind], (kind, name)

    # Gaussians in closed form: ⌊c(α)·2σ²/α⌋ with c(α) = ε_g − (ln(1/δ_g) − ln α)/(α−1)
    # − ln(1 − 1/α) (Canonne, Kamath & Steinke 2020, Prop. 12, the whole δ_g at one order).
    def gaussian_count(alpha: float) -> int:
        cap = 1 - (math.log(1e6) - math.log(alpha)) / (alpha - 1) - math.log(1 - 1 / alpha)
        return max(0, math.floor(cap * 2 * 100**2 / alpha * (1 - 1e-12)))

    assert charges[("gaussian", "best-fixed-order")] == max(map(gaussian_count, ALPHAS)) == 436
    best = got[("gaussian", "best-real-order")]
    assert best["charges"] == gaussian_count(best["alpha"]) == 487
    # At ε_g = 1 the grid and the union bound both cost: rdp2 < whole δ_g < best real order.
    assert (
        charges[("dpsgd", "rdp2")]
        < charges[("dpsgd", "cks-whole-delta")]
        < charges[("dpsgd", "best-real-order")]
    )

"""Exact numbers of the μ-GDP filter and of Whitehouse et al.'s advanced-composition filter,
against mpmath computations written from the papers (not from the implementation)."""

from __future__ import annotations

import math
from decimal import Decimal

import mpmath as mp
import pytest

from blockbudget.accounting import (
    GaussianDp,
    GdpFilter,
    StrongFilter,
    WhitehouseFilter,
    add_vectors,
)
from blockbudget.accounting.filters import Filter, Vector
from blockbudget.budget import UNIT, Budget, Cost, RdpCurve, cost_from_json
from blockbudget.errors import InvalidBudgetError

CAPACITY = Budget(epsilon=1.0, delta=1e-6)


def _count(f: Filter, cost: Cost | GaussianDp) -> tuple[int, Vector]:
    used, step, n = f.zero(), f.features(cost), 0
    while f.fits_with(used, step):
        used, n = add_vectors(used, step), n + 1
    return n, used


def _gdp_delta(mu: mp.mpf, eps: mp.mpf) -> mp.mpf:
    """Dong, Roth & Su 2022, Cor. 2.13."""
    return mp.ncdf(-eps / mu + mu / 2) - mp.exp(eps) * mp.ncdf(-eps / mu - mu / 2)


def _mu_g(eps: str, delta: str) -> mp.mpf:
    """The largest μ with δ_μ(ε) ≤ δ, by bisection at 60 digits."""
    e, d = mp.mpf(eps), mp.mpf(delta)
    lo, hi = mp.mpf(0), mp.mpf(1)
    while _gdp_delta(hi, e) <= d:
        lo, hi = hi, 2 * hi
    for _ in range(220):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _gdp_delta(mid, e) <= d else (lo, mid)
    return lo


# ---- μ-GDP ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eps", "delta"), [("1", "1e-6"), ("0.5", "1e-9"), ("3", "1e-5"), ("10", "1e-12")]
)
def test_gdp_capacity_is_mu_g_squared_rounded_down(eps: str, delta: str) -> None:
    with mp.workdps(60):
        exact = _mu_g(eps, delta) ** 2 * UNIT
        cap = GdpFilter(capacity=Budget(epsilon=eps, delta=delta)).capacity_units()[0]
        assert cap <= exact
        assert exact - cap < 2  # floored to a unit, not lowered further
        # The rounding is on the safe side: the capacity's μ gives δ ≤ δ_g at ε_g.
        assert _gdp_delta(mp.sqrt(mp.mpf(cap) / UNIT), mp.mpf(eps)) <= mp.mpf(delta)


def test_gdp_mu_g_at_one_and_one_in_a_million() -> None:
    f = GdpFilter(capacity=CAPACITY)
    assert f.capacity_units() == (56_028_963_825_260_677,)  # μ_g = 0.23670438066343570…
    assert f.max_next_mu(f.zero()) == Decimal("0.236704380663435709")


@pytest.mark.parametrize(("sigma", "expected"), [(1, 0), (2, 0), (5, 1), (10, 5), (20, 22),
                                                 (50, 140), (100, 560)])  # fmt: skip
def test_gdp_admits_floor_mu_g_squared_sigma_squared_gaussians(sigma: int, expected: int) -> None:
    with mp.workdps(60):
        assert math.floor(_mu_g("1", "1e-6") ** 2 * sigma**2) == expected
    n, _ = _count(GdpFilter(capacity=CAPACITY), GaussianDp.gaussian(sigma=sigma))
    assert n == expected


def test_gdp_adaptive_history_sums_mu_squared() -> None:
    """Charges of different σ chosen one after another: fits while Σ(Δ/σ_i)² ≤ μ_g²."""
    f = GdpFilter(capacity=CAPACITY)
    history: list[Cost | GaussianDp] = [GaussianDp.gaussian(sigma=s) for s in (5, 10, 20, 8)]
    # 1/25 + 1/100 + 1/400 + 1/64 = 0.0681… > 0.05603: the last does not fit
    assert f.accepts(history[:3], GaussianDp.gaussian(sigma=300))
    assert not f.accepts(history[:3], history[3])
    # Sensitivity scales μ: Δ = 2, σ = 20 is μ = 0.1.
    assert GaussianDp.gaussian(sigma=20, sensitivity=2).mu == Decimal("0.1")


def test_pure_dp_converts_to_minus_two_phi_inverse() -> None:
    """ε-DP ⇒ μ-GDP with μ = −2Φ⁻¹(1/(1+e^ε)), rounded up, and the two curves meet at α*."""
    with mp.workdps(60):
        for eps in ("1", "0.1", "1e-6", "5"):
            e = mp.mpf(eps)
            alpha = 1 / (1 + mp.exp(e))
            exact = -2 * mp.sqrt(2) * mp.erfinv(2 * alpha - 1)
            mu = GaussianDp.from_pure_dp(eps).mu
            assert mp.mpf(str(mu)) >= exact
            assert mp.mpf(str(mu)) - exact < exact * mp.mpf("1e-35")
            # G_μ(α*) = Φ(Φ⁻¹(1−α*) − μ) = α* = f_{ε,0}(α*): tight at the kink.
            g = mp.ncdf(-mp.sqrt(2) * mp.erfinv(2 * alpha - 1) - exact)
            assert abs(g - alpha) < mp.mpf("1e-50")
    assert GaussianDp.from_pure_dp(1).mu == Decimal("1.232035385344900972855672526541531853621")
    assert float(GaussianDp.from_pure_dp("1e-6").mu) / 1e-6 == pytest.approx(
        math.sqrt(math.pi / 2), rel=1e-6
    )


def test_gdp_prices_a_pure_budget_and_refuses_what_implies_no_gdp() -> None:
    f = GdpFilter(capacity=CAPACITY)
    assert f.features(Budget(epsilon="0.1")) == f.features(GaussianDp.from_pure_dp("0.1"))
    n, _ = _count(f, Budget(epsilon="0.01"))
    with mp.workdps(60):
        mu = -2 * mp.sqrt(2) * mp.erfinv(2 / (1 + mp.exp(mp.mpf("0.01"))) - 1)
        assert n == math.floor(_mu_g("1", "1e-6") ** 2 / mu**2)  # 356 Laplace charges
    with pytest.raises(InvalidBudgetError, match="δ > 0"):
        f.features(Budget(epsilon=0.1, delta=1e-9))
    with pytest.raises(InvalidBudgetError, match="RDP"):
        f.features(RdpCurve.gaussian(sigma=10.0))
    with pytest.raises(InvalidBudgetError):
        GdpFilter(capacity=Budget(epsilon=1.0))
    assert f.features(GaussianDp(mu="1e-100")) == (1,)  # a positive μ is never free


def test_gdp_cost_json_round_trips() -> None:
    cost = GaussianDp.gaussian(sigma=3)
    mu = "0.3333333333333333333333333333333333333334"
    assert cost.to_json() == {"v": 2, "kind": "gdp", "mu": mu}
    assert GaussianDp.from_json(cost.to_json()) == cost
    assert cost_from_json(cost.to_json()) == cost  # the kind registered itself


# ---- Whitehouse et al. ------------------------------------------------------------------------


def _whitehouse_lhs(eps_list_sq_sum: mp.mpf, slack: mp.mpf) -> mp.mpf:
    """The stopping rule of Whitehouse et al. 2023 (Thm 2) as printed:
    √(2 log(1/δ') Σε²) + ½Σε²."""
    return mp.sqrt(2 * mp.log(1 / slack) * eps_list_sq_sum) + eps_list_sq_sum / 2


@pytest.mark.parametrize(("eps", "delta"), [("1", "1e-6"), ("0.3", "1e-9"), ("5", "1e-5")])
def test_whitehouse_capacity_is_the_root_of_the_theorem_rounded_down(eps: str, delta: str) -> None:
    f = WhitehouseFilter(capacity=Budget(epsilon=eps, delta=delta))
    with mp.workdps(60):
        slack = mp.mpf(delta) / 2
        big_l = mp.log(1 / slack)
        exact = 2 * (mp.sqrt(big_l + mp.mpf(eps)) - mp.sqrt(big_l)) ** 2 * UNIT
        cap = f._sq_cap
        assert cap <= exact
        assert exact - cap < 2
        assert _whitehouse_lhs(mp.mpf(cap) / UNIT, slack) <= mp.mpf(eps)


def test_whitehouse_counts_charges_of_a_thousandth_and_beats_strong() -> None:
    w = WhitehouseFilter(capacity=CAPACITY)
    n, used = _count(w, Budget(epsilon="0.001"))
    assert n == 33_323
    with mp.workdps(50):
        slack = mp.mpf("5e-7")
        assert _whitehouse_lhs(n * mp.mpf("1e-6"), slack) <= 1
        assert _whitehouse_lhs((n + 1) * mp.mpf("1e-6"), slack) > 1
    strong, _ = _count(StrongFilter(capacity=CAPACITY), Budget(epsilon="0.001"))
    assert strong == 14_751
    assert n >= strong
    # The first charge: 0.18255 here, ≈ 0.1214 under StrongFilter (Rogers et al. constants).
    first = w.max_next_epsilon(w.zero())
    assert first == Decimal("0.182546852589455047")
    assert w.accepts([], Budget(epsilon=first))
    assert not w.accepts([], Budget(epsilon=first + Decimal("1e-18")))
    s = StrongFilter(capacity=CAPACITY)
    assert float(first) > 1.5 * s.max_next_epsilon(s.zero())
    assert w.remaining_json(used)["epsilon"] == str(w.max_next_epsilon(used))


def test_whitehouse_keeps_its_slack_and_refuses_curves() -> None:
    f = WhitehouseFilter(capacity=CAPACITY)
    assert f.accepts([], Budget(epsilon=0.01, delta=5e-7))
    assert not f.accepts([], Budget(epsilon=0.01, delta=6e-7))
    g = WhitehouseFilter(capacity=CAPACITY, slack_delta=1e-7)
    assert g.accepts([], Budget(epsilon=0.01, delta=9e-7))
    assert g.max_next_epsilon(g.zero()) < f.max_next_epsilon(f.zero())  # less slack, larger L
    pure_only = WhitehouseFilter(capacity=CAPACITY, slack_delta=1e-6)  # δ'' = 0
    assert pure_only.accepts([], Budget(epsilon=0.1))
    assert not pure_only.accepts([], Budget(epsilon=0.1, delta=1e-18))
    assert pure_only.max_next_epsilon(pure_only.zero()) > f.max_next_epsilon(f.zero())
    with pytest.raises(InvalidBudgetError):
        WhitehouseFilter(capacity=CAPACITY, slack_delta=2e-6)
    with pytest.raises(InvalidBudgetError):
        WhitehouseFilter(capacity=CAPACITY, slack_delta=0.0)
    with pytest.raises(InvalidBudgetError):
        WhitehouseFilter(capacity=Budget(epsilon=1.0))
    with pytest.raises(InvalidBudgetError):
        f.features(RdpCurve.gaussian(sigma=10.0))
    # A huge charge is refused exactly, with no overflow.
    assert not f.accepts([], Budget(epsilon=1e6))


@pytest.mark.parametrize("a", ["1e-6", "0.01", "0.3", "1", "4"])
@pytest.mark.parametrize("b", ["1e-3", "0.2", "2"])
def test_gdp_pure_budget_features_are_superadditive(a: str, b: str) -> None:
    """μ(ε)² is convex with μ(0) = 0, so a pure reservation of a+b covers draws of a then b."""
    f = GdpFilter(capacity=CAPACITY)
    whole = f.features(Budget(epsilon=a) + Budget(epsilon=b))
    parts = add_vectors(f.features(Budget(epsilon=a)), f.features(Budget(epsilon=b)))
    assert parts[0] <= whole[0] + 2


def test_huge_epsilons_are_priced_by_a_closed_form_bound_and_refused_as_capacities() -> None:
    """Exact GDP conversions need e^ε exactly: above MAX_EXACT_EPSILON a pure ε is priced by
    μ ≤ 2√(2ε + 2) (a valid upper bound, checked against the exact value at the threshold) and
    a block's ε_g is refused — in bounded time either way."""
    from blockbudget.accounting.gdp import MAX_EXACT_EPSILON, gdp_capacity_units

    at = GaussianDp.from_pure_dp(MAX_EXACT_EPSILON).mu  # exact search
    bound = 2 * (2 * MAX_EXACT_EPSILON + 2).sqrt()
    assert at <= bound < at * Decimal("1.01")
    huge = GaussianDp.from_pure_dp("1e30").mu
    assert huge >= 2 * Decimal("2e30").sqrt()
    with pytest.raises(InvalidBudgetError, match="ε_g is at most 1000"):
        gdp_capacity_units(Decimal("1e5"), Decimal("1e-6"))

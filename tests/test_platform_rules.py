"""The registered rules beyond the original three work end to end through the library: a GDP
stream prices Gaussian mechanisms and queries as μ = Δ/σ (Dong, Roth & Su 2022, Thm 2.7) and
sizes Gaussian noise; the advanced-composition filter (Whitehouse et al. 2023) admits more ε on
one block than strong composition; rules that cannot price a release refuse it before any draw."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from mechanisms.fakes import NoNoise
from query.support import frame

from blockbudget.accounting import Accounting, make_filter
from blockbudget.accounting.gdp import GaussianDp
from blockbudget.affordance import AffordFor
from blockbudget.budget import Budget
from blockbudget.errors import (
    BudgetExceededError,
    InvalidBudgetError,
    ReservationError,
)
from blockbudget.mechanisms import SeededNoise, gaussian_mechanism, laplace_mechanism
from blockbudget.mechanisms.calibration import analytic_gaussian_sigma
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, run
from blockbudget.query.spec import Mechanism
from blockbudget.store import Blocking
from blockbudget.training.dpsgd import plan_cost
from blockbudget.training.sources import MeteredSource

POLICY = Budget(epsilon=1, delta="1e-6")


def _platform(home: Path, accounting: str) -> Platform:
    p = Platform(home, engine="arrow")
    p.create_stream(
        "s", policy=POLICY, blocking=Blocking.by_time("time"), accounting=Accounting(accounting)
    )
    p.add_context("a")
    p.ingest("s", frame())
    return p


@pytest.fixture
def gdp(tmp_path: Path) -> Iterator[Platform]:
    p = _platform(tmp_path / "g", "gdp")
    yield p
    p.close()


def test_a_gdp_stream_charges_a_gaussian_mechanism_delta_over_sigma(gdp: Platform) -> None:
    assert gdp.stream("s").accounting is Accounting("gdp")
    f = gdp.filter("s")
    with gdp.request("s", blocks=Last(1), budget=GaussianDp(mu="0.23"), context="a") as g:
        out = gaussian_mechanism(g, 3.0, sensitivity=1.0, sigma=8.0, noise=SeededNoise(1))
        assert out.cost == GaussianDp(mu="0.125") and not out.secure_noise  # Δ/σ = 1/8
        sigma = analytic_gaussian_sigma(epsilon=Decimal("0.5"), delta=Decimal("1e-7"))
        calibrated = gaussian_mechanism(
            g, 3.0, sensitivity=2.0, epsilon=0.5, delta=1e-7, noise=NoNoise()
        )
        # the gdp filter's own calibration: the analytic Gaussian's σ (Balle & Wang 2018, Thm 8),
        # less its 1e-9 rounding margin (μ_g is exact, so nothing more is needed)
        assert calibrated.perturbations[0].scale == pytest.approx(2 * sigma, rel=1e-8)
        assert calibrated.perturbations[0].scale <= 2 * sigma
        want = GaussianDp.gaussian(sigma=calibrated.perturbations[0].scale, sensitivity=2.0)
        assert calibrated.cost == want
        # a Laplace release is ε-DP, so μ(ε)-GDP (Dong, Roth & Su 2022, Cor. 2.13)
        lap = laplace_mechanism(g, 3.0, epsilon=0.1, sensitivity=1.0, noise=NoNoise())
        assert lap.cost == GaussianDp.from_pure_dp(Decimal("0.1"))
        block = g.blocks[0]
    state = gdp.ledger.state(block, "a")
    # the grant closed: what was drawn stays charged, the rest of the reservation went back
    drawn = [f.features(c) for c in (out.cost, calibrated.cost, lap.cost)]
    assert state.charged == tuple(sum(col) for col in zip(*drawn, strict=True))
    assert state.reserved == f.zero()


def test_a_gaussian_query_on_gdp_is_charged_mu_and_gaussian_noise_is_sized(
    gdp: Platform,
) -> None:
    q = Query.sum("v", epsilon=0.5, delta=1e-7, lower=0, upper=10, mechanism=Mechanism.GAUSSIAN)
    out = run(gdp, "s", q, blocks=Last(1), context="a", noise=NoNoise())
    (part,) = out.parts
    assert out.cost == GaussianDp.gaussian(sigma=part.scale, sensitivity=part.sensitivity)
    assert float(out.cost.mu) == pytest.approx(part.sensitivity / part.scale, rel=1e-15)  # type: ignore[attr-defined]
    sized = gdp.afford("s", Last(1), context="a", kind=AffordFor.GAUSSIAN)
    assert sized.noise_multiplier is not None and sized.rule == gdp.filter("s").rule.title
    f, (block,) = gdp.filter("s"), sized.blocks
    used = gdp.ledger.state(block, "a").charged
    at = GaussianDp.gaussian(sigma=sized.noise_multiplier)
    assert f.fits_with(used, f.features(at))  # the answer fits, a hair less noise does not
    assert not f.fits_with(
        used, f.features(GaussianDp.gaussian(sigma=sized.noise_multiplier * (1 - 1e-9)))
    )


def test_advanced_composition_admits_more_epsilon_than_strong(tmp_path: Path) -> None:
    strong, white = _platform(tmp_path / "s", "strong"), _platform(tmp_path / "w", "whitehouse")
    try:
        s_eps = strong.afford("s", Last(1), context="a").epsilon
        w_eps = white.afford("s", Last(1), context="a").epsilon
        assert s_eps is not None and w_eps is not None and w_eps > Decimal("1.4") * s_eps
        white.request("s", blocks=Last(1), budget=Budget(epsilon=w_eps), context="a").close()
        (block,) = strong.afford("s", Last(1), context="a").blocks
        with pytest.raises(BudgetExceededError):  # the same first charge does not fit strong
            strong.request("s", blocks=[block], budget=Budget(epsilon=w_eps), context="a")
        counts = {}
        for name in ("strong", "whitehouse"):
            f = make_filter(name, capacity=POLICY)
            one = f.features(Budget(epsilon="0.01"))
            counts[name] = max(k for k in range(400) if f.fits(tuple(k * u for u in one)))
        assert counts["whitehouse"] > counts["strong"]
    finally:
        strong.close()
        white.close()


def test_rules_without_a_price_refuse_before_anything_is_drawn() -> None:
    source = MeteredSource(Accounting("gdp"))
    with pytest.raises(InvalidBudgetError, match="GDP"):  # DP-SGD's subsampling has no exact μ
        plan_cost(source, None, epsilon=Decimal(1), delta=Decimal("1e-6"))
    assert source.draws == [] and source.spent == GaussianDp(mu=0)
    capped = MeteredSource(Accounting("gdp"), cap=GaussianDp(mu=1))  # μ ≤ μ': GDP is ordered
    capped.draw(GaussianDp(mu="0.6"), label="fits")
    with pytest.raises(ReservationError, match="exceeds the source's cap"):
        capped.draw(GaussianDp(mu="0.9"), label="√(0.36 + 0.81) > 1")
    assert capped.spent == GaussianDp(mu="0.6")
    basic = MeteredSource(Accounting.BASIC)
    assert plan_cost(basic, None, epsilon=Decimal(1), delta=Decimal("1e-6")) == Budget(
        epsilon=1, delta="1e-6"
    )

"""Gaussian queries: exact at zero noise, σ from the analytic Gaussian equation (checked against an
independent SciPy solve), (ε, δ) costs on BASIC streams and the parts' Gaussian curves on RDP
streams, the noise's distribution (seeded, 20k draws, rejecting a σ off by 20%), refusals that
charge nothing, the JSON form's versions, and the same exact aggregates on both engines."""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from mechanisms.fakes import NoNoise
from scipy import optimize, stats
from userids_support import make_known

from blockbudget.accounting import Accounting
from blockbudget.budget import ALPHAS, Budget, RdpCurve
from blockbudget.errors import BlockBudgetError, InvalidRequestError
from blockbudget.mechanisms import SeededNoise
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, from_dict, price, run, to_dict
from blockbudget.query.answers import quantiles_from_histogram
from blockbudget.query.spec import Mechanism
from blockbudget.store import Blocking, LatePolicy
from query.support import frame, platform, state

G = Mechanism.GAUSSIAN
DELTA = 1e-8


@pytest.fixture
def p(tmp_path: Path) -> Iterator[Platform]:
    plat = platform(tmp_path / "h")
    yield plat
    plat.close()


def _clip(x: pd.Series, lo: float, hi: float) -> pd.Series:
    return x.dropna().clip(lo, hi)


def _statistics(epsilon: float) -> dict[str, Query]:
    kw: dict[str, Any] = {"epsilon": epsilon, "delta": DELTA, "mechanism": G}
    return {
        "count": Query.count(**kw),
        "count_v": Query.count("v", **kw),
        "sum": Query.sum("v", lower=5, upper=30, **kw),
        "mean": Query.mean("v", lower=0, upper=40, **kw),
        "variance": Query.variance("v", lower=0, upper=40, **kw),
        "histogram": Query.histogram("c", ["a", "b", "z"], other=True, **kw),
        "quantiles": Query.quantiles("v", [0.0, 0.5, 1.0], lower=0, upper=48, bins=48, **kw),
    }


def _truth() -> dict[str, object]:
    df = frame()
    counts = np.histogram(df.v.dropna(), bins=48, range=(0, 48))[0]
    return {
        "count": 48.0,
        "count_v": float(df.v.notna().sum()),
        "sum": _clip(df.v, 5, 30).sum(),
        "mean": _clip(df.v, 0, 40).mean(),
        "variance": _clip(df.v, 0, 40).var(ddof=0),
        "histogram": {"a": 12.0, "b": 12.0, "z": 0.0, None: 24.0},
        "quantiles": quantiles_from_histogram(
            counts.tolist(), lower=0, upper=48, probabilities=[0.0, 0.5, 1.0]
        ),
    }


def test_every_gaussian_statistic_is_exact_at_zero_noise(p: Platform) -> None:
    truth = _truth()
    for name, q in _statistics(1.0).items():
        out = run(p, "s", q, blocks=Last(2), context="a", noise=NoNoise())
        assert all(part.kind is G for part in out.parts), name
        expected = truth[name]
        if isinstance(expected, dict):
            assert out.value == expected, name
        else:
            assert out.value == pytest.approx(expected, abs=1e-6), name


def test_a_huge_epsilon_sends_sigma_to_zero(tmp_path: Path) -> None:
    """The real path (seeded Gaussian draws) at ε = 1e12: σ ≈ 1e-6·Δ₂, answers within 1e-3."""
    plat = platform(tmp_path / "h", epsilon=1e13)
    try:
        truth = _truth()
        for name, q in _statistics(1e12).items():
            out = run(plat, "s", q, blocks=Last(2), context="a", noise=SeededNoise(7))
            assert max(part.scale / part.sensitivity for part in out.parts) < 1e-5, name
            assert out.secure_noise is False
            expected, value = truth[name], out.value
            if isinstance(expected, dict):
                assert isinstance(value, dict) and list(value) == list(expected), name
                assert [value[k] for k in expected] == pytest.approx(
                    [expected[k] for k in expected], abs=1e-3
                ), name
            else:
                assert value == pytest.approx(expected, abs=1e-3), name
    finally:
        plat.close()


def _scipy_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Balle & Wang 2018, Thm 8, solved directly in σ with SciPy's normal CDF (no log space)."""

    def excess(sigma: float) -> float:
        a = sensitivity / (2 * sigma)
        b = epsilon * sigma / sensitivity
        return float(stats.norm.cdf(a - b) - math.exp(epsilon) * stats.norm.cdf(-a - b) - delta)

    return float(optimize.brentq(excess, 1e-3 * sensitivity, 1e3 * sensitivity, xtol=1e-14))


@pytest.mark.parametrize(
    "query, split",
    [
        (Query.count(epsilon=0.5, delta=1e-6, mechanism=G), 1),
        (Query.histogram("c", ["a", "b"], epsilon=2.0, delta=1e-6, mechanism=G), 1),
        (Query.sum("v", epsilon=1.0, delta=1e-6, lower=-3, upper=7, mechanism=G), 1),
        (Query.mean("v", epsilon=1.0, delta=1e-6, lower=0, upper=10, mechanism=G), 2),
        (Query.variance("v", epsilon=3.0, delta=9e-7, lower=0, upper=10, mechanism=G), 3),
    ],
)
def test_sigma_is_the_analytic_gaussian_solution(p: Platform, query: Query, split: int) -> None:
    quote = price(p, "s", query, blocks=Last(1), context="a")
    eps, dl = query.epsilon / split, query.delta / split
    assert len(quote.parts) == split
    for part in quote.parts:
        assert part.kind is G and part.epsilon == Decimal(str(query.epsilon)) / split
        assert part.sensitivity == pytest.approx(
            {"count": 1.0, "counts": 1.0, "sum": 7.0 if split == 1 else 5.0, "sum_squares": 25.0}[
                part.name
            ],
            rel=2e-6,  # the sums' 1e-6 float slack
        )
        expected = _scipy_sigma(eps, dl, part.sensitivity)
        assert part.scale == pytest.approx(expected, rel=1e-6)
        assert part.scale >= expected * (1 - 1e-9)  # never below the exact root
        # The analytic σ beats the classical one (Dwork & Roth Thm A.1) where that applies.
        if eps < 1:
            assert part.scale < part.sensitivity * math.sqrt(2 * math.log(1.25 / dl)) / eps
    assert quote.noise_summary.count("gaussian σ=") == split and "Δ₂=" in quote.noise_summary


def test_basic_streams_charge_epsilon_and_delta_and_intervals_use_normal_quantiles(
    p: Platform,
) -> None:
    q = Query.count(epsilon=0.5, delta=1e-7, mechanism=G)
    quote = price(p, "s", q, blocks=Last(1), context="a")
    assert quote.cost == quote.reserve == Budget(epsilon=0.5, delta=1e-7)
    assert quote.noise_summary.startswith("count: gaussian σ=")
    out = run(p, "s", q, blocks=Last(1), context="a", noise=NoNoise())
    assert out.cost == Budget(epsilon=0.5, delta=1e-7)
    sigma = out.parts[0].scale
    z = float(stats.norm.ppf(0.975))
    assert out.interval == pytest.approx((24 - z * sigma, 24 + z * sigma))
    assert out.to_dict()["parts"][0]["half_width"] == pytest.approx(z * sigma)
    mean = run(
        p,
        "s",
        Query.mean("v", epsilon=10, delta=1e-7, lower=0, upper=50, mechanism=G),
        blocks=Last(1),
        context="a",
        noise=NoNoise(),
    )
    lo, hi = mean.interval or (0.0, 0.0)
    assert lo < _clip(frame().v[24:], 0, 50).mean() < hi
    assert p.blocks("s")[-1].remaining["a"].endswith("δ=8e-07)")


def test_a_strong_stream_charges_epsilon_and_delta(tmp_path: Path) -> None:
    plat = platform(tmp_path / "h", accounting=Accounting.STRONG, epsilon=10)
    try:
        q = Query.mean("v", epsilon=1, delta=1e-7, lower=0, upper=10, mechanism=G)
        out = run(plat, "s", q, blocks=Last(1), context="a", noise=NoNoise())
        assert out.cost == Budget(epsilon=1, delta=1e-7)
        assert out.value == pytest.approx(_clip(frame().v[24:], 0, 10).mean())
    finally:
        plat.close()


def test_an_rdp_stream_is_charged_the_gaussian_curves(tmp_path: Path) -> None:
    plat = platform(tmp_path / "h", accounting=Accounting.RDP, epsilon=10)
    try:
        q = Query.variance("v", epsilon=6, delta=1e-6, lower=0, upper=10, mechanism=G)
        quote = price(plat, "s", q, blocks=Last(1), context="a")
        assert quote.cost == quote.reserve  # the curve itself is reserved
        out = run(plat, "s", q, blocks=Last(1), context="a", noise=NoNoise())
        assert isinstance(out.cost, RdpCurve) and out.cost == quote.cost
        by_hand = [
            sum(a * part.sensitivity**2 / (2 * part.scale**2) for part in out.parts) for a in ALPHAS
        ]
        assert [float(e) for e in out.cost.epsilons] == pytest.approx(by_hand, rel=1e-9)
        assert out.value == pytest.approx(_clip(frame().v[24:], 0, 10).var(ddof=0), abs=1e-6)
    finally:
        plat.close()


def _user_stream(home: Path, accounting: Accounting, rows_per_user: int) -> Platform:
    plat = Platform(home, engine="arrow")
    blocking = Blocking.by_user("uid", ids_per_block=10, rows_per_user=rows_per_user)
    plat.create_stream(
        "u",
        policy=Budget(epsilon=100, delta=1e-3),
        blocking=blocking,
        late_policy=LatePolicy.DROP,
        accounting=accounting,
    )
    plat.add_context("a")
    plat.ingest("u", pd.DataFrame({"uid": [1, 1, 2, 1, 3], "v": [1.0, 2.0, 3.0, 4.0, 5.0]}))
    make_known(plat, "u")  # a user stream is gated until its maximum id is released
    return plat


def test_user_level_streams_pay_group_privacy_and_rdp_needs_one_row_per_user(
    tmp_path: Path,
) -> None:
    q = Query.sum("v", epsilon=0.5, delta=1e-6, lower=0, upper=10, mechanism=G)
    plat = _user_stream(tmp_path / "b", Accounting.BASIC, 2)
    try:
        out = run(plat, "u", q, blocks=Last(1), context="a", noise=NoNoise())
        assert out.value == pytest.approx(1.0 + 2.0 + 3.0 + 5.0)
        # (kε, k·e^{(k−1)ε}·δ) for k = 2 (Dwork & Roth 2014 Thm 2.2; Vadhan 2017 Lemma 2.2).
        assert isinstance(out.cost, Budget) and out.cost.epsilon == 1
        assert float(out.cost.delta) == pytest.approx(2 * math.exp(0.5) * 1e-6, rel=1e-9)
    finally:
        plat.close()
    with pytest.raises(InvalidRequestError, match="rows_per_user=1"):
        _user_stream(tmp_path / "r", Accounting.RDP, 2)  # no query could ever run on it
    plat = _user_stream(tmp_path / "r1", Accounting.RDP, 1)
    try:
        out = run(plat, "u", q, blocks=Last(1), context="a", noise=NoNoise())
        (part,) = out.parts
        assert out.cost == RdpCurve.gaussian(sigma=part.scale, sensitivity=part.sensitivity)
    finally:
        plat.close()


def _noisy_zeros(plat: Platform, q: Query, noise: object) -> tuple[np.ndarray, float]:
    out = run(plat, "s", q, blocks=Last(2), context="a", noise=noise)  # type: ignore[arg-type]
    value = out.value
    assert isinstance(value, dict)
    # Groups 5.. of column n (values 0..4) are empty: their answers are pure noise.
    residual = np.array([value[k] for k in range(5, 20_005)])
    return residual, out.parts[0].scale


def test_the_noise_has_the_calibrated_sigma(p: Platform) -> None:
    """20,000 noisy empty groups through the real release path: seeded (deterministic) KS and
    variance tests accept σ and reject 1.2σ; the secure sampler passes a 7-standard-error
    variance check (failure probability below 1e-11)."""
    q = Query.count(epsilon=1, delta=1e-7, mechanism=G).group_by("n", range(20_005))
    x, sigma = _noisy_zeros(p, q, SeededNoise(2024))
    assert stats.kstest(x, "norm", args=(0, sigma)).pvalue > 0.01
    assert stats.kstest(x, "norm", args=(0, 1.2 * sigma)).pvalue < 1e-6
    ratio = float(np.mean(x**2)) / sigma**2  # its standard error is √(2/20000) = 1%
    assert 0.97 < ratio < 1.03 and not 0.97 < ratio / 1.2**2 < 1.03
    secure, _ = _noisy_zeros(p, q, None)
    assert 0.93 < float(np.mean(secure**2)) / sigma**2 < 1.07


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: Query.count(epsilon=1, mechanism=G), "0 < delta < 1"),
        (lambda: Query.count(epsilon=1, delta=0.0, mechanism="gaussian"), "0 < delta < 1"),
        (lambda: Query.count(epsilon=1, delta=1.0, mechanism=G), "0 < delta < 1"),
        (lambda: Query.count(epsilon=1, delta=float("nan"), mechanism=G), "0 < delta < 1"),
        (lambda: Query.count(epsilon=1, delta=1e-6), "Laplace query is pure"),
        (lambda: Query.count(epsilon=1, delta=1e-6, mechanism="cauchy"), "unknown mechanism"),
        (lambda: from_dict({"statistic": "count", "epsilon": 1, "mechanism": "gaussian"}), "delta"),
        (
            lambda: from_dict({"version": 1, "statistic": "count", "epsilon": 1, "delta": 1e-6}),
            "version 2",
        ),
        (
            lambda: from_dict({"version": 2, "statistic": "count", "epsilon": 1, "mechanism": 1}),
            "must be a string",
        ),
    ],
)
def test_a_gaussian_query_without_delta_is_refused_and_charges_nothing(
    p: Platform, build: Any, match: str
) -> None:
    before = state(p)
    with pytest.raises(InvalidRequestError, match=match):
        run(p, "s", build(), blocks=Last(2), context="a")
    assert state(p) == before


def test_a_delta_the_blocks_cannot_afford_is_refused_and_charges_nothing(p: Platform) -> None:
    before = state(p)
    q = Query.count(epsilon=1, delta=1e-5, mechanism=G)  # the blocks hold δ = 1e-6
    with pytest.raises(BlockBudgetError):
        run(p, "s", q, blocks=["2024-03-01"], context="a")
    assert state(p) == before


def test_the_json_form_is_versioned() -> None:
    laplace = Query.mean("v", epsilon=0.5, lower=0, upper=1)
    gaussian = Query.mean("v", epsilon=0.5, lower=0, upper=1, delta=1e-6, mechanism=G)
    assert to_dict(laplace)["version"] == 1 and "mechanism" not in to_dict(laplace)
    form = to_dict(gaussian)
    assert (form["version"], form["mechanism"], form["delta"]) == (2, "gaussian", 1e-6)
    assert from_dict(form) == gaussian and from_dict(to_dict(laplace)) == laplace
    old = {"version": 1, "statistic": "mean", "epsilon": 0.5, "column": "v", "lower": 0}
    assert from_dict({**old, "upper": 1}).mechanism is Mechanism.LAPLACE
    assert from_dict({**old, "version": 2, "upper": 1}) == laplace


def test_the_engines_give_identical_gaussian_answers(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"epsilon": 1, "delta": 1e-7, "mechanism": G}
    queries = [
        Query.variance("v", lower=-3.3, upper=41.7, **kw).group_by("c", ["a", "b", "c"]),
        Query.sum("v", lower=0, upper=48, **kw).where("n", "<", 3),
        Query.histogram("c", ["a", "d"], other=True, **kw).where("v", "is null"),
        Query.quantiles("v", [0.25, 0.5], lower=0, upper=48, bins=7, **kw),
    ]
    answers = {}
    for engine in ("arrow", "duckdb"):
        plat = platform(tmp_path / engine, engine=engine)
        try:
            answers[engine] = [
                (out.groups, out.parts)
                for out in (
                    run(plat, "s", q, blocks=Last(2), context="a", noise=NoNoise()) for q in queries
                )
            ]
        finally:
            plat.close()
    assert answers["arrow"] == answers["duckdb"]


def test_the_command_line_takes_mechanism_and_delta(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from blockbudget.cli import app

    platform(tmp_path / "h").close()
    base = ["--context", "a", "--home", str(tmp_path / "h"), "--last", "1", "--epsilon", "1"]
    runner = CliRunner()
    g = ["--mechanism", "gaussian", "--delta", "1e-7"]
    r = runner.invoke(app, ["query", "count", "s", *base, *g, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "cost per block: (ε=1, δ=1E-7)" in r.output, r.output
    assert "count: gaussian σ=" in r.output and "Δ₂=1" in r.output
    r = runner.invoke(app, ["query", "count", "s", *base, "--mechanism", "gaussian"])
    assert r.exit_code == 2 and "0 < delta < 1" in " ".join(r.output.split())


def test_a_gaussian_query_spends_a_reservation_that_holds_its_delta(p: Platform) -> None:
    block = p.blocks("s")[-1].block_id
    q = Query.count(epsilon=0.5, delta=1e-7, mechanism=G)
    pure = p.ledger.reserve([block], Budget(epsilon=0.5), context="a")
    before = state(p)
    with pytest.raises(BlockBudgetError, match="reservation"):
        run(p, "s", q, reservation=pure.id, noise=NoNoise())  # holds no δ
    assert state(p) == before
    res = p.ledger.reserve([block], Budget(epsilon=0.5, delta=1e-7), context="a")
    out = run(p, "s", q, reservation=res.id, noise=NoNoise())
    assert out.value == 24.0 and out.cost == Budget(epsilon=0.5, delta=1e-7)
    assert p.ledger.reservation(res.id).state.value == "closed"  # spent in full

"""An adversarial review of top_k and covariance: the privacy claims checked against the
mechanisms as sampled (the doubles the samplers are given, OpenDP's own privacy map, the exact
peeling distribution), the prices of every rule against those bounds, the sensitivities of the
covariance's sums against every encoded row, and the refusals."""

from __future__ import annotations

import itertools
import math
import re
from decimal import ROUND_CEILING, Decimal, localcontext
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mechanisms.fakes import NoNoise
from userids_support import make_known

from blockbudget.accounting import Accounting
from blockbudget.accounting.gdp import GaussianDp
from blockbudget.accounting.rule import Noise, NoisePart
from blockbudget.budget import ALPHAS, Budget, RdpCurve
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.calibration import laplace_scale
from blockbudget.mechanisms.noise import NoiseKind, SeededNoise, opendp_modules
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.source import price
from blockbudget.mechanisms.statistics import FLOAT_SUM_SLACK
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, from_dict, run, to_dict
from blockbudget.query.parts import perturbations
from blockbudget.query.statistic import NoisyGroup, get_statistic
from blockbudget.store import Blocking, LatePolicy

from .support import platform, state

#: (ε, k) whose Gumbel scale k/ε, rounded up to a double, has a shortest decimal above the
#: double itself (so Δ/decimal is below the Δ/double the sampler actually delivers).
ODD = [("0.3", 1), ("0.3", 2), ("0.9", 3), ("1.1", 1), ("7", 1), ("0.45", 2), ("3", 7)]


def _top_k(k: int, eps: str) -> Query:
    cats = [f"c{i}" for i in range(max(k, 3))]
    return Query.of("top_k", "c", categories=cats, k=k, epsilon=Decimal(eps))


def _binary_epsilon(scale: float) -> Fraction:
    """1/β of the double the sampler is given, exactly."""
    return 1 / Fraction(scale)


def _up(t: Fraction) -> Decimal:
    """``t`` rounded up to 40 digits."""
    with localcontext() as ctx:
        ctx.prec, ctx.rounding = 40, ROUND_CEILING
        return Decimal(t.numerator) / Decimal(t.denominator)


# --- the price is never below the mechanism as sampled ------------------------------------


@pytest.mark.parametrize(("eps", "k"), ODD)
def test_one_peels_epsilon_is_read_from_the_samplers_double_upward(eps: str, k: int) -> None:
    scale = laplace_scale(sensitivity=float(k), epsilon=Decimal(eps))
    part = NoisePart(Noise.EXPONENTIAL, scale, 1.0)
    assert Fraction(part.pure_epsilon()) >= _binary_epsilon(scale)
    assert k * _binary_epsilon(scale) <= Fraction(Decimal(eps))  # and k peels fit ε


@pytest.mark.parametrize(("eps", "k"), ODD)
def test_the_rdp_price_covers_k_bounded_range_peels_at_the_samplers_scale(eps: str, k: int) -> None:
    (part,) = perturbations(_top_k(k, eps))
    curve = price("rdp2", epsilon=Decimal(eps), parts=[part])
    assert isinstance(curve, RdpCurve)
    t = _binary_epsilon(part.scale)
    for a, e in zip(ALPHAS, curve.epsilons, strict=True):
        exact = k * min(t, Fraction(repr(a)) * t * t / 8)
        assert Fraction(e) >= exact, a
        assert Fraction(e) <= Fraction(Decimal(eps))  # never more than pure ε


@pytest.mark.parametrize(("eps", "k"), ODD)
def test_the_gdp_price_covers_k_pure_peels_at_the_samplers_scale(eps: str, k: int) -> None:
    (part,) = perturbations(_top_k(k, eps))
    mu = price("gdp", epsilon=Decimal(eps), parts=[part])
    assert isinstance(mu, GaussianDp)
    t = _binary_epsilon(part.scale)
    one = GaussianDp.from_pure_dp(_up(t))
    assert Fraction(mu.mu) ** 2 >= k * Fraction(one.mu) ** 2  # √k·μ(ε'), each rounding up
    assert mu.mu <= GaussianDp.from_pure_dp(Decimal(eps)).mu  # the reservation of ε covers it


def test_the_gdp_price_of_a_laplace_part_covers_the_samplers_scale() -> None:
    scale = laplace_scale(sensitivity=1.0, epsilon=Decimal("0.3"))
    part = Perturbation("v", NoiseKind.LAPLACE, scale, 1.0, 1, Decimal("0.3"))
    mu = price("gdp", epsilon=Decimal("0.3"), parts=[part])
    assert isinstance(mu, GaussianDp)
    t = _binary_epsilon(scale)
    assert mu.mu >= GaussianDp.from_pure_dp(_up(t)).mu


@pytest.mark.parametrize("k", [1, 2, 5])
def test_opendps_own_map_of_the_sampler_agrees_with_the_bounded_range_price(k: int) -> None:
    """The secure sampler's arguments mean what the pricing assumes: OpenDP's zCDP map of
    make_noisy_top_k (monotonic L∞, scale β) at d_in = 1 is k·(1/β)²/8, the ρ of k (1/β)-BR
    peels; non-monotone scores would double d_in (ρ ×4); the pure-DP form is k/β."""
    (part,) = perturbations(_top_k(k, "0.7"))
    dp = opendp_modules()
    dom = dp.vector_domain(dp.atom_domain(T=float, nan=False))

    def rho(monotonic: bool, measure: object) -> float:
        m = dp.m.make_noisy_top_k(
            dom, dp.linf_distance(T=float, monotonic=monotonic), measure, k=k, scale=part.scale
        )
        return float(m.map(1.0))

    t = float(_binary_epsilon(part.scale))
    zcdp = rho(True, dp.zero_concentrated_divergence())
    assert zcdp == pytest.approx(k * t * t / 8, rel=1e-12)
    assert rho(False, dp.zero_concentrated_divergence()) == pytest.approx(4 * zcdp, rel=1e-12)
    assert rho(True, dp.max_divergence()) == pytest.approx(k * t, rel=1e-12)
    curve = price("rdp2", epsilon=Decimal("0.7"), parts=[part])
    assert isinstance(curve, RdpCurve)
    for a, e in zip(ALPHAS, curve.epsilons, strict=True):
        assert float(e) >= min(a * zcdp, k * t) * (1 - 1e-12), a


def _peel_probabilities(scores: np.ndarray, scale: float, k: int) -> dict[tuple[int, ...], float]:
    w = np.exp((scores - scores.max()) / scale)
    out = {}
    for order in itertools.permutations(range(len(scores)), k):
        left, p = w.sum(), 1.0
        for i in order:
            p *= w[i] / left
            left -= w[i]
        out[order] = p
    return out


@pytest.mark.parametrize("k", [1, 2, 3])
def test_add_remove_neighbours_are_within_e_to_the_epsilon_and_replace_ones_are_not(
    k: int,
) -> None:
    """The exact distribution of the released ordered k-tuple (peeling ∝ exp(c/β), Durfee &
    Rogers 2019 Lemma 4.2) at the query's β: adding one row anywhere moves no output's
    probability by more than e^ε; replacing a row (the relation the platform does not use)
    can reach e^{2ε}-ish, more than e^ε — so the scale is right only for add/remove."""
    eps = 1.0
    (part,) = perturbations(_top_k(k, str(eps)))
    worst_add = worst_replace = 0.0
    for base in itertools.product([0.0, 1.0, 3.0, 20.0], repeat=4):
        scores = np.array(base)
        p = _peel_probabilities(scores, part.scale, k)
        for i, j in itertools.permutations(range(4), 2):
            added = scores + np.eye(4)[i]
            q = _peel_probabilities(added, part.scale, k)
            worst_add = max(worst_add, *(abs(math.log(p[o] / q[o])) for o in p))
            moved = added - np.eye(4)[j]  # one row moved from j to i
            q = _peel_probabilities(moved, part.scale, k)
            worst_replace = max(worst_replace, *(abs(math.log(p[o] / q[o])) for o in p))
    assert worst_add <= eps * (1 + 1e-9)
    assert worst_replace > 1.3 * eps


# --- user-level streams pay group privacy --------------------------------------------------


def _user_stream(home: Path, accounting: Accounting, rows_per_user: int) -> Platform:
    plat = Platform(home, engine="arrow")
    plat.create_stream(
        "u",
        policy=Budget(epsilon=100, delta=1e-3),
        blocking=Blocking.by_user("uid", ids_per_block=10, rows_per_user=rows_per_user),
        late_policy=LatePolicy.DROP,
        accounting=accounting,
    )
    plat.add_context("a")
    frame = pd.DataFrame({"uid": [1, 1, 2, 1, 3], "c": ["x", "x", "y", "x", "z"]})
    plat.ingest("u", frame)
    make_known(plat, "u")
    return plat


def test_a_top_k_on_a_user_stream_is_charged_the_group_cost(tmp_path: Path) -> None:
    q = Query.of("top_k", "c", categories=["x", "y", "z"], k=2, epsilon=0.5)
    plat = _user_stream(tmp_path / "b", Accounting.BASIC, 2)
    try:
        out = run(plat, "u", q, blocks=Last(1), context="a", noise=NoNoise())
        assert out.cost == Budget(epsilon=1)  # 2 rows per user: 2ε
        assert out.groups[0].value == {"x": 1.0, "y": 2.0}  # user 1's third row was dropped
    finally:
        plat.close()
    plat = _user_stream(tmp_path / "g", Accounting("gdp"), 2)
    try:
        out = run(plat, "u", q, blocks=Last(1), context="a", noise=NoNoise())
        (part,) = out.parts
        one = price("gdp", epsilon=Decimal("0.5"), parts=[part])
        assert isinstance(out.cost, GaussianDp) and isinstance(one, GaussianDp)
        assert out.cost.mu >= 2 * one.mu
    finally:
        plat.close()


# --- refusals and randomness ---------------------------------------------------------------


@pytest.mark.parametrize("bad", [True, "2", 2.5, 0, -1, 5, None])
def test_a_bad_k_in_the_json_form_is_refused_charging_nothing(tmp_path: Path, bad: object) -> None:
    form = {**to_dict(Query.of("top_k", "c", categories=["a", "b"], k=1, epsilon=1)), "k": bad}
    if bad is None:
        del form["k"]
    p = platform(tmp_path)
    try:
        before = state(p)
        with pytest.raises(InvalidRequestError):
            run(p, "s", from_dict(form), blocks=Last(2), context="a")
        assert state(p) == before
    finally:
        p.close()


def test_secure_by_default_and_a_seeded_result_says_so(tmp_path: Path) -> None:
    p = platform(tmp_path)
    try:
        q = Query.of("top_k", "c", categories=["a", "b", "c", "d"], k=2, epsilon=1)
        assert run(p, "s", q, blocks=Last(2), context="a").secure_noise
        assert not run(p, "s", q, blocks=Last(2), context="a", noise=SeededNoise(1)).secure_noise
        cov = Query.of(
            "covariance", "v", lower=0, upper=47, column2="n", lower2=0, upper2=4, epsilon=6
        )
        assert run(p, "s", cov, blocks=Last(2), context="a").secure_noise
    finally:
        p.close()


# --- covariance: the sensitivities bound every row's terms --------------------------------

BOUNDS = [
    ((0.0, 1.0), (-1.0, 1.0)),
    ((-3.0, 5.0), (-2.0, -1.0)),  # y all negative
    ((-7.5, -0.25), (-1e3, 2.5)),  # x all negative, y straddling 0
    ((-1e-3, 1e6), (0.1, 0.30000000000000004)),  # lopsided, and an awkward decimal width
    ((-1e9, 1e9), (-1e-9, 3e-9)),
]


@pytest.mark.parametrize(("bx", "by"), BOUNDS)
def test_each_covariance_sensitivity_bounds_what_one_row_adds(
    bx: tuple[float, float], by: tuple[float, float]
) -> None:
    """For every row (x, y) — values at, inside and far outside the bounds — the term it adds
    to each released sum (decoded as the release decodes it) is within the part's
    sensitivity less its float slack: so add/remove one row moves each sum by at most Δ."""
    q = Query.of(
        "covariance", "x", lower=bx[0], upper=bx[1], column2="y", lower2=by[0],
        upper2=by[1], epsilon=6,
    )  # fmt: skip
    nan_y = {**to_dict(q), "upper2": math.nan}
    with pytest.raises(InvalidRequestError, match="upper2 must be finite"):
        from_dict(nan_y)
    stat = get_statistic("covariance")
    aggs = {a.name: a for a in stat.aggregates(q)}
    sens = {p.name: p.sensitivity for p in perturbations(q)}
    assert sens["count"] == 1.0

    def grid(lo: float, hi: float) -> np.ndarray:
        mid = lo / 2 + hi / 2
        pts = [lo, hi, mid, math.nextafter(lo, hi), math.nextafter(hi, lo), -1e300, 1e300, 0.0]
        pts += list(np.linspace(lo, hi, 101))
        return np.array(pts, dtype=np.float64)

    fx, fy = aggs["sum_x"].fixed, aggs["sum_y"].fixed
    assert fx is not None and fy is not None
    u, v = fx.encode(grid(*bx)), fy.encode(grid(*by))
    qx, qy = fx.quantum, fy.quantum
    uu, vv = [int(a) for a in u], [int(b) for b in v]
    terms = {
        "sum_x": max(abs(a) * qx for a in uu),
        "sum_y": max(abs(b) * qy for b in vv),
        "sum_xx": max(a * a * qx * qx for a in uu),
        "sum_yy": max(b * b * qy * qy for b in vv),
        "sum_xy": max(abs(a * b) * qx * qy for a in uu for b in vv),
    }
    for name, term in terms.items():
        assert term * (1 + FLOAT_SUM_SLACK) <= sens[name], name
        assert sens[name] <= term * (1 + 4 * FLOAT_SUM_SLACK) + 1e-300, name  # not loose
    # and the centred product's range is what the brief's corner formula gives, shifted
    rx, ry = fx.radius, fy.radius
    assert terms["sum_xy"] == pytest.approx(rx * ry, rel=1e-5)


@pytest.mark.parametrize(
    "noisy",
    [
        {"count": 0.0, "sum_x": 5.0, "sum_y": -5.0, "sum_xx": -1.0, "sum_yy": 0.0, "sum_xy": 9.0},
        {"count": -3.0, "sum_x": 1e308, "sum_y": 1e308, "sum_xx": 1e308, "sum_yy": 1e308,
         "sum_xy": -1e308},
        {"count": math.inf, "sum_x": math.inf, "sum_y": -math.inf, "sum_xx": math.inf,
         "sum_yy": math.nan, "sum_xy": math.inf},
        {"count": 1e-300, "sum_x": 1e-300, "sum_y": 1e-300, "sum_xx": 1e-300, "sum_yy": 1e-300,
         "sum_xy": 1e-300},
    ],
)  # fmt: skip
def test_the_covariance_answer_is_safe_post_processing_of_any_noisy_values(
    noisy: dict[str, float],
) -> None:
    q = Query.of("covariance", "x", lower=-2, upper=6, column2="y", lower2=-1, upper2=0, epsilon=6)
    stat = get_statistic("covariance")
    parts = {p.name: p for p in perturbations(q)}
    group = NoisyGroup({n: np.array([v]) for n, v in noisy.items()}, parts, 0.05)
    value, interval = stat.answer(q, group)
    assert isinstance(value, dict) and interval is None
    cov, corr = value["covariance"], value["correlation"]
    assert math.isfinite(cov) and math.isfinite(corr)
    assert abs(cov) <= 4.0 * 0.5 and -1.0 <= corr <= 1.0


# --- a number too large for a double is a bad parameter, not an internal error --------------


@pytest.mark.parametrize("field", ["upper2", "lower2", "upper"])
def test_a_bound_too_large_for_a_double_is_refused_as_a_bad_request(field: str) -> None:
    form = {**to_dict(Query.of(
        "covariance", "x", lower=-1, upper=1, column2="y", lower2=0, upper2=4, epsilon=1
    )), field: (-1 if field == "lower2" else 1) * 10**400}  # fmt: skip
    with pytest.raises(InvalidRequestError, match=f"{field}'? must be"):
        from_dict(form)


def test_over_http_a_huge_integer_bound_is_a_422_charging_nothing(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient
    from service.support import seed

    from blockbudget.service import create_app

    seeded = seed(tmp_path / "home")
    p = seeded.platform
    try:
        q = to_dict(
            Query.of(
                "covariance", "v", lower=0, upper=1, column2="n", lower2=0, upper2=4, epsilon=1
            )
        )
        before = state(p, "flights")
        app = create_app(p, keys=seeded.keys, auth_cache_seconds=0)
        with TestClient(app, raise_server_exceptions=False) as client:
            h = seeded.headers(seeded.analyst)
            for field in ("upper2", "upper"):
                body = {"query": {**q, field: 10**400}, "context": "team-a", "last": 1}
                r = client.post("/v1/streams/flights/query", headers=h, json=body)
                assert r.status_code == 422, r.text
                assert re.search(f"{field}'? must be", r.json()["detail"]), r.text
        assert state(p, "flights") == before
    finally:
        p.close()

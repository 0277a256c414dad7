"""The top-k statistic in layers: its noise parameters and prices checked deterministically,
exact at huge ε, refusals that charge nothing, the selection's distribution (which rejects a
wrong scale), and the query path end to end (Python, JSON form, HTTP and CLI)."""

from __future__ import annotations

import itertools
import json
import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from mechanisms.fakes import NoNoise
from scipy import stats
from typer.testing import CliRunner

from blockbudget.accounting.gdp import GaussianDp
from blockbudget.budget import ALPHAS, Budget, RdpCurve
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource, SecureNoise, SeededNoise, Selection
from blockbudget.mechanisms.source import price, release_of
from blockbudget.platform import Last
from blockbudget.query import Query, from_dict, run, to_dict
from blockbudget.query.parts import perturbations

from .support import platform, state
from .test_statistic_contract import tie_free_platform

CATS = ["a", "b", "c", "z"]


def top_k(k: int = 2, *, epsilon: float = 1.0, cats: list[object] | None = None) -> Query:
    return Query.of("top_k", "c", categories=CATS if cats is None else cats, k=k, epsilon=epsilon)


# --- parameters, deterministically -----------------------------------------------------------


def test_the_gumbel_scale_is_k_over_epsilon_and_one_selection_per_group() -> None:
    (part,) = perturbations(top_k(3, epsilon=0.5).group_by("n", [0, 1]))
    assert part.kind is Selection.GUMBEL and part.picks == 3
    assert part.scale == 6.0 and part.sensitivity == 1.0  # β = k·Δ/ε
    assert part.size == 2 * len(CATS) and part.epsilon == Decimal("0.5")
    (odd,) = perturbations(top_k(1, epsilon=0.3))
    assert odd.scale >= 1 / 0.3 and odd.scale == pytest.approx(1 / 0.3, rel=1e-15)


def test_the_release_is_k_exponential_mechanism_selections_priced_by_every_rule() -> None:
    parts = perturbations(top_k(4, epsilon=2.0))
    release = release_of(epsilon=Decimal(2), parts=parts)
    assert len(release.parts) == 4
    assert {(p.noise.value, p.pure_epsilon()) for p in release.parts} == {
        ("exponential", Decimal("0.5"))
    }
    for rule in ("basic", "strong", "whitehouse"):  # (ε, δ) rules charge the asked ε
        assert price(rule, epsilon=Decimal(2), parts=parts) == Budget(epsilon=2)
    curve = price("rdp2", epsilon=Decimal(2), parts=parts)
    assert isinstance(curve, RdpCurve)
    for a, e in zip(ALPHAS, curve.epsilons, strict=True):
        # four (1/2)-bounded-range selections: 4·min(1/2, α/32) (Cesar & Rogers 2021)
        expected = 4 * min(Decimal("0.5"), Decimal(repr(a)) / 32)
        assert expected <= e <= expected * (1 + Decimal("1e-12")), a
    assert curve == price("rdp", epsilon=Decimal(2), parts=parts)
    assert curve.epsilons[0] < RdpCurve.from_pure_dp(2).epsilons[0] / 4  # tighter than pure ε
    mu = price("gdp", epsilon=Decimal(2), parts=parts)
    quarter = GaussianDp.from_pure_dp(Decimal("0.5"))
    assert mu == quarter + quarter + quarter + quarter
    assert isinstance(mu, GaussianDp) and mu.mu < GaussianDp.from_pure_dp(2).mu


def test_the_bounded_range_curve_is_a_quarter_of_the_pure_one_at_small_orders() -> None:
    br, pure = RdpCurve.bounded_range(Decimal("0.1")), RdpCurve.from_pure_dp(Decimal("0.1"))
    assert br.epsilons[0] == Decimal("0.001875")  # 1.5·0.01/8
    assert br.epsilons[0] * 4 == pure.epsilons[0]
    assert RdpCurve.bounded_range(1).epsilons[-1] == 1  # capped at ε


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: top_k(0), "1 ≤ k ≤ 4"),
        (lambda: top_k(5), "1 ≤ k ≤ 4"),
        (lambda: Query.of("top_k", "c", categories=CATS, epsilon=1), "needs 'k'"),
        (lambda: Query.of("top_k", "c", categories=CATS, k=1.5, epsilon=1), "must be int"),
        (lambda: Query.of("top_k", "c", categories=CATS, k=True, epsilon=1), "must be int"),
        (lambda: Query.of("top_k", "c", categories=["a", "a"], k=1, epsilon=1), "distinct"),
        (lambda: Query.of("top_k", "c", k=1, epsilon=1), "categories are given"),
        (lambda: Query.of("top_k", categories=CATS, k=1, epsilon=1), "needs a value column"),
        (lambda: Query.of("top_k", "c", categories=CATS, k=1, other=True, epsilon=1), "other"),
        (
            lambda: Query.of(
                "top_k", "c", categories=CATS, k=1, epsilon=1, delta=1e-6, mechanism="gaussian"
            ),
            "does not take mechanism='gaussian'",
        ),
        (lambda: Query.of("top_k", "c", categories=CATS, k=1, kk=2, epsilon=1), "takes no"),
        (lambda: Query.of("count", k=1, epsilon=1), "takes no \\['k'\\]"),
    ],
)
def test_bad_parameters_are_refused_on_construction(make: object, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        make()  # type: ignore[operator]


def test_a_refused_query_charges_and_seals_nothing(tmp_path: Path) -> None:
    p = platform(tmp_path)
    try:
        before = state(p)
        with pytest.raises(InvalidRequestError, match="does not match column"):
            run(p, "s", top_k(1, cats=[1, 2]), blocks=Last(2), context="a")
        with pytest.raises(InvalidRequestError):
            run(p, "s", from_dict({**to_dict(top_k()), "k": 9}), blocks=Last(2), context="a")
        assert state(p) == before
    finally:
        p.close()


# --- exact at huge ε ------------------------------------------------------------------------


def test_huge_epsilon_and_zero_noise_select_the_exact_ranking(tmp_path: Path) -> None:
    p = tie_free_platform(tmp_path)  # n = j on 4·(j + 1) rows: 4 leads, then 3, 2
    try:
        q = Query.of("top_k", "n", categories=[0, 1, 2, 3, 4, 7], k=3, epsilon=1e6)
        expected = {4: 1.0, 3: 2.0, 2: 3.0}
        secure = run(p, "s", q, blocks=Last(3), context="a")
        assert secure.groups[0].value == expected and secure.secure_noise
        assert list(secure.groups[0].value) == [4, 3, 2]  # best first
        assert secure.groups[0].interval is None
        zero = run(p, "s", q, blocks=Last(3), context="a", noise=NoNoise())
        assert zero.groups[0].value == expected and not zero.secure_noise
        seeded = run(p, "s", q, blocks=Last(3), context="a", noise=SeededNoise(3))
        assert seeded.groups[0].value == expected and not seeded.secure_noise
        assert "gumbel top-3 β=3e-06" in secure.noise_summary
        grouped = run(p, "s", q.group_by("c", ["a", "d"]), blocks=Last(3), context="a")
        assert [g.value for g in grouped.groups] == [expected, expected]
    finally:
        p.close()


# --- the distribution of the selection ------------------------------------------------------

SCORES = np.array([0.0, 1.0, 2.0])
N = 5_000


def pair_probabilities(scale: float) -> dict[tuple[int, int], float]:
    """Peeling with the exponential mechanism ∝ exp(score/scale), twice."""
    w = np.exp(SCORES / scale)
    out = {}
    for i, j in itertools.permutations(range(3), 2):
        out[(i, j)] = w[i] / w.sum() * w[j] / (w.sum() - w[i])
    return out


def _pairs(noise: NoiseSource, scale: float) -> dict[tuple[int, int], int]:
    counts = dict.fromkeys(itertools.permutations(range(3), 2), 0)
    for _ in range(N):
        first, second = noise.top_k(SCORES, k=2, scale=scale)
        counts[(int(first), int(second))] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("noise", [SeededNoise(11), SecureNoise()], ids=["seeded", "secure"])
def test_the_selection_is_two_exponential_mechanism_peels_and_a_wrong_scale_is_rejected(
    noise: NoiseSource,
) -> None:
    """χ² of the 6 ordered pairs: the right scale is not rejected at p = 1e-6 (a failure has
    probability 1e-6 for the secure source; the seeded one is deterministic); scales 0.7× and
    1.3× are (their pair probabilities differ by ≥ 0.02 somewhere: at N = 5,000 the expected
    χ² is over four times the critical value of ~35)."""
    counts = _pairs(noise, 1.0)
    observed = np.array(list(counts.values()))
    for factor, reject in ((1.0, False), (0.7, True), (1.3, True)):
        expected = N * np.array(list(pair_probabilities(factor).values()))
        p_value = stats.chisquare(observed, expected).pvalue
        assert bool(p_value < 1e-6) is reject, (factor, p_value)


def test_wrong_scales_differ_enough_for_the_chi_square_to_reject() -> None:
    right = pair_probabilities(1.0)
    for factor in (0.7, 1.3):
        wrong = pair_probabilities(factor)
        gap = max(abs(right[k] - wrong[k]) for k in right)
        assert gap >= 0.02, factor
        # the expected χ² at the wrong scale, N·Σ(p−q)²/q, far above the 1e-6 critical value
        chi2 = N * sum((right[k] - wrong[k]) ** 2 / wrong[k] for k in right)
        assert chi2 > 4 * stats.chi2.isf(1e-6, 5)


def test_top_k_refuses_bad_arguments_and_sources_that_do_not_select() -> None:
    seeded = SeededNoise(0)
    with pytest.raises(InvalidRequestError, match="1 ≤ k ≤ 3"):
        seeded.top_k(SCORES, k=4, scale=1.0)
    with pytest.raises(Exception, match="Gumbel scale"):
        seeded.top_k(SCORES, k=1, scale=math.inf)

    class Plain(NoiseSource):
        def _laplace(self, values: np.ndarray, scale: float) -> np.ndarray:
            return values

        def _gaussian(self, values: np.ndarray, sigma: float) -> np.ndarray:
            return values

    with pytest.raises(InvalidRequestError, match="does not sample top-k"):
        Plain().top_k(SCORES, k=1, scale=1.0)


# --- the query path end to end --------------------------------------------------------------


def test_python_json_http_and_cli_answer_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At zero noise (the exact top-k, ties to the first category) every door answers alike."""
    from fastapi.testclient import TestClient
    from service.support import seed

    from blockbudget.cli import app as cli

    seeded = seed(tmp_path / "home")
    monkeypatch.setattr("blockbudget.query.execute.resolve_noise", lambda _: NoNoise())
    monkeypatch.setenv("BLOCKBUDGET_DATABASE", seeded.platform.database_url)
    try:
        q = Query.of("top_k", "carrier", categories=["AA", "UA", "DL", "B6"], k=2, epsilon=0.05)
        q = q.group_by("origin", ["EWR", "JFK", "LGA"])
        platform_ = seeded.platform
        py = run(platform_, "flights", q, blocks=Last(2), context="team-a").to_dict()
        from blockbudget.service import create_app

        app = create_app(platform_, keys=seeded.keys, auth_cache_seconds=0)
        with TestClient(app) as client:
            body = {"query": to_dict(q), "context": "team-a", "last": 2}
            r = client.post(
                "/v1/streams/flights/query", headers=seeded.headers(seeded.analyst), json=body
            )
            assert r.status_code == 200, r.text
            http = r.json()
            bad = {**body, "query": {**to_dict(q), "k": 0}}
            r = client.post(
                "/v1/streams/flights/query", headers=seeded.headers(seeded.analyst), json=bad
            )
            assert r.status_code == 422 and "1 ≤ k ≤ 4" in r.text
        args = ["query", "top_k", "flights", "--epsilon", "0.05", "--column", "carrier"]
        args += ["--categories", "AA,UA,DL,B6", "--param", "k=2", "--group-by"]
        args += ["origin=EWR,JFK,LGA", "--last", "2", "--context", "team-a", "--json"]
        r2 = CliRunner().invoke(cli, [*args, "--home", str(platform_.home)])
        assert r2.exit_code == 0, r2.output
        local = json.loads(r2.output)
        for out in (http, local):
            assert out["groups"] == py["groups"] and out["query"] == py["query"]
            assert out["parts"] == py["parts"]
        assert py["query"]["k"] == 2 and py["parts"][0]["noise"] == "gumbel"
        assert [len(g["value"]) for g in py["groups"]] == [2, 2, 2]
    finally:
        seeded.platform.close()

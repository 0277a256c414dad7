"""The covariance statistic in layers: its six parts' sensitivities and shares checked
deterministically, exact at huge ε against numpy, refusals that charge nothing, the noise of
the product sum (a distribution test that rejects a wrong scale), and the query path end to
end (Python, JSON form, HTTP and CLI)."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from mechanisms.fakes import NoNoise
from scipy import stats
from typer.testing import CliRunner

from blockbudget.engine.plan import FIXED_POINT_BITS, AggKind
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseKind, SeededNoise
from blockbudget.platform import Last
from blockbudget.query import Query, from_dict, run, to_dict
from blockbudget.query.parts import aggregates, perturbations, plan

from .support import frame, platform, state


def cov(*, epsilon: float = 6.0, **more: object) -> Query:
    fields: dict[str, object] = {"lower": 0, "upper": 48, "column2": "n", "lower2": 0, "upper2": 4}
    fields.update(more)
    return Query.of("covariance", "v", epsilon=epsilon, **fields)  # type: ignore[arg-type]


def test_six_parts_at_a_sixth_each_with_sensitivities_from_the_bounds() -> None:
    q = cov(epsilon=6.0)
    parts = {p.name: p for p in perturbations(q)}
    assert list(parts) == ["count", "sum_x", "sum_y", "sum_xx", "sum_yy", "sum_xy"]
    assert {p.epsilon for p in parts.values()} == {Decimal(1)}
    assert {p.kind for p in parts.values()} == {NoiseKind.LAPLACE}
    # radii 24 and 2 (centred at 24 and 2); q = 2**(5-20) and 2**(1-20): U = V = 2**20 units
    rx, ry = 24.0, 2.0
    slack = 1 + 1e-6
    expected = {"count": 1.0, "sum_x": rx, "sum_y": ry, "sum_xx": rx * rx, "sum_yy": ry * ry}
    expected["sum_xy"] = rx * ry
    for name, bound in expected.items():
        sens = parts[name].sensitivity
        assert bound <= sens <= bound * slack * (1 + 2**-40) * (1 + 24 / 2**FIXED_POINT_BITS), name
        assert parts[name].scale == pytest.approx(sens, rel=1e-15)  # b = Δ/(ε/6) = Δ
    (xy,) = [a for a in aggregates(q) if a.kind is AggKind.SUM_PRODUCTS]
    assert xy.column == "v" and xy.by == "n" and xy.fixed is not None and xy.by_fixed is not None
    assert xy.fixed.centre == 24.0 and xy.by_fixed.centre == 2.0


def test_the_plan_keeps_rows_where_both_values_are_present() -> None:
    from blockbudget.engine.plan import Op

    preds = plan(cov(), _source()).predicates
    assert [(p.column, p.op) for p in preds] == [("v", Op.NOT_NULL), ("n", Op.NOT_NULL)]
    assert cov().columns() == ("v", "n")


def _source() -> object:
    from blockbudget.engine.plan import BlockFiles, ScanSource

    return ScanSource(blocks=(BlockFiles("b", (), 0),), base="", columns=("v", "n", "c"))


def test_a_gaussian_covariance_splits_delta_too() -> None:
    q = cov(delta=6e-6, mechanism="gaussian")
    assert {p.kind for p in perturbations(q)} == {NoiseKind.GAUSSIAN}
    assert from_dict(to_dict(q)) == q


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"column2": "v"}, "two different columns"),
        ({"lower2": 5}, "lower < upper"),
        ({"column2": ""}, "1 to 200 characters"),
        ({"column2": 3}, "must be str"),
        ({"upper2": "x"}, "must be float"),
        ({"k": 2}, "takes no"),
    ],
)
def test_bad_parameters_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        cov(**fields)


def test_missing_parameters_and_a_text_column_are_refused_charging_nothing(
    tmp_path: Path,
) -> None:
    with pytest.raises(InvalidRequestError, match="needs 'column2'"):
        Query.of("covariance", "v", lower=0, upper=1, lower2=0, upper2=1, epsilon=1)
    with pytest.raises(InvalidRequestError, match="needs public clipping bounds"):
        Query.of("covariance", "v", column2="n", lower2=0, upper2=1, epsilon=1)
    p = platform(tmp_path)
    try:
        before = state(p)
        with pytest.raises(InvalidRequestError, match="needs a numeric column; 'c'"):
            run(p, "s", cov(column2="c"), blocks=Last(2), context="a")
        with pytest.raises(Exception, match="no column"):
            run(p, "s", cov(column2="nope"), blocks=Last(2), context="a")
        assert state(p) == before
    finally:
        p.close()


def _exact(rows: object) -> dict[str, float]:
    f = rows  # a DataFrame
    both = f[f["v"].notna() & f["n"].notna()]  # type: ignore[index]
    x = np.clip(both["v"].to_numpy(float), 0, 48)
    y = np.clip(both["n"].to_numpy(float), 0, 4)
    c = float(np.mean(x * y) - np.mean(x) * np.mean(y))
    return {"covariance": c, "correlation": float(np.corrcoef(x, y)[0, 1])}


@pytest.mark.parametrize("engine", ["arrow", "duckdb"])
def test_huge_epsilon_and_zero_noise_match_numpy(tmp_path: Path, engine: str) -> None:
    p = platform(tmp_path, engine=engine, epsilon=1e7)
    try:
        f = frame()
        q = cov(epsilon=1e6).group_by("c", ["a", "b"])
        zero = run(p, "s", q, blocks=Last(2), context="a", noise=NoNoise())
        secure = run(p, "s", q, blocks=Last(2), context="a")
        # ε/6 = 1.7e5 per sum: the largest Laplace scale (Σuv, Δ = 48·4) is 1.2e-3, about 1e-4
        # in a group's covariance; 1e-2 is ~100 scales away (never flaky) and still far below what
        # a wrong formula or a missing centring would give.
        for result, tol in ((zero, 1e-9), (secure, 1e-2)):
            for g in result.groups:
                want = _exact(f[f["c"] == g.key[0]])
                got = g.value
                assert isinstance(got, dict) and g.interval is None
                for name in want:
                    assert math.isclose(got[name], want[name], rel_tol=tol, abs_tol=tol), name
    finally:
        p.close()


def test_answers_are_clamped_into_their_ranges() -> None:
    from blockbudget.query.statistic import NoisyGroup

    q = cov()
    parts = {p.name: p for p in perturbations(q)}
    wild = {"count": 2.0, "sum_x": 1e6, "sum_y": -1e6, "sum_xx": -5.0, "sum_yy": 1e9}
    wild["sum_xy"] = 1e12
    noisy = NoisyGroup({k: np.array([v]) for k, v in wild.items()}, parts, 0.05)
    value, _ = q.statistic.definition.answer(q, noisy)
    assert isinstance(value, dict)
    assert value["covariance"] == 24.0 * 2.0 and value["correlation"] == 0.0  # var_x ≤ 0


@pytest.mark.slow
def test_the_product_sums_noise_has_its_laplace_scale_and_rejects_a_wrong_one(
    tmp_path: Path,
) -> None:
    """Many seeded releases of the product sum Σuv: its noise (release − exact) is Laplace at
    the part's scale — KS accepts at p > 1e-6 and rejects 0.7× and 1.3× (as
    tests/mechanisms/test_distributions.py argues, at N = 50,000)."""
    from mechanisms.fakes import FakeSource

    from blockbudget.mechanisms.source import draw_then_perturb

    q = cov(epsilon=6.0)
    (xy,) = [p for p in perturbations(q) if p.name == "sum_xy"]
    noise = SeededNoise(5)
    out = draw_then_perturb(
        FakeSource(), cost=None, label="t", noise=noise, jobs=[(xy, np.zeros(50_000))]
    )[0]
    for factor, reject in ((1.0, False), (0.7, True), (1.3, True)):
        p_value = stats.kstest(out, stats.laplace(scale=xy.scale * factor).cdf).pvalue
        assert bool(p_value < 1e-6) is reject, (factor, p_value)


def test_python_json_http_and_cli_answer_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient
    from service.support import seed

    from blockbudget.budget import Budget
    from blockbudget.cli import app as cli
    from blockbudget.service import create_app
    from blockbudget.service.auth import Permission
    from blockbudget.store import Blocking

    seeded = seed(tmp_path / "home")
    monkeypatch.setattr("blockbudget.query.execute.resolve_noise", lambda _: NoNoise())
    monkeypatch.setenv("BLOCKBUDGET_DATABASE", seeded.platform.database_url)
    p = seeded.platform
    p.create_stream("pairs", policy=Budget(epsilon=1), blocking=Blocking.by_time("time"))
    p.ingest("pairs", frame())
    seeded.keys.grant("ana", "pairs", Permission.READ)
    try:
        q = cov(epsilon=0.05).group_by("c", ["a", "b", "c"])
        py = run(p, "pairs", q, blocks=Last(2), context="team-a").to_dict()
        with TestClient(create_app(p, keys=seeded.keys, auth_cache_seconds=0)) as client:
            body = {"query": to_dict(q), "context": "team-a", "last": 2}
            h = seeded.headers(seeded.analyst)
            r = client.post("/v1/streams/pairs/query", headers=h, json=body)
            assert r.status_code == 200, r.text
            http = r.json()
        args = ["query", "covariance", "pairs", "--epsilon", "0.05", "--column", "v"]
        args += ["--lower", "0", "--upper", "48", "--param", "column2=n"]
        args += ["--param", "lower2=0", "--param", "upper2=4"]
        args += ["--group-by", "c=a,b,c", "--last", "2", "--context", "team-a"]
        r2 = CliRunner().invoke(cli, [*args, "--json", "--home", str(p.home)])
        assert r2.exit_code == 0, r2.output
        local = json.loads(r2.output)
        for out in (http, local):
            assert out["groups"] == py["groups"] and out["query"] == py["query"]
        assert len(py["parts"]) == 6 and py["query"]["column2"] == "n"
        for g in py["groups"]:
            assert dict(g["value"]).keys() == {"covariance", "correlation"}
    finally:
        seeded.platform.close()

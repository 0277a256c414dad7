"""One query, three doors: the Python API, the command line (local and ``--server``) and the
HTTP API answer the same query identically (zero noise), and the price route charges nothing.

Zero noise: :func:`blockbudget.query.run`'s default noise source is replaced by the tests'
``NoNoise`` (the library itself has no zero-noise source), so every door returns the exact
aggregate and the answers must be equal, not merely close."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fastapi.testclient import TestClient
from mechanisms.fakes import NoNoise
from typer.testing import CliRunner

from blockbudget.cli import app as cli
from blockbudget.platform import Last
from blockbudget.query import Query, run, to_dict
from blockbudget.service import create_app
from service.support import Seeded, ledger_snapshot, thread_server

QUERY = (
    Query.mean("dep_delay", epsilon=0.05, lower=-60, upper=300)
    .where("dep_delay", "is not null")
    .where("carrier", "in", ["AA", "UA", "DL", "B6"])
    .group_by("origin", ["EWR", "JFK", "LGA", "XXX"])
)
CLI_ARGS = [
    "mean",
    "flights",
    "--epsilon",
    "0.05",
    "--column",
    "dep_delay",
    "--lower",
    "-60",
    "--upper",
    "300",
    "--where",
    "dep_delay is not null",
    "--where",
    "carrier in AA,UA,DL,B6",
    "--group-by",
    "origin=EWR,JFK,LGA,XXX",
    "--last",
    "2",
    "--json",
]


@pytest.fixture
def zero_noise(monkeypatch: pytest.MonkeyPatch, seeded: Seeded) -> None:
    monkeypatch.setattr("blockbudget.query.execute.resolve_noise", lambda _: NoNoise())
    # The local CLI opens the same ledger as the server (SQLite in the home, or PostgreSQL).
    monkeypatch.setenv("BLOCKBUDGET_DATABASE", seeded.platform.database_url)


def _answer(out: dict[str, object]) -> tuple[object, ...]:
    return (out["groups"], out["parts"], out["cost"], out["query"], out["secure_noise"])


def test_python_cli_and_http_answer_identically(
    seeded: Seeded, client: TestClient, tmp_path: Path, zero_noise: None
) -> None:
    platform = seeded.platform
    py = run(platform, "flights", QUERY, blocks=Last(2), context="team-a").to_dict()
    h = seeded.headers(seeded.analyst)
    body = {"query": to_dict(QUERY), "context": "team-a", "last": 2}
    r = client.post("/v1/streams/flights/query", headers=h, json=body)
    assert r.status_code == 200, r.text
    http = r.json()
    runner = CliRunner()
    home = ["--home", str(platform.home)]
    r2 = runner.invoke(cli, ["query", *CLI_ARGS, "--context", "team-a", *home])
    assert r2.exit_code == 0, r2.output
    local = json.loads(r2.output)
    spec = tmp_path / "q.json"
    spec.write_text(json.dumps(to_dict(QUERY)))
    r3 = runner.invoke(
        cli,
        [
            "query",
            "run",
            "flights",
            "--spec",
            f"@{spec}",
            "--last",
            "2",
            "--json",
            *home,
            "--context",
            "team-a",
        ],
    )
    assert r3.exit_code == 0, r3.output
    with thread_server(create_app(platform, keys=seeded.keys)) as url:
        remote = ["--server", url, "--api-key", seeded.analyst]
        r4 = runner.invoke(cli, ["query", *CLI_ARGS, *remote])  # the key's only context
    assert r4.exit_code == 0, r4.output
    answers = [_answer(x) for x in (py, http, local, json.loads(r3.output), json.loads(r4.output))]
    assert all(a == answers[0] for a in answers)
    # ... and the answer is the hand computation over the two newest blocks' rows.
    truth = pd.read_csv(seeded.csv, parse_dates=["time"])
    days = sorted(truth.time.dt.date.unique())[-2:]
    rows = truth[truth.time.dt.date.isin(days) & truth.carrier.isin(["AA", "UA", "DL", "B6"])]
    rows = rows.dropna(subset=["dep_delay"])
    for group in py["groups"]:
        (origin,) = group["key"]
        x = rows[rows.origin == origin].dep_delay.clip(-60, 300)
        expected = x.mean() if len(x) else 120.0  # empty group: the bounds' midpoint
        assert group["value"] == pytest.approx(expected, abs=1e-9)
        assert group["interval"][0] <= group["value"] <= group["interval"][1]


def test_the_price_route_charges_nothing_and_matches_the_run(
    seeded: Seeded, client: TestClient, zero_noise: None
) -> None:
    h = seeded.headers(seeded.analyst)
    body = {"query": to_dict(QUERY), "context": "team-a", "last": 2}
    before = ledger_snapshot(seeded.platform)
    sealed = [m.sealed for m in seeded.platform.store.blocks("flights")]
    r = client.post("/v1/streams/flights/query/price", headers=h, json=body)
    assert r.status_code == 200, r.text
    quote = r.json()
    assert ledger_snapshot(seeded.platform) == before
    assert [m.sealed for m in seeded.platform.store.blocks("flights")] == sealed
    assert quote["ok"] and quote["cost"] == {"epsilon": "0.05", "delta": "0"}
    r = client.post("/v1/streams/flights/query", headers=h, json=body)
    assert r.status_code == 200, r.text
    assert r.json()["blocks"] == quote["blocks"] and r.json()["parts"] == quote["parts"]
    # The CLI's dry run prints the same and changes nothing either.
    after = ledger_snapshot(seeded.platform)
    out = CliRunner().invoke(
        cli,
        [
            "query",
            *CLI_ARGS,
            "--dry-run",
            "--context",
            "team-a",
            "--home",
            str(seeded.platform.home),
        ],
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["parts"] == quote["parts"]
    assert ledger_snapshot(seeded.platform) == after


def test_a_gaussian_query_answers_identically_over_http_and_the_cli(
    seeded: Seeded, client: TestClient, zero_noise: None
) -> None:
    """The JSON form (version 2) carries the mechanism and δ through every door."""
    q = Query.sum(
        "dep_delay", epsilon=0.05, delta=1e-7, lower=-60, upper=300, mechanism="gaussian"
    ).group_by("origin", ["EWR", "JFK"])
    py = run(seeded.platform, "flights", q, blocks=Last(2), context="team-a").to_dict()
    assert py["cost"] == {"epsilon": "0.05", "delta": "1E-7"}
    assert py["noise"].startswith("sum: gaussian σ=") and "Δ₂=" in py["noise"]
    h = seeded.headers(seeded.analyst)
    body = {"query": to_dict(q), "context": "team-a", "last": 2}
    quote = client.post("/v1/streams/flights/query/price", headers=h, json=body)
    assert quote.status_code == 200 and quote.json()["parts"] == py["parts"], quote.text
    r = client.post("/v1/streams/flights/query", headers=h, json=body)
    assert r.status_code == 200, r.text
    args = ["sum", "flights", "--epsilon", "0.05", "--mechanism", "gaussian", "--delta", "1e-7"]
    args += ["--column", "dep_delay", "--lower", "-60", "--upper", "300"]
    args += ["--group-by", "origin=EWR,JFK", "--last", "2", "--json", "--context", "team-a"]
    r2 = CliRunner().invoke(cli, ["query", *args, "--home", str(seeded.platform.home)])
    assert r2.exit_code == 0, r2.output
    assert _answer(r.json()) == _answer(py) == _answer(json.loads(r2.output))


@pytest.mark.parametrize(
    "query, status, match",
    [
        (
            {"statistic": "count", "epsilon": 0.1, "group_by": [{"column": "origin"}]},
            422,
            "declared domain",
        ),
        (
            {
                "statistic": "count",
                "epsilon": 0.1,
                "where": [{"column": "nosuch", "op": "is null"}],
            },
            422,
            "unknown column 'nosuch'",
        ),
        (
            {
                "statistic": "count",
                "epsilon": 0.1,
                "where": [{"column": "origin", "op": "==", "value": 3}],
            },
            422,
            "does not match",
        ),
        ({"statistic": "count", "epsilon": 0.1, "nonsense": 1}, 422, "unknown query field"),
        (  # a Gaussian query needs δ > 0
            {"version": 2, "statistic": "count", "epsilon": 0.1, "mechanism": "gaussian"},
            422,
            "0 < delta < 1",
        ),
    ],
)
def test_refused_queries_change_nothing(
    seeded: Seeded, client: TestClient, query: dict[str, object], status: int, match: str
) -> None:
    h = seeded.headers(seeded.analyst)
    before = ledger_snapshot(seeded.platform)
    for path in ("/v1/streams/flights/query", "/v1/streams/flights/query/price"):
        r = client.post(path, headers=h, json={"query": query, "last": 1})
        assert r.status_code == status and match in r.json()["detail"], r.text
    assert ledger_snapshot(seeded.platform) == before
    assert not any(m.sealed for m in seeded.platform.store.blocks("flights"))


def test_the_routes_keep_the_acl_and_context_checks(seeded: Seeded, client: TestClient) -> None:
    body = {"query": {"statistic": "count", "epsilon": 0.1}, "last": 1}
    before = ledger_snapshot(seeded.platform)
    ha = seeded.headers(seeded.analyst)
    for path in ("/v1/streams/secret/query", "/v1/streams/secret/query/price"):
        assert client.post(path, headers=ha, json=body).status_code == 403
    for path in ("/v1/streams/flights/query", "/v1/streams/flights/query/price"):
        r = client.post(path, headers=ha, json={**body, "context": "team-b"})
        assert r.status_code == 403, r.text
        assert client.post(path, json=body).status_code == 401
    assert ledger_snapshot(seeded.platform) == before


def test_whether_a_timestamp_exists_is_not_told_by_the_status(
    seeded: Seeded, client: TestClient
) -> None:
    """An aware domain value on the naive ``time`` column: the DuckDB engine used to fail (422,
    uncharged) only when a row held the value and answer (200) otherwise — a free membership
    oracle. Now the checks refuse both, before anything is reserved or sealed."""
    rows = pd.read_csv(seeded.csv, parse_dates=["time"])
    present = rows["time"].iloc[100]
    absent = present + pd.Timedelta(seconds=17)
    assert not (rows["time"] == absent).any()
    h = seeded.headers(seeded.analyst)
    before = ledger_snapshot(seeded.platform)
    for t in (present, absent):
        domain = [{"datetime": t.isoformat() + "+00:00"}]
        query = {
            "statistic": "count",
            "epsilon": 1e-9,
            "group_by": [{"column": "time", "domain": domain}],
        }
        r = client.post("/v1/streams/flights/query", headers=h, json={"query": query, "last": 4})
        assert r.status_code == 422 and "time-zone-aware" in r.json()["detail"], r.text
    assert ledger_snapshot(seeded.platform) == before
    assert not any(m.sealed for m in seeded.platform.store.blocks("flights"))

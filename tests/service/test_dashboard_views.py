"""The same numbers in every view: the admin's, the owner's and the analyst's dashboards, the
blocks route and the CLI's blocks table (local and over HTTP) report the same retiring blocks
for the same (stream, context), and the every-open-context ones (also the metrics' count) only
to those who see every open context; the dashboard's series, alerts and per-stream history are
exact; the alert threshold is server configuration."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from blockbudget.budget import Budget
from blockbudget.cli import app as cli_app
from blockbudget.errors import InvalidRequestError
from blockbudget.ledger import EventKind
from blockbudget.lowbudget import ALERT_ENV, alert_threshold_from_env, check_threshold
from blockbudget.service import create_app
from blockbudget.service.dashboard import low_budget_alerts, retiring_counts
from blockbudget.service.dashboard_index import (
    StreamEventIndex,
    _catch_up_batch,
    index_mark,
    stream_events,
)
from service.support import Seeded, seed, thread_server


def charge(api: TestClient, seeded: Seeded, block: str, ctx: str, eps: str) -> None:
    r = api.post(
        "/v1/streams/flights/charges",
        json={"blocks": [block], "epsilon": eps, "context": ctx},
        headers=seeded.headers(seeded.admin),
    )
    assert r.status_code == 200, r.text


def views(api: TestClient, seeded: Seeded) -> dict[str, dict[str, Any]]:
    """Per role: the retiring blocks per context shown (dashboard, blocks route) and the
    every-open-context ones (None where the role does not see every open context)."""
    out = {}
    for role, key in (("admin", seeded.admin), ("owner", seeded.owner), ("ana", seeded.analyst)):
        dash = api.get("/v1/dashboard?stream=flights", headers=seeded.headers(key))
        listed = api.get("/v1/streams/flights/blocks", headers=seeded.headers(key))
        assert dash.status_code == 200 and listed.status_code == 200, (dash.text, listed.text)
        blocks = listed.json()
        flags = {b["retiring"] is None for b in blocks}
        assert len(flags) == 1, blocks  # shown for every block or for none
        out[role] = {
            "dashboard": dash.json()["retiring"],
            "blocks": {
                c: [b["block_id"] for b in blocks if b["retiring_in"][c]]
                for c in blocks[0]["retiring_in"]
            },
            "everywhere": dash.json()["retiring_everywhere"],
            "flag": None if flags == {True} else [b["block_id"] for b in blocks if b["retiring"]],
        }
    return out


def check_views(
    seen: dict[str, dict[str, Any]], per: dict[str, list[str]], every: list[str]
) -> None:
    """Every role shows, for each context it sees, the same retiring blocks (``per``); the
    every-open-context list only to the admin and the stream's owner."""
    for role, got in seen.items():
        for where in ("dashboard", "blocks"):
            assert got[where] == {c: per[c] for c in got[where]}, (role, where, got)
        assert got["everywhere"] == got["flag"] == (None if role == "ana" else every), role
    assert sorted(seen["ana"]["dashboard"]) == ["team-a"]  # the analyst: its context only
    assert sorted(seen["admin"]["dashboard"]) == sorted(seen["owner"]["blocks"]) == sorted(per)


def cli_count(args: list[str]) -> tuple[dict[str, int], int | None]:
    r = CliRunner().invoke(cli_app, ["blocks", "flights", *args], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # the line may wrap at the console's width
    found = re.search(
        r"retiring block\(s\), live and under 10% left: ([\w-]+ \d+(?:, [\w-]+ \d+)*)"
        r"(; in every open context (\d+))?",
        text,
    )
    assert found, r.output
    per = {c: int(n) for c, n in (part.split() for part in found.group(1).split(", "))}
    return per, None if found.group(3) is None else int(found.group(3))


def test_every_view_counts_the_same_retiring_blocks(tmp_path: Path) -> None:
    seeded = seed(tmp_path / "home")
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    b = [v.block_id for v in seeded.platform.store.blocks("flights")]
    home = ["--home", str(tmp_path / "home")]
    with TestClient(app) as api:
        # Block 0 spent in team-a only: retiring there, for everyone who sees team-a (the
        # analyst bound to it, the admin, the owner); not in team-b, nor in every open context.
        # The analyst is not told whether it retires in every open context (it cannot see
        # team-b); it used to be, by a block-level flag that changed when an admin spent team-b.
        charge(api, seeded, b[0], "team-a", "0.95")
        check_views(views(api, seeded), {"team-a": [b[0]], "team-b": []}, [])
        assert cli_count(home) == ({"team-a": 1, "team-b": 0}, 0)
        # Now spent in every open context: block 1 too; block 2 only in team-b (an open
        # reservation would count as spent: the table's remaining).
        charge(api, seeded, b[0], "team-b", "0.95")
        charge(api, seeded, b[1], "team-a", "0.95")
        charge(api, seeded, b[1], "team-b", "0.99")
        charge(api, seeded, b[2], "team-b", "1")
        per = {"team-a": [b[0], b[1]], "team-b": [b[0], b[1], b[2]]}
        check_views(views(api, seeded), per, [b[0], b[1]])
        assert cli_count(home) == ({"team-a": 2, "team-b": 3}, 2)
        assert retiring_counts(seeded.platform) == {"flights": 2, "secret": 0}
        # a retired block is no longer retiring
        charge(api, seeded, b[1], "team-a", "0.05")
        charge(api, seeded, b[1], "team-b", "0.01")
        r = api.post("/v1/streams/flights/retire", headers=seeded.headers(seeded.admin))
        assert r.json() == {"retired": [b[1]]}
        check_views(views(api, seeded), {"team-a": [b[0]], "team-b": [b[0], b[2]]}, [b[0]])
        assert retiring_counts(seeded.platform, streams=["flights"]) == {"flights": 1}
        assert cli_count(home) == ({"team-a": 1, "team-b": 2}, 1)
    with thread_server(app) as url:
        for key, expected in (
            (seeded.admin, ({"team-a": 1, "team-b": 2}, 1)),
            (seeded.owner, ({"team-a": 1, "team-b": 2}, 1)),
            (seeded.analyst, ({"team-a": 1}, None)),
        ):
            assert cli_count(["--server", url, "--api-key", key]) == expected
    # the metrics' alerts: per (stream, context), live blocks only, strictly under the threshold
    alerts = [a.to_json() for a in low_budget_alerts(seeded.platform, below=0.1)]
    assert alerts == [
        {"stream": "flights", "context": "team-a", "below": 0.1, "blocks": [b[0]], "lowest": 0.05},
        {
            "stream": "flights",
            "context": "team-b",
            "below": 0.1,
            "blocks": [b[0], b[2]],
            "lowest": 0.0,
        },
    ]
    assert low_budget_alerts(seeded.platform, below=0.1, streams=["secret"]) == []
    assert low_budget_alerts(seeded.platform, below=0.0) == []  # nothing is under 0
    seeded.platform.close()


def test_alerts_series_and_threshold_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded = seed(tmp_path / "home")
    b = [v.block_id for v in seeded.platform.store.blocks("flights")]
    monkeypatch.setenv(ALERT_ENV, "0.6")
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    with TestClient(app) as api:
        charge(api, seeded, b[0], "team-a", "0.5")
        charge(api, seeded, b[1], "team-a", "0.25")
        charge(api, seeded, b[2], "team-b", "1")
        h = seeded.headers(seeded.admin)
        dash = api.get("/v1/dashboard?stream=flights&buckets=6", headers=h).json()
        assert dash["alert_below"] == 0.6  # from the environment
        assert dash["alerts"] == [
            {
                "stream": "flights",
                "context": "team-a",
                "below": 0.6,
                "blocks": [b[0]],
                "lowest": 0.5,
            },
            {
                "stream": "flights",
                "context": "team-b",
                "below": 0.6,
                "blocks": [b[2]],
                "lowest": 0.0,
            },
        ]
        # a caller looks at another threshold; the analyst only at its own context
        dash = api.get("/v1/dashboard?stream=flights&alert_below=0.3", headers=h).json()
        assert [(a["context"], a["blocks"]) for a in dash["alerts"]] == [("team-b", [b[2]])]
        ana = seeded.headers(seeded.analyst)
        dash = api.get("/v1/dashboard?stream=flights&alert_below=0.8", headers=ana).json()
        assert [(a["context"], a["blocks"]) for a in dash["alerts"]] == [("team-a", [b[0], b[1]])]
        assert api.get("/v1/dashboard?alert_below=1.5", headers=h).status_code == 422
        # the series: the last point is the mean remaining fraction, by hand
        series = api.get("/v1/dashboard?stream=flights", headers=h).json()["series"]
        assert series["contexts"]["team-a"][-1] == pytest.approx((0.5 + 0.75 + 1 + 1) / 4)
        assert series["contexts"]["team-b"][-1] == pytest.approx(3 / 4)
        hm = api.get("/v1/dashboard?stream=flights", headers=h).json()["heatmap"]
        assert hm["remaining"]["team-a"][0][-1] == "ε=0.5, δ=0.000001"
        assert hm["remaining"]["team-b"][2][-1] == "ε=0, δ=0.000001"
    explicit = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0, alert_below=0.05)
    with TestClient(explicit) as api:
        dash = api.get("/v1/dashboard?stream=flights", headers=seeded.headers(seeded.admin)).json()
        assert dash["alert_below"] == 0.05
        assert [(a["context"], a["blocks"]) for a in dash["alerts"]] == [("team-b", [b[2]])]
    seeded.platform.close()


def test_threshold_validation() -> None:
    assert alert_threshold_from_env({}) == 0.1
    assert alert_threshold_from_env({ALERT_ENV: " 0.2 "}) == 0.2
    for bad in ("x", "1.5", "-0.1", "nan"):
        with pytest.raises(InvalidRequestError, match=r"fraction in|in \[0, 1\]"):
            alert_threshold_from_env({ALERT_ENV: bad})
    with pytest.raises(InvalidRequestError):
        check_threshold(True)


def test_history_reads_only_its_streams_events(tmp_path: Path, database_url: str | None) -> None:
    """The per-stream index (SQLite and PostgreSQL): complete, caught up incrementally, never
    reading other streams' events when asked for one stream's (their rows are not in its
    range); two processes catching up over the same events insert each row once."""
    seeded = seed(tmp_path / "home", database_url=database_url)
    platform = seeded.platform
    ledger = platform.ledger
    index = StreamEventIndex(ledger.engine)
    flights = [v.block_id for v in platform.store.blocks("flights")]
    secret = [v.block_id for v in platform.store.blocks("secret")]
    first = index.events("flights")
    assert {e.kind.value for e in first} == {"block_added"}
    assert [e.payload["block"] for e in first] == flights
    platform.ledger.charge(secret, Budget(epsilon="0.1"), context="team-b")
    platform.ledger.charge(flights[:1], Budget(epsilon="0.2"), context="team-a")
    got = index.events("flights")
    assert len(got) == len(first) + 1 and got[-1].payload["blocks"] == flights[:1]
    assert [e.kind.value for e in index.events("secret")][-1] == "charged"
    with ledger.engine.connect() as conn:
        rows = conn.execute(stream_events.select()).all()
        mark = conn.execute(index_mark.select()).one()
    by_stream: dict[str, int] = {}
    for stream, _ in rows:
        by_stream[stream] = by_stream.get(stream, 0) + 1
    assert by_stream == {"flights": len(flights) + 1, "secret": len(secret) + 1}
    assert mark.seq == len(ledger.events())  # caught up to the tip
    # a second index object (another process) catches up from the stored mark
    assert [e.seq for e in StreamEventIndex(ledger.engine).events("flights")] == [
        e.seq for e in got
    ]
    # two catching up over the same new events (as if their reads interleaved): rows once
    platform.ledger.charge(flights[1:2], Budget(epsilon="0.1"), context="team-a")
    with ledger.engine.begin() as conn:
        _catch_up_batch(conn)
        conn.execute(index_mark.update().values(seq=mark.seq))  # the other saw the old mark
    with ledger.engine.begin() as conn:
        _catch_up_batch(conn)
    charges = [e.payload["blocks"] for e in index.events("flights", [EventKind.CHARGED])]
    assert charges == [flights[:1], flights[1:2]]  # each once, in order
    platform.close()


def test_serve_takes_the_alert_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve --alert-below`` reaches the worker processes through the environment (where
    ``create_app`` reads it); a value outside [0, 1] is refused before anything starts."""
    import blockbudget.service.server as server

    started: list[dict[str, Any]] = []
    monkeypatch.setattr(server, "bootstrap_admin", lambda home, database: None)
    monkeypatch.setattr(server, "serve", lambda **kw: started.append(kw))
    # serve sets the variable in os.environ; setenv first makes monkeypatch remove it afterwards.
    monkeypatch.setenv(ALERT_ENV, "0.1")
    monkeypatch.delenv(ALERT_ENV)
    runner = CliRunner()
    r = runner.invoke(cli_app, ["serve", "--home", str(tmp_path), "--alert-below", "1.5"])
    assert r.exit_code == 2 and not started, r.output
    r = runner.invoke(cli_app, ["serve", "--home", str(tmp_path), "--alert-below", "0.25"])
    assert r.exit_code == 0 and len(started) == 1, r.output
    assert alert_threshold_from_env() == 0.25

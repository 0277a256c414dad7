"""Dry runs price a query or a task and charge, reserve, seal and queue nothing: the ledger is
unchanged, locally and through a server."""

from __future__ import annotations

from pathlib import Path

from blockbudget.budget import Budget
from blockbudget.platform import Platform

from .support import ids, invoke_json, ledger_snapshot, make_home


def _snapshot(home: Path) -> tuple[object, ...]:
    p = Platform(home, engine="arrow")
    try:
        sealed = tuple(m.sealed for m in p.store.blocks("b"))
        return ledger_snapshot(p), sealed
    finally:
        p.close()


def test_local_dry_runs_change_nothing(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = make_home(home)
    b = ids(p, "b")
    p.ledger.charge([b[2]], Budget(epsilon="0.9"), context="a")
    p.close()
    h = ["--home", str(home), "--context", "a"]
    before = _snapshot(home)
    code, doc = invoke_json(
        "task", "submit", "b", "--epsilon", "0.5", "--newest", "2", "--dry-run", *h
    )
    assert code == 2 and doc["dry_run"] is True and doc["reserved"] is False
    assert doc["demand"] == {"epsilon": "0.5", "delta": "0"}
    assert doc["blocks"] == b[1:] and doc["affordable"] == [b[1]] and doc["ok"] is False
    code, doc = invoke_json(
        "task",
        "submit",
        "b",
        "--statistic",
        "count",
        "--epsilon",
        "0.25",
        "--block",
        b[0],
        "--dry-run",
        *h,
    )
    assert code == 0 and doc["ok"] is True and doc["kind"] == "query"
    assert doc["demand"] == {"epsilon": "0.25", "delta": "0"}
    code, doc = invoke_json(
        "task", "submit", "b", "--epsilon", "0.05", "--any", "3", "--dry-run", *h
    )
    assert code == 0 and doc["affordable"] == b and doc["ok"] is True
    code, doc = invoke_json(
        "query",
        "mean",
        "b",
        "--epsilon",
        "0.5",
        "--column",
        "v",
        "--lower",
        "0",
        "--upper",
        "9",
        "--last",
        "2",
        "--dry-run",
        *h,
    )
    assert code == 0 and doc["ok"] is True and doc["blocks"] == b[:2]
    assert _snapshot(home) == before
    code, doc = invoke_json("task", "list", "--home", str(home))
    assert doc["tasks"] == []  # nothing queued


def test_dry_runs_through_a_server_change_nothing(tmp_path: Path) -> None:
    from service.support import seed, thread_server

    from blockbudget.service import create_app

    seeded = seed(tmp_path / "server-home")
    p = seeded.platform
    blocks = [m.block_id for m in p.store.blocks("flights")]
    p.ledger.charge([blocks[-1]], Budget(epsilon="0.75"), context="team-a")
    before = ledger_snapshot(p), tuple(m.sealed for m in p.store.blocks("flights"))
    with thread_server(create_app(p, keys=seeded.keys, auth_cache_seconds=0)) as url:
        srv = ["--server", url, "--api-key", seeded.analyst]
        code, doc = invoke_json(
            "task", "submit", "flights", "--epsilon", "0.5", "--newest", "2", "--dry-run", *srv
        )
        assert code == 2 and doc["context"] == "team-a"  # the analyst's bound context
        assert doc["largest_epsilon"] == "0.25" and doc["ok"] is False
        assert doc["blocks"] == blocks[-2:]
        code, doc = invoke_json(
            "task",
            "submit",
            "flights",
            "--statistic",
            "count",
            "--epsilon",
            "0.25",
            "--block",
            blocks[0],
            "--dry-run",
            *srv,
        )
        assert (
            code == 0 and doc["ok"] is True and doc["demand"] == {"epsilon": "0.25", "delta": "0"}
        )
        code, doc = invoke_json("afford", "flights", "--last", "2", *srv)
        assert code == 0 and doc["epsilon"] == "0.25" and doc["binding"] == [blocks[-1]]
        code, doc = invoke_json(
            "task", "submit", "flights", "--epsilon", "0.5", "--any", "2", "--dry-run", *srv
        )
        message = doc["error"]["message"]
        assert code == 2 and "locally" not in message, message  # an analyst may not run locally
        assert (
            "--newest 2 --dry-run" in message and "blockbudget afford flights --last 2" in message
        )
        # --json against a server: the server's forms, exact budgets; refusals with status
        code, doc = invoke_json("blocks", "flights", *srv)
        assert code == 0 and doc["blocks"][-1]["remaining"]["team-a"]["epsilon"] == "0.25"
        code, doc = invoke_json("stream", "list", *srv)
        assert code == 0 and [s["name"] for s in doc["streams"]] == ["flights"]
        code, doc = invoke_json(
            "query", "count", "flights", "--epsilon", "0.5", "--block", blocks[-1], *srv
        )
        assert code == 2 and doc["error"]["status"] == 409
        assert doc["error"]["type"] == "BudgetExceededError"
        assert doc["error"]["refusal"]["blocks"][0]["shortfall"]["epsilon"] == "0.25"
    assert (ledger_snapshot(p), tuple(m.sealed for m in p.store.blocks("flights"))) == before
    assert not seeded.platform.ledger.reservations()

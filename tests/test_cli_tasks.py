"""``blockbudget task ...`` with ``--json``: against a running server (a real uvicorn on
loopback) and on a local home, where the command pumps a TaskQueue itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from typer.testing import CliRunner

from blockbudget import Budget
from blockbudget.cli import app
from blockbudget.platform import Platform
from blockbudget.store import Blocking
from blockbudget.tasks.queue import DEFAULT_SCHEDULER

runner = CliRunner()


def _json(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_task_commands_against_a_server(tmp_path: Path) -> None:
    from service.support import seed, thread_server

    from blockbudget.service import create_app

    seeded = seed(tmp_path / "server-home")
    app_ = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0, pump_seconds=0.2)
    with thread_server(app_) as url:

        def as_(key: str, *args: str) -> Any:
            return runner.invoke(app, [*args, "--server", url, "--api-key", key])

        ana, admin = seeded.analyst, seeded.admin
        # a DP query naming no blocks: the scheduler picks two, the query spends that grant
        task = _json(
            as_(ana, "task", "submit", "flights", "--statistic", "count", "--epsilon", "0.05",
                "--any", "2", "--wait", "30", "--json")
        )  # fmt: skip
        assert task["state"] == "done" and task["kind"] == "query", task
        assert task["result"]["cost"]["epsilon"] == "0.05" and len(task["blocks"]) == 2
        assert sorted(task["result"]["blocks"]) == sorted(task["blocks"])
        res = seeded.platform.ledger.reservation(task["reservation_id"])
        assert res.holder == "ana" and res.request_id == f"ana:queue:{task['id']}"
        spec = tmp_path / "mean.json"
        spec.write_text(
            json.dumps(
                {
                    "statistic": "mean",
                    "epsilon": 0.05,
                    "column": "dep_delay",
                    "lower": -30,
                    "upper": 120,
                }
            )
        )
        ranged = _json(
            as_(ana, "task", "submit", "flights", "--query-spec", str(spec), "--range",
                "2013-01-02", "2013-01-04", "--k", "1", "--wait", "30", "--json")
        )  # fmt: skip
        assert ranged["state"] == "done", ranged
        assert ranged["blocks"][0] in ("flights/2013-01-02", "flights/2013-01-03")
        # the admin sets DPF-N with N = 20, under which a 0.5 demand waits (0.05 unlocked per
        # arrival)
        out = _json(as_(admin, "task", "scheduler", "flights", "dpf-n:n=20", "--json"))
        assert out["scheduler"] == "dpf-n:n=20"
        assert (
            _json(as_(ana, "task", "scheduler", "flights", "--json"))["scheduler"]
            == out["scheduler"]
        )
        r = as_(ana, "task", "scheduler", "flights", "fcfs")
        assert r.exit_code == 2 and "HTTP 403" in r.output
        waiting = _json(
            as_(ana, "task", "submit", "flights", "--epsilon", "0.5", "--block", "2013-01-01",
                "--json")
        )  # fmt: skip
        why = _json(as_(ana, "task", "why", waiting["id"], "--json"))
        assert why["state"] == "waiting" and "dpf-n" in why["why"]["reason"], why
        shown = _json(as_(ana, "task", "show", waiting["id"], "--json"))
        assert shown["selector"] == {"named": ["flights/2013-01-01"]} and shown["why"]
        listed = _json(as_(ana, "task", "list", "--state", "waiting", "--json"))
        assert [t["id"] for t in listed["tasks"]] == [waiting["id"]]
        assert _json(as_(seeded.other, "task", "list", "--json"))["tasks"] == []
        done = _json(as_(ana, "task", "cancel", waiting["id"], "--json"))
        assert done["state"] == "cancelled"
        r = as_(ana, "task", "cancel", waiting["id"])
        assert r.exit_code == 2 and "HTTP 409 TaskStateError" in r.output
        r = as_(ana, "task", "show", waiting["id"])
        assert r.exit_code == 0 and f"task {waiting['id']}: cancelled" in r.output
        r = as_(ana, "task", "submit", "flights", "--epsilon", "0.1", "--newest", "1", "--any", "1")
        assert r.exit_code != 0 and "exactly one of" in r.output
    assert seeded.platform.verify().ok


def test_task_commands_on_a_local_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    platform = Platform(home)
    platform.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
    platform.add_context("team")
    hours = pd.date_range("2024-01-01", periods=30, freq="h")
    platform.ingest("s", pd.DataFrame({"t": hours, "v": [float(i) for i in range(30)]}))
    blocks = [b.block_id for b in platform.blocks("s")]
    platform.close()
    where = ["--home", str(home), "--context", "team"]

    def run(*args: str) -> Any:
        return runner.invoke(app, ["task", *args, "--home", str(home)])

    budget = _json(
        runner.invoke(app, ["task", "submit", "s", "--epsilon", "0.05", "--newest", "1", *where,
                            "--json"])
    )  # fmt: skip
    assert budget["state"] == "granted" and budget["blocks"] == [blocks[-1]], budget
    query = _json(
        runner.invoke(app, ["task", "submit", "s", "--statistic", "sum", "--column", "v",
                            "--lower", "0", "--upper", "30", "--epsilon", "0.05", "--any", "1",
                            *where, "--json"])
    )  # fmt: skip
    assert query["state"] == "done" and query["result"]["cost"]["epsilon"] == "0.05", query
    listed = _json(run("list", "--json"))
    assert [t["id"] for t in listed["tasks"]] == [budget["id"], query["id"]]
    assert _json(run("list", "--kind", "query", "--json"))["tasks"][0]["id"] == query["id"]
    cancelled = _json(run("cancel", budget["id"], "--json"))
    assert cancelled["state"] == "cancelled"
    platform = Platform(home)
    try:
        assert platform.ledger.reservation(budget["reservation_id"]).state.value == "closed"
        assert platform.verify().ok
    finally:
        platform.close()
    out = _json(run("scheduler", "s", "--json"))
    assert out["scheduler"] == DEFAULT_SCHEDULER
    r = runner.invoke(app, ["task", "submit", "s", "--epsilon", "0.1", "--newest", "1",
                            "--home", str(home)])  # fmt: skip
    assert r.exit_code == 2 and "--context" in r.output

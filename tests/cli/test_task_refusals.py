"""A refused task answers as a refused query does: exit code 2, per block the remaining
budget and the shortfall (exact decimals), and a next step naming a command the caller may run
— locally and against a server (its ``refusal`` over HTTP)."""

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

runner = CliRunner()


def _home(tmp_path: Path) -> tuple[Path, list[str]]:
    home = tmp_path / "home"
    platform = Platform(home)
    platform.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
    platform.add_context("team")
    hours = pd.date_range("2024-01-01", periods=30, freq="h")
    platform.ingest("s", pd.DataFrame({"t": hours, "v": [float(i) for i in range(30)]}))
    blocks = [b.block_id for b in platform.blocks("s")]
    platform.close()
    return home, blocks


def test_a_refused_task_exits_2_with_its_shortfall_locally(tmp_path: Path) -> None:
    home, blocks = _home(tmp_path)
    where = ["--home", str(home), "--context", "team"]
    r = runner.invoke(app, ["task", "scheduler", "s", "fcfs", "--home", str(home)])
    assert r.exit_code == 0, r.output
    first = runner.invoke(
        app, ["task", "submit", "s", "--epsilon", "0.7", "--block", blocks[0], *where, "--json"]
    )
    assert first.exit_code == 0 and json.loads(first.output)["state"] == "granted", first.output
    refused = runner.invoke(
        app, ["task", "submit", "s", "--epsilon", "0.5", "--block", blocks[0], *where, "--json"]
    )
    assert refused.exit_code == 2, refused.output
    task = json.loads(refused.output)
    assert task["state"] == "refused"
    refusal = task["refusal"]
    assert (refusal["considered"], refusal["affordable"], refusal["needed"]) == (1, 0, 1)
    (row,) = refusal["blocks"]
    assert row["block"] == blocks[0]
    assert row["remaining"] == {"epsilon": "0.3", "delta": "0"}
    assert row["shortfall"] == {"epsilon": "0.2", "delta": "0"}
    assert "blockbudget afford s --context team" in refusal["next"]
    # as text: the same, and exit 2
    text = runner.invoke(
        app, ["task", "submit", "s", "--epsilon", "0.5", "--block", blocks[0], *where]
    )
    assert text.exit_code == 2, text.output
    assert "remaining ε=0.3, δ=0, short by ε=0.2, δ=0" in text.output
    assert "blockbudget afford s" in text.output
    # show reads it again (exit 0: the command succeeded, the task was refused before)
    shown = runner.invoke(app, ["task", "show", task["id"], "--home", str(home), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.output)["refusal"] == refusal


def test_a_refused_task_exits_2_with_its_shortfall_on_a_server(tmp_path: Path) -> None:
    from service.support import seed, thread_server

    from blockbudget.service import create_app

    seeded = seed(tmp_path / "server-home")
    app_ = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0, pump_seconds=0.2)
    with thread_server(app_) as url:

        def as_(key: str, *args: str) -> Any:
            return runner.invoke(app, [*args, "--server", url, "--api-key", key])

        r = as_(seeded.admin, "task", "scheduler", "flights", "fcfs")
        assert r.exit_code == 0, r.output
        block = "2013-01-01"
        first = as_(seeded.analyst, "task", "submit", "flights", "--epsilon", "0.7",
                    "--block", block, "--wait", "30", "--json")  # fmt: skip
        assert json.loads(first.output)["state"] == "granted", first.output
        refused = as_(seeded.analyst, "task", "submit", "flights", "--epsilon", "0.5",
                      "--block", block, "--wait", "30", "--json")  # fmt: skip
        assert refused.exit_code == 2, refused.output
        task = json.loads(refused.output)
        assert task["state"] == "refused", task
        refusal = task["refusal"]
        assert (refusal["affordable"], refusal["needed"]) == (0, 1)
        (row,) = refusal["blocks"]
        assert row["remaining"]["epsilon"] == "0.3" and row["shortfall"]["epsilon"] == "0.2"
        assert "blockbudget afford flights" in refusal["next"]
        text = as_(seeded.analyst, "task", "show", task["id"])
        assert text.exit_code == 0 and "short by ε=0.2" in text.output, text.output
        # the list names the stream's own scheduler (fcfs), not the server's default
        listed = json.loads(as_(seeded.analyst, "task", "list", "--json").output)
        assert listed["schedulers"] == {"flights": "fcfs"}, listed
        table = runner.invoke(
            app,
            ["task", "list", "--server", url, "--api-key", seeded.analyst],
            env={"COLUMNS": "250"},
        )
        assert table.exit_code == 0 and "fcfs" in table.output, table.output

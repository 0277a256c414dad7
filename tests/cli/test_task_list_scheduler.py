"""``task list`` names the scheduler of each listed task's stream — a stream switched to its
own scheduler is not shown under the default one."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from blockbudget import Budget
from blockbudget.cli import app
from blockbudget.platform import Platform
from blockbudget.store import Blocking
from blockbudget.tasks.queue import DEFAULT_SCHEDULER

runner = CliRunner()


def test_task_list_shows_each_streams_own_scheduler(tmp_path: Path) -> None:
    home = tmp_path / "home"
    platform = Platform(home)
    for name in ("s", "t"):
        platform.create_stream(name, policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
        hours = pd.date_range("2024-01-01", periods=30, freq="h")
        platform.ingest(name, pd.DataFrame({"t": hours, "v": [float(i) for i in range(30)]}))
    platform.add_context("team")
    platform.close()
    where = ["--home", str(home), "--context", "team"]
    r = runner.invoke(app, ["task", "scheduler", "s", "fcfs", "--home", str(home)])
    assert r.exit_code == 0, r.output
    for name in ("s", "t"):
        r = runner.invoke(
            app, ["task", "submit", name, "--epsilon", "0.05", "--newest", "1", *where, "--json"]
        )
        assert r.exit_code == 0, r.output
    listed = json.loads(runner.invoke(app, ["task", "list", "--home", str(home), "--json"]).output)
    assert listed["schedulers"] == {"s": "fcfs", "t": DEFAULT_SCHEDULER}, listed
    text = runner.invoke(app, ["task", "list", "--home", str(home)], env={"COLUMNS": "250"})
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert "scheduler of s: fcfs" in lines, text.output
    assert f"scheduler of t: {DEFAULT_SCHEDULER}" in lines, text.output

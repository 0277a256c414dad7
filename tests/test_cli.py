"""The command line, end to end, through Typer's runner (same code path as the console script)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from blockbudget.cli import app

runner = CliRunner()


def _csv(path: Path) -> Path:
    rng = np.random.default_rng(1)
    n = 300
    frame = pd.DataFrame(
        {
            "time": pd.Timestamp("2024-03-01")
            + pd.to_timedelta(rng.integers(0, 3 * 86_400, n), unit="s"),
            "delay": rng.normal(5, 3, n),
            "carrier": rng.choice(["AA", "UA"], n),
        }
    )
    frame.to_csv(path, index=False)
    return path


def test_stream_ingest_blocks_query_and_verify(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    r = runner.invoke(app, ["stream", "create", "s", "--epsilon", "1", "--column", "time", *home])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["ingest", "s", str(_csv(tmp_path / "d.csv")), *home])
    assert r.exit_code == 0, r.output
    assert "300 rows: 3 new block(s)" in r.output
    # Contexts are registered by an administrator; an unknown one is refused.
    r = runner.invoke(app, ["query", "count", "s", "--epsilon", "0.1", "--context", "a", *home])
    assert r.exit_code == 2 and "UnknownContextError" in r.output
    for name in ("a", "b"):
        r = runner.invoke(app, ["context", "add", name, "--description", f"team {name}", *home])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["context", "list", *home])
    assert "team a" in r.output and "default" in r.output
    r = runner.invoke(app, ["stream", "list", *home])
    assert "s" in r.output and r.exit_code == 0
    r = runner.invoke(
        app, ["query", "count", "s", "--epsilon", "0.4", "--context", "a", "--last", "3", *home]
    )
    assert r.exit_code == 0, r.output
    assert "DP answer" in r.output
    r = runner.invoke(
        app,
        [
            "query",
            "mean",
            "s",
            "--epsilon",
            "0.4",
            "--column",
            "delay",
            "--lower",
            "-10",
            "--upper",
            "20",
            "--context",
            "a",
            *home,
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "query",
            "histogram",
            "s",
            "--epsilon",
            "0.1",
            "--column",
            "carrier",
            "--categories",
            "AA,UA",
            "--context",
            "b",
            *home,
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["blocks", "s", *home])
    assert r.exit_code == 0 and "s/2024-03-01" in r.output
    assert "20.0%" in r.output  # 1 − 0.4 − 0.4 left in context a
    assert "3 contexts are registered" in r.output  # default, a, b: the coalition bound
    # A refused query: clear message, exit code 2, nothing charged.
    r = runner.invoke(
        app,
        [
            "query",
            "count",
            "s",
            "--epsilon",
            "0.5",
            "--context",
            "a",
            "--block",
            "2024-03-01",
            *home,
        ],
    )
    assert r.exit_code == 2
    assert "BudgetExceededError" in r.output and "Nothing was charged" in r.output
    r = runner.invoke(app, ["audit", "verify", *home])
    assert r.exit_code == 0 and "audit verify: OK" in r.output


def test_bad_input_gives_clear_errors(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    r = runner.invoke(app, ["stream", "create", "s", "--epsilon", "-1", *home])
    assert r.exit_code == 2 and "epsilon" in r.output
    r = runner.invoke(app, ["stream", "create", "s", "--epsilon", "1", "--window", "3x", *home])
    assert r.exit_code != 0
    runner.invoke(app, ["stream", "create", "s", "--epsilon", "1", *home])
    bad = tmp_path / "bad.csv"
    bad.write_text("other\n1\n2\n")
    r = runner.invoke(app, ["ingest", "s", str(bad), *home])
    assert r.exit_code == 2 and "DataError" in r.output


def test_demo_quick(tmp_path: Path) -> None:
    r = runner.invoke(app, ["demo", "--days", "20", "--home", str(tmp_path / "demo")])
    assert r.exit_code == 0, r.output
    assert "audit verify: OK" in r.output
    assert "retired" in r.output
    assert (tmp_path / "demo" / "answers.csv").exists()


def test_user_stream_queries_reserve_the_group_cost(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    data = tmp_path / "u.csv"
    pd.DataFrame({"uid": [1] * 10 + [2, 3], "v": range(12)}).to_csv(data, index=False)
    r = runner.invoke(
        app,
        [
            "stream",
            "create",
            "u",
            "--epsilon",
            "1",
            "--by",
            "user",
            "--column",
            "uid",
            "--ids-per-block",
            "100",
            "--rows-per-user",
            "3",
            *home,
        ],
    )
    assert r.exit_code == 0, r.output
    runner.invoke(app, ["context", "add", "a", *home])
    assert runner.invoke(app, ["ingest", "u", str(data), *home]).exit_code == 0
    r = runner.invoke(app, ["query", "count", "u", "--epsilon", "0.2", "--context", "a", *home])
    assert r.exit_code == 0, r.output
    assert "(ε=0.2" in r.output  # the mechanism's row-level cost
    r = runner.invoke(app, ["blocks", "u", "--context", "a", *home])
    assert "40.0%" in r.output  # 1 − 3 × 0.2 left: the group cost was charged

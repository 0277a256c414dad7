"""``blockbudget ingest``: the ingest id, repeats said as such, overlap policies, --json."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from blockbudget.cli import app

runner = CliRunner()


def _csv(path: Path, hours: range) -> Path:
    start = pd.Timestamp("2024-03-01")
    pd.DataFrame(
        {"time": [start + pd.Timedelta(hours=h) for h in hours], "delay": [float(h) for h in hours]}
    ).to_csv(path, index=False)
    return path


def _run(*args: str) -> str:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def test_ingest_twice_says_already_ingested(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    _run("stream", "create", "s", "--epsilon", "1", "--column", "time", *home)
    one = _csv(tmp_path / "one.csv", range(0, 6))
    first = json.loads(_run("ingest", "s", str(one), "--json", *home))
    assert (first["rows"], first["new_blocks"], first["repeat"]) == (6, ["s/2024-03-01"], False)
    assert first["ingest_id"] == "sha256:" + first["content_hash"]
    assert set(first) == {
        "rows", "new_blocks", "appended_blocks", "late_rows", "dropped_rows", "sealed_blocks",
        "ingest_id", "content_hash", "repeat", "ingested_at", "overlap",
    }  # fmt: skip
    out = _run("ingest", "s", str(one), *home)
    assert (
        out.split()
        == (
            f"already ingested as 6 rows: 1 new block(s), 0 appended, 0 late row(s) "
            f"(ingest id {first['ingest_id']}); nothing changed"
        ).split()
    )
    again = json.loads(_run("ingest", "s", str(one), "--json", *home))
    assert again == {**first, "repeat": True}


def test_overlaps_are_refused_by_default_and_reported(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    _run("stream", "create", "s", "--epsilon", "1", "--column", "time", *home)
    _run("ingest", "s", str(_csv(tmp_path / "one.csv", range(0, 6))), "--ingest-id", "one", *home)
    two = str(_csv(tmp_path / "two.csv", range(4, 9)))
    r = runner.invoke(app, ["ingest", "s", two, *home])
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "DuplicateRowsError" in text
    assert "2 row(s) repeat rows stream 's' already holds" in text
    assert "per block key: {'2024-03-01': 2}; nothing was ingested" in text
    out = " ".join(_run("ingest", "s", two, "--on-overlap", "skip-duplicates", *home).split())
    assert "ingested 3 rows: 0 new block(s), 1 appended" in out
    assert (
        "5 row(s) fell in blocks that already had rows (2024-03-01); "
        "2 were exact duplicates, 2 skipped" in out
    )
    r = runner.invoke(app, ["ingest", "s", two, "--ingest-id", "one", *home])
    assert r.exit_code == 2 and "IngestIdConflictError" in r.output

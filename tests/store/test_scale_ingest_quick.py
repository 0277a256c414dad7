"""The scale-ingest benchmark runs in its --quick form and prints well-formed JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_ingest.py"
KEYS = {
    "op",
    "rows",
    "blocks",
    "seconds",
    "baseline_seconds",
    "ratio",
    "rss_mb",
    "baseline_rss_mb",
    "rss_ratio",
}


def test_quick_benchmark_prints_json_lines(tmp_path: Path) -> None:
    env = {**os.environ, "BLOCKBUDGET_BENCH_CACHE": str(tmp_path / "cache")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    row = lines[0]
    assert row.keys() >= KEYS
    assert (row["op"], row["rows"], row["blocks"]) == ("ingest", 20_000, 8)
    assert row["seconds"] > 0 and row["baseline_seconds"] > 0 and row["rss_mb"] > 0
    assert abs(row["ratio"] - row["seconds"] / row["baseline_seconds"]) < 0.01
    assert abs(row["rss_ratio"] - row["rss_mb"] / row["baseline_rss_mb"]) < 0.01
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [
        "ingest-v1-20000-8-shuffled.parquet"
    ]  # the input is generated once into the cache

"""benchmarks/scale_stats.py runs in its --quick form: one JSON line per statistic with the
engine's and DuckDB's times and peak memory, each measured in its own subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_stats.py"
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


def test_quick_scale_stats_benchmark(tmp_path: Path) -> None:
    env = {**os.environ, "BLOCKBUDGET_BENCH_CACHE": str(tmp_path)}
    argv = [sys.executable, str(SCRIPT), "--quick", "--ops", "count,grouped", "--engine", "arrow"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True, env=env)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()]
    assert [x["op"] for x in lines] == ["count", "grouped"]
    for x in lines:
        assert set(x) >= KEYS and x["rows"] == 20_000 and x["blocks"] == 4
        assert x["seconds"] > 0 and x["baseline_seconds"] > 0 and x["rss_mb"] > 0
        assert abs(x["ratio"] - x["seconds"] / x["baseline_seconds"]) < 0.01 * x["ratio"] + 1e-3
    # generated once: the cache folder holds the platform, marked complete
    (home,) = tmp_path.iterdir()
    assert (home / "complete").exists()

"""The engines benchmark runs in its --quick form and prints well-formed JSON lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "engines.py"


def test_quick_benchmark_prints_json_lines(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path), "--engines", "duckdb"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    cases = {x["case"]: x for x in lines}
    assert set(cases) == {
        "raw_duckdb",
        "raw_duckdb_clipped",
        "raw_duckdb_grouped",
        "agg_duckdb",
        "dp_duckdb",
        "dp_duckdb_grouped",
        "dp_duckdb_user",
    }
    for line in lines:
        assert line["bench"] == "engines" and line["rows"] == 40_000
        assert line["seconds"] > 0 and line["peak_rss_mb"] > 0
    assert cases["dp_duckdb"]["ratio_seconds"] > 0
    assert cases["agg_duckdb"]["sum_units"] == cases["dp_duckdb"]["sum_units"]
    # grouping keeps 3 of the 4 values of g: its sum of units differs from the ungrouped one
    assert cases["dp_duckdb_grouped"]["sum_units"] != cases["dp_duckdb"]["sum_units"]

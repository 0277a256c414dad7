"""The overlap-check benchmark runs in its --quick form and prints well-formed JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ingest_overlap.py"


def test_quick_benchmark_prints_json_lines() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert [(r["op"], r["blocks"], r["input_rows"]) for r in lines] == [
        ("ingest_overlap", 10, 200),
        ("ingest_overlap", 200, 200),
    ]
    for row in lines:
        assert row["append_seconds"] > 0 and row["check_seconds"] > 0
        assert abs(row["ratio"] - row["check_seconds"] / row["append_seconds"]) < 0.01

"""The scale benchmark runs in its --quick form (100 and 1,000 blocks), prints well-formed JSON
lines, and the work a request and a retirement sweep do in the database does not grow with the
stream: compared through SQLite's count of virtual-machine instructions and of statements
(deterministic), never through times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "scale_request.py"


def test_quick_scale_benchmark(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
        env=env,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    by = {(x["op"], x.get("stream_blocks")): x for x in lines}
    assert set(by) == {
        *((op, n) for op in ("request", "retire", "verify") for n in (100, 1000)),
        ("verify_log", None),
    }
    for op in ("request", "retire"):
        small, large = by[(op, 100)], by[(op, 1000)]
        assert {"cpu_ms", "sql_statements", "sqlite_kilo_steps"} <= large.keys()
        assert large["cpu_ms"] > 0
        # 10x the blocks: the same statements, and at most a little more work in them (a
        # scan of the stream would do about 10x the work)
        assert large["sql_statements"] <= small["sql_statements"] + 2
        assert large["sqlite_kilo_steps"] <= 2 * small["sqlite_kilo_steps"] + 2
    assert by[("retire", 1000)]["first_cpu_ms"] > 0
    for n in (100, 1000):
        v = by[("verify", n)]
        assert v["events"] > n and v["incremental"]["replayed"] < 10
    log = by[("verify_log", None)]
    assert log["events"] >= 1900 and log["incremental"]["replayed"] == 1
    assert log["incremental"]["sqlite_kilo_steps"] < log["full"]["sqlite_kilo_steps"]
    assert list(tmp_path.iterdir()) == []  # the platforms are cleaned up

"""benchmarks/scheduler.py --quick --sections live: the live queue's decision latency runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OPS = {
    "submit",
    "submit_last_tenth",
    "pump_idle",
    "pump_new_block",
    "submit_steady",
    "pump_after_submit",
}


def test_live_benchmark_quick() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scheduler.py"),
            "--quick",
            "--sections",
            "live",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=ROOT,
    )
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    live = [x for x in lines if x["bench"] == "live"]
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for x in live:
        by.setdefault(x["scheduler"], {})[x["op"]] = x
    assert set(by) == {"dpf-n:n=10", "fcfs", "online-threshold:seed=1"}
    for spec, ops in by.items():
        assert set(ops) == OPS, spec
        row = ops["submit"]
        assert row["tasks"] == 500 and row["blocks"] == 50 and row["n"] == 500
        # every submission is accounted for: 500, then one per round (5)
        ended = row["end_waiting"] + row["end_granted"] + row["end_refused"]
        assert ended == 505, (spec, row)
        # 50 blocks of ε_g = 1 fit at most 1000 tasks' worth of ε = 0.05 on one block each
        assert 0 < row["end_granted"] <= 1000
        for op in OPS:
            r = ops[op]
            assert 0 <= r["p50_ms"] <= r["p95_ms"] <= r["max_ms"]
            assert r["n"] == {"submit": 500, "submit_last_tenth": 50}.get(op, 5)
    # DPF and FCFS keep a queue of waiting tasks; Alg. 2 decides each task on arrival
    assert by["dpf-n:n=10"]["submit"]["end_waiting"] > 0
    assert by["fcfs"]["submit"]["end_waiting"] > 0
    assert by["online-threshold:seed=1"]["submit"]["end_waiting"] == 0

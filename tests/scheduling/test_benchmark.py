"""benchmarks/scheduler.py --quick runs and meets its targets on the small instances."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_quick() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scheduler.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=ROOT,
    )
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    kinds = {x["bench"] for x in lines}
    assert {"machine", "scale", "allocations", "optimum", "seed000"} <= kinds
    alloc = {
        (x["workload"], x["accounting"], x["scheduler"]): x
        for x in lines
        if x["bench"] == "allocations"
    }
    # DPF beats FCFS on the PrivateKube microbenchmark (OSDI'21 Fig. 5's direction)
    for acc in ("basic", "rdp"):
        assert (
            alloc[("privatekube-micro", acc, "dpf-n")]["allocated"]
            >= alloc[("privatekube-micro", acc, "fcfs")]["allocated"]
        )
    # DPack at least matches DPF on the heterogeneous RDP workload
    assert alloc[("alibaba-like", "rdp", "dpack")]["vs_dpf"] >= 1.0
    for x in lines:
        if x["bench"] == "optimum":
            assert x["allocated"] <= x["optimum"]  # nothing beats the optimum
            if x["scheduler"] == "dpack":
                assert x["vs_optimum"] >= 0.9
        if x["bench"] == "seed000":
            assert x["vs_optimum"] <= 1.0 + 1e-9

"""benchmarks/scheduler.py --quick runs and meets its targets on the small instances."""

from __future__ import annotations

import json
import statistics
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
    # DPack at least matches DPF on Alibaba-DP, offline and online (EuroSys'25 Fig. 6's
    # direction), and every scheduler there is compared with FCFS of the same run
    for name in ("alibaba-dp-offline", "alibaba-dp-online"):
        assert alloc[(name, "rdp", "dpack")]["vs_dpf"] >= 1.0
        assert alloc[(name, "rdp", "fcfs")]["vs_fcfs"] == 1.0
        for sched in ("round-robin", "dpf-n", "dpf-t", "dpack"):
            row = alloc[(name, "rdp", sched)]
            assert row["vs_fcfs"] == round(
                row["allocated"] / alloc[(name, "rdp", "fcfs")]["allocated"], 3
            )
        # seed 000's Alg. 2 runs on the OPEN variant of the same tasks
        assert (f"{name}-open", "rdp", "online-threshold") in alloc
    # timings come from interleaved rounds, each ratio against FCFS of the same round
    scale = [x for x in lines if x["bench"] == "scale"]
    assert {x["scheduler"].split("(")[0] for x in scale} == {"fcfs", "dpf-n", "dpack"}
    for x in scale:
        assert x["rounds"] == 2 and len(x["scheduler_seconds_rounds"]) == 2
        median = statistics.median(x["scheduler_seconds_rounds"])
        assert abs(x["scheduler_seconds"] - median) <= 1e-3
        if x["scheduler"] == "fcfs":
            assert x["time_vs_fcfs"] == 1.0
    for x in lines:
        if x["bench"] == "optimum":
            assert x["allocated"] <= x["optimum"]  # nothing beats the optimum
            if x["scheduler"] == "dpack":
                assert x["vs_optimum"] >= 0.9
        if x["bench"] == "seed000":
            assert x["vs_optimum"] <= 1.0 + 1e-9

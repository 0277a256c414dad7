"""Scheduler benchmark: wall time vs tasks and blocks (12 RDP orders), allocations per workload,
and the gap to the offline optimum where it can be computed. Prints JSON lines.

    .venv/bin/python benchmarks/scheduler.py            # full: up to 100k tasks over 10k blocks
    .venv/bin/python benchmarks/scheduler.py --quick    # seconds (run by the tests)

Sections (the "bench" field):

* ``scale`` — Alibaba-like RDP workload (12 orders), tasks = 10 × blocks, from 1k tasks over 100
  blocks to 100k over 10k; scheduler wall time (inside callbacks) and allocations for FCFS,
  DPF (N-unlocking), DPack, with ratios to FCFS measured in the same run.
* ``allocations`` — tasks allocated per workload (PrivateKube microbenchmark under basic and RDP
  accounting; Alibaba-like) for FCFS, round robin, DPF-N, DPF-T, DPack; ``vs_dpf`` and
  ``vs_dpack`` ratios.
* ``optimum`` — small instances where the offline optimum (HiGHS MILP) is computable:
  allocated / optimum for each heuristic.
* ``seed000`` — seed 000's online algorithms vs Sage random choice and the offline optimum on
  the small- and mixed-cost query workloads (realized significance).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any

from blockbudget.accounting import Accounting
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.scheduling.base import Scheduler
from blockbudget.scheduling.baselines import Fcfs, RandomBlocks, RoundRobin
from blockbudget.scheduling.dpack import DPack
from blockbudget.scheduling.dpf import DpfN, DpfT
from blockbudget.scheduling.offline import OfflineOptimum
from blockbudget.scheduling.simulator import SimulationResult, simulate
from blockbudget.scheduling.threshold import MixedThreshold, OnlineThreshold
from blockbudget.scheduling.workloads import (
    Workload,
    alibaba_like,
    privatekube_micro,
    seed000_queries,
)


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def run(scheduler: Scheduler, workload: Workload) -> SimulationResult:
    return simulate(scheduler, workload.blocks, workload.tasks, accounting=workload.accounting)


def bench_scale(sizes: list[tuple[int, int]]) -> None:
    for n_tasks, n_blocks in sizes:
        t0 = time.perf_counter()
        w = alibaba_like(n_blocks=n_blocks, n_tasks=n_tasks, seed=1)
        gen = time.perf_counter() - t0
        base: SimulationResult | None = None
        for sched in (Fcfs(), DpfN(n=100), DPack(tick=max(1.0, n_blocks / 1000))):
            t0 = time.perf_counter()
            r = run(sched, w)
            wall = time.perf_counter() - t0
            base = base or r
            emit(
                bench="scale",
                scheduler=sched.describe(),
                tasks=n_tasks,
                blocks=n_blocks,
                orders=12,
                scheduler_seconds=round(r.scheduler_seconds, 3),
                simulation_seconds=round(wall, 3),
                workload_seconds=round(gen, 3),
                allocated=r.allocated,
                allocated_vs_fcfs=round(r.allocated / max(1, base.allocated), 3),
                time_vs_fcfs=round(r.scheduler_seconds / max(1e-9, base.scheduler_seconds), 2),
            )


def bench_allocations(quick: bool) -> None:
    n_blocks = 10 if quick else 50
    workloads = [
        privatekube_micro(n_blocks=n_blocks, tasks_per_block=50, seed=2),
        privatekube_micro(n_blocks=n_blocks, tasks_per_block=50, seed=2, accounting=Accounting.RDP),
        alibaba_like(n_blocks=n_blocks, n_tasks=n_blocks * 20, seed=2),
    ]
    for w in workloads:
        results = {}
        for sched in (Fcfs(), RoundRobin(), DpfN(n=100), DpfT(n=100), DPack()):
            results[sched.name] = run(sched, w)
        for name, r in results.items():
            emit(
                bench="allocations",
                workload=w.name,
                accounting=w.accounting.value,
                scheduler=name,
                tasks=len(w.tasks),
                allocated=r.allocated,
                vs_dpf=round(r.allocated / max(1, results["dpf-n"].allocated), 3),
                vs_dpack=round(r.allocated / max(1, results["dpack"].allocated), 3),
                scheduler_seconds=round(r.scheduler_seconds, 3),
            )


def bench_optimum(quick: bool) -> None:
    cases = [
        privatekube_micro(n_blocks=5, tasks_per_block=30, seed=3),
        alibaba_like(n_blocks=10, n_tasks=40 if quick else 120, seed=3),
    ]
    for w in cases:
        opt_sched = OfflineOptimum(time_limit=120.0, node_limit=200_000)
        opt = run(opt_sched, w)
        for sched in (Fcfs(), DpfN(n=100), DpfT(n=100), DPack()):
            r = run(sched, w)
            emit(
                bench="optimum",
                workload=w.name,
                accounting=w.accounting.value,
                scheduler=sched.name,
                allocated=r.allocated,
                optimum=opt.allocated,
                optimum_proven=bool(opt_sched.optimal),
                vs_optimum=round(r.allocated / max(1, opt.allocated), 3),
            )


def bench_seed000(quick: bool) -> None:
    for mixed in (False, True):
        w = seed000_queries(n_blocks=8, n_queries=10 if quick else 40, mixed=mixed, seed=4)
        assert w.upper is not None and w.lower is not None
        ours_cls = MixedThreshold if mixed else OnlineThreshold
        scheds: list[Scheduler] = [
            OfflineOptimum(),
            ours_cls(
                upper=w.upper,
                lower=w.lower,
                comparison_epsilon=0.01,
                sensitivity=0.01,
                seed=4,
                noise=SeededNoise(4),
            ),
            RandomBlocks(seed=4),
        ]
        results = [run(s, w) for s in scheds]
        for s, r in zip(scheds, results, strict=True):
            emit(
                bench="seed000",
                workload=w.name,
                scheduler=s.name,
                significance=round(r.significance, 4),
                allocated=r.allocated,
                vs_optimum=round(r.significance / max(1e-12, results[0].significance), 3),
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--sections", default="scale,allocations,optimum,seed000")
    args = parser.parse_args()
    emit(
        bench="machine",
        python=sys.version.split()[0],
        platform=platform.platform(),
        quick=args.quick,
    )
    sections = set(args.sections.split(","))
    if "scale" in sections:
        sizes = (
            [(500, 50)]
            if args.quick
            else [(1000, 100), (10_000, 1000), (100_000, 10_000), (100_000, 1000), (10_000, 10_000)]
        )
        bench_scale(sizes)
    if "allocations" in sections:
        bench_allocations(args.quick)
    if "optimum" in sections:
        bench_optimum(args.quick)
    if "seed000" in sections:
        bench_seed000(args.quick)


if __name__ == "__main__":
    main()

"""Scheduler benchmark: wall time vs tasks and blocks (12 RDP orders), allocations per workload,
and the gap to the offline optimum where it can be computed. Prints JSON lines.

    .venv/bin/python benchmarks/scheduler.py            # full: up to 100k tasks over 10k blocks
    .venv/bin/python benchmarks/scheduler.py --quick    # seconds (run by the tests)

Sections (the "bench" field):

* ``scale`` — Alibaba-DP workload (12 RDP orders, online, no initial blocks), tasks = 10 ×
  blocks, 1k tasks over 100 blocks, 10k over 1k and 100k over 10k (``--scale-sizes`` for
  others); scheduler wall time (inside callbacks) and allocations for FCFS, DPF (N-unlocking),
  DPack.

Timings (``scale`` and ``alibaba``) come from ``--rounds`` interleaved rounds (default 3; 2 with
``--quick``): each round runs every scheduler once from a fresh instance, starting at a
different one each round; a row gives the median scheduler seconds, every round's, and
``time_vs_fcfs``, the median over rounds of its time over FCFS's *in the same round* — the
figure that survives a shared, loaded machine. Allocations must be the same in every round.
* ``allocations`` — tasks allocated per workload for FCFS, round robin, DPF-N, DPF-T, DPack:
  PrivateKube's microbenchmark (basic and RDP accounting) and the faithful Alibaba-DP workload
  (``scheduling/alibaba.py``), offline (one batch) and online (DPack's runs: 100 initial blocks,
  ~100 tasks per online block, T-unlocking over 30 blocks, batches every 10, metric recomputed
  every 50 grants). On Alibaba-DP, seed 000's Alg. 2 (``online-threshold``) runs on the OPEN
  variant of the same tasks (any k blocks instead of the latest k), beside FCFS on that variant.
  Every row has ``vs_fcfs`` (allocated and profit over FCFS on the same workload and shape, same
  run), and NAMED rows ``vs_dpf`` (over DPF-N) and ``vs_dpack``.
* ``optimum`` — small instances where the offline optimum (HiGHS MILP) is computable:
  allocated / optimum for each heuristic.
* ``seed000`` — seed 000's online algorithms vs Sage random choice and the offline optimum on
  the small- and mixed-cost query workloads (realized significance).
* ``live`` (not in the default sections) — decision latency of the live task queue
  (``tasks.queue.TaskQueue`` on SQLite in a temporary folder): 10k BUDGET tasks over 1k blocks
  (``--quick``: 500 over 50) for ``dpf-n:n=10``, ``fcfs`` and ``online-threshold``
  (``--live-schedulers``); p50/p95/max milliseconds per submission (the decision on arrival),
  per idle pump, per pump that absorbs a new block, and per submission and pump once the queue
  is full. ``python benchmarks/scheduler.py --sections live [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blockbudget.accounting import Accounting
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.scheduling.alibaba import Arrivals, alibaba_dp, open_variant
from blockbudget.scheduling.base import Scheduler
from blockbudget.scheduling.baselines import Fcfs, RandomBlocks, RoundRobin
from blockbudget.scheduling.dpack import DPack
from blockbudget.scheduling.dpf import DpfN, DpfT
from blockbudget.scheduling.offline import OfflineOptimum
from blockbudget.scheduling.simulator import SimulationResult, simulate
from blockbudget.scheduling.threshold import MixedThreshold, OnlineThreshold
from blockbudget.scheduling.unlocking import UnlockMode
from blockbudget.scheduling.workloads import Workload, privatekube_micro, seed000_queries

if TYPE_CHECKING:
    from blockbudget.platform import Platform


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def run(scheduler: Scheduler, workload: Workload) -> SimulationResult:
    return simulate(scheduler, workload.blocks, workload.tasks, accounting=workload.accounting)


@dataclass(frozen=True)
class Timed:
    """One scheduler over several interleaved rounds: its (deterministic) result and timings."""

    result: SimulationResult
    seconds: tuple[float, ...]  # scheduler seconds per round
    wall: tuple[float, ...]  # simulate() wall seconds per round
    vs_base: tuple[float, ...]  # scheduler seconds over the baseline's, same round

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def fields(self) -> dict[str, Any]:
        return {
            "scheduler_seconds": round(self.median, 3),
            "scheduler_seconds_rounds": [round(x, 3) for x in self.seconds],
            "simulation_seconds": round(statistics.median(self.wall), 3),
            "time_vs_base": round(statistics.median(self.vs_base), 2),
        }


def run_rounds(
    factories: dict[str, Callable[[], Scheduler]], workload: Workload, rounds: int
) -> dict[str, Timed]:
    """Run every scheduler ``rounds`` times, interleaved (round r runs all of them, starting at
    a different one each round so that no scheduler always follows the same one), each from a
    fresh instance. The first factory is the baseline: ``vs_base`` divides by its time in the
    same round. Allocations must not change between rounds (the schedulers are deterministic;
    seeded noise where there is any)."""
    names = list(factories)
    out: dict[str, list[SimulationResult]] = {n: [] for n in names}
    wall: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            out[name].append(run(factories[name](), workload))
            wall[name].append(time.perf_counter() - t0)
    base = [x.scheduler_seconds for x in out[names[0]]]
    timed = {}
    for name in names:
        if len({x.allocated for x in out[name]}) != 1:
            raise RuntimeError(f"{name} allocated differently across rounds on {workload.name}")
        secs = tuple(x.scheduler_seconds for x in out[name])
        timed[name] = Timed(
            out[name][0],
            secs,
            tuple(wall[name]),
            tuple(s / max(1e-9, b) for s, b in zip(secs, base, strict=True)),
        )
    return timed


def bench_scale(sizes: list[tuple[int, int]], rounds: int) -> None:
    for n_tasks, n_blocks in sizes:
        t0 = time.perf_counter()
        w = alibaba_dp(
            n_blocks=n_blocks, initial_blocks=0, tasks_per_block=n_tasks / n_blocks, seed=1
        )
        gen = time.perf_counter() - t0
        tick = max(1.0, n_blocks / 1000)

        def dpack(tick: float = tick) -> Scheduler:
            return DPack(tick=tick)

        factories: dict[str, Callable[[], Scheduler]] = {
            "fcfs": Fcfs,
            "dpf-n": lambda: DpfN(n=100),
            "dpack": dpack,
        }
        timed = run_rounds(factories, w, rounds)
        base = timed["fcfs"].result
        for t in timed.values():
            fields = t.fields()
            fields["time_vs_fcfs"] = fields.pop("time_vs_base")
            emit(
                bench="scale",
                scheduler=t.result.scheduler,
                tasks=n_tasks,
                blocks=n_blocks,
                orders=12,
                rounds=rounds,
                **fields,
                workload_seconds=round(gen, 3),
                allocated=t.result.allocated,
                allocated_vs_fcfs=round(t.result.allocated / max(1, base.allocated), 3),
            )


def _emit_allocations(
    w: Workload, results: Mapping[str, SimulationResult | Timed], gen: float
) -> None:
    """One JSON line per scheduler, with ratios against FCFS (and DPF-N, DPack if present);
    for timed rounds, the median time and its ratio to FCFS's in the same rounds."""
    res = {n: r.result if isinstance(r, Timed) else r for n, r in results.items()}
    base = res["fcfs"]
    for name, r in res.items():
        row: dict[str, Any] = {
            "bench": "allocations",
            "workload": w.name,
            "accounting": w.accounting.value,
            "scheduler": name,
            "config": r.scheduler,
            "tasks": len(w.tasks),
            "blocks": len(w.blocks),
            "allocated": r.allocated,
            "profit": round(r.profit, 3),
            "vs_fcfs": round(r.allocated / max(1, base.allocated), 3),
            "profit_vs_fcfs": round(r.profit / max(1e-12, base.profit), 3),
            "scheduler_seconds": round(r.scheduler_seconds, 3),
            "workload_seconds": round(gen, 3),
        }
        timed = results[name]
        if isinstance(timed, Timed):
            fields = timed.fields()
            fields["time_vs_fcfs"] = fields.pop("time_vs_base")
            row.update(fields, rounds=len(timed.seconds))
        for ref, key in (("dpf-n", "vs_dpf"), ("dpack", "vs_dpack")):
            if ref in res:
                row[key] = round(r.allocated / max(1, res[ref].allocated), 3)
        emit(**row)


def alibaba_schedulers(arrivals: Arrivals) -> dict[str, Callable[[], Scheduler]]:
    """FCFS, RR, DPF-N, DPF-T and DPack with DPack's Alibaba settings (online: T-unlocking over
    30 blocks, a batch every 10, efficiencies recomputed every 50 grants; offline: one batch)."""

    def dpack() -> Scheduler:
        if arrivals is Arrivals.OFFLINE:
            return DPack(unlock=UnlockMode.NONE, recompute_every=50)
        return DPack(unlock=UnlockMode.T, lifetime=30.0, tick=10.0, recompute_every=50)

    return {
        "fcfs": Fcfs,
        "round-robin": RoundRobin,
        "dpf-n": lambda: DpfN(n=100),
        "dpf-t": lambda: DpfT(n=100, lifetime=30.0, tick=10.0),
        "dpack": dpack,
    }


def bench_alibaba(
    *, offline_blocks: int, online_blocks: int, per_block: float, seed: int, rounds: int
) -> None:
    """Alibaba-DP, offline and online: NAMED schedulers, then Alg. 2 on the OPEN variant."""
    sizes = {
        Arrivals.OFFLINE: dict(n_blocks=offline_blocks, initial_blocks=0),
        Arrivals.ONLINE: dict(n_blocks=100 + online_blocks, initial_blocks=100),
    }
    for arrivals, size in sizes.items():
        t0 = time.perf_counter()
        w = alibaba_dp(arrivals=arrivals, tasks_per_block=per_block, seed=seed, **size)
        gen = time.perf_counter() - t0
        _emit_allocations(w, run_rounds(alibaba_schedulers(arrivals), w, rounds), gen)
        t0 = time.perf_counter()
        wo = open_variant(w)
        gen = time.perf_counter() - t0
        upper, lower = wo.upper, wo.lower
        assert upper is not None and lower is not None

        def alg2(upper: float = upper, lower: float = lower) -> Scheduler:
            return OnlineThreshold(
                upper=upper,
                lower=lower,
                comparison_epsilon=0.01,
                sensitivity=0.01,
                seed=seed,
                noise=SeededNoise(seed),
            )

        factories: dict[str, Callable[[], Scheduler]] = {"fcfs": Fcfs, "online-threshold": alg2}
        _emit_allocations(wo, run_rounds(factories, wo, rounds), gen)


def bench_allocations(quick: bool) -> None:
    n_blocks = 10 if quick else 50
    workloads = [
        privatekube_micro(n_blocks=n_blocks, tasks_per_block=50, seed=2),
        privatekube_micro(n_blocks=n_blocks, tasks_per_block=50, seed=2, accounting=Accounting.RDP),
    ]
    for w in workloads:
        results = {}
        for sched in (Fcfs(), RoundRobin(), DpfN(n=100), DpfT(n=100), DPack()):
            results[sched.name] = run(sched, w)
        _emit_allocations(w, results, 0.0)


def bench_optimum(quick: bool) -> None:
    cases = [
        privatekube_micro(n_blocks=5, tasks_per_block=30, seed=3),
        alibaba_dp(
            n_blocks=10, arrivals=Arrivals.OFFLINE, tasks_per_block=4 if quick else 12, seed=3
        ),
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


# --- live: decision latency of the task queue ---------------------------------------------------

LIVE_SCHEDULERS = ("dpf-n:n=10", "fcfs", "online-threshold:seed=1")


def percentiles(ms: list[float]) -> dict[str, float]:
    """p50, p95 and max of some milliseconds (p95 by linear interpolation)."""
    xs = sorted(ms)
    pos = 0.95 * (len(xs) - 1)
    lo = int(pos)
    p95 = xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)
    return {
        "p50_ms": round(statistics.median(xs), 3),
        "p95_ms": round(p95, 3),
        "max_ms": round(xs[-1], 3),
        "n": len(xs),
    }


def live_platform(home: Path, n_blocks: int) -> Platform:
    """A platform in ``home`` (SQLite) with stream ``s`` of ``n_blocks`` daily blocks of one
    row each (ε_g = 1) and context ``c``."""
    from blockbudget.budget import Budget
    from blockbudget.platform import Platform
    from blockbudget.store import Blocking

    p = Platform(home, engine="arrow")
    p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
    p.add_context("c")
    add_live_blocks(p, 0, n_blocks)
    return p


def add_live_blocks(p: Platform, start: int, n: int) -> None:
    """Ingest ``n`` daily blocks of one row each, from day ``start`` after 2024-01-01."""
    import pandas as pd

    days = pd.date_range("2024-01-01", periods=start + n, freq="D")[start:]
    p.ingest("s", pd.DataFrame({"t": days, "v": [1.0] * n}))


def timed_ms(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def bench_live_one(spec: str, *, n_tasks: int, n_blocks: int, k: int, rounds: int) -> None:
    """One scheduler in a fresh live queue (see :func:`bench_live`)."""
    import tempfile

    from blockbudget.budget import Budget
    from blockbudget.tasks.model import TaskState
    from blockbudget.tasks.queue import TaskQueue
    from blockbudget.tasks.selectors import AnyBlocks

    with tempfile.TemporaryDirectory(prefix="bb-live-") as home:
        t0 = time.perf_counter()
        p = live_platform(Path(home), n_blocks)
        setup = time.perf_counter() - t0
        q = TaskQueue(p, scheduler=spec, noise=SeededNoise(1), workers=1)
        demand = Budget(epsilon="0.05")

        def submit(i: int) -> float:
            t0 = time.perf_counter()
            q.submit_budget("s", demand, selector=AnyBlocks(k), context="c", principal=f"a{i % 3}")
            return (time.perf_counter() - t0) * 1000

        submit_ms = [submit(i) for i in range(n_tasks)]
        idle_ms = [timed_ms(q.pump) for _ in range(rounds)]
        block_ms, steady_submit_ms, steady_pump_ms = [], [], []
        for r in range(rounds):
            add_live_blocks(p, n_blocks + r, 1)  # not timed: the pump that absorbs it is
            block_ms.append(timed_ms(q.pump))
            steady_submit_ms.append(submit(n_tasks + r))
            steady_pump_ms.append(timed_ms(q.pump))
        counts = {
            state.value: len(q.tasks(state=state, limit=10 * n_tasks))
            for state in (TaskState.WAITING, TaskState.GRANTED, TaskState.REFUSED)
        }
        q.close()
        p.close()
    row: dict[str, Any] = {
        "bench": "live",
        "scheduler": spec,
        "tasks": n_tasks,
        "blocks": n_blocks,
        "k": k,
        "demand_epsilon": 0.05,
        "setup_seconds": round(setup, 3),
        **{f"end_{state}": n for state, n in counts.items()},
    }
    tail = max(1, n_tasks // 10)
    for name, ms in (
        ("submit", submit_ms),
        ("submit_last_tenth", submit_ms[-tail:]),
        ("pump_idle", idle_ms),
        ("pump_new_block", block_ms),
        ("submit_steady", steady_submit_ms),
        ("pump_after_submit", steady_pump_ms),
    ):
        emit(**row, op=name, **percentiles(ms))


def bench_live(*, n_tasks: int, n_blocks: int, k: int, rounds: int, schedulers: list[str]) -> None:
    """Decision latency of the live :class:`~blockbudget.tasks.queue.TaskQueue` (SQLite in a
    temporary folder, this process the leader): ``n_tasks`` BUDGET tasks of ε = 0.05 on any
    ``k`` blocks (ε_g = 1, so about ``n_blocks``/(0.05·k) of them fit and the rest wait) are
    submitted one by one; then ``rounds`` idle pumps, and ``rounds`` times: one new block
    ingested (untimed) and the pump that absorbs it, one more submission and a pump. A
    submission enters the scheduler at once (the decision on arrival, with its ledger write
    if granted); a pump syncs the pools with the ledger, polls the task table once a second,
    ticks the schedulers and applies their decisions."""
    for spec in schedulers:
        bench_live_one(spec, n_tasks=n_tasks, n_blocks=n_blocks, k=k, rounds=rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument(
        "--sections", default="scale,allocations,alibaba,optimum,seed000", help="or live"
    )
    parser.add_argument("--live-tasks", type=int, default=None, help="live: waiting tasks")
    parser.add_argument("--live-blocks", type=int, default=None, help="live: blocks")
    parser.add_argument("--live-schedulers", default=",".join(LIVE_SCHEDULERS))
    parser.add_argument("--offline-blocks", type=int, default=None, help="Alibaba-DP offline")
    parser.add_argument("--online-blocks", type=int, default=None, help="after 100 initial ones")
    parser.add_argument("--tasks-per-block", type=float, default=None, help="Alibaba-DP")
    parser.add_argument("--seed", type=int, default=2, help="Alibaba-DP workload seed")
    parser.add_argument("--scale-sizes", default="", help="e.g. 10000x1000,100000x10000")
    parser.add_argument(
        "--rounds", type=int, default=None, help="interleaved timing rounds (scale, alibaba)"
    )
    args = parser.parse_args()
    emit(
        bench="machine",
        python=sys.version.split()[0],
        platform=platform.platform(),
        quick=args.quick,
    )
    sections = set(args.sections.split(","))
    rounds = args.rounds or (2 if args.quick else 3)
    if "scale" in sections:
        sizes = [(500, 50)] if args.quick else [(1000, 100), (10_000, 1000), (100_000, 10_000)]
        if args.scale_sizes:
            sizes = [
                (int(t), int(b)) for t, b in (x.split("x") for x in args.scale_sizes.split(","))
            ]
        bench_scale(sizes, rounds)
    if "allocations" in sections:
        bench_allocations(args.quick)
    if "alibaba" in sections:
        bench_alibaba(
            offline_blocks=args.offline_blocks or (10 if args.quick else 30),
            online_blocks=args.online_blocks or (5 if args.quick else 30),
            per_block=args.tasks_per_block or (20.0 if args.quick else 100.0),
            seed=args.seed,
            rounds=rounds,
        )
    if "optimum" in sections:
        bench_optimum(args.quick)
    if "seed000" in sections:
        bench_seed000(args.quick)
    if "live" in sections:
        bench_live(
            n_tasks=args.live_tasks or (500 if args.quick else 10_000),
            n_blocks=args.live_blocks or (50 if args.quick else 1000),
            k=10,
            rounds=5 if args.quick else 20,
            schedulers=args.live_schedulers.split(","),
        )


if __name__ == "__main__":
    main()

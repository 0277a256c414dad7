"""Scheduler time with OPEN tasks restricted to a selector's blocks, beside unrestricted ones.

Every OPEN-capable online scheduler runs the same arrivals twice on the simulator: tasks that
may use any block, and the same tasks restricted to the 10 newest blocks at their arrival
(``TaskSpec.eligible``, as a ``Newest(10)`` or time-range selector makes them). Printed as JSON
lines: allocations and scheduler seconds (the pool's bookkeeping included). Restricting a task
must not make a decision cost more than its share of the blocks it may use.

    PYTHONPATH=src python benchmarks/eligibility.py [--quick] [--blocks N] [--tasks M]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from dataclasses import replace

import numpy as np

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.scheduling import BlockSpec, TaskSpec, get_scheduler
from blockbudget.scheduling.simulator import simulate

SCHEDULERS = (
    "fcfs",
    "round-robin",
    "random-blocks",
    "streaming",
    "online-threshold",
    "mixed-threshold",
    "sage-block-conserve",
)
NEWEST = 10


def workload(n_blocks: int, n_tasks: int) -> tuple[list[BlockSpec], list[TaskSpec], list[TaskSpec]]:
    """Blocks at t = 0, 1, …; tasks uniform over the run (ε 1–20% of a block, c_j = 3); the
    restricted copy may use only the 10 newest blocks at its arrival."""
    rng = np.random.default_rng(0)
    blocks = [BlockSpec(f"b{i}", float(i), Budget(epsilon=1.0)) for i in range(n_blocks)]
    free = []
    for j in range(n_tasks):
        arrival = float(rng.uniform(0, n_blocks))
        demand = Budget(epsilon=round(float(rng.uniform(0.01, 0.2)), 4))
        free.append(TaskSpec(f"t{j}", arrival, demand, max_blocks=3))
    newest = [
        replace(
            t,
            eligible=frozenset(
                f"b{i}" for i in range(max(0, int(t.arrival) - NEWEST + 1), int(t.arrival) + 1)
            ),
        )
        for t in free
    ]
    return blocks, free, newest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 blocks, 300 tasks")
    parser.add_argument("--blocks", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=5000)
    args = parser.parse_args()
    n_blocks, n_tasks = (100, 300) if args.quick else (args.blocks, args.tasks)
    print(
        json.dumps(
            {
                "bench": "machine",
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "quick": args.quick,
            }
        )
    )
    blocks, free, newest = workload(n_blocks, n_tasks)
    for name in SCHEDULERS:
        for label, tasks in (("any", free), (f"newest-{NEWEST}", newest)):
            sched = get_scheduler(name, seed=0, noise=SeededNoise(0))
            result = simulate(sched, blocks, tasks, accounting=Accounting.BASIC)
            row = {
                "bench": "eligibility",
                "scheduler": name,
                "tasks_may_use": label,
                "blocks": n_blocks,
                "tasks": n_tasks,
                "allocated": result.allocated,
                "scheduler_seconds": round(result.scheduler_seconds, 3),
                "us_per_task": round(1e6 * result.scheduler_seconds / n_tasks, 1),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

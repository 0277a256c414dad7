"""Task queue decision latency: submit and pump with many waiting tasks over many blocks.

Builds a platform (SQLite in a temporary folder, arrow engine) with one stream of ``--blocks``
daily blocks, and a :class:`~blockbudget.tasks.queue.TaskQueue` whose scheduler keeps every
task waiting (DPF-N with a huge N: each arrival unlocks a sliver), then submits ``--tasks``
BUDGET tasks, each naming one block (round robin over the blocks). Reported (JSON lines):

* ``submit`` — median and p99 wall time of one submission (checks, insert, entry into DPF);
* ``pump_idle`` — a pump when nothing changed (one audit-log read, nothing else);
* ``pump_charge`` — a pump after one direct ledger charge on one block (that block's row read,
  charged to ``__ledger__``);
* ``pump_block`` — a pump after one new block (its row read, DPF's ``on_block``);

(the charge and the block are made before the timed pump);
* ``cancel`` — one cancel of a waiting task (row update, pool reject).

Each line carries ``waiting`` (tasks waiting then) so runs at different sizes compare: a
pump's cost should not grow with it. The queue is a library object: this measures decisions,
not HTTP.

Usage: ``python benchmarks/tasks_pump.py [--quick] [--blocks B] [--tasks T] [--scheduler S]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import sqlalchemy as sa

from blockbudget import Budget
from blockbudget.platform import Platform
from blockbudget.store import Blocking
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import Named


def build(home: Path, blocks: int) -> Platform:
    """A platform with stream ``s`` of ``blocks`` daily blocks (one row each)."""
    p = Platform(home, engine="arrow")
    p.create_stream("s", policy=Budget(epsilon=10), blocking=Blocking.by_time("t"))
    p.add_context("team")
    days = pd.date_range("2000-01-01", periods=blocks, freq="D")
    p.ingest("s", pd.DataFrame({"t": days, "v": [1.0] * blocks}))
    return p


class Statements:
    """Counts the SQL statements the platform's engines execute."""

    def __init__(self, p: Platform) -> None:
        self.count = 0
        for engine in {id(e): e for e in (p.ledger.engine, p.store.engine)}.values():
            sa.event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *args: object) -> None:
        self.count += 1


def _measure(
    stmts: Statements,
    step: Callable[[], object],
    setup: Callable[[], object] = lambda: None,
    repeat: int = 5,
) -> dict[str, float]:
    """Median wall time (ms) and SQL statements of ``step``, after an untimed ``setup``."""
    times, counts = [], []
    for _ in range(repeat):
        setup()
        before = stmts.count
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1000)
        counts.append(stmts.count - before)
    return {
        "median_ms": round(statistics.median(times), 3),
        "sql_statements": statistics.median(counts),
    }


def run(blocks: int, tasks: int, scheduler: str) -> list[dict[str, object]]:
    """The measurements (see the module docstring)."""
    out: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as home:
        p = build(Path(home), blocks)
        ids = [b.block_id for b in p.ledger.blocks("s")]
        q = TaskQueue(p, scheduler=scheduler, poll_seconds=1e9)
        demand = Budget(epsilon="0.01")
        times = []
        last = None
        for i in range(tasks):
            start = time.perf_counter()
            last = q.submit_budget(
                "s", demand, selector=Named((ids[i % blocks],)), context="team", principal="a"
            )
            times.append((time.perf_counter() - start) * 1000)
        waiting = len(q.tasks(state=TaskState.WAITING, limit=10**9))
        times.sort()
        common = {"blocks": blocks, "tasks": tasks, "scheduler": scheduler, "waiting": waiting}
        out.append(
            {
                "name": "submit",
                **common,
                "median_ms": round(statistics.median(times), 3),
                "p99_ms": round(times[int(0.99 * (len(times) - 1))], 3),
            }
        )
        stmts = Statements(p)
        out.append({"name": "pump_idle", **common, **_measure(stmts, q.pump)})

        def charge() -> None:
            p.ledger.charge([ids[0]], Budget(epsilon="0.001"), context="team")

        out.append({"name": "pump_charge", **common, **_measure(stmts, q.pump, charge)})
        day = [pd.Timestamp("1990-01-01")]

        def new_block() -> None:
            day[0] -= pd.Timedelta(days=1)
            p.ingest("s", pd.DataFrame({"t": day, "v": [1.0]}))

        out.append({"name": "pump_block", **common, **_measure(stmts, q.pump, new_block)})
        assert last is not None
        victim = last.id
        cancel = _measure(stmts, lambda: q.cancel(victim, by="a"), repeat=1)
        out.append({"name": "cancel", **common, **cancel})
        q.close()
        p.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="50 blocks × 100 tasks, then 100 × 300"
    )
    parser.add_argument("--blocks", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--scheduler", default="dpf-n:n=1000000000")
    args = parser.parse_args()
    sizes = [(50, 100), (100, 300)] if args.quick else [(args.blocks, args.tasks)]
    for blocks, tasks in sizes:
        for line in run(blocks, tasks, args.scheduler):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

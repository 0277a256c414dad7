"""What one request, one retirement sweep and one audit verification cost as a stream grows.

For each stream size N (1k, 10k and 100k daily blocks; ``--quick``: 100 and 1k) the script
builds one platform (one ingest of a table with one row per day, so N new blocks in one
transaction) and measures, in CPU seconds of this process (``time.process_time``):

* ``request`` — ``platform.request(stream, blocks=Last(7), …)`` and a DP count on the grant
  (which charges the seven blocks): the path every analyst's query takes;
* ``retire`` — ``platform.retire_exhausted(stream)`` after one such request (so a handful of
  blocks changed since the previous sweep; the first sweep, which sees every block, is
  reported apart as ``first_cpu_ms``);
* ``verify`` — ``platform.verify(full=True)`` of the whole audit log (``full``) and, where the
  ledger keeps a verified checkpoint, of the events after it (``incremental``, with the number
  of events ``replayed``); ``verify_log`` does the same on a ledger of 100 blocks whose log
  holds 20k events (``--quick``: 2k), where the log, not the state, is what is large.

Besides CPU time, each line carries deterministic counters of the work done in the database
(``sql_statements`` and ``sqlite_kilo_steps``: SQLite virtual-machine instructions / 1000,
which grow with the rows a statement examines); the test of ``--quick`` compares those, never
wall or CPU times. Each figure is the median over ``--rounds`` rounds.

Prints one JSON line per (op, N); with ``--baseline-src DIR`` the same measurements are taken
in a subprocess importing blockbudget from ``DIR`` (e.g. an older checkout's ``src``) and
printed with ``"baseline": true``.

Usage: ``python benchmarks/scale_request.py [--quick] [--sizes 1000,10000] [--rounds R]
[--dir DIR] [--baseline-src DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlalchemy import Engine, event

from blockbudget.budget import Budget
from blockbudget.mechanisms import statistics as stats
from blockbudget.platform import Last, Platform
from blockbudget.store import Blocking, Unit

STREAM = "days"
CONTEXT = "bench"
COST = Budget(epsilon="0.01")


class Counters:
    """SQL statements and SQLite VM instructions of every connection of some engines."""

    def __init__(self) -> None:
        self.statements = 0
        self.steps = 0
        self._on = False

    def attach(self, engine: Engine) -> None:
        def on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.set_trace_callback(self._trace)
            dbapi_conn.set_progress_handler(self._progress, 1000)

        event.listen(engine, "connect", on_connect)
        engine.dispose()  # pooled connections were made before the listener

    def _trace(self, _sql: str) -> None:
        if self._on:
            self.statements += 1

    def _progress(self) -> int:
        if self._on:
            self.steps += 1
        return 0

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.statements = self.steps = 0
        self._on = True
        try:
            yield
        finally:
            self._on = False


def build(home: Path, n: int) -> tuple[Platform, float]:
    """A platform with one daily stream of ``n`` blocks; returns it and the setup seconds."""
    t0 = time.perf_counter()
    p = Platform(home)
    p.add_context(CONTEXT, description="benchmark")
    p.create_stream(
        STREAM,
        policy=Budget(epsilon=1),
        blocking=Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1)),
    )
    start = datetime(1970, 1, 1, 12, tzinfo=UTC)
    table = pa.table(
        {
            "ts": pa.array(
                [start + timedelta(days=i) for i in range(n)], pa.timestamp("us", "UTC")
            ),
            "x": pa.array(range(n), pa.int64()),
        }
    )
    p.ingest(STREAM, table)
    return p, time.perf_counter() - t0


def measure(counters: Counters, fn: Callable[[], Any], rounds: int) -> dict[str, float]:
    cpu, stmts, steps = [], [], []
    for _ in range(rounds):
        with counters.counting():
            t0 = time.process_time()
            fn()
            cpu.append((time.process_time() - t0) * 1000)
        stmts.append(counters.statements)
        steps.append(counters.steps)
    return {
        "cpu_ms": round(statistics.median(cpu), 2),
        "sql_statements": statistics.median(stmts),
        "sqlite_kilo_steps": statistics.median(steps),
    }


def one_request(p: Platform) -> None:
    """``Last(7)`` and a DP count with the default (OpenDP's secure) noise."""
    with p.request(STREAM, blocks=Last(7), budget=COST, context=CONTEXT) as grant:
        stats.dp_count(grant, grant.data, epsilon=COST.epsilon)


def run_size(root: Path, n: int, rounds: int) -> list[dict[str, Any]]:
    home = root / f"n{n}"
    shutil.rmtree(home, ignore_errors=True)
    p, setup_s = build(home, n)
    counters = Counters()
    counters.attach(p.ledger.engine)
    counters.attach(p.store.engine)
    out: list[dict[str, Any]] = []
    one_request(p)  # warm caches (imports, compiled statements)
    req = measure(counters, lambda: one_request(p), rounds)
    out.append({"op": "request", "stream_blocks": n, "setup_s": round(setup_s, 2), **req})

    with counters.counting():
        t0 = time.process_time()
        p.retire_exhausted(STREAM)
        first = (time.process_time() - t0) * 1000

    def request_then_retire() -> None:
        one_request(p)

    cpu, stmts, steps = [], [], []
    for _ in range(rounds):
        request_then_retire()
        r = measure(counters, lambda: p.retire_exhausted(STREAM), 1)
        cpu.append(r["cpu_ms"])
        stmts.append(r["sql_statements"])
        steps.append(r["sqlite_kilo_steps"])
    out.append(
        {
            "op": "retire",
            "stream_blocks": n,
            "first_cpu_ms": round(first, 2),
            "cpu_ms": round(statistics.median(cpu), 2),
            "sql_statements": statistics.median(stmts),
            "sqlite_kilo_steps": statistics.median(steps),
        }
    )

    full = measure(counters, lambda: _verify(p, full=True), 1)
    line: dict[str, Any] = {"op": "verify", "stream_blocks": n, "events": _last_report[0].events}
    line["full"] = full
    if _has_incremental(p):
        one_request(p)  # a few events after the checkpoint the full verification stored
        line["incremental"] = measure(counters, lambda: _verify(p, full=False), 1)
        line["incremental"]["replayed"] = _last_report[0].replayed
    out.append(line)
    p.close()
    shutil.rmtree(home, ignore_errors=True)
    return out


def run_log(root: Path, events: int) -> dict[str, Any]:
    """A ledger of 100 blocks and about ``events`` events (direct charges); verification of
    the whole log, then of one more charge after the checkpoint the first stored."""
    from blockbudget.accounting import Accounting
    from blockbudget.ledger import Ledger

    path = root / f"log{events}.db"
    path.unlink(missing_ok=True)
    ledger = Ledger(f"sqlite:///{path}")
    ledger.add_context(CONTEXT)
    ids = [f"b{i:03d}" for i in range(100)]
    ledger.add_blocks(ids, stream="s", capacity=Budget(epsilon=10**6), accounting=Accounting.BASIC)
    for i in range(events - 102):
        ledger.charge([ids[i % 100], ids[(i * 7 + 1) % 100]], COST, context=CONTEXT)
    counters = Counters()
    counters.attach(ledger.engine)
    line: dict[str, Any] = {"op": "verify_log", "blocks": 100}
    if _has_incremental(ledger):
        line["full"] = measure(counters, lambda: _verify(ledger, full=True), 1)
        line["events"] = _last_report[0].events
        ledger.charge([ids[0]], COST, context=CONTEXT)
        line["incremental"] = measure(counters, lambda: _verify(ledger, full=False), 1)
        line["incremental"]["replayed"] = _last_report[0].replayed
    else:
        line["full"] = measure(counters, lambda: _verify(ledger, full=True), 1)
        line["events"] = _last_report[0].events
    ledger.dispose()
    path.unlink(missing_ok=True)
    return line


def _has_incremental(p: Any) -> bool:
    import inspect

    return "full" in inspect.signature(p.verify).parameters


_last_report: list[Any] = [None]


def _verify(p: Any, *, full: bool) -> None:
    report = p.verify(full=full) if _has_incremental(p) else p.verify()
    if not report.ok:
        raise SystemExit(f"verify failed: {report.problems[:3]}")
    _last_report[0] = report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="sizes 100 and 1000, 3 rounds")
    ap.add_argument("--sizes", default=None, help="comma-separated stream sizes")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--dir", default=None, help="where the platforms are built (then removed)")
    ap.add_argument("--baseline-src", default=None, help="also run against this src folder")
    ap.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else ([100, 1000] if args.quick else [1000, 10_000, 100_000])
    )
    rounds = args.rounds or (3 if args.quick else 5)
    root = Path(args.dir or tempfile.mkdtemp(prefix="scale-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        lines: list[Callable[[], list[dict[str, Any]]]] = [
            (lambda n=n: run_size(root, n, rounds)) for n in sizes
        ]
        logs = [2000] if args.quick else [20_000]
        lines += [(lambda e=e: [run_log(root, e)]) for e in logs]
        for make in lines:
            for line in make():
                if args.baseline:
                    line["baseline"] = True
                print(json.dumps(line), flush=True)
        if args.baseline_src:
            env = {**os.environ, "PYTHONPATH": str(Path(args.baseline_src).resolve())}
            cmd = [sys.executable, __file__, "--baseline", "--rounds", str(rounds)]
            cmd += ["--sizes", ",".join(map(str, sizes)), "--dir", str(root / "baseline")]
            cmd += ["--quick"] if args.quick else []
            subprocess.run(cmd, env=env, check=True)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

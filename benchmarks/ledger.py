"""Durable ledger charges per second against raw sqlite3 transactions, measured in the same run.

For BASIC and RDP filters and 1, 10 and 100 blocks per charge, each configuration runs:

* **ledger** — ``Ledger.charge(blocks, cost, request_id=…)`` on a fresh SQLite file (WAL,
  ``synchronous=FULL``): one durable transaction per charge that locks the budget rows, checks
  every filter, updates the rows, appends a hash-chained audit event and records the request id.
* **raw** (the baseline) — the stdlib ``sqlite3`` module on a fresh file with the same pragmas,
  doing the same row updates: ``BEGIN IMMEDIATE``; read the same N budget rows
  (``SELECT … WHERE block_id IN (…) AND context = ?``); add the feature vector to each (with
  the ledger's own vector codec, so the baseline is not handicapped); write them back
  (``executemany`` UPDATE); ``COMMIT``. No filter check, no audit, no idempotency.

Each round runs the ledger and the baseline back to back (alternating which goes first), so that
both see the same state of a shared, noisy machine. Prints one JSON line per configuration (and
one ``summary`` line) with the medians over rounds of ``ledger_per_s`` and ``raw_per_s``,
``ratio`` = the median over rounds of the paired ratio ledger / raw (with ``ratio_min``,
``ratio_max``), and ``ratio_of_medians``.

Usage: ``python benchmarks/ledger.py [--quick] [--rounds R] [--charges K] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from blockbudget.accounting import Accounting, make_filter
from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.ledger import Ledger
from blockbudget.ledger.types import decode_vector, encode_vector, vadd


def _fresh(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")


def _setup(accounting: Accounting, charges: int) -> tuple[Budget, Cost]:
    if accounting is Accounting.BASIC:
        return Budget(epsilon=charges * 0.01 + 1, delta=0), Budget(epsilon=0.01)
    # RDP: a Gaussian mechanism; the capacity leaves room for every charge.
    return Budget(epsilon=charges * 0.5 + 100, delta=1e-6), RdpCurve.gaussian(sigma=10.0)


def run_ledger(path: Path, accounting: Accounting, n_blocks: int, charges: int, tag: str) -> float:
    """Charges per second through the ledger."""
    _fresh(path)
    capacity, cost = _setup(accounting, charges)
    ledger = Ledger(f"sqlite:///{path}")
    try:
        ledger.add_context("default")  # a new ledger has no context
        blocks = [f"s/{i:05d}" for i in range(n_blocks)]
        ledger.add_blocks(blocks, stream="s", capacity=capacity, accounting=accounting)
        ledger.charge(blocks, cost, request_id=f"{tag}-warm")
        start = time.perf_counter()
        for i in range(charges):
            ledger.charge(blocks, cost, request_id=f"{tag}-{i}")
        elapsed = time.perf_counter() - start
        state = ledger.state(blocks[0])
        if state.charged != tuple(
            (charges + 1) * v for v in make_filter(accounting, capacity=capacity).features(cost)
        ):
            raise SystemExit("benchmark self-check failed: the ledger lost a charge")
    finally:
        ledger.dispose()
    return charges / elapsed


def run_raw(path: Path, accounting: Accounting, n_blocks: int, charges: int) -> float:
    """Transactions per second of plain sqlite3 doing the same row updates."""
    _fresh(path)
    capacity, cost = _setup(accounting, charges)
    feats = make_filter(accounting, capacity=capacity).features(cost)
    zero = encode_vector((0,) * len(feats))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute(
            "CREATE TABLE budgets (block_id TEXT, context TEXT, charged TEXT NOT NULL, "
            "reserved TEXT NOT NULL, PRIMARY KEY (block_id, context)) WITHOUT ROWID"
        )
        blocks = [f"s/{i:05d}" for i in range(n_blocks)]
        conn.executemany(
            "INSERT INTO budgets VALUES (?, 'default', ?, ?)", [(b, zero, zero) for b in blocks]
        )
        marks = ",".join("?" * n_blocks)
        select = (
            f"SELECT block_id, charged FROM budgets WHERE block_id IN ({marks}) AND context = ?"
        )
        update = "UPDATE budgets SET charged = ? WHERE block_id = ? AND context = ?"
        params = (*blocks, "default")
        start = time.perf_counter()
        for _ in range(charges):
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(select, params).fetchall()
            new = []
            for block, charged in rows:
                total = vadd(decode_vector(charged), feats)
                new.append((encode_vector(total), block, "default"))
            conn.executemany(update, new)
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    return charges / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (a few seconds)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds")
    parser.add_argument("--charges", type=int, default=None, help="charges per round (1 block)")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the database files")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 9)
    base = args.charges or (40 if args.quick else 800)
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bb-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    machine = {
        "nproc": os.cpu_count(),
        "arch": platform.machine(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    results = []
    for accounting in (Accounting.BASIC, Accounting.RDP):
        for n_blocks in (1, 10, 100):
            charges = max(5, base // {1: 1, 10: 2, 100: 8}[n_blocks])
            led, raw = [], []
            for r in range(rounds):
                tag = f"{accounting.value}-{n_blocks}-{r}"
                ledger_db, raw_db = workdir / "ledger.db", workdir / "raw.db"
                if r % 2 == 0:  # alternate which of the two goes first
                    led.append(run_ledger(ledger_db, accounting, n_blocks, charges, tag))
                    raw.append(run_raw(raw_db, accounting, n_blocks, charges))
                else:
                    raw.append(run_raw(raw_db, accounting, n_blocks, charges))
                    led.append(run_ledger(ledger_db, accounting, n_blocks, charges, tag))
            paired = [x / y for x, y in zip(led, raw, strict=True)]
            line = {
                "bench": "ledger_charge",
                "accounting": accounting.value,
                "blocks_per_charge": n_blocks,
                "charges": charges,
                "rounds": rounds,
                "ledger_per_s": round(statistics.median(led), 1),
                "raw_per_s": round(statistics.median(raw), 1),
                "ratio": round(statistics.median(paired), 3),
                "ratio_of_medians": round(statistics.median(led) / statistics.median(raw), 3),
                "ratio_min": round(min(paired), 3),
                "ratio_max": round(max(paired), 3),
                "storage": "sqlite WAL synchronous=FULL",
                **machine,
            }
            results.append(line)
            print(json.dumps(line), flush=True)
    single = [r["ratio"] for r in results if r["blocks_per_charge"] == 1]
    print(
        json.dumps(
            {
                "bench": "summary",
                "min_single_block_ratio": min(single),
                "target_single_block_ratio": 0.5,
                "quick": bool(args.quick),
                **machine,
            }
        ),
        flush=True,
    )
    for name in ("ledger.db", "raw.db"):
        _fresh(workdir / name)
    if args.dir is None:
        workdir.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())

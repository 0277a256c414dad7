"""The overlap check of an ingest against a plain append, on streams of growing block counts.

A stream with ``blocks`` daily blocks of ``rows`` rows each (SQLite catalog, local block
folder) receives, per round, an ingest touching ``touched`` of its blocks: ``rows`` rows per
touched block, half of them exact duplicates of the block's stored rows. The same input is
ingested twice on two identical stores, interleaved:

* ``append_seconds`` — ``on_overlap="append"``: no stored row is read (the overlap by key is
  still reported, from the catalog);
* ``check_seconds`` — ``on_overlap="skip-duplicates"``: the touched blocks' part files are read
  and compared with the input in DuckDB, the duplicates left out;
* ``ratio`` = check_seconds / append_seconds (medians over rounds; each round touches other
  blocks, so every round checks blocks of the same size);
* ``hash_seconds`` — the content hash of the input alone (paid by both).

Both include the content hash, staging, fsync and the catalog commit. The check's cost should
not depend on ``blocks``: compare the lines of one run.

Usage: ``python benchmarks/ingest_overlap.py [--quick] [--blocks 100,10000] [--rows 1000]
[--touched 2] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.store import Blocking, BlockStore, LatePolicy, StreamSpec
from blockbudget.store.content import ContentHasher

_US_PER_DAY = 86_400_000_000
_START_US = 1_704_067_200_000_000  # 2024-01-01T00:00


def _rows(days: np.ndarray, per_day: int, rng: np.random.Generator) -> pa.Table:
    ts = np.repeat(days, per_day) * _US_PER_DAY + _START_US
    ts += rng.integers(0, _US_PER_DAY, size=ts.size)
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us")),
            "user": pa.array(rng.integers(0, 1_000_000, size=ts.size)),
            "value": pa.array(rng.normal(size=ts.size)),
        }
    )


def _spec() -> StreamSpec:
    return StreamSpec(
        "s",
        Budget(epsilon=1, delta=1e-6),
        Accounting.BASIC,
        Blocking.by_time("ts", timedelta(days=1)),
        LatePolicy.NEW_BLOCK,
    )


def run(blocks: int, rows: int, touched: int, rounds: int, seed: int = 0) -> dict[str, object]:
    """One line: the medians over ``rounds`` on a stream of ``blocks`` blocks."""
    rng = np.random.default_rng(seed)
    base = _rows(np.arange(blocks), rows, rng)
    inputs = []
    for r in range(rounds):
        days = np.arange(r * touched, (r + 1) * touched) % blocks
        stored = pa.concat_tables(
            [base.slice(int(d) * rows, rows).slice(0, rows // 2) for d in days]
        )
        fresh = _rows(days, rows - rows // 2, rng)
        inputs.append(pa.concat_tables([stored, fresh]))
    timings: dict[str, list[float]] = {"append": [], "skip-duplicates": [], "hash": []}
    with tempfile.TemporaryDirectory() as tmp:
        stores = {}
        for policy in ("append", "skip-duplicates"):
            folder = Path(tmp) / policy
            folder.mkdir()
            store = BlockStore(f"sqlite:///{folder / 'p.db'}", folder / "blocks")
            store.create_stream(_spec())
            store.ingest("s", base, on_overlap="append")
            stores[policy] = store
        for r, table in enumerate(inputs):
            order = ("append", "skip-duplicates") if r % 2 == 0 else ("skip-duplicates", "append")
            for policy in order:
                t0 = time.perf_counter()
                report = stores[policy].ingest("s", table, on_overlap=policy)
                timings[policy].append(time.perf_counter() - t0)
                want = 0 if policy == "append" else touched * (rows // 2)
                assert report.overlap.skipped_rows == want, report.overlap
            t0 = time.perf_counter()
            hasher = ContentHasher()
            hasher.update(table)
            hasher.hexdigest()
            timings["hash"].append(time.perf_counter() - t0)
        for store in stores.values():
            store.dispose()
    append = statistics.median(timings["append"])
    check = statistics.median(timings["skip-duplicates"])
    return {
        "op": "ingest_overlap",
        "blocks": blocks,
        "rows_per_block": rows,
        "touched": touched,
        "input_rows": inputs[0].num_rows,
        "rounds": rounds,
        "append_seconds": round(append, 5),
        "check_seconds": round(check, 5),
        "ratio": round(check / append, 3),
        "hash_seconds": round(statistics.median(timings["hash"]), 5),
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for the tests")
    parser.add_argument("--blocks", default="100,10000")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--touched", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(b) for b in args.blocks.split(",")]
    rows, rounds = args.rows, args.rounds
    if args.quick:
        sizes, rows, rounds = [10, 200], 100, 2
    for blocks in sizes:
        print(json.dumps(run(blocks, rows, args.touched, rounds), sort_keys=True), flush=True)


if __name__ == "__main__":
    main()

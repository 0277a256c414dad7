"""Ingest at scale: ``BlockStore.ingest`` of one Parquet file against pyarrow writing the same
per-block Parquet files from the same file, with each run's peak memory.

Input: ``rows`` synthetic records (``ts`` timestamp[us] over ``blocks`` days, ``user`` int64,
``value`` float64, ``kind`` string of 8 values, ``amount`` int32), in random order across the
days by default (``--order shuffled``: every input batch touches every block, the hard case for
the writers) or sorted by time (``--order sorted``), generated once into the cache folder
(``$BLOCKBUDGET_BENCH_CACHE``, default ``~/.cache/blockbudget-bench``).

* ``seconds`` — wall time of ``store.ingest(stream, path)`` on a fresh store (SQLite catalog, local
  block folder): streaming read, checks, grouping, one part file per daily block, fsync of the
  files and directories, catalog commit;
* ``baseline_seconds`` — the obvious pyarrow program for the same output: ``pq.read_table``,
  a stable sort by day, ``pq.write_table`` of each day's slice into its own file (no checks, no
  fsync, no catalog);
* ``ratio`` = seconds / baseline_seconds (medians over interleaved rounds, the order of the two
  alternating);
* ``rss_mb`` / ``baseline_rss_mb`` — the peak resident memory of the process that did the run
  (each run is a fresh subprocess; it reports ``getrusage(RUSAGE_SELF).ru_maxrss`` after the run,
  imports included), ``rss_ratio`` = rss_mb / baseline_rss_mb.

Usage: ``python benchmarks/scale_ingest.py [--quick] [--rows 1000000,10000000] [--blocks 64]
[--rounds 3] [--order shuffled|sorted]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

_US_PER_DAY = 86_400_000_000
_START_US = 1_704_067_200_000_000  # 2024-01-01T00:00
_CHUNK = 1_000_000
_KINDS = np.array(["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"])


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "blockbudget-bench"
    return Path(os.environ.get("BLOCKBUDGET_BENCH_CACHE") or default)


def make_input(rows: int, blocks: int, order: str, folder: Path) -> Path:
    """The input file (generated once per rows/blocks/order, in chunks: bounded memory)."""
    path = folder / f"ingest-v1-{rows}-{blocks}-{order}.parquet"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261123)
    schema = pa.schema(
        [
            ("ts", pa.timestamp("us")),
            ("user", pa.int64()),
            ("value", pa.float64()),
            ("kind", pa.string()),
            ("amount", pa.int32()),
        ]
    )
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, schema) as writer:
        for start in range(0, rows, _CHUNK):
            n = min(_CHUNK, rows - start)
            if order == "sorted":
                lo = start * blocks * _US_PER_DAY // rows
                hi = (start + n) * blocks * _US_PER_DAY // rows
                offsets = np.sort(rng.integers(lo, max(hi, lo + 1), n))
            else:
                offsets = rng.integers(0, blocks * _US_PER_DAY, n)
            table = pa.table(
                {
                    "ts": pa.array(_START_US + offsets, pa.int64()).cast(pa.timestamp("us")),
                    "user": rng.integers(0, 1_000_000, n),
                    "value": rng.normal(50.0, 10.0, n),
                    "kind": _KINDS[rng.integers(0, len(_KINDS), n)],
                    "amount": rng.integers(0, 10_000, n).astype(np.int32),
                },
                schema=schema,
            )
            writer.write_table(table)
    tmp.rename(path)
    return path


def run_ours(path: Path, work: Path) -> float:
    from datetime import timedelta

    from blockbudget import Accounting, Budget
    from blockbudget.store import Blocking, BlockStore, LatePolicy, StreamSpec, Unit

    with BlockStore(f"sqlite:///{work / 'catalog.db'}", work / "blocks") as store:
        store.create_stream(
            StreamSpec(
                "events",
                Budget(epsilon=1.0),
                Accounting.BASIC,
                Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1)),
                LatePolicy.NEW_BLOCK,
            )
        )
        start = time.perf_counter()
        report = store.ingest("events", path)
        seconds = time.perf_counter() - start
        assert report.rows == pq.ParquetFile(path).metadata.num_rows
    return seconds


def run_baseline(path: Path, work: Path) -> float:
    import pyarrow.compute as pc

    start = time.perf_counter()
    table = pq.read_table(path)
    days = pc.divide(table.column("ts").cast(pa.int64()), _US_PER_DAY).to_numpy()
    order = np.argsort(days, kind="stable")
    table = table.take(pa.array(order))
    uniq, first = np.unique(days[order], return_index=True)
    bounds = [*first.tolist(), table.num_rows]
    for i, day in enumerate(uniq.tolist()):
        folder = work / "blocks" / str(day)
        folder.mkdir(parents=True)
        pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]), folder / "part.parquet")
    return time.perf_counter() - start


def child(kind: str, path: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"bb-scale-{kind}-"))
    try:
        seconds = (run_ours if kind == "ours" else run_baseline)(path, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"seconds": seconds, "rss_mb": rss_mb}))


def spawn(kind: str, path: Path) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--input", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def bench(rows: int, blocks: int, rounds: int, order: str) -> dict[str, object]:
    path = make_input(rows, blocks, order, cache_dir())
    ours: list[dict[str, float]] = []
    base: list[dict[str, float]] = []
    for r in range(rounds):
        pair = ("ours", "baseline") if r % 2 == 0 else ("baseline", "ours")
        for kind in pair:
            (ours if kind == "ours" else base).append(spawn(kind, path))
    seconds = statistics.median(x["seconds"] for x in ours)
    baseline = statistics.median(x["seconds"] for x in base)
    rss = max(x["rss_mb"] for x in ours)
    base_rss = max(x["rss_mb"] for x in base)
    return {
        "op": "ingest",
        "rows": rows,
        "blocks": blocks,
        "order": order,
        "rounds": rounds,
        "seconds": round(seconds, 3),
        "baseline_seconds": round(baseline, 3),
        "ratio": round(seconds / baseline, 3),
        "rows_per_s": round(rows / seconds),
        "rss_mb": round(rss, 1),
        "baseline_rss_mb": round(base_rss, 1),
        "rss_ratio": round(rss / base_rss, 3),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 8 blocks, 1 round")
    parser.add_argument("--rows", default="1000000,10000000", help="comma-separated sizes")
    parser.add_argument("--blocks", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--order", choices=("shuffled", "sorted"), default="shuffled")
    parser.add_argument("--child", choices=("ours", "baseline"), help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.input)
        return
    if args.quick:
        sizes, blocks, rounds = [20_000], 8, 1
    else:
        sizes = [int(s) for s in args.rows.split(",")]
        blocks, rounds = args.blocks, args.rounds
    for rows in sizes:
        print(json.dumps(bench(rows, blocks, rounds, args.order)), flush=True)


if __name__ == "__main__":
    main()

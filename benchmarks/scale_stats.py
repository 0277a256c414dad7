"""DP statistics at scale: the query engine against DuckDB on the same part files.

For each size (rows), a stream of daily blocks (``--blocks`` days, 6 columns) is generated once
into a cache folder ($BLOCKBUDGET_BENCH_CACHE, default ~/.cache/blockbudget-bench) and ingested
through :class:`~blockbudget.platform.Platform`. Then each DP statistic (count, sum, mean,
variance, quantiles, histogram, a filtered count and a grouped mean) runs over every block with
:func:`blockbudget.query.run` — check, reserve, engine aggregate, durable charge, secure noise —
and its baseline, DuckDB running the same non-private aggregate directly on the same part files,
runs right next to it. Every measurement is a fresh subprocess (so each has its own peak RSS:
``ru_maxrss`` of that child from ``os.wait4``, the per-child form of
``getrusage(RUSAGE_CHILDREN)``, which would report the maximum over all children so far); the
order of the two alternates across ``--rounds`` rounds and the medians are printed as JSON
lines::

    {"op", "rows", "blocks", "seconds", "baseline_seconds", "ratio", "rss_mb",
     "baseline_rss_mb", "rss_ratio", "engine", "rounds"}

``seconds`` is the median wall time of three warm runs in the child (after one untimed warm-up
run): for the DP side :func:`blockbudget.query.run` on an open platform — block selection,
reservation, sealing, the engine's aggregate, the durable charge, noise and the release of what
was not spent; for the baseline the SQL statement on an open DuckDB connection. Peak RSS is the
child's whole life.

    python benchmarks/scale_stats.py                       # 1M, 10M and 100M rows, 3 rounds
    python benchmarks/scale_stats.py --rows 10000000       # one size
    python benchmarks/scale_stats.py --quick               # a tiny size (run by the tests)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STREAM = "events"
CONTEXT = "bench"
LOWER, UPPER = -50.0, 150.0
REGIONS = ["north", "south", "east", "west"]
CATEGORIES = [f"c{i}" for i in range(8)]
#: Timed runs per measurement (after one untimed warm-up run).
REPEATS = 3
OPS = ("count", "sum", "mean", "variance", "quantiles", "histogram", "filtered", "grouped")


def cache_root() -> Path:
    default = Path.home() / ".cache" / "blockbudget-bench"
    return Path(os.environ.get("BLOCKBUDGET_BENCH_CACHE", default))


def home_for(rows: int, blocks: int) -> Path:
    return cache_root() / f"scale-stats-{rows}-{blocks}"


def generate(home: Path, *, rows: int, blocks: int) -> None:
    """Ingest ``rows`` rows over ``blocks`` days into a platform in ``home`` (once: a
    ``complete`` marker is written last, so an interrupted generation starts again)."""
    import shutil

    import numpy as np
    import pyarrow as pa

    from blockbudget.budget import Budget
    from blockbudget.platform import Platform
    from blockbudget.store import Blocking

    if (home / "complete").exists():
        return
    shutil.rmtree(home, ignore_errors=True)
    platform = Platform(home)
    try:
        platform.create_stream(
            STREAM, policy=Budget(epsilon=1e9), blocking=Blocking.by_time("time")
        )
        platform.add_context(CONTEXT)
        rng = np.random.default_rng(2026)
        start = np.datetime64("2024-01-01T00:00:00", "us")
        per_day = rows // blocks
        for day in range(blocks):
            n = per_day + (rows - per_day * blocks if day == blocks - 1 else 0)
            offsets = np.sort(rng.integers(0, 86_400_000_000, n)).astype("timedelta64[us]")
            table = pa.table(
                {
                    "time": pa.array(start + np.timedelta64(day, "D") + offsets),
                    "value": rng.normal(40.0, 30.0, n),
                    "amount": rng.lognormal(3.0, 1.0, n),
                    "category": pa.array(np.array(CATEGORIES)[rng.integers(0, 8, n)]),
                    "region": pa.array(np.array(REGIONS)[rng.integers(0, 4, n)]),
                    "flag": rng.integers(0, 10, n),
                }
            )
            platform.ingest(STREAM, table)
    finally:
        platform.close()
    (home / "complete").write_text(json.dumps({"rows": rows, "blocks": blocks}))


def dp_query(op: str) -> Any:
    """The DP query of ``op``."""
    from blockbudget.query import Query

    bounds = {"lower": LOWER, "upper": UPPER}
    eps = 1.0
    queries = {
        "count": lambda: Query.count(epsilon=eps),
        "sum": lambda: Query.sum("value", epsilon=eps, **bounds),
        "mean": lambda: Query.mean("value", epsilon=eps, **bounds),
        "variance": lambda: Query.variance("value", epsilon=eps, **bounds),
        "quantiles": lambda: Query.quantiles(
            "value", [0.25, 0.5, 0.75], epsilon=eps, bins=200, **bounds
        ),
        "histogram": lambda: Query.histogram("category", CATEGORIES, epsilon=eps),
        "filtered": lambda: (
            Query.count(epsilon=eps).where("region", "==", "north").where("flag", "<", 3)
        ),
        "grouped": lambda: Query.mean("value", epsilon=eps, **bounds).group_by("region", REGIONS),
    }
    return queries[op]()


def baseline_sql(op: str) -> str:
    """DuckDB's non-private version of ``op`` over ``t`` (the same part files)."""
    clip = f"least(greatest(value, {LOWER}), {UPPER})"
    return {
        "count": "SELECT count(*) FROM t",
        "sum": f"SELECT sum({clip}) FROM t WHERE value IS NOT NULL",
        "mean": f"SELECT avg({clip}) FROM t WHERE value IS NOT NULL",
        "variance": f"SELECT var_pop({clip}) FROM t WHERE value IS NOT NULL",
        "quantiles": f"SELECT quantile_cont({clip}, [0.25, 0.5, 0.75]) FROM t",
        "histogram": "SELECT category, count(*) FROM t GROUP BY category",
        "filtered": "SELECT count(*) FROM t WHERE region = 'north' AND flag < 3",
        "grouped": f"SELECT region, avg({clip}) FROM t WHERE value IS NOT NULL GROUP BY region",
    }[op]


def measure(kind: str, op: str, home: Path, engine: str | None) -> dict[str, Any]:
    """One measurement, in this (child) process: the median of ``REPEATS`` warm runs after one
    untimed warm-up run (a server answers from a warm process; the first run of a process also
    pays for imports, compiled statements and opening DuckDB, which are not per query)."""
    from blockbudget.platform import Last, Platform

    times: list[float] = []
    if kind == "dp":
        from blockbudget.query import run

        query = dp_query(op)
        platform = Platform(home) if engine is None else Platform(home, engine=engine)
        n = len(platform.store.blocks(STREAM))
        for i in range(REPEATS + 1):
            t0 = time.perf_counter()
            result = run(platform, STREAM, query, blocks=Last(n), context=CONTEXT)
            _ = result.value
            if i:
                times.append(time.perf_counter() - t0)
        platform.close()
        return {"seconds": statistics.median(times)}
    import duckdb

    platform = Platform(home)
    ids = [m.block_id for m in platform.store.blocks(STREAM)]
    paths = platform.store.source(ids).full_paths()
    platform.close()
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet({paths!r})")
    for i in range(REPEATS + 1):
        t0 = time.perf_counter()
        con.execute(baseline_sql(op)).fetchall()
        if i:
            times.append(time.perf_counter() - t0)
    con.close()
    return {"seconds": statistics.median(times)}


def child(kind: str, op: str, home: Path, engine: str | None) -> tuple[float, float]:
    """Run one measurement in a fresh subprocess: (seconds, peak RSS in MiB)."""
    argv = [sys.executable, __file__, "--measure", kind, "--op", op, "--home", str(home)]
    if engine:
        argv += ["--engine", engine]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} {op} failed (exit {proc.returncode})")
    seconds = float(json.loads(out.strip().splitlines()[-1])["seconds"])
    return seconds, usage.ru_maxrss / 1024.0  # Linux: KiB


def bench(rows: int, blocks: int, *, rounds: int, ops: list[str], engine: str | None) -> None:
    home = home_for(rows, blocks)
    generate(home, rows=rows, blocks=blocks)
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(rounds):
        for op in ops:
            order = ("dp", "baseline") if (r % 2 == 0) else ("baseline", "dp")
            for kind in order:
                samples.setdefault((op, kind), []).append(child(kind, op, home, engine))
    for op in ops:
        dp, base = samples[(op, "dp")], samples[(op, "baseline")]
        sec = statistics.median(s for s, _ in dp)
        bsec = statistics.median(s for s, _ in base)
        rss = statistics.median(m for _, m in dp)
        brss = statistics.median(m for _, m in base)
        line = {
            "op": op,
            "rows": rows,
            "blocks": blocks,
            "seconds": round(sec, 6),
            "baseline_seconds": round(bsec, 6),
            "ratio": round(sec / bsec, 3),
            "rss_mb": round(rss, 1),
            "baseline_rss_mb": round(brss, 1),
            "rss_ratio": round(rss / brss, 3),
            "engine": engine or "default",
            "rounds": rounds,
        }
        print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000,100000000", help="comma-separated")
    parser.add_argument("--blocks", type=int, default=40, help="daily blocks per stream")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {OPS}")
    parser.add_argument("--engine", default=None, help="the platform's engine (default: its own)")
    parser.add_argument("--quick", action="store_true", help="20k rows, 4 blocks, 1 round")
    parser.add_argument("--measure", choices=("dp", "baseline"), help=argparse.SUPPRESS)
    parser.add_argument("--op", choices=OPS, help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.op, args.home, args.engine)), flush=True)
        return
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        parser.error(f"unknown ops {unknown}; known: {list(OPS)}")
    if args.quick:
        bench(20_000, 4, rounds=1, ops=ops, engine=args.engine)
        return
    for rows in (int(r) for r in args.rows.split(",")):
        bench(rows, args.blocks, rounds=args.rounds, ops=ops, engine=args.engine)


if __name__ == "__main__":
    main()

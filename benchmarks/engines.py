"""Engines: a DP statistic against DuckDB's plain aggregate over the same Parquet files.

Data (generated once under ``--dir``): F part files × R rows × 6 columns (``user`` int64,
``g`` a 4-value string, ``n`` int64, ``x``, ``y``, ``z`` float64 with 1% NaN and 1% null in
``x``), one block per 10 files, 50 rows per user on average.

Each case runs in its own subprocess (time and peak RSS via ``getrusage(RUSAGE_CHILDREN)``):

* ``raw_duckdb`` — ``SELECT count(*), sum(x) FROM read_parquet([...])``: no privacy (the
  reference of every ratio); ``raw_duckdb_clipped`` adds the clipping (``least/greatest``) and
  ``raw_duckdb_grouped`` a ``GROUP BY g``, still in floating point and without NaN handling;
* ``dp_<engine>`` — the DP mean's work: an engine computes count and a clipped fixed-point sum of
  ``x`` (``FixedPoint(-4, 4)``) over the same files, then two Laplace draws (OpenDP's sampler);
* ``agg_<engine>`` — the engine's aggregate alone (no noise: OpenDP's native library, loaded
  by the noise sampler, adds about 100 MB to a process);
* ``dp_<engine>_user`` — the same on a user-level source (``rows_per_user`` = 2), i.e. with
  contribution bounding (DuckDB: a ``row_number()`` window);
* ``dp_<engine>_grouped`` — the same grouped by ``g`` (declared domain of 3 of the 4 values).

Each line reports ``seconds`` and ``cpu_s`` (best of ``--repeat`` runs inside the subprocess, after
one warm-up run; CPU time sums all threads, a steadier figure on a shared machine),
``peak_rss_mb`` (the case's process; for Ray the driver only) and ``ratio_*`` against
``raw_duckdb``.

Usage: ``python benchmarks/engines.py [--quick] [--dir D] [--files F] [--rows R]
[--engines duckdb,arrow,ray]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def generate(root: Path, files: int, rows: int) -> None:
    """Write the part files once (skipped when a complete set is there)."""
    marker = root / f"done-{files}x{rows}"
    if marker.exists():
        return
    rng = np.random.default_rng(12)
    users_per_file = max(1, rows // 50)
    for i in range(files):
        x = rng.normal(0.5, 2.0, rows)
        x[rng.random(rows) < 0.01] = np.nan
        table = pa.table(
            {
                "user": pa.array(rng.integers(0, users_per_file, rows) + (i // 10) * 10**9),
                "g": pa.array(rng.choice(["a", "b", "c", "d"], rows)),
                "n": pa.array(rng.integers(0, 1000, rows)),
                "x": pa.array(x, mask=rng.random(rows) < 0.01),
                "y": pa.array(rng.random(rows)),
                "z": pa.array(rng.random(rows)),
            }
        )
        (root / f"b{i // 10}").mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / f"b{i // 10}" / f"part-{i % 10}.parquet")
    marker.touch()


def _source(root: Path, files: int, rows: int, user: bool) -> object:
    from blockbudget.engine import BlockFiles, ScanSource

    blocks = []
    for b in range((files + 9) // 10):
        paths = tuple(f"b{b}/part-{i}.parquet" for i in range(min(10, files - 10 * b)))
        blocks.append(BlockFiles(f"s/{b}", paths, rows * len(paths)))
    return ScanSource(
        blocks=tuple(blocks),
        base=str(root),
        columns=("user", "g", "n", "x", "y", "z"),
        uri=str(root),
        user_column="user" if user else None,
        rows_per_user=2 if user else None,
    )


#: The non-private baselines: plain DuckDB over the same files.
RAW = {
    "raw_duckdb": "SELECT count(*), sum(x) FROM read_parquet($f)",
    "raw_duckdb_clipped": (
        "SELECT count(x), sum(least(greatest(x, -4.0), 4.0)) FROM read_parquet($f)"
    ),
    "raw_duckdb_grouped": "SELECT g, count(*), sum(x) FROM read_parquet($f) GROUP BY g",
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_case(case: str, root: Path, files: int, rows: int, repeat: int) -> tuple[float, float, int]:
    """One case, in this process: the best wall time, the best CPU time (all threads) and, for
    a DP case, the exact sum of the fixed-point units (equal across engines)."""
    best, best_cpu = float("inf"), float("inf")
    if case in RAW:
        import duckdb

        con = duckdb.connect()
        paths = _source(root, files, rows, False).full_paths()  # type: ignore[attr-defined]
        for _ in range(repeat + 1):
            start, cpu = time.perf_counter(), _cpu()
            con.execute(RAW[case], {"f": paths}).fetchall()
            best = min(best, time.perf_counter() - start)
            best_cpu = min(best_cpu, _cpu() - cpu)
        return best, best_cpu, 0
    from blockbudget.engine import AggKind, Aggregate, FixedPoint, GroupKey, Plan, get_engine

    noisy = case.startswith("dp_")
    engine_name, _, variant = case.removeprefix("dp_").removeprefix("agg_").partition("_")
    engine = get_engine(engine_name)
    source = _source(root, files, rows, variant == "user")
    fixed = FixedPoint(-4.0, 4.0)
    plan = Plan(
        source,  # type: ignore[arg-type]
        (Aggregate("n", AggKind.COUNT, "x"), Aggregate("s", AggKind.SUM, "x", fixed=fixed)),
        group_by=(GroupKey("g", ("a", "b", "c")),) if variant == "grouped" else (),
    )
    if noisy:
        from blockbudget.mechanisms.noise import SecureNoise

        noise = SecureNoise()
    for _ in range(repeat + 1):
        start, cpu = time.perf_counter(), _cpu()
        parts = engine.aggregate(plan)
        if noisy:
            counts = np.array(parts.of("n"), dtype=np.float64)
            sums = np.array([fixed.decode(v) for v in parts.of("s")])
            noise.add_laplace(counts, scale=1.0)
            noise.add_laplace(sums, scale=8.0)
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, _cpu() - cpu)
    engine.close()
    return best, best_cpu, sum(parts.of("s"))


def measure(case: str, args: argparse.Namespace) -> dict[str, float]:
    """Run one case in a fresh subprocess (through a wrapper process, so that
    ``RUSAGE_CHILDREN`` holds that one child only); its time and peak RSS."""
    cmd = [sys.executable, __file__, "--wrap", case, "--dir", str(args.dir)]
    cmd += ["--files", str(args.files), "--rows", str(args.rows), "--repeat", str(args.repeat)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def wrap(case: str, args: argparse.Namespace) -> None:
    """Run ``case`` as this process's only child and print its time and peak RSS."""
    cmd = [sys.executable, __file__, "--case", case, "--dir", str(args.dir)]
    cmd += ["--files", str(args.files), "--rows", str(args.rows), "--repeat", str(args.repeat)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    seconds, cpu, units = json.loads(out.stdout.strip().splitlines()[-1])
    line = {"seconds": round(seconds, 4), "cpu_s": round(cpu, 4), "peak_rss_mb": peak_kb // 1024}
    if units:
        line["sum_units"] = units
    print(json.dumps(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 files x 20k rows, one repeat")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/blockbudget-engines-bench"))
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engines", default="duckdb,arrow")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--wrap", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.files, args.rows, args.repeat = 2, 20_000, 1
    root = args.dir / f"{args.files}x{args.rows}"
    if args.wrap:
        wrap(args.wrap, args)
        return
    if args.case:
        print(json.dumps(run_case(args.case, root, args.files, args.rows, args.repeat)))
        return
    root.mkdir(parents=True, exist_ok=True)
    generate(root, args.files, args.rows)
    cases = list(RAW)
    for engine in args.engines.split(","):
        cases += [f"agg_{engine}", f"dp_{engine}", f"dp_{engine}_grouped", f"dp_{engine}_user"]
    env = {"python": platform.python_version(), "cpus": os.cpu_count()}
    raw: dict[str, float] | None = None
    for case in cases:
        line = measure(case, args)
        ratios = {}
        if raw is None:
            raw = line
        else:
            for key in ("seconds", "cpu_s", "peak_rss_mb"):
                ratios[f"ratio_{key}"] = round(line[key] / max(raw[key], 1e-9), 2)
        rows = args.files * args.rows
        print(json.dumps({"bench": "engines", "case": case, "rows": rows, **line, **ratios, **env}))


if __name__ == "__main__":
    main()

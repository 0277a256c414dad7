"""Data at a platform's scale: every figure of issue "data at a real platform's scale" in one run.

Runs three parts, each a script of its own that prints JSON lines, and passes their lines through:

* ``scale_ingest.py`` — ``{"op": "ingest", "rows", "blocks", "seconds", "baseline_seconds",
  "ratio", "rss_mb", "baseline_rss_mb", "rss_ratio"}``: blockbudget's streaming ingest against
  pyarrow writing the same per-block Parquet files from the same input;
* ``scale_stats.py`` — the same keys for every DP statistic (``op`` = its name) against DuckDB
  running the same non-private aggregate directly on the same part files;
* ``scale_request.py`` — ``{"op": "request", "stream_blocks", "cpu_ms"}`` (and ``retire`` and
  ``verify`` lines): the cost of a request as the stream grows to 100k blocks.

Every ratio is against a baseline measured in the same run, interleaved over rounds, each
measurement in a fresh process so that peak memory (``ru_maxrss``) is its own.

Usage: ``python benchmarks/scale.py [--quick] [--rows 1000000,10000000,100000000]``; data is
generated once into ``$BLOCKBUDGET_BENCH_CACHE`` (default ``~/.cache/blockbudget-bench``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = ("scale_ingest.py", "scale_stats.py", "scale_request.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the tests")
    parser.add_argument("--rows", default=None, help="comma-separated row counts (ingest, stats)")
    parser.add_argument("--parts", default=",".join(PARTS), help="which part scripts to run")
    args = parser.parse_args(argv)
    for part in args.parts.split(","):
        cmd = [sys.executable, str(HERE / part)]
        if args.quick:
            cmd.append("--quick")
        if args.rows and part != "scale_request.py":
            cmd += ["--rows", args.rows]
        done = subprocess.run(cmd, check=False, stdout=sys.stdout, stderr=sys.stderr)
        if done.returncode != 0:
            print(f"{part} failed with exit code {done.returncode}", file=sys.stderr)
            return done.returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the audit log's high-water mark costs a query: the same platform work with the mark off,
advanced after every commit (the default), and batched.

The mark (``blockbudget.store.rollback``) is a small file written beside the block files after
every write that appends audit events, before the write's answer is handed out: locally a temp
file, ``fsync``, ``rename`` and a directory ``fsync``; on an object store one PUT. This
benchmark measures what that adds to

* ``query`` — a DP count over the newest block through :func:`blockbudget.query.run` (reserve,
  seal, read the block's part file with the engine, draw: two ledger commits, two marks), and
* ``charge`` — a direct one-block charge (one ledger commit, one mark): the worst case, where
  the mark's cost is compared with a bare durable commit.

For each policy in ``--policies`` (``;``-separated, default ``off;charge;commit;100``: no mark;
the default — after every charge, the rest within about a second; after every commit; every 100
events) one platform is built with the same stream and data, on its own SQLite file and data
root. Each round runs every policy's ``--ops`` operations back to back, rotating which goes
first, so all see the same state of a shared, noisy machine. Prints one JSON line per (round,
policy, op)

    {"bench": "watermark_round", "round", "op", "policy", "ops", "median_ms", "mean_ms"}

and one per (policy, op) with the medians over rounds and the paired ratio to ``off``

    {"bench": "watermark", "op", "policy", "median_ms", "ratio", "ratio_min", "ratio_max",
     "marks_written", "data_root", "rounds", "quick", "nproc", "python"}

(``ratio`` is the median over rounds of median_ms(policy) / median_ms(off) in the same round;
``marks_written`` counts the mark files the policy's platform wrote in the whole run).

Usage: ``python benchmarks/watermark.py [--quick] [--rounds R] [--ops K] [--dir DIR]
[--data-root URI]`` (``--data-root s3://bucket/prefix?endpoint_override=…`` measures an object
store: each policy gets its own prefix under it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from blockbudget import Budget
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, run
from blockbudget.store import Blocking


def build(home: Path, data_root: str | None, policy: str) -> Platform:
    p = Platform(home, data_root=data_root, engine="arrow", mark_every=policy)
    p.add_context("bench")
    p.create_stream("s", policy=Budget(epsilon=1_000_000), blocking=Blocking.by_time("t"))
    n = 2_000
    p.ingest(
        "s",
        pd.DataFrame(
            {
                "t": pd.Timestamp("2024-01-01") + pd.to_timedelta(range(n), unit="min"),
                "v": [float(i % 97) for i in range(n)],
            }
        ),
    )
    return p


def timed(fn: Callable[[], object], k: int) -> list[float]:
    out = []
    for _ in range(k):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--ops", type=int, default=100)
    ap.add_argument("--policies", default="off;charge;commit;100")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.ops = 2, 10
    policies = [x.strip() for x in args.policies.split(";") if x.strip()]
    if "off" not in policies:
        policies.insert(0, "off")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        bench(
            Path(tmp), args.data_root, policies, rounds=args.rounds, ops=args.ops, quick=args.quick
        )


def bench(
    tmp: Path, data_root: str | None, policies: list[str], *, rounds: int, ops: int, quick: bool
) -> None:
    platforms: dict[str, Platform] = {}
    for policy in policies:
        root = None
        if data_root is not None:
            base, _, query = data_root.partition("?")
            root = f"{base.rstrip('/')}/{uuid.uuid4().hex[:8]}" + (f"?{query}" if query else "")
        platforms[policy] = build(tmp / f"home-{len(platforms)}", root, policy)
    q = Query.count(epsilon=0.001)
    block = platforms[policies[0]].store.blocks("s")[-1].block_id

    def op_query(p: Platform) -> Callable[[], object]:
        return lambda: run(p, "s", q, blocks=Last(1), context="bench")

    def op_charge(p: Platform) -> Callable[[], object]:
        return lambda: p.charge([block], Budget(epsilon="0.001"), context="bench")

    ops_of = {"query": op_query, "charge": op_charge}
    medians: dict[tuple[str, str], list[float]] = {}
    try:
        for p in platforms.values():  # warm up: engine, caches, first mark
            for make in ops_of.values():
                timed(make(p), 3)
        for r in range(rounds):
            order = policies[r % len(policies) :] + policies[: r % len(policies)]
            for op, make in ops_of.items():
                for policy in order:
                    ms = timed(make(platforms[policy]), ops)
                    med = statistics.median(ms)
                    medians.setdefault((op, policy), []).append(med)
                    emit(
                        {
                            "bench": "watermark_round",
                            "round": r,
                            "op": op,
                            "policy": policy,
                            "ops": ops,
                            "median_ms": round(med, 4),
                            "mean_ms": round(statistics.fmean(ms), 4),
                        }
                    )
        for op in ops_of:
            base = medians[(op, "off")]
            for policy in policies:
                mine = medians[(op, policy)]
                ratios = [m / b for m, b in zip(mine, base, strict=True)]
                guard = platforms[policy].watermark
                emit(
                    {
                        "bench": "watermark",
                        "op": op,
                        "policy": policy,
                        "median_ms": round(statistics.median(mine), 4),
                        "ratio": round(statistics.median(ratios), 4),
                        "ratio_min": round(min(ratios), 4),
                        "ratio_max": round(max(ratios), 4),
                        "marks_written": 0 if guard is None else marks_written(guard),
                        "data_root": "s3" if data_root else "local",
                        "rounds": rounds,
                        "quick": quick,
                        "nproc": os.cpu_count(),
                        "python": host.python_version(),
                    }
                )
    finally:
        for p in platforms.values():
            p.close()


def marks_written(guard: Any) -> int:
    return int(getattr(guard, "_writes", 0))


def emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

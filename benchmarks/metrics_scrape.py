"""What a ``GET /metrics`` scrape costs as the ledger's history grows.

A ledger gets ``--blocks`` blocks over 4 streams and 3 contexts; then, in ``--steps`` rounds, each
round appends ``--events`` more charges (1-4 random live blocks each, tiny ε) and retires a tenth
of the blocks that were live, adding as many fresh ones (so the live set stays the same size
while the retired blocks and the audit log grow). After each round it measures, as JSON lines
``{"bench": "metrics_scrape", "round", "events", "live_blocks", "retired_blocks", "contexts",
"first_s", "idle_s", "incremental_s", "http_s", "http_bytes"}``:

* ``first_s`` — a process's first scrape of the ledger numbers (reads the tables: one pass over
  the live blocks and their budget rows, the event counts grouped by kind and context);
* ``idle_s`` — a scrape with nothing new (reads the audit tip only);
* ``incremental_s`` — a scrape after 10 new charges (reads those 10 events and the rows of the
  blocks they touched, then aggregates the live blocks);
* ``http_s``/``http_bytes`` — a whole ``GET /metrics`` through the app (admin key; after 10 new
  charges), the exposition included.

Each figure is the median of 5 runs. The ledger lives on ``--dir`` (default: a tmpfs folder when
there is one, since the benchmark measures reads, not the writes that build the history).

    python benchmarks/metrics_scrape.py                  # 4000 live blocks, 4 × 25000 events
    python benchmarks/metrics_scrape.py --quick          # tiny (run by the tests)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

STREAMS = ("s0", "s1", "s2", "s3")
CONTEXTS = ("ads", "research", "finance")
RUNS = 5


def median_seconds(fn: Callable[[], object], before: Callable[[], object] | None = None) -> float:
    times = []
    for _ in range(RUNS):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--blocks", type=int, default=4000)
    p.add_argument("--events", type=int, default=25_000, help="charges added per round")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--dir", type=Path, default=None)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.blocks, args.events, args.steps = 40, 150, 2
    shm = Path("/dev/shm")
    parent = args.dir or (shm if shm.is_dir() else None)
    with tempfile.TemporaryDirectory(dir=parent) as tmp:
        run(Path(tmp), blocks=args.blocks, events=args.events, steps=args.steps)


def run(home: Path, *, blocks: int, events: int, steps: int) -> None:
    from fastapi.testclient import TestClient

    from blockbudget.accounting import Accounting
    from blockbudget.budget import Budget
    from blockbudget.platform import Platform
    from blockbudget.service import create_app
    from blockbudget.service.auth import KeyStore, Role
    from blockbudget.service.metrics_db import BudgetTracker
    from blockbudget.service.request_log import configure_request_log

    rng = random.Random(14)
    platform = Platform(home)
    ledger = platform.ledger
    for c in CONTEXTS:
        ledger.add_context(c)
    live: list[str] = []
    serial = 0

    def add(n: int) -> None:
        nonlocal serial
        for stream in STREAMS:
            ids = [f"{stream}/{serial + i}" for i in range(n // len(STREAMS))]
            ledger.add_blocks(
                ids, stream=stream, capacity=Budget(epsilon=1000), accounting=Accounting.BASIC
            )
            live.extend(ids)
        serial += n

    def charge(n: int) -> None:
        for _ in range(n):
            stream = rng.choice(STREAMS)
            mine = [b for b in rng.sample(live, k=min(len(live), 16)) if b.startswith(stream)]
            if mine:
                chosen = mine[: rng.randint(1, 4)]
                ledger.charge(chosen, Budget(epsilon=0.01), context=rng.choice(CONTEXTS))

    add(blocks)
    keys = KeyStore(ledger.engine)
    keys.add_principal("root", Role.ADMIN)
    headers = {"Authorization": f"Bearer {keys.create_key('root')}"}
    configure_request_log("off")  # the app keeps it so
    app = create_app(platform, keys=keys, pump_seconds=3600)
    total = 0
    with TestClient(app) as http:
        for step in range(1, steps + 1):
            charge(events)
            total += events
            gone = rng.sample(live, k=len(live) // 10)
            ledger.retire(gone)
            dead = set(gone)
            live[:] = [b for b in live if b not in dead]
            add(len(gone))
            warm = BudgetTracker(ledger.engine)
            warm.snapshot()
            first = median_seconds(lambda: BudgetTracker(ledger.engine).snapshot())
            idle = median_seconds(warm.snapshot)
            incremental = median_seconds(warm.snapshot, before=lambda: charge(10))
            http_s = median_seconds(
                lambda: http.get("/metrics", headers=headers), before=lambda: charge(10)
            )
            body = http.get("/metrics", headers=headers)
            snap = warm.snapshot()
            retired = sum(n for (_, status), n in snap.blocks.items() if status == "retired")
            line = {
                "bench": "metrics_scrape",
                "round": step,
                "events": snap.seq,
                "live_blocks": len(live),
                "retired_blocks": retired,
                "contexts": len(CONTEXTS),
                "first_s": round(first, 5),
                "idle_s": round(idle, 6),
                "incremental_s": round(incremental, 5),
                "http_s": round(http_s, 5),
                "http_bytes": len(body.content),
            }
            print(json.dumps(line, sort_keys=True), flush=True)
    platform.close()


if __name__ == "__main__":
    main()

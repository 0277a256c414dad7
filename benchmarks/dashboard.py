"""The dashboard's history read as unrelated history grows: one watched stream (8 blocks, 64
charges) beside another stream whose charges pile up. For each size of the other stream's
history, prints a JSON line with the time to read the watched stream's events through the
per-stream index (:mod:`blockbudget.service.dashboard_index`) and replay them into the heatmap
and series, the time the same took by scanning the whole audit log (what the dashboard did
before), and the index's catch-up time for the events appended since the previous size (each
event is indexed once). The index read must stay flat while the full scan grows.

    PYTHONPATH=src python benchmarks/dashboard.py [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from blockbudget.accounting import Accounting, make_filter
from blockbudget.budget import Budget
from blockbudget.ledger import Ledger
from blockbudget.service.dashboard import heatmap
from blockbudget.service.dashboard_index import StreamEventIndex

WATCHED_BLOCKS = 8
WATCHED_CHARGES = 64
CAPACITY = Budget(epsilon=1_000_000)


def timed(fn: object, reps: int) -> tuple[float, object]:
    """The median wall time of ``reps`` calls of ``fn`` in ms, and its last result."""
    times, out = [], None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()  # type: ignore[operator]
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def run(folder: Path, sizes: list[int], reps: int) -> list[dict[str, object]]:
    ledger = Ledger(f"sqlite:///{folder / 'ledger.db'}")
    ledger.add_context("team")
    watched = [f"watched/b{i}" for i in range(WATCHED_BLOCKS)]
    other = [f"other/b{i}" for i in range(16)]
    ledger.add_blocks(watched, stream="watched", capacity=CAPACITY, accounting=Accounting.BASIC)
    ledger.add_blocks(other, stream="other", capacity=CAPACITY, accounting=Accounting.BASIC)
    for i in range(WATCHED_CHARGES):
        ledger.charge([watched[i % WATCHED_BLOCKS]], Budget(epsilon="0.5"), context="team")
    filter_ = make_filter(Accounting.BASIC, capacity=CAPACITY)
    index = StreamEventIndex(ledger.engine)
    out: list[dict[str, object]] = []
    appended = 0
    for size in sizes:
        while appended < size:
            ledger.charge([other[appended % len(other)]], Budget(epsilon="0.001"), context="team")
            appended += 1
        t = time.perf_counter()
        index.catch_up()
        catch_up_ms = (time.perf_counter() - t) * 1000

        def indexed() -> int:
            events = index.events("watched")
            heatmap(events, blocks=watched, contexts=["team"], filter_=filter_)
            return len(events)

        def scanned() -> int:
            events = [e for e in ledger.events() if _watched(e.payload)]
            heatmap(events, blocks=watched, contexts=["team"], filter_=filter_)
            return len(events)

        index_ms, read = timed(indexed, reps)
        scan_ms, scanned_read = timed(scanned, reps)
        assert read == scanned_read, (read, scanned_read)
        out.append(
            {
                "bench": "dashboard_history",
                "unrelated_events": size,
                "watched_events": read,
                "log_events": len(ledger.events()),
                "index_ms": round(index_ms, 3),
                "full_scan_ms": round(scan_ms, 3),
                "catch_up_ms": round(catch_up_ms, 3),
            }
        )
        print(json.dumps(out[-1], sort_keys=True), flush=True)
    ledger.dispose()
    return out


def _watched(payload: dict[str, object]) -> bool:
    if payload.get("stream") == "watched":
        return True
    named = payload.get("blocks")
    return isinstance(named, list) and any(str(b).startswith("watched/") for b in named)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a test runs this)")
    parser.add_argument("--dir", type=Path, default=None, help="scratch folder (default: temp)")
    args = parser.parse_args()
    sizes = [0, 200, 800] if args.quick else [0, 2_000, 8_000, 32_000]
    reps = 3 if args.quick else 7
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        rows = run(Path(scratch), sizes, reps)
    first, last = rows[0], rows[-1]
    print(
        json.dumps(
            {
                "bench": "summary",
                "quick": args.quick,
                "python": sys.version.split()[0],
                "machine": platform.machine(),
                "index_ms_growth": round(float(last["index_ms"]) / float(first["index_ms"]), 3),  # type: ignore[arg-type]
                "full_scan_ms_growth": round(
                    float(last["full_scan_ms"]) / float(first["full_scan_ms"]),  # type: ignore[arg-type]
                    3,
                ),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()

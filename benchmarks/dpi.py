"""DPI: time per slot against the domain size (100 → 100,000), with a baseline from the same run.

For each domain size k, a DPI stream (seeded selector, Dirichlet pool N = 1,000, p = 0.02, the
standard query pool: k point queries + dyadic ranges, replay 32) processes S slots of synthetic
per-item counts (one user per record, 10·k records per slot). Reported per k:

* ``dpi_slot_ms`` — the median wall time of one ``DPIStream.step_counts`` call (seeded numpy
  selection; a ``dpi_slot_secure`` line repeats it with the default OpenDP selector);
* ``baseline_ms`` — the same slot's unavoidable linear work measured in the same run: building the
  compressed PDF and answering every query of the pool once (``QueryPool.answers``), no privacy;
* ``ratio`` = dpi_slot_ms / baseline_ms, and ``slots_per_s`` = 1000 / dpi_slot_ms.

``histogram_slot`` lines give the same for every histogram mode (``HistogramStream``: windowed
Laplace, windowed Gaussian, per-slot Laplace; docs/streaming.md) at each k, with seeded noise and
with OpenDP's secure samplers: ``slots_per_s`` = slots / total wall time over a run of
``--hist-slots`` slots (so a windowed mode's occasional releases are amortised, warm-up included),
and ``release_ms``, the median time of a slot that releases (the noise of all k bins).

A final ``summary`` line fits log(time) against log(k) (slope 1 = linear in the domain).

Usage: ``python benchmarks/dpi.py [--quick] [--slots S] [--sizes 100,1000,...] [--hist-slots H]``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time

import numpy as np

from blockbudget.mechanisms.noise import NoiseKind
from blockbudget.streaming import (
    Compression,
    DPIConfig,
    DPIStream,
    HistogramConfig,
    HistogramStream,
    QueryPool,
    ReleaseMode,
    SeededSelector,
    SynopsisPool,
)

HIST_MODES = (
    ("windowed", ReleaseMode.WINDOWED, NoiseKind.LAPLACE),
    ("windowed-gaussian", ReleaseMode.WINDOWED, NoiseKind.GAUSSIAN),
    ("per-slot", ReleaseMode.PER_SLOT, NoiseKind.LAPLACE),
)


def bench_histogram(
    k: int, slots: int, mode: tuple[str, ReleaseMode, NoiseKind], *, secure: bool, seed: int = 0
) -> dict[str, object]:
    """Throughput of one histogram mode over ``slots`` slots of synthetic counts."""
    name, release_mode, noise = mode
    config = HistogramConfig(
        epsilon=2.0,
        delta=1e-6 if noise is NoiseKind.GAUSSIAN else 0.0,
        mode=release_mode,
        noise=noise,
        expected_slots=max(2, slots),
    )
    stream = HistogramStream(
        config=config, compression=Compression(k, 10 * k), seed=None if secure else seed
    )
    rng = np.random.default_rng(seed)
    truth = rng.dirichlet(np.full(k, 0.5))
    data = [rng.multinomial(10 * k, truth) for _ in range(slots)]
    releases: list[float] = []
    start = time.perf_counter()
    for counts in data:
        t0 = time.perf_counter()
        out = stream.step_counts(counts)
        if out.released:
            releases.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    return {
        "kind": "histogram_slot",
        "mode": name,
        "domain": k,
        "slots": slots,
        "secure_noise": out.secure_noise,
        "releases": len(releases),
        "release_ms": round(1000 * statistics.median(releases), 3) if releases else None,
        "slots_per_s": round(slots / total, 1),
    }


def bench(k: int, slots: int, seed: int = 0, *, secure: bool = False) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    pool = SynopsisPool.generate(domain_size=k, size=1000, precision=0.02, rng=rng)
    queries = QueryPool.standard(k)
    stream = DPIStream(
        config=DPIConfig(epsilon=2.0, rate=2.0 * slots / 2.0),
        compression=Compression(k, min_users=10 * k),
        pool=pool,
        queries=queries,
        selector=None if secure else SeededSelector(np.random.default_rng(seed + 1)),
        rng=np.random.default_rng(seed + 2),
    )
    truth = rng.dirichlet(np.full(k, 0.5))
    data = [rng.multinomial(10 * k, truth) for _ in range(slots)]
    dpi_times: list[float] = []
    base_times: list[float] = []
    for counts in data:
        start = time.perf_counter()
        stream.step_counts(counts)
        dpi_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        pdf = counts / counts.sum()
        queries.answers(pdf)
        base_times.append(time.perf_counter() - start)
    dpi_ms = 1000 * statistics.median(dpi_times)
    base_ms = 1000 * statistics.median(base_times)
    return {
        "kind": "dpi_slot_secure" if secure else "dpi_slot",
        "domain": k,
        "queries": queries.size,
        "slots": slots,
        "dpi_slot_ms": round(dpi_ms, 4),
        "baseline_ms": round(base_ms, 4),
        "ratio": round(dpi_ms / base_ms, 2),
        "slots_per_s": round(1000 / dpi_ms, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few slots (tests)")
    parser.add_argument("--slots", type=int, default=None)
    parser.add_argument("--sizes", type=str, default=None)
    parser.add_argument("--hist-slots", type=int, default=None, help="slots per histogram run")
    args = parser.parse_args(argv)
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    else:
        sizes = [100, 1000] if args.quick else [100, 1000, 10_000, 100_000]
    slots = args.slots or (10 if args.quick else 200)
    rows = []
    for k in sizes:
        row = bench(k, slots)
        rows.append(row)
        print(json.dumps(row), flush=True)
        # the default (OpenDP) selector, fewer slots
        print(json.dumps(bench(k, max(5, slots // 4), secure=True)), flush=True)
        hist_slots = args.hist_slots or (40 if args.quick else 365)
        for mode in HIST_MODES:
            for secure in (False, True):
                n = hist_slots if not (secure and mode[1] is ReleaseMode.PER_SLOT) else 20
                print(json.dumps(bench_histogram(k, n, mode, secure=secure)), flush=True)
    xs = [math.log(float(r["domain"])) for r in rows]  # type: ignore[arg-type]
    ys = [math.log(float(r["dpi_slot_ms"])) for r in rows]  # type: ignore[arg-type]
    slope = float(np.polyfit(xs, ys, 1)[0]) if len(rows) > 1 else float("nan")
    print(
        json.dumps(
            {
                "kind": "summary",
                "loglog_slope": round(slope, 3),
                "python": platform.python_version(),
                "machine": platform.machine(),
                "quick": args.quick,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

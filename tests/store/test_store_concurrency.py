"""Several processes ingesting into one store with a concurrent sealer, and orphan files.

With ``BLOCKBUDGET_TEST_POSTGRES_URL`` set to a scratch database, these (and every test using
the ``db_url`` fixture) also run against PostgreSQL."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from store_helpers import part_files, sort_frame, time_spec

from blockbudget import UnknownBlockError
from blockbudget.store import BlockStore, catalog

BATCHES = 8


def _ingest_worker(db_url: str, root: str, paths: list[str], barrier: Any) -> None:
    with BlockStore(db_url, root) as store:
        barrier.wait(timeout=60)
        for path in paths:
            store.ingest("flights", path)


def _write_batches(frame: pd.DataFrame, folder: Path, worker: int) -> list[str]:
    rows = frame.iloc[worker::2].reset_index(drop=True)  # both workers hit every day
    paths = []
    for i, positions in enumerate(np.array_split(np.arange(len(rows)), BATCHES)):
        chunk = rows.iloc[positions]
        path = folder / f"w{worker}-{i}.parquet"
        pq.write_table(pa.Table.from_pandas(chunk, preserve_index=False), path)
        paths.append(str(path))
    return paths


def _run_concurrently(db_url: str, root: Path, frame: pd.DataFrame, tmp: Path) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(3)
    procs = [
        ctx.Process(
            target=_ingest_worker,
            args=(db_url, str(root), _write_batches(frame, tmp, w), barrier),
        )
        for w in (0, 1)
    ]
    for p in procs:
        p.start()
    sealed_meta = None
    with BlockStore(db_url, root) as store:
        barrier.wait(timeout=60)
        deadline = time.monotonic() + 60
        while sealed_meta is None and time.monotonic() < deadline:
            try:
                store.block("flights/2013-01-01")
            except UnknownBlockError:
                time.sleep(0.005)
                continue
            store.seal(["flights/2013-01-01"])  # races with the ingests
            sealed_meta = store.block("flights/2013-01-01")
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0, f"an ingest process failed (exit code {p.exitcode})"
    assert sealed_meta is not None
    return {"sealed": sealed_meta}


def test_two_processes_ingest_without_losing_rows(
    db_url: str, root: Path, tmp_path: Path, three_days: pd.DataFrame
) -> None:
    with BlockStore(db_url, root) as store:
        store.create_stream(time_spec())
    out = _run_concurrently(db_url, root, three_days, tmp_path)
    with BlockStore(db_url, root) as store:
        metas = store.blocks("flights")
        ids = [m.block_id for m in metas]
        got = store.read_pandas(ids)
        pd.testing.assert_frame_equal(sort_frame(got), sort_frame(three_days))
        by_day: dict[str, int] = {}
        for m in metas:
            by_day[m.key] = by_day.get(m.key, 0) + m.rows
            assert store.read(m.block_id).num_rows == m.rows
        assert by_day == {"2013-01-01": 842, "2013-01-02": 943, "2013-01-03": 914}
        # the block sealed mid-flight never changed afterwards; later rows went to #2
        assert store.block("flights/2013-01-01") == out["sealed"]
        assert {m.key for m in metas if m.seq > 1} <= {"2013-01-01"}
        # every file on disk is registered, and every registered file is on disk
        with store.engine.connect() as conn:
            registered = catalog.select_part_paths(conn)
        assert set(part_files(root)) == registered
        assert sum(m.parts for m in metas) == len(registered)
        assert store.vacuum(older_than=timedelta(0)) == []


def test_vacuum_removes_only_old_orphans(
    store: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    store.create_stream(time_spec())
    store.ingest("flights", three_days)
    orphan = root / "flights" / "2013-01-09" / "1" / "part-deadbeef.parquet"
    orphan.parent.mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), orphan)
    assert store.vacuum() == []  # too recent: may belong to an ingest in flight
    old = time.time() - 7200
    os.utime(orphan, (old, old))
    assert store.vacuum("flights") == ["flights/2013-01-09/1/part-deadbeef.parquet"]
    assert not orphan.exists() and not (root / "flights" / "2013-01-09").exists()
    assert len(part_files(root)) == 3

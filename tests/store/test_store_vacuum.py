"""Vacuum against ingests in flight: a long streaming ingest whose staged parts a vacuum
deleted must not commit them (the catalog never lists a missing file), and vacuum still removes
real orphans.

``older_than=timedelta(0)`` stands in for an ingest that runs longer than the default hour.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from store_helpers import part_files, time_spec

from blockbudget.errors import StoreConflictError
from blockbudget.store import BlockStore, catalog

SCHEMA = pa.schema([("time_hour", pa.timestamp("us")), ("x", pa.float64())])


def _day(day: int, rows: int = 100) -> pa.RecordBatch:
    return pa.record_batch(
        [pa.array([datetime(2013, 1, day)] * rows, pa.timestamp("us")), pa.array([1.0] * rows)],
        schema=SCHEMA,
    )


def test_vacuum_during_a_streaming_ingest_never_leaves_the_catalog_a_missing_file(
    store: BlockStore, root: Path
) -> None:
    store.create_stream(time_spec())
    removed: list[str] = []

    def batches() -> Iterator[pa.RecordBatch]:
        for day in (1, 2, 3):
            yield _day(day)
            if day == 2:  # days 1 and 2 are staged as part files by now
                removed.extend(store.vacuum(older_than=timedelta(0)))

    with pytest.raises(StoreConflictError, match=r"deleted before its commit.*retry"):
        store.ingest(
            "flights", pa.RecordBatchReader.from_batches(SCHEMA, batches()), buffer_bytes=0
        )
    assert len(removed) == 2  # the staged parts of days 1 and 2 (the vacuum ran first)
    # the ingest committed nothing and removed its remaining files
    assert store.blocks("flights") == []
    assert part_files(root) == []
    # a retry commits, every committed block reads, and a later vacuum keeps its files
    store.ingest("flights", pa.Table.from_batches([_day(d) for d in (1, 2, 3)]))
    metas = store.blocks("flights")
    assert [(m.key, m.rows) for m in metas] == [(f"2013-01-0{d}", 100) for d in (1, 2, 3)]
    assert all(store.read(m.block_id).num_rows == 100 for m in metas)
    assert store.vacuum(older_than=timedelta(0)) == []
    with store.engine.connect() as conn:
        assert set(part_files(root)) == catalog.select_part_paths(conn)


def test_vacuum_during_a_streaming_ingest_on_s3(s3_root: str, tmp_path: Path) -> None:
    # On an object store a part exists once its writer closes: one open writer closes day 1's
    # part when day 2 starts, and nothing (no fsync) would notice it gone before the commit.
    removed: list[str] = []
    with BlockStore(f"sqlite:///{tmp_path / 'c.db'}", s3_root) as store:
        store.create_stream(time_spec())

        def batches() -> Iterator[pa.RecordBatch]:
            for day in (1, 2, 3):
                yield _day(day)
                if day == 2:
                    removed.extend(store.vacuum(older_than=timedelta(0)))

        reader = pa.RecordBatchReader.from_batches(SCHEMA, batches())
        with pytest.raises(StoreConflictError, match="deleted before its commit"):
            store.ingest("flights", reader, buffer_bytes=0, max_open_writers=1)
        assert len(removed) == 1 and removed[0].startswith("flights/2013-01-01/1/")
        assert store.blocks("flights") == []
        assert store.vacuum(older_than=timedelta(0)) == []  # the ingest removed its files
        store.ingest("flights", pa.Table.from_batches([_day(d) for d in (1, 2, 3)]))
        assert [store.read(m.block_id).num_rows for m in store.blocks("flights")] == [100] * 3


def test_vacuum_still_removes_orphans_of_streams_and_of_no_stream(
    store: BlockStore, root: Path
) -> None:
    store.create_stream(time_spec())
    store.ingest("flights", pa.Table.from_batches([_day(1)]))
    kept = part_files(root)
    orphans = ["flights/2013-01-09/1/part-dead.parquet", "gone/2013-01-01/1/part-beef.parquet"]
    for rel in orphans:
        (root / rel).parent.mkdir(parents=True)
        pq.write_table(pa.table({"x": [1]}), root / rel)
    assert store.vacuum(older_than=timedelta(0)) == orphans
    assert part_files(root) == kept
    assert store.read(store.blocks("flights")[0].block_id).num_rows == 100

"""Streaming ingest: files and batch streams read batch by batch, bounded writers (spills),
validation of every batch before the commit, durability order, re-planning of staged files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from store_helpers import part_files, snapshot, sort_frame, time_spec

from blockbudget import DataError, InvalidRequestError
from blockbudget.store import BlockStore, LatePolicy, OnOverlap, catalog, files, inputs

DAYS = ("flights/2013-01-01", "flights/2013-01-02", "flights/2013-01-03")


def _blocks_equal(store: BlockStore, frame: pd.DataFrame) -> None:
    """Each day's block holds exactly that day's rows, in input order."""
    for block_id in DAYS:
        want = frame[frame["day"] == int(block_id[-2:])].reset_index(drop=True)
        pd.testing.assert_frame_equal(store.read_pandas([block_id]), want)


def test_parquet_file_is_read_in_batches(
    store: BlockStore, three_days: pd.DataFrame, tmp_path: Path
) -> None:
    path = tmp_path / "in.parquet"
    three_days.to_parquet(path, index=False)
    store.create_stream(time_spec())
    report = store.ingest("flights", path, batch_rows=500)  # 6 batches
    assert report.rows == 2699 and report.new_blocks == DAYS
    assert [m.parts for m in store.blocks("flights")] == [1, 1, 1]  # one part per block
    _blocks_equal(store, three_days)


def test_csv_file_is_read_in_blocks(
    store: BlockStore, three_days: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.csv"
    three_days.to_csv(path, index=False)
    monkeypatch.setattr(inputs, "CSV_BLOCK_BYTES", 16 * 1024)  # ~20 batches
    seen: list[int] = []
    real = inputs.normalize

    def counting(table: pa.Table, *, source: str) -> pa.Table:
        seen.append(table.num_rows)
        return real(table, source=source)

    monkeypatch.setattr(inputs, "normalize", counting)
    store.create_stream(time_spec())
    store.ingest("flights", three_days.iloc[:10])  # fixes the schema from the frame's types
    report = store.ingest("flights", path, on_overlap=OnOverlap.APPEND)
    assert len(seen) > 10 and max(seen) < 400 and sum(seen) == 10 + 2699
    assert report.rows == 2699
    got = store.read_pandas(list(DAYS))
    want = pd.concat([three_days.iloc[:10], three_days], ignore_index=True)
    pd.testing.assert_frame_equal(sort_frame(got), sort_frame(want))


def test_record_batch_reader_and_iterable(store: BlockStore, three_days: pd.DataFrame) -> None:
    table = pa.Table.from_pandas(three_days, preserve_index=False)
    store.create_stream(time_spec())
    store.create_stream(time_spec("again"))
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=300))
    assert store.ingest("flights", reader).rows == 2699
    _blocks_equal(store, three_days)
    report = store.ingest("again", iter(table.to_batches(max_chunksize=1000)))
    assert dict(report.block_rows) == {
        "again/2013-01-01": 842,
        "again/2013-01-02": 943,
        "again/2013-01-03": 914,
    }
    assert store.read("again/2013-01-02").equals(store.read("flights/2013-01-02"))
    with pytest.raises(DataError, match="item 1 is a str, not a pyarrow RecordBatch"):
        store.ingest("again", iter([table.to_batches()[0], "oops"]))


def test_spill_starts_another_part_of_the_block(
    store: BlockStore, three_days: pd.DataFrame
) -> None:
    # Rows of the three days interleaved; one writer open at a time and no buffering: each
    # switch between days closes a part file and later rows of that day start another.
    rng = np.random.default_rng(7)
    frame = three_days.iloc[rng.permutation(len(three_days))].reset_index(drop=True)
    store.create_stream(time_spec())
    report = store.ingest("flights", frame, batch_rows=200, max_open_writers=1, buffer_bytes=0)
    metas = store.blocks("flights")
    assert [m.rows for m in metas] == [842, 943, 914] == list(report.block_rows.values())
    assert all(m.parts > 1 for m in metas)
    assert sum(m.rows for m in metas) == sum(len(p) for p in [frame])
    _blocks_equal(store, frame)  # parts are read in commit order: input order is kept


def test_a_bad_row_in_a_late_batch_commits_nothing(
    store: BlockStore, three_days: pd.DataFrame, root: Path, tmp_path: Path
) -> None:
    store.create_stream(time_spec())
    store.ingest("flights", three_days.iloc[:100])
    before = snapshot(store, root)
    frame = three_days.copy()
    frame.loc[2500, "time_hour"] = pd.NaT
    path = tmp_path / "bad.parquet"
    frame.to_parquet(path, index=False)
    with pytest.raises(DataError, match=r"are null \(first at row 2500\)"):
        store.ingest("flights", path, batch_rows=300)  # rows 0..2399 were already written
    assert snapshot(store, root) == before
    bad = three_days.assign(year=three_days["year"].astype(float))
    bad.loc[2600, "year"] = 2013.5  # a float that an int64 column cannot hold
    with pytest.raises(DataError, match=r"'year'.*first at row 2600: 2013.5"):
        store.ingest("flights", bad, batch_rows=300)
    assert snapshot(store, root) == before


def test_reject_counts_late_rows_of_every_batch(
    store: BlockStore, three_days: pd.DataFrame
) -> None:
    store.create_stream(time_spec("flights", late=LatePolicy.REJECT))
    store.ingest("flights", three_days)
    store.seal(["flights/2013-01-01", "flights/2013-01-03"])
    with pytest.raises(DataError, match=r"1756 late row\(s\): 842 row\(s\) for sealed block"):
        store.ingest("flights", three_days, batch_rows=100, ingest_id="again")
    assert [m.parts for m in store.blocks("flights")] == [1, 1, 1]


def test_files_are_fsynced_before_the_commit(
    store: BlockStore, three_days: pd.DataFrame, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    monkeypatch.setattr(files, "fsync_path", lambda path: events.append(("fsync", path)))
    real = catalog.insert_parts

    def recording(conn: object, values: list[dict[str, object]]) -> None:
        events.append(("commit", ""))
        real(conn, values)  # type: ignore[arg-type]

    monkeypatch.setattr(catalog, "insert_parts", recording)
    store.create_stream(time_spec())
    store.ingest("flights", three_days)
    assert events[-1] == ("commit", "") and events.count(("commit", "")) == 1
    synced = {Path(p) for _, p in events[:-1]}
    base = root.resolve()
    for rel in part_files(root):  # each file, its seq, key and stream directories, the root
        parts = Path(rel).parts
        assert {base.joinpath(*parts[:i]) for i in range(len(parts) + 1)} <= synced
    assert len(part_files(root)) == 3


def _sealing_midway(store: BlockStore, table: pa.Table) -> Iterator[pa.RecordBatch]:
    batches = table.to_batches(max_chunksize=500)
    yield batches[0]  # day 1 planned into its open block #1
    store.seal(["flights/2013-01-01"])  # another writer seals it meanwhile
    yield from batches[1:]


def test_staged_files_follow_a_replan(
    store: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    store.create_stream(time_spec())
    store.ingest("flights", three_days.iloc[:10])
    table = pa.Table.from_pandas(three_days.iloc[10:], preserve_index=False)
    report = store.ingest("flights", _sealing_midway(store, table))
    assert report.new_blocks[0] == "flights/2013-01-01#2" and report.late_rows == 832
    assert [p.split("/")[:3] for p in part_files(root) if "2013-01-01" in p] == [
        ["flights", "2013-01-01", "1"],
        ["flights", "2013-01-01", "2"],
    ]
    assert store.read("flights/2013-01-01#2").num_rows == 832


def test_a_concurrent_first_ingest_fixes_another_schema(
    store: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    small = three_days.iloc[:50]
    first = pa.Table.from_pandas(small, preserve_index=False)
    first = first.set_column(
        first.schema.get_field_index("year"), "year", first.column("year").cast(pa.int32())
    )
    other = pa.Table.from_pandas(three_days.iloc[50:60], preserve_index=False)  # year: int64
    store.create_stream(time_spec())

    def racing() -> Iterator[pa.RecordBatch]:
        yield from first.to_batches()
        store.ingest("flights", other)  # wins the first ingest: year is int64
        fixed = store.schema("flights")
        assert fixed is not None and fixed.field("year").type == pa.int64()

    report = store.ingest("flights", racing())
    assert report.rows == 50
    got = store.read_pandas(["flights/2013-01-01"])
    assert len(got) == 60 and got["year"].dtype == np.int64
    assert len(part_files(root)) == 2  # the int32 files were rewritten and removed


def test_parquet_files_written_are_plain_parquet(
    store: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    store.create_stream(time_spec())
    store.ingest("flights", three_days, batch_rows=256)
    path = root / part_files(root)[0]
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == 842 and meta.num_row_groups == 1  # buffered into one row group


def test_bounds_below_their_minimum_are_refused(
    store: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    store.create_stream(time_spec())
    for bad in ({"batch_rows": 0}, {"max_open_writers": 0}, {"buffer_bytes": -1}):
        with pytest.raises(InvalidRequestError, match="batch_rows >= 1, max_open_writers >= 1"):
            store.ingest("flights", three_days, **bad)
    assert part_files(root) == [] and store.blocks("flights") == []

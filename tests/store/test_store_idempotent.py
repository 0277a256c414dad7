"""Idempotent ingest: ingest ids (default: the content hash), repeats, id conflicts, and the
overlap with stored rows under each on_overlap policy."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import sqlalchemy as sa
from store_helpers import snapshot, sort_frame, time_spec

from blockbudget import InvalidRequestError
from blockbudget.errors import DataError, DuplicateRowsError, IngestIdConflictError
from blockbudget.store import BlockStore, OnOverlap, catalog, overlap
from blockbudget.store.content import ContentHasher


def _day(frame: pd.DataFrame, day: int) -> pd.DataFrame:
    return frame[frame["day"] == day].reset_index(drop=True)


def _without_ingests(state: tuple[list[str], dict[str, list[str]]]) -> object:
    paths, rows = state
    return paths, {k: v for k, v in rows.items() if k != "store_ingests"}


def _repeats(store: BlockStore, ingest_id: str) -> int:
    t = catalog.ingests_table
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(t.c.repeats).where(t.c.ingest_id == ingest_id)).one()[0])


def test_a_repeat_changes_nothing_and_returns_the_first_report(
    store: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    store.create_stream(time_spec())
    first = store.ingest("flights", three_days)
    assert first.ingest_id == "sha256:" + first.content_hash and not first.repeat
    assert first.new_blocks == ("flights/2013-01-01", "flights/2013-01-02", "flights/2013-01-03")
    before = snapshot(store, root)
    again = store.ingest("flights", three_days.copy(), batch_rows=100)
    assert again.repeat
    assert (again.rows, again.new_blocks, again.ingest_id, again.ingested_at) == (
        2699,
        first.new_blocks,
        first.ingest_id,
        first.ingested_at,
    )
    assert _without_ingests(snapshot(store, root)) == _without_ingests(before)
    assert _repeats(store, first.ingest_id) == 1


def test_the_content_hash_ignores_the_source_and_batching(
    store: BlockStore, three_days: pd.DataFrame, tmp_path: Path
) -> None:
    store.create_stream(time_spec())
    first = store.ingest("flights", three_days)
    csv, parquet = tmp_path / "f.csv", tmp_path / "f.parquet"
    stored = store.read(list(first.new_blocks))
    stored.to_pandas().to_csv(csv, index=False)
    pa.parquet.write_table(stored, parquet, row_group_size=300)  # type: ignore[attr-defined]
    for data in (stored, parquet, csv, stored.to_batches(max_chunksize=77)):
        assert store.ingest("flights", data).ingest_id == first.ingest_id
    # column order does not matter (conformed to the stream's schema); row order does
    assert store.ingest("flights", stored.select(stored.schema.names[::-1])).repeat
    hasher = ContentHasher()
    hasher.update(stored.slice(1))
    assert "sha256:" + hasher.hexdigest() != first.ingest_id


def _nested(tags: list[list[str | None] | None]) -> pa.Table:
    point = pa.struct([("x", pa.int64()), ("name", pa.string())])
    return pa.table(
        {
            "time_hour": pa.array([datetime(2013, 1, 1, 5), datetime(2013, 1, 1, 6)]),
            "tags": pa.array(tags, pa.list_(pa.string())),
            "point": pa.array([{"x": 1, "name": None}, None], point),
            "trail": pa.array([None, [{"x": 2, "name": "a"}, None]], pa.list_(point)),
        }
    )


def test_nested_columns_with_nulls_hash_and_ingest(store: BlockStore, tmp_path: Path) -> None:
    store.create_stream(time_spec())
    table = _nested([["a", None], None])
    pa.parquet.write_table(table, tmp_path / "n.parquet")  # type: ignore[attr-defined]
    first = store.ingest("flights", tmp_path / "n.parquet")
    assert first.rows == 2 and not first.repeat
    assert store.ingest("flights", table).repeat  # same content, same hash
    digests = set()
    for t in (table, _nested([["a", None], None]), _nested([["a", None], []])):
        hasher = ContentHasher()
        hasher.update(t)
        digests.add(hasher.hexdigest())
    assert len(digests) == 2  # a null list and an empty one differ; equal content hashes equal
    assert store.read(list(first.new_blocks)).column("tags").to_pylist() == [["a", None], None]


def test_a_column_the_hash_cannot_fill_is_a_data_error(store: BlockStore) -> None:
    hasher = ContentHasher()
    column = pa.array([(1, 2, 3), None], pa.month_day_nano_interval())
    with pytest.raises(DataError, match="column 'gap'"):
        hasher.update(pa.table({"gap": column}))
        hasher.hexdigest()


def test_reordered_rows_are_a_new_ingest_whose_rows_are_duplicates(
    store: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    store.create_stream(time_spec())
    store.ingest("flights", three_days)
    before = snapshot(store, root)
    with pytest.raises(DuplicateRowsError, match=r"2699 row\(s\) repeat rows") as err:
        store.ingest("flights", three_days.iloc[::-1])
    assert "'2013-01-01': 842, '2013-01-02': 943, '2013-01-03': 914" in str(err.value)
    assert snapshot(store, root) == before


def test_an_id_names_one_content(store: BlockStore, three_days: pd.DataFrame, root: Path) -> None:
    store.create_stream(time_spec())
    day1, day2 = _day(three_days, 1), _day(three_days, 2)
    first = store.ingest("flights", day1, ingest_id="jan-01")
    assert first.ingest_id == "jan-01"
    before = snapshot(store, root)
    with pytest.raises(IngestIdConflictError, match="ingest id 'jan-01' of stream 'flights'"):
        store.ingest("flights", day2, ingest_id="jan-01")
    assert snapshot(store, root) == before
    assert store.ingest("flights", day1, ingest_id="jan-01").repeat
    with pytest.raises(InvalidRequestError, match="an ingest id must be"):
        store.ingest("flights", day2, ingest_id="bad id")
    with pytest.raises(InvalidRequestError, match="unknown on_overlap"):
        store.ingest("flights", day2, on_overlap="drop")


def test_skip_duplicates_ingests_the_new_rows_of_an_overlapping_file(
    store: BlockStore, three_days: pd.DataFrame
) -> None:
    store.create_stream(time_spec())
    day1, day2, day3 = (_day(three_days, d) for d in (1, 2, 3))
    store.ingest("flights", pd.concat([day1, day2.iloc[:400]], ignore_index=True))
    store.seal(["flights/2013-01-01"])  # as if charged: its rows never change
    report = store.ingest(
        "flights", pd.concat([day1, day2, day3], ignore_index=True), on_overlap="skip-duplicates"
    )
    o = report.overlap
    assert (o.rows, dict(o.keys)) == (842 + 943, {"2013-01-01": 842, "2013-01-02": 943})
    assert (o.checked, o.duplicate_rows, o.skipped_rows) == (True, 842 + 400, 842 + 400)
    assert dict(o.duplicates) == {"2013-01-01": 842, "2013-01-02": 400}
    assert (report.rows, report.new_blocks, report.appended_blocks) == (
        543 + 914,
        ("flights/2013-01-03",),
        ("flights/2013-01-02",),
    )
    assert report.dropped_rows == 0 and report.late_rows == 0
    assert [b.block_id for b in store.blocks("flights")] == [
        "flights/2013-01-01",
        "flights/2013-01-02",
        "flights/2013-01-03",
    ]  # no flights/2013-01-01#2 of duplicates
    got = store.read_pandas([b.block_id for b in store.blocks("flights")])
    pd.testing.assert_frame_equal(sort_frame(got), sort_frame(three_days))


def test_duplicates_count_as_multisets_with_nulls_equal(store: BlockStore) -> None:
    store.create_stream(time_spec())
    t = pd.Timestamp("2013-01-01 05:00")
    stored = pd.DataFrame({"time_hour": [t, t], "x": [1.0, None], "s": ["a", None]})
    store.ingest("flights", stored)
    again = pd.DataFrame(
        {"time_hour": [t, t, t, t], "x": [1.0, 1.0, None, 2.0], "s": ["a", "a", None, None]}
    )
    report = store.ingest("flights", again, on_overlap=OnOverlap.SKIP_DUPLICATES)
    assert (report.overlap.duplicate_rows, report.rows) == (2, 2)
    got = store.read_pandas("flights/2013-01-01")
    assert sorted(map(str, got["x"].tolist())) == ["1.0", "1.0", "2.0", "nan"]


def test_skipping_every_row_commits_an_ingest_without_blocks(
    store: BlockStore, three_days: pd.DataFrame
) -> None:
    store.create_stream(time_spec())
    day1 = _day(three_days, 1)
    store.ingest("flights", day1)
    report = store.ingest("flights", day1.iloc[:10], on_overlap="skip-duplicates")
    assert (report.rows, report.new_blocks, report.appended_blocks) == (0, (), ())
    assert report.overlap.skipped_rows == 10
    assert store.block("flights/2013-01-01").rows == 842
    assert store.ingest("flights", day1.iloc[:10], on_overlap="skip-duplicates").repeat


def test_append_keeps_todays_semantics_and_reads_no_stored_rows(
    store: BlockStore, three_days: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_stream(time_spec())
    day1 = _day(three_days, 1)
    store.ingest("flights", day1)
    store.seal(["flights/2013-01-01"])
    monkeypatch.setattr(overlap, "duplicate_positions", None)  # would fail if called
    report = store.ingest("flights", day1.iloc[:5], on_overlap=OnOverlap.APPEND)
    assert report.new_blocks == ("flights/2013-01-01#2",) and report.late_rows == 5
    o = report.overlap
    assert (o.rows, dict(o.keys), o.checked, o.duplicate_rows) == (5, {"2013-01-01": 5}, False, 0)


def test_the_check_reads_only_the_touched_keys_files(
    store: BlockStore, three_days: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create_stream(time_spec())
    for d in (1, 2, 3):
        store.ingest("flights", _day(three_days, d).iloc[:100])
    seen: list[str] = []
    real = overlap.duplicate_positions

    def recording(files, stored, parts):  # type: ignore[no-untyped-def]
        seen.extend(stored)
        return real(files, stored, parts)

    monkeypatch.setattr(overlap, "duplicate_positions", recording)
    report = store.ingest("flights", _day(three_days, 2).iloc[50:150], on_overlap="skip-duplicates")
    assert len(seen) == 1 and seen[0].startswith("flights/2013-01-02/1/part-")
    assert (report.overlap.duplicate_rows, report.rows) == (50, 50)


def test_a_concurrent_append_to_a_checked_key_is_checked_too(
    db_url: str, root: Path, three_days: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    day1 = _day(three_days, 1)
    with BlockStore(db_url, root) as a, BlockStore(db_url, root) as b:
        a.create_stream(time_spec())
        a.ingest("flights", day1.iloc[:100])
        real = overlap.OverlapCheck.run
        calls: list[int] = []

        def run_then_race(self, files, stream, staged, current):  # type: ignore[no-untyped-def]
            real(self, files, stream, staged, current)
            if not calls:  # between this check and its commit, another server appends
                calls.append(1)
                b.ingest("flights", day1.iloc[100:110], on_overlap="append")
            else:
                calls.append(2)

        monkeypatch.setattr(overlap.OverlapCheck, "run", run_then_race)
        report = a.ingest("flights", day1.iloc[:200], on_overlap="skip-duplicates")
    assert calls == [1, 2, 2]  # a, b (its own ingest), a again: the added file
    assert report.overlap.duplicate_rows == report.overlap.skipped_rows == 110
    assert report.rows == 90
    assert a.block("flights/2013-01-01").rows == 200


@pytest.mark.parametrize("runs", [4])
def test_concurrent_ingests_of_one_file_commit_once(
    db_url: str, root: Path, three_days: pd.DataFrame, runs: int
) -> None:
    stores = [BlockStore(db_url, root) for _ in range(runs)]
    try:
        stores[0].create_stream(time_spec())
        barrier = threading.Barrier(runs)
        reports: list[object] = [None] * runs

        def go(i: int) -> None:
            barrier.wait()
            reports[i] = stores[i].ingest("flights", three_days)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(runs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        repeats = [r.repeat for r in reports]  # type: ignore[attr-defined]
        assert sorted(repeats) == [False] + [True] * (runs - 1)
        assert {r.new_blocks for r in reports} == {  # type: ignore[attr-defined]
            ("flights/2013-01-01", "flights/2013-01-02", "flights/2013-01-03")
        }
        blocks = stores[0].blocks("flights")
        assert [(b.block_id, b.rows, b.parts) for b in blocks] == [
            ("flights/2013-01-01", 842, 1),
            ("flights/2013-01-02", 943, 1),
            ("flights/2013-01-03", 914, 1),
        ]
        assert len(list(root.rglob("*.parquet"))) == 3  # the losers' staged files are gone
    finally:
        for s in stores:
            s.dispose()


def test_an_ingest_whose_id_commits_while_it_runs_is_a_repeat_not_a_duplicate(
    db_url: str, root: Path, three_days: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the parallel suite met on PostgreSQL, made deterministic: a concurrent ingest
    of the same content commits after this one checked the id and before it commits, so its
    overlap check finds every row stored. The answer is the first ingest's report, marked a
    repeat — not a DuplicateRowsError — and nothing is written twice."""
    from blockbudget.store.ingesting import IngestRun

    store = BlockStore(db_url, root)
    try:
        store.create_stream(time_spec())
        first = store.ingest("flights", three_days)
        real = IngestRun._ingested
        calls = {"n": 0}

        def blind_once(self: IngestRun, stream: str, ingest_id: str) -> object:
            calls["n"] += 1
            return None if calls["n"] == 1 else real(self, stream, ingest_id)

        monkeypatch.setattr(IngestRun, "_ingested", blind_once)
        again = store.ingest("flights", three_days)
        assert calls["n"] == 2 and again.repeat and again.ingest_id == first.ingest_id
        assert [b.rows for b in store.blocks("flights")] == [842, 943, 914]
        # a different ingest of the same rows is still refused as duplicates
        monkeypatch.setattr(IngestRun, "_ingested", real)
        with pytest.raises(DuplicateRowsError):
            store.ingest("flights", three_days, ingest_id="another-id")
    finally:
        store.close()

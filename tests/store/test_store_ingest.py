"""Ingest by time, user-id range and attribute; every input kind; reading blocks back."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from store_helpers import POLICY, part_files, sort_frame, time_spec

from blockbudget import Accounting, DataError, InvalidRequestError, UnknownBlockError
from blockbudget.store import Blocking, BlockStore, DataFormat, LatePolicy, StreamSpec

DAY_COUNTS = {"flights/2013-01-01": 842, "flights/2013-01-02": 943, "flights/2013-01-03": 914}


def test_time_blocks_on_flights(store: BlockStore, three_days: pd.DataFrame, root: Path) -> None:
    store.create_stream(time_spec())
    report = store.ingest("flights", three_days)
    assert report.rows == 2699 == len(three_days)
    assert report.new_blocks == tuple(DAY_COUNTS)
    assert report.appended_blocks == ()
    assert report.late_rows == 0
    assert dict(report.block_rows) == DAY_COUNTS
    metas = store.blocks("flights")
    assert [(m.block_id, m.rows, m.parts, m.sealed, m.seq) for m in metas] == [
        (b, n, 1, False, 1) for b, n in DAY_COUNTS.items()
    ]
    first = metas[0]
    assert (first.window_start, first.window_end) == (datetime(2013, 1, 1), datetime(2013, 1, 2))
    assert first.nbytes > 0 and first.created_at.tzinfo is not None
    assert store.block("flights/2013-01-02") == metas[1]
    assert len(part_files(root)) == 3
    assert all(p.startswith("flights/2013-01-0") and "/1/part-" in p for p in part_files(root))
    for block_id, n in DAY_COUNTS.items():
        day = int(block_id[-2:])
        got = store.read_pandas([block_id])
        assert len(got) == n
        want = three_days[three_days["day"] == day].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want)  # same rows, same order


def test_read_assembles_exactly_the_rows(store: BlockStore, three_days: pd.DataFrame) -> None:
    store.create_stream(time_spec())
    half = len(three_days) // 2
    store.ingest("flights", three_days.iloc[:half])
    second = store.ingest("flights", three_days.iloc[half:])
    assert second.appended_blocks == ("flights/2013-01-02",)  # the day that straddles the cut
    assert second.new_blocks == ("flights/2013-01-03",)
    ids = [m.block_id for m in store.blocks("flights")]
    got = store.read_pandas(ids)
    pd.testing.assert_frame_equal(sort_frame(got), sort_frame(three_days))
    assert store.block("flights/2013-01-02").parts == 2
    sub = store.read(ids[::-1], columns=["dest", "day"])
    assert sub.column_names == ["dest", "day"]
    assert sub.column("day").to_pylist()[:914] == [3] * 914  # blocks in the order asked
    assert sorted(sub.column("dest").to_pylist()) == sorted(three_days["dest"])


def test_sub_day_windows(store: BlockStore, three_days: pd.DataFrame) -> None:
    spec = StreamSpec(
        "six",
        POLICY,
        Accounting.BASIC,
        Blocking.by_time("sched_dep_datetime", timedelta(hours=6)),
        LatePolicy.REJECT,
    )
    store.create_stream(spec)
    report = store.ingest("six", three_days)
    quarter = three_days["sched_dep_datetime"].dt.floor("6h")
    want = {f"six/{k:%Y-%m-%dT%H:%M}": int(n) for k, n in quarter.value_counts().items()}
    assert dict(report.block_rows) == want
    assert "six/2013-01-01T06:00" in want
    assert sum(m.rows for m in store.blocks("six")) == len(three_days)


def test_user_id_blocks(store: BlockStore) -> None:
    rng = np.random.default_rng(7)
    uid = rng.integers(0, 3500, size=2000)
    frame = pd.DataFrame({"uid": uid, "x": rng.normal(size=2000)})
    spec = StreamSpec(
        "users", POLICY, Accounting.BASIC, Blocking.by_user("uid", 1000), LatePolicy.REJECT
    )
    store.create_stream(spec)
    report = store.ingest("users", pa.Table.from_pandas(frame))
    want = {
        f"users/u{lo:06d}-{lo + 999:06d}": int(((uid >= lo) & (uid < lo + 1000)).sum())
        for lo in (0, 1000, 2000, 3000)
    }
    assert dict(report.block_rows) == want
    metas = store.blocks("users")
    assert [(m.id_start, m.id_end) for m in metas] == [
        (0, 999),
        (1000, 1999),
        (2000, 2999),
        (3000, 3999),
    ]
    got = store.read_pandas("users/u002000-002999")
    pd.testing.assert_frame_equal(
        sort_frame(got), sort_frame(frame[(uid >= 2000) & (uid < 3000)].reset_index(drop=True))
    )


def test_attribute_blocks(store: BlockStore, three_days: pd.DataFrame) -> None:
    spec = StreamSpec(
        "by-origin",
        POLICY,
        Accounting.BASIC,
        Blocking.by_attribute("origin"),
        LatePolicy.NEW_BLOCK,
    )
    store.create_stream(spec)
    report = store.ingest("by-origin", three_days)
    counts = three_days["origin"].value_counts()
    assert dict(report.block_rows) == {f"by-origin/{k}": int(v) for k, v in counts.items()}
    assert [m.attribute for m in store.blocks("by-origin")] == ["EWR", "JFK", "LGA"]
    odd = pd.DataFrame({"city": ["New York", "a/b", "New York"], "v": [1, 2, 3]})
    store.create_stream(
        StreamSpec(
            "city", POLICY, Accounting.BASIC, Blocking.by_attribute("city"), LatePolicy.REJECT
        )
    )
    assert store.ingest("city", odd).new_blocks == ("city/New%20York", "city/a%2Fb")
    assert store.block("city/New%20York").attribute == "New York"
    assert store.read_pandas("city/a%2Fb")["v"].tolist() == [2]


def test_csv_parquet_pandas_and_arrow_inputs(
    store: BlockStore, three_days: pd.DataFrame, tmp_path: Path
) -> None:
    store.create_stream(time_spec())
    quarters = np.array_split(np.arange(len(three_days)), 5)
    chunks = [three_days.iloc[q].reset_index(drop=True) for q in quarters]
    csv_path = tmp_path / "in.csv"
    chunks[0].to_csv(csv_path, index=False)
    gz_path = tmp_path / "in.csv.gz"
    chunks[1].to_csv(gz_path, index=False)
    pq_path = tmp_path / "in.data"
    pq.write_table(pa.Table.from_pandas(chunks[2], preserve_index=False), pq_path)
    rows = [
        store.ingest("flights", csv_path).rows,
        store.ingest("flights", str(gz_path)).rows,
        store.ingest("flights", pq_path, format=DataFormat.PARQUET).rows,
        store.ingest("flights", pa.Table.from_pandas(chunks[3])).rows,
        store.ingest("flights", pa.RecordBatch.from_pandas(chunks[4], preserve_index=False)).rows,
    ]
    assert rows == [len(c) for c in chunks]
    got = store.read_pandas([m.block_id for m in store.blocks("flights")])
    pd.testing.assert_frame_equal(sort_frame(got), sort_frame(three_days))
    with pytest.raises(DataError, match="cannot infer the format"):
        store.ingest("flights", pq_path)
    with pytest.raises(InvalidRequestError, match="file paths only"):
        store.ingest("flights", chunks[0], format="csv")


def test_first_ingest_from_csv_fixes_schema(store: BlockStore, tmp_path: Path) -> None:
    store.create_stream(time_spec("ev", late=LatePolicy.REJECT))
    path = tmp_path / "ev.csv"
    path.write_text("time_hour,zip,n\n2013-01-01 05:00:00,01234,1\n2013-01-02 07:00:00,99999,2\n")
    store.ingest("ev", path)
    schema = store.schema("ev")
    assert schema is not None
    assert [str(f.type) for f in schema] == ["timestamp[us]", "int64", "int64"]
    # a later pandas frame with int32 and microsecond times is cast safely
    frame = pd.DataFrame(
        {
            "n": np.array([3], dtype=np.int32),
            "time_hour": pd.to_datetime(["2013-01-02 09:00"]),
            "zip": [5],
        }
    )
    assert store.ingest("ev", frame).appended_blocks == ("ev/2013-01-02",)
    assert store.read_pandas("ev/2013-01-02")["n"].tolist() == [2, 3]


def test_safe_casts_check_values(store: BlockStore) -> None:
    store.create_stream(time_spec("ev", late=LatePolicy.REJECT))
    t = pd.to_datetime(["2013-01-01", "2013-01-01", "2013-01-02"])
    store.ingest("ev", pd.DataFrame({"time_hour": t, "n": [1, 2, 3]}))
    # integral floats (NaN -> null) fit int64
    assert store.ingest("ev", pd.DataFrame({"time_hour": t, "n": [4.0, None, 6.0]})).rows == 3
    with pytest.raises(DataError, match=r"column 'n'.*first at row 1: 2\.5"):
        store.ingest("ev", pd.DataFrame({"time_hour": t, "n": [4.0, 2.5, 6.0]}))
    with pytest.raises(DataError, match="column 'n' has type string"):
        store.ingest("ev", pd.DataFrame({"time_hour": t, "n": ["4", "5", "6"]}))
    assert store.read("ev/2013-01-01").column("n").to_pylist() == [1, 2, 4, None]
    assert store.read("ev/2013-01-02").column("n").to_pylist() == [3, 6]


def test_read_errors(store: BlockStore, three_days: pd.DataFrame) -> None:
    store.create_stream(time_spec())
    store.create_stream(time_spec("other"))
    store.ingest("flights", three_days)
    store.ingest("other", three_days.iloc[:10])
    with pytest.raises(InvalidRequestError, match="at least one block"):
        store.read([])
    with pytest.raises(UnknownBlockError, match="flights/2014-01-01; nothing was read"):
        store.read(["flights/2013-01-01", "flights/2014-01-01"])
    with pytest.raises(UnknownBlockError):
        store.read(["not-an-id"])
    with pytest.raises(InvalidRequestError, match="duplicate"):
        store.read(["flights/2013-01-01", "flights/2013-01-01"])
    with pytest.raises(InvalidRequestError, match="one stream"):
        store.read(["flights/2013-01-01", "other/2013-01-01"])
    with pytest.raises(InvalidRequestError, match="unknown or no columns"):
        store.read(["flights/2013-01-01"], columns=["nope"])
    with pytest.raises(InvalidRequestError, match="not sealed"):
        store.read(["flights/2013-01-01"], require_sealed=True)
    store.seal(["flights/2013-01-01"])
    assert store.read(["flights/2013-01-01"], require_sealed=True).num_rows == 842
    with pytest.raises(UnknownBlockError, match="no stream 'missing'"):
        store.blocks("missing")
    with pytest.raises(UnknownBlockError):
        store.block("flights/1999-01-01")


def test_streams_catalog(store: BlockStore, db_url: str, root: Path) -> None:
    a = store.create_stream(time_spec("a"))
    b = store.create_stream(time_spec("b", late=LatePolicy.REJECT, close_after=2))
    assert store.create_stream(time_spec("a")) == a  # identical: no-op
    with pytest.raises(InvalidRequestError, match="different spec"):
        store.create_stream(time_spec("a", late=LatePolicy.REJECT))
    assert store.list_streams() == [a, b]
    assert store.schema("a") is None
    with BlockStore(db_url, root) as again:  # the catalog persists
        assert again.get_stream("b") == b
    with pytest.raises(UnknownBlockError, match="no stream 'zzz'"):
        store.get_stream("zzz")
    with pytest.raises(UnknownBlockError):
        store.ingest("zzz", pd.DataFrame({"time_hour": [datetime(2013, 1, 1)]}))


def test_empty_input_writes_nothing(
    store: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    store.create_stream(time_spec())
    report = store.ingest("flights", three_days.iloc[:0])
    assert (report.rows, report.new_blocks) == (0, ())
    assert store.blocks("flights") == [] and part_files(root) == []
    assert store.schema("flights") is None


@pytest.mark.parametrize("uri", ["file", "mock"])
def test_filesystem_uris(tmp_path: Path, three_days: pd.DataFrame, uri: str) -> None:
    root = f"file://{tmp_path / 'fsroot'}" if uri == "file" else "mock://"
    with BlockStore(f"sqlite:///{tmp_path / 'u.db'}", root) as store:
        store.create_stream(time_spec())
        store.ingest("flights", three_days)
        got = store.read_pandas(list(DAY_COUNTS))
        pd.testing.assert_frame_equal(sort_frame(got), sort_frame(three_days))
    if uri == "file":
        assert len(part_files(tmp_path / "fsroot")) == 3


def test_dates_and_timezone_aware_times(store: BlockStore) -> None:
    store.create_stream(time_spec("dates", late=LatePolicy.REJECT))
    days = pa.table({"time_hour": pa.array([date(2013, 1, 2), date(2013, 1, 1)]), "v": [1, 2]})
    assert store.ingest("dates", days).new_blocks == ("dates/2013-01-01", "dates/2013-01-02")
    store.create_stream(time_spec("tz", late=LatePolicy.REJECT))
    local = pd.to_datetime(["2013-01-01 18:00", "2013-01-01 20:00"]).tz_localize("America/New_York")
    frame = pd.DataFrame({"time_hour": local, "v": [1, 2]})
    # windows of timezone-aware times are computed in UTC: 20:00 EST is 01:00 UTC next day
    report = store.ingest("tz", frame)
    assert dict(report.block_rows) == {"tz/2013-01-01": 1, "tz/2013-01-02": 1}


def test_integer_and_boolean_attributes(store: BlockStore) -> None:
    for name, values, keys in [
        ("ints", [3, 10, 3], ("ints/10", "ints/3")),
        ("bools", [True, False, True], ("bools/false", "bools/true")),
    ]:
        by_a = Blocking.by_attribute("a")
        store.create_stream(StreamSpec(name, POLICY, Accounting.BASIC, by_a, LatePolicy.REJECT))
        report = store.ingest(name, pd.DataFrame({"a": values, "v": [1, 2, 3]}))
        assert report.new_blocks == keys
        assert report.block_rows[keys[1]] == 2

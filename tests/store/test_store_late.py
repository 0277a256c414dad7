"""Sealing, late records under both policies, close_after and close_before."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import pandas as pd
import pytest
from store_helpers import POLICY, part_files, snapshot, sort_frame, time_spec

from blockbudget import Accounting, DataError, InvalidRequestError, UnknownBlockError
from blockbudget.store import Blocking, BlockStore, LatePolicy, OnOverlap, StreamSpec


def _day(frame: pd.DataFrame, day: int) -> pd.DataFrame:
    return frame[frame["day"] == day].reset_index(drop=True)


def test_seal_is_idempotent_and_all_or_nothing(store: BlockStore, three_days: pd.DataFrame) -> None:
    store.create_stream(time_spec())
    store.ingest("flights", three_days)
    assert store.seal(["flights/2013-01-01", "flights/2013-01-01"]) == ["flights/2013-01-01"]
    assert store.seal(["flights/2013-01-01"]) == []
    with pytest.raises(UnknownBlockError, match="flights/2013-02-01; nothing was sealed"):
        store.seal(["flights/2013-01-02", "flights/2013-02-01"])
    assert not store.block("flights/2013-01-02").sealed
    with pytest.raises(InvalidRequestError):
        store.seal([])
    sealed = store.block("flights/2013-01-01")
    assert sealed.sealed and sealed.sealed_at is not None
    assert [m.block_id for m in store.blocks("flights", sealed=True)] == ["flights/2013-01-01"]
    assert len(store.blocks("flights", sealed=False)) == 2


def test_late_rows_new_block(store: BlockStore, three_days: pd.DataFrame, root: Path) -> None:
    store.create_stream(time_spec())
    day1, day2 = _day(three_days, 1), _day(three_days, 2)
    store.ingest("flights", pd.concat([day1.iloc[:500], day2.iloc[:400]], ignore_index=True))
    store.seal(["flights/2013-01-01"])
    before = store.block("flights/2013-01-01")
    files_before = [p for p in part_files(root) if p.startswith("flights/2013-01-01/")]
    report = store.ingest(
        "flights", pd.concat([day1.iloc[500:], day2.iloc[400:]], ignore_index=True)
    )
    assert report.new_blocks == ("flights/2013-01-01#2",)
    assert report.appended_blocks == ("flights/2013-01-02",)
    assert report.late_rows == 342
    assert dict(report.block_rows) == {"flights/2013-01-01#2": 342, "flights/2013-01-02": 543}
    # the sealed block did not change, in the catalog or on disk
    assert store.block("flights/2013-01-01") == before
    assert [p for p in part_files(root) if p.startswith("flights/2013-01-01/1/")] == files_before
    late = store.block("flights/2013-01-01#2")
    assert (late.key, late.seq, late.rows, late.late, late.sealed) == (
        "2013-01-01",
        2,
        342,
        True,
        False,
    )
    assert any(p.startswith("flights/2013-01-01/2/part-") for p in part_files(root))
    # more late rows go to the open late block; once it is sealed, to #3
    again = store.ingest("flights", day1.iloc[:10], on_overlap=OnOverlap.APPEND)
    assert again.appended_blocks == ("flights/2013-01-01#2",) and again.late_rows == 10
    store.seal(["flights/2013-01-01#2"])
    assert store.ingest("flights", day1.iloc[:5], on_overlap=OnOverlap.APPEND).new_blocks == (
        "flights/2013-01-01#3",
    )
    both = store.read_pandas(["flights/2013-01-01", "flights/2013-01-01#2"])
    want = pd.concat([day1, day1.iloc[:10]], ignore_index=True)
    pd.testing.assert_frame_equal(sort_frame(both), sort_frame(want))


def test_late_rows_reject(store: BlockStore, three_days: pd.DataFrame, root: Path) -> None:
    store.create_stream(time_spec(late=LatePolicy.REJECT))
    day1, day2, day3 = (_day(three_days, d) for d in (1, 2, 3))
    store.ingest("flights", pd.concat([day1.iloc[:500], day2], ignore_index=True))
    store.seal(["flights/2013-01-01"])
    before = snapshot(store, root)
    batch = pd.concat([day1.iloc[500:], day2.iloc[:3], day3], ignore_index=True)
    with pytest.raises(DataError, match=r"342 row\(s\) for sealed block flights/2013-01-01\b"):
        store.ingest("flights", batch)
    assert snapshot(store, root) == before  # nothing written: not even day 3 or day 2's rows
    assert store.block("flights/2013-01-01").rows == 500
    # without the late rows the same batch goes through
    assert (
        store.ingest("flights", pd.concat([day2.iloc[:3], day3]), on_overlap=OnOverlap.APPEND).rows
        == 3 + 914
    )


def test_close_after_seals_old_windows(store: BlockStore, three_days: pd.DataFrame) -> None:
    store.create_stream(time_spec("w", late=LatePolicy.REJECT, close_after=2))
    day1, day2, day3 = (_day(three_days, d) for d in (1, 2, 3))
    assert store.ingest("w", pd.concat([day1, day2])).sealed_blocks == ()
    # day 3 arrives: day 1 is two windows older and closes in the same transaction
    report = store.ingest("w", day3.iloc[:100])
    assert report.sealed_blocks == ("w/2013-01-01",)
    assert [m.sealed for m in store.blocks("w")] == [True, False, False]
    with pytest.raises(DataError, match="sealed block w/2013-01-01"):
        store.ingest("w", day1.iloc[:1])
    assert store.ingest("w", day2.iloc[:1], on_overlap=OnOverlap.APPEND).appended_blocks == (
        "w/2013-01-02",
    )
    # a jump ahead closes everything older, including windows that never had a block
    later = day3.iloc[:2].assign(time_hour=[datetime(2013, 1, 10, 5), datetime(2013, 1, 10, 6)])
    assert store.ingest("w", later).sealed_blocks == ("w/2013-01-02", "w/2013-01-03")
    with pytest.raises(DataError, match="closed window 2013-01-05"):
        store.ingest("w", later.assign(time_hour=datetime(2013, 1, 5, 7)))


def test_close_after_one_with_new_block(store: BlockStore, three_days: pd.DataFrame) -> None:
    store.create_stream(time_spec("w", close_after=1))
    day1, day2 = _day(three_days, 1), _day(three_days, 2)
    first = store.ingest("w", pd.concat([day1, day2]))
    assert first.sealed_blocks == ("w/2013-01-01",)  # day 2 is in the same batch
    report = store.ingest("w", day1.iloc[:7], on_overlap=OnOverlap.APPEND)
    # late rows for a closed window get a new block, sealed at once: the window stays closed
    assert report.new_blocks == ("w/2013-01-01#2",) and report.late_rows == 7
    assert report.sealed_blocks == ("w/2013-01-01#2",)
    assert store.block("w/2013-01-01#2").sealed


def test_close_before(store: BlockStore, three_days: pd.DataFrame) -> None:
    store.create_stream(time_spec("w", late=LatePolicy.REJECT))
    store.ingest("w", three_days)
    assert store.close_before("w", date(2013, 1, 3)) == ["w/2013-01-01", "w/2013-01-02"]
    assert store.close_before("w", "2013-01-03") == []  # idempotent
    assert not store.block("w/2013-01-03").sealed
    # a window before the bound that has no block yet is closed too
    with pytest.raises(DataError, match="closed window 2012-12-31"):
        store.ingest("w", three_days.iloc[:1].assign(time_hour=datetime(2012, 12, 31, 8)))
    attr = StreamSpec(
        "attr", POLICY, Accounting.BASIC, Blocking.by_attribute("dest"), LatePolicy.REJECT
    )
    store.create_stream(attr)
    with pytest.raises(InvalidRequestError, match="no public order"):
        store.close_before("attr", "JFK")


def test_user_stream_close_after(store: BlockStore) -> None:
    spec = StreamSpec(
        "users",
        POLICY,
        Accounting.BASIC,
        Blocking.by_user("uid", 100),
        LatePolicy.REJECT,
        close_after=3,
    )
    store.create_stream(spec)
    store.ingest("users", pd.DataFrame({"uid": [5, 150, 250], "v": [1, 2, 3]}))
    report = store.ingest("users", pd.DataFrame({"uid": [320], "v": [4]}))
    assert report.sealed_blocks == ("users/u000000-000099",)
    with pytest.raises(DataError, match=r"1 row\(s\) for sealed block users/u000000-000099"):
        store.ingest("users", pd.DataFrame({"uid": [7, 321], "v": [5, 6]}))


def test_late_rows_drop_on_a_user_stream(store: BlockStore, root: Path) -> None:
    """A returning user's new records neither join the sealed block nor start a second one."""
    spec = StreamSpec(
        "users", POLICY, Accounting.BASIC, Blocking.by_user("uid", 100), LatePolicy.DROP
    )
    store.create_stream(spec)
    store.ingest("users", pd.DataFrame({"uid": [5, 6, 150], "v": [1, 2, 3]}))
    store.seal(["users/u000000-000099"])
    before = store.block("users/u000000-000099")
    files_before = [p for p in part_files(root) if p.startswith("users/u000000-000099/")]
    report = store.ingest("users", pd.DataFrame({"uid": [7, 8, 151, 250], "v": [4, 5, 6, 7]}))
    assert report.dropped_rows == 2
    assert report.rows == 2
    assert report.late_rows == 0
    assert report.appended_blocks == ("users/u000100-000199",)
    assert report.new_blocks == ("users/u000200-000299",)
    assert store.block("users/u000000-000099") == before
    assert [p for p in part_files(root) if p.startswith("users/u000000-000099/")] == files_before
    assert [m.block_id for m in store.blocks("users")] == [
        "users/u000000-000099",
        "users/u000100-000199",
        "users/u000200-000299",
    ]
    # everything late: nothing written, nothing refused
    only_late = store.ingest("users", pd.DataFrame({"uid": [9], "v": [8]}))
    assert (only_late.rows, only_late.dropped_rows, only_late.new_blocks) == (0, 1, ())


def test_user_stream_refuses_new_block_policy() -> None:
    with pytest.raises(InvalidRequestError, match=r"LatePolicy\.DROP"):
        StreamSpec("u", POLICY, Accounting.BASIC, Blocking.by_user("uid", 10), LatePolicy.NEW_BLOCK)

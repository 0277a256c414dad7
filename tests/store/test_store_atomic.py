"""Malformed input is refused whole: a DataError that names the problem, and the directory
tree and every catalog table exactly as before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from store_helpers import POLICY, snapshot, time_spec

from blockbudget import Accounting, DataError
from blockbudget.store import Blocking, BlockStore, LatePolicy, StreamSpec


@pytest.fixture
def loaded(store: BlockStore, three_days: pd.DataFrame, root: Path) -> BlockStore:
    """A flights stream holding day 1 and half of day 2 (so later rows both append and create)."""
    store.create_stream(time_spec())
    store.ingest("flights", three_days.iloc[:1200])
    return store


def _refused(store: BlockStore, root: Path, action: Callable[[], object], match: str) -> None:
    before = snapshot(store, root)
    with pytest.raises(DataError, match=match):
        action()
    assert snapshot(store, root) == before


def test_csv_with_a_broken_row(
    loaded: BlockStore, three_days: pd.DataFrame, root: Path, tmp_path: Path
) -> None:
    path = tmp_path / "broken.csv"
    three_days.iloc[1200:].to_csv(path, index=False)
    lines = path.read_text().splitlines()
    lines[700] = lines[700].rsplit(",", 3)[0]  # drop the last three fields of line 701
    path.write_text("\n".join(lines) + "\n")
    _refused(
        loaded,
        root,
        lambda: loaded.ingest("flights", path),
        r"broken\.csv'.*line 701 .*expected 20 columns, got 17",
    )


def test_csv_with_a_bad_value(
    loaded: BlockStore, three_days: pd.DataFrame, root: Path, tmp_path: Path
) -> None:
    path = tmp_path / "bad.csv"
    frame = three_days.iloc[1200:].astype({"distance": object}).reset_index(drop=True)
    frame.loc[333, "distance"] = "far"
    frame.to_csv(path, index=False)
    _refused(
        loaded,
        root,
        lambda: loaded.ingest("flights", path),
        r"bad\.csv'.*column 'distance'.*int64.*line 335.*'far'",
    )


def test_unreadable_parquet(loaded: BlockStore, root: Path, tmp_path: Path) -> None:
    path = tmp_path / "junk.parquet"
    path.write_bytes(b"PAR1 this is not parquet")
    _refused(loaded, root, lambda: loaded.ingest("flights", path), r"junk\.parquet'.*Parquet")
    _refused(loaded, root, lambda: loaded.ingest("flights", tmp_path / "no.csv"), "no such file")


def test_missing_blocking_column(loaded: BlockStore, three_days: pd.DataFrame, root: Path) -> None:
    frame = three_days.iloc[1200:].drop(columns=["time_hour"])
    _refused(loaded, root, lambda: loaded.ingest("flights", frame), r"missing \['time_hour'\]")
    fresh = time_spec("fresh")
    loaded.create_stream(fresh)
    _refused(
        loaded,
        root,
        lambda: loaded.ingest("fresh", frame),
        "blocks by column 'time_hour', which the input lacks",
    )


def test_nulls_in_the_blocking_column(
    loaded: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    frame = three_days.iloc[1200:].reset_index(drop=True)
    frame.loc[[17, 900], "time_hour"] = pd.NaT
    _refused(
        loaded,
        root,
        lambda: loaded.ingest("flights", frame),
        r"'time_hour' must have no nulls, but 2 row\(s\) are null \(first at row 17\)",
    )


def test_wrong_blocking_type(store: BlockStore, root: Path) -> None:
    store.create_stream(time_spec("t"))
    frame = pd.DataFrame({"time_hour": ["2013-01-01", "2013-01-02"]})
    _refused(store, root, lambda: store.ingest("t", frame), "timestamp or date, but it is string")


def test_negative_user_ids(store: BlockStore, root: Path) -> None:
    spec = StreamSpec("u", POLICY, Accounting.BASIC, Blocking.by_user("uid", 10), LatePolicy.REJECT)
    store.create_stream(spec)
    store.ingest("u", pd.DataFrame({"uid": [1, 12], "v": [0.5, 1.5]}))
    bad = pd.DataFrame({"uid": [3, 4, -2, 25, -7], "v": np.arange(5.0)})
    _refused(
        store,
        root,
        lambda: store.ingest("u", bad),
        r"non-negative.*2 negative value\(s\) \(first at row 2: -2\)",
    )
    fractional = pa.table({"uid": pa.array([1.0, 2.5]), "v": pa.array([1.0, 2.0])})
    _refused(store, root, lambda: store.ingest("u", fractional), r"'uid'.*first at row 1: 2\.5")
    store.create_stream(
        StreamSpec("u2", POLICY, Accounting.BASIC, spec.blocking, LatePolicy.REJECT)
    )
    floats = pa.table({"uid": pa.array([1.0, 2.0]), "v": pa.array([1.0, 2.0])})
    _refused(store, root, lambda: store.ingest("u2", floats), "integer user ids, but it is double")


def test_type_mismatch_with_the_stream_schema(
    loaded: BlockStore, three_days: pd.DataFrame, root: Path
) -> None:
    frame = three_days.iloc[1200:].astype({"carrier": "category"})
    frame["distance"] = frame["distance"].astype(str)
    _refused(
        loaded,
        root,
        lambda: loaded.ingest("flights", frame),
        r"column 'distance' has type string, but stream 'flights' has int64",
    )
    tz = three_days.iloc[1200:].assign(time_hour=three_days["time_hour"].dt.tz_localize("UTC"))
    _refused(loaded, root, lambda: loaded.ingest("flights", tz), "column 'time_hour'")
    extra = three_days.iloc[1200:].assign(extra=1)
    _refused(loaded, root, lambda: loaded.ingest("flights", extra), r"unexpected \['extra'\]")


def test_first_ingest_needs_typed_columns(store: BlockStore, root: Path) -> None:
    store.create_stream(time_spec("t"))
    frame = pd.DataFrame({"time_hour": pd.to_datetime(["2013-01-01"]), "note": [None]})
    _refused(store, root, lambda: store.ingest("t", frame), "column 'note' has only nulls")
    dup = pa.table([pa.array([1]), pa.array([2])], names=["a", "a"])
    _refused(store, root, lambda: store.ingest("t", dup), "'a' appears more than once")


def test_failure_after_files_were_written_removes_them(
    loaded: BlockStore, three_days: pd.DataFrame, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash of the commit itself (here: the part insert) leaves no file and no row."""
    from blockbudget.store import catalog

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(catalog, "insert_parts", boom)
    before = snapshot(loaded, root)
    with pytest.raises(RuntimeError, match="disk full"):
        loaded.ingest("flights", three_days.iloc[1200:])
    assert snapshot(loaded, root) == before

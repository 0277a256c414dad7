"""The block store on object storage: a local S3 server (moto on 127.0.0.1) as the data root."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pandas as pd
import pyarrow.fs as pafs
import pytest
from store_helpers import sort_frame, time_spec

from blockbudget.store import BlockStore

DAYS = ("flights/2013-01-01", "flights/2013-01-02", "flights/2013-01-03")


def _objects(uri: str) -> list[str]:
    fs, base = pafs.FileSystem.from_uri(uri)
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return sorted(i.path[len(base) + 1 :] for i in infos if i.type == pafs.FileType.File)


def test_csv_and_parquet_ingest_read_and_vacuum_on_s3(
    s3_root: str, tmp_path: Path, three_days: pd.DataFrame
) -> None:
    csv, parquet = tmp_path / "a.csv", tmp_path / "b.parquet"
    half = len(three_days) // 2
    three_days.iloc[:half].to_parquet(parquet, index=False)
    three_days.iloc[half:].to_csv(csv, index=False)
    with BlockStore(f"sqlite:///{tmp_path / 'c.db'}", s3_root) as store:
        store.create_stream(time_spec())
        first = store.ingest("flights", parquet, batch_rows=400)
        second = store.ingest("flights", csv)
        assert first.rows + second.rows == 2699
        assert [m.parts for m in store.blocks("flights")] == [1, 2, 1]
        got = store.read_pandas(list(DAYS))
        pd.testing.assert_frame_equal(sort_frame(got), sort_frame(three_days))
        objects = _objects(s3_root)
        assert len(objects) == 4 and all(o.startswith("flights/2013-01-0") for o in objects)
        # An orphan (a crashed ingest's file) is removed by vacuum; the catalog's files stay.
        fs, base = pafs.FileSystem.from_uri(s3_root)
        with fs.open_output_stream(f"{base}/flights/2013-01-09/1/part-orphan.parquet") as out:
            out.write(b"x")
        assert store.vacuum("flights", older_than=timedelta(0)) == [
            "flights/2013-01-09/1/part-orphan.parquet"
        ]
        assert _objects(s3_root) == objects
        pd.testing.assert_frame_equal(
            sort_frame(store.read_pandas(list(DAYS))), sort_frame(three_days)
        )


def test_a_failed_ingest_leaves_no_object(
    s3_root: str, tmp_path: Path, three_days: pd.DataFrame
) -> None:
    frame = three_days.copy()
    frame.loc[2000, "time_hour"] = pd.NaT
    with BlockStore(f"sqlite:///{tmp_path / 'c.db'}", s3_root) as store:
        store.create_stream(time_spec())
        with pytest.raises(Exception, match="first at row 2000"):
            store.ingest("flights", frame, batch_rows=500, buffer_bytes=0)
        assert store.blocks("flights") == [] and _objects(s3_root) == []

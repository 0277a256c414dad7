"""A platform whose block files live on object storage (a local S3 server, moto on 127.0.0.1):
ingest a CSV and a Parquet file, grant their rows, vacuum."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.fs as pafs

from blockbudget import Budget
from blockbudget.platform import Last, Platform
from blockbudget.store import Blocking, Unit

DAY = Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1))


def _frame(day: int, n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    start = pd.Timestamp("2024-01-01") + pd.Timedelta(days=day)
    return pd.DataFrame(
        {
            "ts": start + pd.to_timedelta(rng.integers(0, 86_400, n), unit="s"),
            "value": rng.normal(10.0, 2.0, n),
        }
    )


def test_platform_on_s3_ingests_grants_and_vacuums(s3_root: str, tmp_path: Path) -> None:
    csv, parquet = tmp_path / "d0.csv", tmp_path / "d1.parquet"
    d0, d1 = _frame(0, 120, seed=1), _frame(1, 80, seed=2)
    d0.to_csv(csv, index=False)
    d1.to_parquet(parquet, index=False)
    platform = Platform(tmp_path / "home", data_root=s3_root)
    try:
        platform.add_context("team")
        platform.create_stream("events", policy=Budget(epsilon=1.0), blocking=DAY)
        platform.ingest("events", parquet)  # fixes the schema (ts: timestamp[us])
        platform.ingest("events", csv)
        assert [v.rows for v in platform.blocks("events", contexts=["team"])] == [120, 80]
        assert not (tmp_path / "home" / "blocks").exists()  # nothing went to the home folder
        with platform.request(
            "events", blocks=Last(2), budget=Budget(epsilon=0.5), context="team"
        ) as grant:
            got = grant.frame().sort_values(["ts", "value"]).reset_index(drop=True)
        want = pd.concat([d0, d1]).sort_values(["ts", "value"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want.astype(got.dtypes.to_dict()))
        fs, base = pafs.FileSystem.from_uri(s3_root)
        with fs.open_output_stream(f"{base}/events/orphan.parquet") as out:
            out.write(b"x")
        assert platform.store.vacuum(older_than=timedelta(0)) == ["events/orphan.parquet"]
    finally:
        platform.close()

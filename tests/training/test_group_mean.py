"""GroupMeanPipeline is the library's group-mean pipeline for any application's keys and values:
rows with a missing value or a key outside the public ones are dropped (a per-row filter, never
an error), values are clipped into the public range, and the release is the exact mean at a
huge ε."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
from numpy.typing import NDArray

from blockbudget.mechanisms import SeededNoise
from blockbudget.training import (
    BudgetSplit,
    GroupMeanPipeline,
    Inequality,
    MeteredSource,
    SlaMode,
)


@dataclass(frozen=True)
class ThreeKeys(GroupMeanPipeline):
    """Mean of ``v`` per ``k`` in {0, 1, 2}, values in [0, 10]."""

    target: float
    mode: SlaMode = SlaMode.SAGE
    inequality: Inequality = Inequality.SEED
    split: BudgetSplit = field(default_factory=BudgetSplit)
    test_fraction: float = 0.1
    name: str = "three"

    @property
    def nkeys(self) -> int:
        return 3

    @property
    def value_range(self) -> float:
        return 10.0

    def group_rows(self, frame: pd.DataFrame) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        return frame["k"].to_numpy(dtype=np.int64), frame["v"].to_numpy(dtype=np.float64)


FRAME = pd.DataFrame(
    {
        "k": [0, 0, 1, 2, 3, -1, 1],
        "v": [2.0, 4.0, 5.0, 30.0, 1.0, 1.0, np.nan],
    }
)


def test_the_release_is_the_exact_clipped_mean_of_the_kept_rows_at_a_huge_epsilon() -> None:
    src = MeteredSource()
    run = ThreeKeys(target=1.0).run(
        src, FRAME, epsilon=1e9, delta=0, eta=0.05, noise=SeededNoise(1), seed=1
    )
    # kept: key 0 → 2, 4; key 1 → 5; key 2 → 30 clipped to 10 (key 3, key −1, NaN dropped)
    assert run.model.value.means == pytest.approx((3.0, 5.0, 10.0), abs=1e-6)
    assert run.model.value.counts == pytest.approx((2.0, 1.0, 1.0), abs=1e-6)
    assert run.n_train == 4
    # SEED: the validation post-processes the release, so the release is charged all of ε
    assert [label for label, _ in src.draws] == ["three/release"]
    assert not run.secure_noise

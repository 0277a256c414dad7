"""DP-SGD's size and plan: nothing is drawn for a target no schedule meets, a fit never fails
after its DP count was charged, the count is floored at the batch size (post-processing), and
a pipeline with a declared size spends nothing on counting."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from blockbudget.apps.flights.features import year_frame
from blockbudget.apps.flights.pipelines import classification_pipeline
from blockbudget.errors import InvalidBudgetError, InvalidRequestError
from blockbudget.mechanisms import SeededNoise
from blockbudget.training import DPSGDModel, LogisticDPSGD, MeteredSource, dpsgd
from blockbudget.training.sizing import COUNT_FRACTION, training_size


def _data(n: int = 500) -> tuple[Any, Any]:
    x = np.random.default_rng(0).normal(size=(n, 3))
    return x, (x[:, 0] > 0).astype(np.int64)


@pytest.mark.parametrize("cls", [DPSGDModel, LogisticDPSGD], ids=lambda c: c.__name__)
def test_a_target_no_schedule_meets_is_refused_before_the_count(cls: Any) -> None:
    x, y = _data()
    src = MeteredSource()
    with pytest.raises(InvalidBudgetError):  # σ beyond 1e7: no schedule meets ε = 1e-9
        cls(batch_size=50, seed=1).fit(src, x, y, epsilon=1e-9, delta=1e-6)
    assert src.draws == []


@pytest.mark.parametrize("cls", [DPSGDModel, LogisticDPSGD], ids=lambda c: c.__name__)
def test_a_target_met_only_at_full_batch_never_fails_after_the_count(
    cls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target the subsampled schedule of the counted size cannot meet but full batch can (so
    it was under Opacus' RDP accountant at ε = 0.001, δ = 1e-6; the PLD meets both, so the
    subsampled plan is made to refuse here): the fit falls back to full batch instead of
    failing after its count."""
    real = dpsgd.plan_dpsgd

    def subsampled_refused(**kwargs: Any) -> dpsgd.SgdPlan:
        if kwargs["n"] > kwargs["batch_size"]:
            raise InvalidBudgetError("no subsampled schedule meets it")
        return real(**kwargs)

    monkeypatch.setattr(dpsgd, "plan_dpsgd", subsampled_refused)
    x, y = _data()
    for seed in range(3):
        src = MeteredSource()
        model = cls(batch_size=50, seed=seed).fit(src, x, y, epsilon=0.001, delta=1e-6)
        assert src.draws[0][0].endswith("/count")
        assert len(src.draws) == 2 and model.plan_ is not None
        assert model.plan_.sample_rate == 1.0 and model.plan_.steps == 1
        assert src.spent.epsilon <= Decimal("0.001")  # type: ignore[union-attr]


def test_the_count_is_floored_at_the_minimum_rows() -> None:
    noise = SeededNoise(5)
    rows = [
        training_size(
            MeteredSource(),
            900,
            public_rows=None,
            count_fraction=COUNT_FRACTION,
            epsilon=Decimal("0.03"),
            noise=noise,
            label="x",
            min_rows=256,
        ).rows
        for _ in range(2000)
    ]
    assert min(rows) == 256  # the floor is hit (often, at this ε) and never crossed
    within = np.mean([(r >= 450) & (r <= 1800) for r in rows])
    assert within > 0.78  # 10 % share: ≈ 0.84 (a 5 % share gave ≈ 0.62)


def test_a_fit_at_small_epsilon_never_plans_below_its_batch_size() -> None:
    x, y = _data(900)
    for seed in range(20):
        model = LogisticDPSGD(batch_size=256, seed=seed).fit(
            MeteredSource(), x, y, epsilon=0.03, delta=1e-6
        )
        assert model.rows_ is not None and model.rows_ >= 256


class _Blocks(MeteredSource):
    blocks = ("b1", "b2")


def test_a_pipeline_with_declared_rows_per_block_spends_nothing_on_counting() -> None:
    frame = year_frame()
    day = frame[(frame["month"] == 3) & (frame["day"] == 4)].reset_index(drop=True)
    pipeline = classification_pipeline(target=0.8, batch_size=128, rows_per_block=500)
    src = _Blocks()
    run = pipeline.run(src, day, epsilon=1.0, delta=1e-6, eta=0.05, seed=2)
    assert [label for label, _ in src.draws] == ["dpsgd/train", "dpsgd/validate"]
    assert run.model.rows_ == math.floor(500 * 2 * 0.9)
    bare = MeteredSource()
    with pytest.raises(InvalidRequestError, match="rows_per_block"):
        pipeline.run(bare, day, epsilon=1.0, delta=1e-6, eta=0.05, seed=2)
    assert bare.draws == []

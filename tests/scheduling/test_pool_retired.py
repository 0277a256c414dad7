"""A retired block refuses every fit under every accounting rule; releases and credits still
work there, and the other blocks are untouched."""

from __future__ import annotations

import numpy as np
import pytest

from blockbudget.accounting import Accounting, Noise, NoisePart, Release
from blockbudget.budget import Budget, Cost
from blockbudget.scheduling import BlockSpec, Pool, TaskSpec


@pytest.mark.parametrize("accounting", list(Accounting))
def test_a_retired_block_refuses_every_fit(accounting: Accounting) -> None:
    pool = Pool(accounting)
    for b in ("a", "b"):
        pool.add_block(BlockSpec(b, 0.0, Budget(epsilon=10.0, delta=1e-6)))
    # a Gaussian of σ = 5 as each rule prices it (ε = 0.1 for the (ε, δ) rules)
    gaussian = NoisePart(Noise.GAUSSIAN, scale=5.0, sensitivity=1.0)
    cost: Cost = accounting.rule.price(Release.of(epsilon=0.1, parts=(gaussian,)))
    pool.submit(TaskSpec("t", 0.0, cost, max_blocks=2))
    assert pool.reserve("t", "b", cost)
    pool.retire("b")
    pool.retire("b")  # idempotent
    assert pool.retired.tolist() == [False, True]
    assert not pool.fits("t", "b", cost) and pool.fits("t", "a", cost)
    assert pool.fits_many([0, 1], pool.vector(cost)).tolist() == [True, False]
    assert not pool.charge("t", {"b": cost}) and not pool.charge_overhead("t", "b", cost, note="")
    assert pool.used_fraction().tolist()[1] == 1.0
    assert np.all(pool.remaining()[1] <= 0)
    pool.release("t", "b")  # a hold there may still be given back
    assert not pool.reserve("t", "b", cost)
    assert pool.grant("t", {"a": cost})

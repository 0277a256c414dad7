"""A retired block refuses every fit under every accounting rule; releases and credits still
work there, and the other blocks are untouched."""

from __future__ import annotations

import numpy as np
import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.scheduling import BlockSpec, Pool, TaskSpec


@pytest.mark.parametrize("accounting", list(Accounting))
def test_a_retired_block_refuses_every_fit(accounting: Accounting) -> None:
    pool = Pool(accounting)
    for b in ("a", "b"):
        pool.add_block(BlockSpec(b, 0.0, Budget(epsilon=10.0, delta=1e-6)))
    cost: Cost = (
        RdpCurve.gaussian(sigma=5.0)
        if accounting is Accounting.RDP
        else Budget(epsilon=0.1, delta=0 if accounting is Accounting.BASIC else 1e-9)
    )
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

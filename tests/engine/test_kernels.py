"""The reference kernels' exact integer sums."""

from __future__ import annotations

import numpy as np

from blockbudget.engine.kernels import FLUSH_ROWS, _group_sum
from blockbudget.engine.plan import FIXED_POINT_BITS


def test_group_sums_are_exact_at_the_extremes() -> None:
    rng = np.random.default_rng(40)
    top = 1 << (2 * FIXED_POINT_BITS)  # the largest square of a unit
    groups = rng.integers(0, 5, 10_000)
    units = rng.integers(-top, top + 1, 10_000)
    expected = np.zeros(5, dtype=np.int64)
    np.add.at(expected, groups, units)
    assert _group_sum(groups, units, 5).tolist() == expected.tolist()
    # a whole window of the largest units in one group: 2**22 · 2**40 = 2**62, still exact
    worst = np.full(FLUSH_ROWS, top, dtype=np.int64)
    one_group = np.zeros(FLUSH_ROWS, dtype=np.int64)
    assert _group_sum(one_group, worst, 3).tolist() == [FLUSH_ROWS * top, 0, 0]
    assert _group_sum(one_group, -worst, 3).tolist() == [-FLUSH_ROWS * top, 0, 0]

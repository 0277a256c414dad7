"""TaskSpec.eligible is enforced by the pool; Pool.credit gives charged budget back."""

import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import InternalError, InvalidRequestError
from blockbudget.scheduling import BlockSpec, Pool, TaskSpec
from blockbudget.scheduling.base import DecisionKind


def test_eligible_and_credit() -> None:
    pool = Pool(Accounting.BASIC)
    for b in "abc":
        pool.add_block(BlockSpec(b, 0, Budget(epsilon=1)))
    pool.submit(TaskSpec("t", 0, Budget(epsilon=0.5), eligible=frozenset({"a", "b"}), max_blocks=2))
    assert pool.eligible("t", "a") and not pool.eligible("t", "c")
    with pytest.raises(InternalError):
        pool.reserve("t", "c", Budget(epsilon=0.1))
    with pytest.raises(InternalError):
        pool.charge("t", {"c": Budget(epsilon=0.1)})
    assert pool.charge("t", {"a": Budget(epsilon=0.5)})
    pool.credit("a", Budget(epsilon=0.3), task_id="__ledger__", note="x")
    assert pool.decisions[-1].kind is DecisionKind.CREDIT
    assert abs(pool.charged[0][0] - 0.2) < 1e-6
    pool.credit("a", Budget(epsilon=1), task_id="__ledger__")
    assert pool.charged[0][0] == 0.0
    with pytest.raises(InvalidRequestError):
        TaskSpec("u", 0, Budget(epsilon=0.5), blocks=("a",), eligible=frozenset({"a"}))

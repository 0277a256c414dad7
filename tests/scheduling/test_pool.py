"""The Pool refuses overspending and revisiting decisions; floats stay conservative."""

from __future__ import annotations

import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve
from blockbudget.errors import InternalError, InvalidRequestError, UnknownBlockError
from blockbudget.scheduling import BlockSpec, DecisionKind, Pool, TaskSpec, TaskStatus
from blockbudget.scheduling.simulator import is_fair_share


def pool_with(accounting: Accounting = Accounting.BASIC) -> Pool:
    pool = Pool(accounting)
    eps = 10.0 if accounting is Accounting.RDP else 1.0
    pool.add_block(BlockSpec("b0", 0.0, Budget(epsilon=eps, delta=1e-6)))
    pool.add_block(BlockSpec("b1", 0.0, Budget(epsilon=eps, delta=1e-6)))
    return pool


def test_charges_are_all_or_nothing_and_never_overspend() -> None:
    pool = pool_with()
    pool.submit(TaskSpec("a", 0.0, Budget(epsilon=0.7), blocks=("b0", "b1")))
    pool.submit(TaskSpec("b", 0.0, Budget(epsilon=0.4), blocks=("b0", "b1")))
    assert pool.grant("a")
    assert not pool.grant("b")  # 0.7 + 0.4 > 1 on both blocks
    assert pool.is_pending("b") and pool.charged[:, 0].tolist() == pytest.approx([0.7, 0.7])
    # 0.7 + 0.3 is exactly 1 in the ledger's units: the pool gives the block's last budget
    pool.submit(TaskSpec("c", 0.0, Budget(epsilon=0.3), blocks=("b0",)))
    assert pool.grant("c")
    pool.submit(TaskSpec("d", 0.0, Budget(epsilon="1e-18"), blocks=("b0",)))
    assert not pool.grant("d")  # one unit more is refused


def test_decisions_are_irrevocable() -> None:
    pool = pool_with()
    pool.submit(TaskSpec("a", 0.0, Budget(epsilon=0.1), blocks=("b0",)))
    assert pool.grant("a")
    for act in (
        lambda: pool.grant("a"),
        lambda: pool.reject("a"),
        lambda: pool.reserve("a", "b0", Budget(epsilon=0.1)),
        lambda: pool.charge("a", {"b0": Budget(epsilon=0.1)}),
    ):
        with pytest.raises(InternalError, match="irrevocable"):
            act()
    with pytest.raises(InternalError, match="may not use"):
        pool.submit(TaskSpec("x", 0.0, Budget(epsilon=0.1), blocks=("b0",)))
        pool.charge("x", {"b1": Budget(epsilon=0.1)})


def test_reservations_count_as_spent_and_are_consumed_by_the_charge() -> None:
    pool = pool_with()
    pool.submit(TaskSpec("a", 0.0, Budget(epsilon=0.6), max_blocks=1))
    pool.submit(TaskSpec("b", 0.0, Budget(epsilon=0.6), max_blocks=1))
    assert pool.reserve("a", "b0", Budget(epsilon=0.3))
    assert pool.reserve("a", "b0", Budget(epsilon=0.3))
    assert not pool.fits("b", "b0", Budget(epsilon=0.6))
    assert pool.fits("a", "b0", Budget(epsilon=0.6))  # its own reservation is available to it
    assert pool.charge("a", {"b0": Budget(epsilon=0.6)})
    kinds = [d.kind for d in pool.decisions]
    assert kinds == [
        DecisionKind.RESERVE,
        DecisionKind.RESERVE,
        DecisionKind.RELEASE,
        DecisionKind.CHARGE,
    ]
    assert pool.reserved[0, 0] == 0.0
    with pytest.raises(InternalError, match="at most 1 blocks"):
        pool.charge("a", {"b1": Budget(epsilon=0.1)})
    pool.reserve("b", "b1", Budget(epsilon=0.2))
    pool.reject("b")
    assert pool.status["b"] is TaskStatus.REJECTED and pool.reserved[1, 0] == 0.0


def test_rdp_fits_while_some_order_is_within_capacity() -> None:
    pool = pool_with(Accounting.RDP)
    curve = RdpCurve.gaussian(sigma=3.0)
    pool.submit(TaskSpec("a", 0.0, curve, blocks=("b0",)))
    assert pool.grant("a")
    z = float(pool.used_fraction([0])[0])
    assert 0 < z < 1
    assert is_fair_share(
        pool, TaskSpec("m", 0.0, RdpCurve.gaussian(sigma=30.0), blocks=("b0",)), 10
    )
    assert not is_fair_share(
        pool, TaskSpec("e", 0.0, RdpCurve.gaussian(sigma=1.0), blocks=("b0",)), 10
    )


def test_bad_input_is_refused_with_clear_errors() -> None:
    pool = pool_with()
    with pytest.raises(UnknownBlockError):
        pool.submit(TaskSpec("a", 0.0, Budget(epsilon=0.1), blocks=("nope",)))
    with pytest.raises(InvalidRequestError, match="max_blocks"):
        TaskSpec("a", 0.0, Budget(epsilon=0.1), max_blocks=0)
    with pytest.raises(InvalidRequestError, match="zero budget"):
        TaskSpec("a", 0.0, Budget(epsilon=0))
    with pytest.raises(InvalidRequestError, match="twice"):
        pool.add_block(BlockSpec("b0", 1.0, Budget(epsilon=1.0)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"profit": "x"}, "profit must be a finite number"),
        ({"profit": float("nan")}, "profit"),
        ({"profit": -1.0}, "profit must be >= 0"),
        ({"timeout": "x"}, "timeout must be a finite number"),
        ({"timeout": 0.0}, "timeout must be > 0"),
        ({"min_blocks": True}, "min_blocks must be an int"),
        ({"min_blocks": 3, "max_blocks": 2}, "could never be granted"),
        ({"blocks": "b0"}, "sequence of block ids"),
        ({"blocks": ("b0",), "min_blocks": 2}, "exceeds the 1 named blocks"),
        ({"max_blocks": 1.5}, "max_blocks must be an int"),
    ],
)
def test_task_specs_refuse_bad_values_with_the_rule(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match):
        TaskSpec("t", 0.0, Budget(epsilon=0.1), **kwargs)  # type: ignore[arg-type]

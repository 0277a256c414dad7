"""Credits wake waiting tasks: when a live driver credits budget back to a block
(:meth:`Pool.credit`), every scheduler that keeps waiting tasks retries those that may use it
(:meth:`Scheduler.on_credit`), with no new block and no tick."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.scheduling import BlockSpec, Pool, Scheduler, TaskSpec, TaskStatus
from blockbudget.scheduling.baselines import Fcfs, RoundRobin
from blockbudget.scheduling.dpack import DPack
from blockbudget.scheduling.dpf import DpfN, DpfT

LEDGER = "__ledger__"

#: name → (scheduler factory, whether its tasks name their blocks)
WAITING_QUEUES: dict[str, tuple[Callable[[], Scheduler], bool]] = {
    "fcfs": (lambda: Fcfs(seed=0), False),
    "round-robin": (lambda: RoundRobin(seed=0), False),
    "dpf-n": (lambda: DpfN(n=1), True),
    "dpf-t": (lambda: DpfT(lifetime=1.0), True),
    "dpack": (lambda: DPack(lifetime=1.0), True),
}


def _setup(name: str) -> tuple[Scheduler, Pool, Callable[[str, float], None]]:
    factory, named = WAITING_QUEUES[name]
    s = factory()
    pool = Pool(Accounting.BASIC)
    for b in ("b", "c"):
        spec = BlockSpec(b, arrival=0.0, capacity=Budget(epsilon=1.0))
        pool.add_block(spec)
        s.on_block(pool, spec)
    pool.submit(TaskSpec(LEDGER, arrival=0.0, demand=Budget(epsilon="1e-12")))

    def arrive(task_id: str, epsilon: float) -> None:
        pool.now += 2.0  # T-unlocking: everything unlocked
        demand = Budget(epsilon=epsilon)
        if named:
            task = TaskSpec(task_id, pool.now, demand, blocks=("b",))
        else:
            task = TaskSpec(task_id, pool.now, demand, max_blocks=1, eligible=frozenset({"b"}))
        pool.submit(task)
        s.on_task(pool, task)
        s.on_tick(pool)

    return s, pool, arrive


@pytest.mark.parametrize("name", sorted(WAITING_QUEUES))
def test_a_credit_grants_a_task_that_waited_for_it(name: str) -> None:
    s, pool, arrive = _setup(name)
    arrive("a", 0.8)
    assert pool.status["a"] is TaskStatus.GRANTED
    arrive("w", 0.5)
    assert pool.status["w"] is TaskStatus.PENDING
    pool.credit("b", Budget(epsilon=0.8), task_id=LEDGER, note="a's grant was cancelled")
    s.on_credit(pool, ["b"])
    assert pool.status["w"] is TaskStatus.GRANTED
    assert pool.charged_blocks["w"] == ["b"]


@pytest.mark.parametrize("name", sorted(WAITING_QUEUES))
def test_a_credit_on_a_block_the_task_may_not_use_changes_nothing(name: str) -> None:
    s, pool, arrive = _setup(name)
    arrive("a", 0.8)
    arrive("w", 0.5)
    n = len(pool.decisions)
    pool.credit("c", Budget(epsilon=0.1), task_id=LEDGER)
    s.on_credit(pool, ["c"])
    assert pool.status["w"] is TaskStatus.PENDING
    assert len(pool.decisions) == n + 1  # the credit only


def test_the_default_hook_does_nothing() -> None:
    class Plain(Scheduler):
        name = "plain"

        def on_task(self, pool: Pool, task: TaskSpec) -> None:
            pass

    pool = Pool(Accounting.BASIC)
    pool.add_block(BlockSpec("b", 0.0, Budget(epsilon=1.0)))
    Plain(seed=0).on_credit(pool, ["b"])
    assert pool.decisions == []

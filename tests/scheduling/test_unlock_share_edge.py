"""An exactly full unlocked share is grantable (DPF-N, DPF-T, DPack), and never more than
the ledger would admit: the unlock limit tolerates float rounding, the pool's capacity does
not."""

from __future__ import annotations

import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.scheduling import BlockSpec, Pool, TaskSpec, TaskStatus
from blockbudget.scheduling.base import Scheduler
from blockbudget.scheduling.dpack import DPack
from blockbudget.scheduling.dpf import DpfN, DpfT
from blockbudget.scheduling.unlocking import UnlockMode

N_SHARE = {
    "dpf-n": lambda: DpfN(n=10),
    "dpf-n-unbatched": lambda: DpfN(n=10, batch=False),
    "dpack-n": lambda: DPack(n=10, unlock=UnlockMode.N),
}
T_SHARE = {"dpf-t": lambda: DpfT(lifetime=10.0), "dpack-t": lambda: DPack(lifetime=10.0)}


def _pool(scheduler: Scheduler, *, epsilon: float = 1.0) -> Pool:
    pool = Pool(Accounting.BASIC)
    spec = BlockSpec("b", arrival=0.0, capacity=Budget(epsilon=epsilon))
    pool.add_block(spec)
    scheduler.on_block(pool, spec)
    return pool


def _arrive(scheduler: Scheduler, pool: Pool, task_id: str, epsilon: float | str) -> None:
    task = TaskSpec(task_id, arrival=pool.now, demand=Budget(epsilon=epsilon), blocks=("b",))
    pool.submit(task)
    scheduler.on_task(pool, task)


@pytest.mark.parametrize("name", sorted(N_SHARE))
def test_one_full_n_share_is_granted_at_its_own_arrival(name: str) -> None:
    s = N_SHARE[name]()
    pool = _pool(s)
    _arrive(s, pool, "t1", "0.1")
    s.on_tick(pool)
    assert pool.status["t1"] is TaskStatus.GRANTED


def test_a_share_and_a_bit_more_still_waits() -> None:
    s = DpfN(n=10)
    pool = _pool(s)
    _arrive(s, pool, "t1", "0.1000001")
    s.on_tick(pool)
    assert pool.status["t1"] is TaskStatus.PENDING


@pytest.mark.parametrize("name", sorted(T_SHARE))
def test_a_full_t_share_is_granted_when_it_unlocks(name: str) -> None:
    s = T_SHARE[name]()
    pool = _pool(s)
    _arrive(s, pool, "t1", "0.3")
    pool.now = 3.0  # 3/10 of the block unlocked: exactly the demand
    s.on_tick(pool)
    assert pool.status["t1"] is TaskStatus.GRANTED


def test_the_pool_never_admits_more_than_the_capacity() -> None:
    s = DpfN(n=1)
    pool = _pool(s)
    _arrive(s, pool, "t1", "0.6")
    _arrive(s, pool, "t2", "0.4000001")
    s.on_tick(pool)
    assert pool.status["t1"] is TaskStatus.GRANTED
    assert pool.status["t2"] is TaskStatus.PENDING

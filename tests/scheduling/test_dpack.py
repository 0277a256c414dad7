"""DPack's batch semantics as in the authors' code: knapsacks over the whole queue, and a pass
that walks the ranking until ``recompute_every`` grants."""

from __future__ import annotations

import numpy as np

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve
from blockbudget.scheduling import BlockSpec, TaskSpec, TaskStatus
from blockbudget.scheduling.dpack import DPack
from blockbudget.scheduling.pool import Pool
from blockbudget.scheduling.unlocking import UnlockMode, WaitingTask

CAP = Budget(epsilon=10.0, delta=1e-7)


def _setup(
    accounting: Accounting, n_blocks: int, tasks: list[TaskSpec]
) -> tuple[DPack, Pool, list[WaitingTask]]:
    sched = DPack(unlock=UnlockMode.NONE)
    pool = Pool(accounting)
    for i in range(n_blocks):
        block = BlockSpec(f"b{i}", 0.0, CAP)
        pool.add_block(block)
        sched.on_block(pool, block)
    items = []
    for task in tasks:
        pool.submit(task)
        item = sched.prepare(pool, task)
        sched.waiting.add(item)
        items.append(item)
    return sched, pool, items


def _brute_efficiency(
    pool: Pool, sched: DPack, ranked: list[WaitingTask], queue: list[WaitingTask]
) -> list[float]:
    """Per block and order: greedy count over the whole queue, argmax orders, 1/available."""
    out = []
    for item in ranked:
        cost = 0.0
        for b in item.blocks.tolist():
            avail = sched.available(pool, np.array([b]))[0]
            demands = [w.vec for w in queue if b in w.blocks.tolist()]
            counts = []
            for a in range(pool.dims):
                if avail[a] <= 0:
                    counts.append(-1)
                    continue
                total, n = 0.0, 0
                for d in sorted(v[a] for v in demands):
                    if total + d <= avail[a]:
                        total, n = total + d, n + 1
                counts.append(n)
            best = max(counts)
            cost += sum(
                item.vec[a] / avail[a]
                for a in range(pool.dims)
                if counts[a] == best and avail[a] > 0
            )
        out.append(item.task.profit / cost)
    return out


def test_knapsacks_count_queued_tasks_that_are_not_ranked() -> None:
    rng = np.random.default_rng(11)
    tasks = []
    for j in range(40):
        first = int(rng.integers(0, 4))
        blocks = tuple(f"b{i}" for i in range(first, min(5, first + int(rng.integers(1, 4)))))
        sigma = float(rng.uniform(0.6, 3.0))
        curve = RdpCurve.gaussian(sigma=sigma) if j % 3 else RdpCurve.laplace(scale=sigma)
        tasks.append(TaskSpec(f"t{j}", 0.0, curve, blocks=blocks, profit=float(1 + j % 4)))
    sched, pool, items = _setup(Accounting.RDP, 5, tasks)
    ranked, others = items[:25], items[25:]
    with_queue = sched.efficiencies(pool, ranked, others)
    alone = sched.efficiencies(pool, ranked)
    np.testing.assert_allclose(with_queue, _brute_efficiency(pool, sched, ranked, items), rtol=1e-9)
    np.testing.assert_allclose(alone, _brute_efficiency(pool, sched, ranked, ranked), rtol=1e-9)
    # the queued-but-unranked tasks move some block's best order, hence some efficiencies
    assert not np.allclose(with_queue, alone)


def test_blocked_tasks_stay_in_the_knapsacks_while_pending() -> None:
    # t_big can never run (its demand exceeds the capacity at every order); it is dropped from
    # the ranking but still counted in b0's knapsack, as in the authors' queue
    big = RdpCurve.gaussian(sigma=0.05)
    tasks = [TaskSpec("t_big", 0.0, big, blocks=("b0",))]
    tasks += [
        TaskSpec(f"t{k}", 0.0, RdpCurve.gaussian(sigma=1.0 + k), blocks=("b0",)) for k in range(3)
    ]
    sched, pool, items = _setup(Accounting.RDP, 1, tasks)
    ok = sched.runnable(pool, items)
    assert ok.tolist() == [False, True, True, True]
    sched.drop_dead(pool, items, ok)
    assert "t_big" not in sched.waiting.tasks
    assert "t_big" in sched.blocked.tasks
    q_block, q_demands = sched._queued_rows(pool, np.array([0]), [])
    assert q_block.tolist() == [0]
    np.testing.assert_array_equal(q_demands[0], items[0].vec)
    # once it is no longer pending (timed out, here rejected) it leaves the knapsacks
    pool.reject("t_big")
    q_block, _ = sched._queued_rows(pool, np.array([0]), [])
    assert q_block.size == 0
    assert "t_big" not in sched.blocked.tasks


def test_a_pass_walks_past_tasks_that_no_longer_fit_until_the_limit() -> None:
    eps = [6.0, 6.0, 3.0, 0.5]
    tasks = [TaskSpec(f"t{k}", 0.0, Budget(epsilon=e), blocks=("b0",)) for k, e in enumerate(eps)]
    sched, pool, items = _setup(Accounting.BASIC, 1, tasks)
    # t1 no longer fits after t0 (12 > 10): skipped; t2 fits; the limit stops before t3
    assert sched._grant_up_to(pool, items, 2) == 2
    assert [pool.status[f"t{k}"] for k in range(4)] == [
        TaskStatus.GRANTED,
        TaskStatus.PENDING,
        TaskStatus.GRANTED,
        TaskStatus.PENDING,
    ]
    assert set(sched.waiting.tasks) == {"t1", "t3"}
    # a walk that reaches the end returns fewer than the limit
    assert sched._grant_up_to(pool, [sched.waiting.tasks["t1"], sched.waiting.tasks["t3"]], 5) == 1
    assert pool.status["t3"] is TaskStatus.GRANTED
    assert pool.charged[0, 0] <= 10.0

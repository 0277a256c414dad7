"""Ties are broken in queue order (arrival, then submission), never by the task id's string,
and ``fcfs-t`` queues under T-unlocking where ``fcfs`` decides on arrival."""

from __future__ import annotations

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.scheduling import BlockSpec, TaskSpec, TaskStatus, get_scheduler
from blockbudget.scheduling.dpack import DPack
from blockbudget.scheduling.dpf import DpfN, DpfT
from blockbudget.scheduling.fcfs_queued import FcfsT
from blockbudget.scheduling.simulator import simulate
from blockbudget.scheduling.unlocking import UnlockMode
from blockbudget.tasks.schedspec import parse_spec

CAP = Budget(epsilon=1.0, delta=1e-6)
BLOCKS = [BlockSpec("b0", 0.0, CAP)]


def _twins(first: str, second: str) -> list[TaskSpec]:
    """Two tasks with equal demands (equal dominant shares) at the same time; the block holds
    one of them."""
    demand = Budget(epsilon=0.6)
    return [TaskSpec(tid, 0.0, demand, blocks=("b0",)) for tid in (first, second)]


def _granted(result_pool: object) -> set[str]:
    status = result_pool.status  # type: ignore[attr-defined]
    return {t for t, s in status.items() if s is TaskStatus.GRANTED}


def test_dpf_breaks_a_tie_in_queue_order_not_by_the_id_string() -> None:
    # N = 1: each arrival unlocks the whole block; batch=False runs a pass at every arrival,
    # so after both arrived only one of the two fits and the tie decides
    for tasks, winner in ((_twins("t2", "t10"), "t2"), (_twins("t10", "t2"), "t10")):
        for sched in (DpfN(n=2, batch=False), DpfT(lifetime=1.0, tick=1.0)):
            result = simulate(sched, BLOCKS, tasks, accounting=Accounting.BASIC)
            assert _granted(result.pool) == {winner}, sched.describe()


def test_dpack_and_fcfs_t_break_a_tie_in_queue_order() -> None:
    for tasks, winner in ((_twins("t2", "t10"), "t2"), (_twins("t10", "t2"), "t10")):
        for sched in (DPack(unlock=UnlockMode.NONE), FcfsT(lifetime=1.0, tick=1.0)):
            result = simulate(sched, BLOCKS, tasks, accounting=Accounting.BASIC)
            assert _granted(result.pool) == {winner}, sched.describe()


def test_earlier_arrival_wins_a_tie_before_submission_order() -> None:
    demand = Budget(epsilon=0.6)
    tasks = [
        TaskSpec("t2", 0.5, demand, blocks=("b0",)),
        TaskSpec("t10", 0.2, demand, blocks=("b0",)),
    ]
    result = simulate(FcfsT(lifetime=1.0, tick=1.0), BLOCKS, tasks, accounting=Accounting.BASIC)
    assert _granted(result.pool) == {"t10"}


def test_fcfs_t_queues_where_fcfs_refuses_on_arrival() -> None:
    # T-unlocking over 4 units, a batch every unit
    tasks = [TaskSpec("a", 0.0, Budget(epsilon=0.5), blocks=("b0",))]
    tasks += [TaskSpec(f"m{k}", 0.1 * k, Budget(epsilon=0.2), blocks=("b0",)) for k in (1, 2)]
    queued = simulate(FcfsT(lifetime=4.0, tick=1.0), BLOCKS, tasks, accounting=Accounting.BASIC)
    pool = queued.pool
    # at t = 1 a quarter is unlocked: "a" (0.5) does not fit, m1 (0.2) does (no head-of-line
    # blocking); at t = 2 (0.3 left) m2 goes before "a"; "a" fits when the block is unlocked
    assert pool.granted_at == {"m1": 1.0, "m2": 2.0, "a": 4.0}
    # the arrival-time FCFS grants everything at once against the whole capacity
    at_once = simulate(get_scheduler("fcfs"), BLOCKS, tasks, accounting=Accounting.BASIC)
    assert at_once.pool.granted_at == {"a": 0.0, "m1": 0.1, "m2": 0.2}


def test_fcfs_t_spec_matches_dpf_t_options() -> None:
    spec = parse_spec("fcfs-t:lifetime=30,tick=10")
    sched = spec.build(noise=None)
    assert isinstance(sched, FcfsT) and sched.lifetime == 30.0 and sched.tick_interval == 10.0
    assert spec.named_only

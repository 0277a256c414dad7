"""Retired blocks are never used again by a live pool: a retirement the ledger's feed shows
makes the pool refuse every fit on the block, so an OPEN task is granted elsewhere instead of
being placed there and refused by the ledger."""

from __future__ import annotations

from pathlib import Path

from blockbudget.budget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks
from tasks.tasks_support import SEED, Clock, make_platform

DAY1, DAY2 = "s/2024-01-01", "s/2024-01-02"


def test_a_waiting_open_task_is_granted_on_a_live_block_not_a_retired_one(
    tmp_path: Path,
) -> None:
    p = make_platform(tmp_path, days=2)
    q = TaskQueue(p, scheduler="fcfs", noise=SeededNoise(SEED), clock=Clock())
    kw = {"selector": AnyBlocks(1), "context": "team", "principal": "ana"}
    a = q.wait(q.submit_budget("s", Budget(epsilon="0.9"), **kw).id, timeout=10)  # type: ignore[arg-type]
    b = q.wait(q.submit_budget("s", Budget(epsilon="0.9"), **kw).id, timeout=10)  # type: ignore[arg-type]
    assert (a.state, a.blocks, b.state, b.blocks) == (
        TaskState.GRANTED,
        (DAY2,),  # FCFS takes the newest block that fits
        TaskState.GRANTED,
        (DAY1,),
    )
    w = q.submit_budget("s", Budget(epsilon="0.5"), **kw)  # type: ignore[arg-type]
    q.pump()
    assert q.task(w.id).state is TaskState.WAITING
    p.ledger.retire([DAY2], reason="operator")
    q.cancel(a.id, by="ana")
    q.pump()
    assert q.task(w.id).state is TaskState.WAITING  # DAY2 is free but retired
    q.cancel(b.id, by="ana")
    q.pump()
    w = q.task(w.id)
    assert (w.state, w.blocks) == (TaskState.GRANTED, (DAY1,)), w.note
    q.close()
    assert p.verify().ok
    p.close()


def test_a_block_retired_as_exhausted_is_skipped(tmp_path: Path) -> None:
    p = make_platform(tmp_path, days=2)
    q = TaskQueue(p, scheduler="fcfs", noise=SeededNoise(SEED), clock=Clock())
    q.pump()  # the pool exists before the charge and the retirement
    p.ledger.charge([DAY2], Budget(epsilon="0.97"), context="team")
    assert p.retire_exhausted("s", min_cost=Budget(epsilon="0.05")) == [DAY2]
    w = q.submit_budget(
        "s", Budget(epsilon="0.02"), selector=AnyBlocks(1), context="team", principal="ana"
    )
    w = q.wait(w.id, timeout=10)
    assert (w.state, w.blocks) == (TaskState.GRANTED, (DAY1,)), w.note
    q.close()
    p.close()

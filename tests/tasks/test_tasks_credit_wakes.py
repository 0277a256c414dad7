"""Credits wake waiting tasks live: a task waiting because a budget grant holds its block is
granted at the first pump after that grant is cancelled or released — no new block, no tick
(the clock does not move)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget.budget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks
from tasks.tasks_support import SEED, Clock, make_platform

SPECS = ["dpack", "dpf-n:n=1", "dpf-t", "fcfs", "round-robin"]


def _settle(q: TaskQueue, clock: Clock) -> None:
    for _ in range(3):  # time passes: DPF-T and DPack unlock, batches and turns run
        clock.t += 30
        q.pump()


@pytest.mark.parametrize("how", ["cancel", "release"])
@pytest.mark.parametrize("spec", SPECS)
def test_a_waiting_task_is_granted_when_the_grant_ahead_of_it_goes(
    tmp_path: Path, spec: str, how: str
) -> None:
    p = make_platform(tmp_path, days=1)
    clock = Clock()
    q = TaskQueue(p, scheduler=spec, noise=SeededNoise(SEED), clock=clock)
    kw = {"selector": AnyBlocks(1), "context": "team", "principal": "ana"}
    a = q.submit_budget("s", Budget(epsilon="0.8"), **kw)  # type: ignore[arg-type]
    _settle(q, clock)
    a = q.task(a.id)
    assert a.state is TaskState.GRANTED and a.reservation_id is not None
    w = q.submit_budget("s", Budget(epsilon="0.5"), **kw)  # type: ignore[arg-type]
    _settle(q, clock)
    assert q.task(w.id).state is TaskState.WAITING
    if how == "cancel":
        q.cancel(a.id, by="ana")
    else:
        p.ledger.release(a.reservation_id)
    q.pump()  # the clock has not moved: no tick; no block arrived
    w = q.task(w.id)
    assert w.state is TaskState.GRANTED, w.note
    assert w.blocks == a.blocks
    q.close()
    assert p.verify().ok
    p.close()

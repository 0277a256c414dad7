"""A task whose deadline passed is expired before budget that came back can serve it."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget import Budget
from blockbudget.query import Query
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks, Named
from tasks.tasks_support import Clock, make_platform


@pytest.mark.parametrize("scheduler", ["fcfs", "dpf-n:n=1", "round-robin"])
def test_a_task_past_its_deadline_is_never_granted_by_budget_that_came_back(
    tmp_path: Path, scheduler: str
) -> None:
    p = make_platform(tmp_path, days=1)
    block = p.ledger.states("s", "team")[0].block
    clock = Clock()
    q = TaskQueue(p, scheduler=scheduler, clock=clock, poll_seconds=0.0)
    outside = p.ledger.reserve([block], Budget(epsilon="0.9"), context="team")
    q.pump()
    selector = Named((block,)) if scheduler.startswith("dpf") else AnyBlocks(1)
    t = q.submit_query(
        "s",
        Query.count(epsilon=0.5),
        selector=selector,
        context="team",
        principal="ana",
        deadline_seconds=5,
    )
    q.pump()
    assert q.task(t.id).state is TaskState.WAITING
    before = p.ledger.state(block, "team").charged
    clock.t += 60  # the pump was busy for a minute: the deadline passed
    p.ledger.release(outside.id)  # ... and the budget came back meanwhile
    q.pump()
    got = q.wait(t.id, timeout=5)
    assert got.state is TaskState.EXPIRED, (got.state, got.note)
    assert got.reservation_id is None and got.result is None
    assert p.ledger.state(block, "team").charged == before  # nothing spent
    assert p.verify().ok
    q.close()
    p.close()

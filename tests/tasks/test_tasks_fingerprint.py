"""A request id names one submission: demands equal as numbers replay it, demands that differ
in any digit (even after the 28th) conflict."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget.budget import Budget
from blockbudget.errors import RequestIdConflictError
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import Newest
from tasks.tasks_support import Clock, make_platform


def test_demands_are_compared_digit_for_digit(tmp_path: Path) -> None:
    p = make_platform(tmp_path, days=1)
    q = TaskQueue(p, scheduler="dpf-n:n=1000", clock=Clock())

    def submit(epsilon: str, rid: str) -> str:
        demand = Budget(epsilon=epsilon)
        task = q.submit_budget("s", demand, selector=Newest(1), context="team", request_id=rid)
        return task.id

    assert submit("0.1", "a") == submit("0.10", "a") == submit("1E-1", "a")
    submit("0.10000000000000000000000000001", "b")
    with pytest.raises(RequestIdConflictError):
        submit("0.10000000000000000000000000004", "b")
    assert len(q.tasks()) == 2
    q.close()
    p.close()

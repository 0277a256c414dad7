"""A task's request id is tied to every digit of its demand (no 28-digit collisions): demands
differing after 28 significant digits are different arguments (409), equal demands written
differently are the same task."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from blockbudget import Budget
from blockbudget.errors import RequestIdConflictError
from blockbudget.platform import Platform
from blockbudget.store import Blocking
from blockbudget.tasks.leader import AlwaysLeader
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import Newest


@pytest.fixture
def queue(tmp_path: Path) -> TaskQueue:
    p = Platform(tmp_path / "home", engine="arrow")
    p.create_stream("s", policy=Budget(epsilon=1, delta=1e-5), blocking=Blocking.by_time("t"))
    p.add_context("team")
    p.ingest("s", pd.DataFrame({"t": pd.date_range("2024-01-01", periods=2, freq="D")}))
    return TaskQueue(p, scheduler="dpf-n:n=10", leadership=AlwaysLeader())


def _submit(queue: TaskQueue, epsilon: str, delta: str = "0", rid: str = "r") -> str:
    demand = Budget(epsilon=epsilon, delta=delta)
    task = queue.submit_budget(
        "s", demand, selector=Newest(1), context="team", principal="ana", request_id=rid
    )
    return task.id


def test_demands_differing_after_28_digits_are_other_arguments(queue: TaskQueue) -> None:
    _submit(queue, "0.10000000000000000000000000001", rid="a")
    with pytest.raises(RequestIdConflictError):
        _submit(queue, "0.10000000000000000000000000004", rid="a")
    _submit(queue, "0.1", "1.0000000000000000000000000001e-6", rid="b")
    with pytest.raises(RequestIdConflictError):
        _submit(queue, "0.1", "1.0000000000000000000000000004e-6", rid="b")
    queue.close()


def test_equal_demands_written_differently_are_one_task(queue: TaskQueue) -> None:
    assert _submit(queue, "0.1", rid="c") == _submit(queue, "0.10", rid="c")
    assert _submit(queue, "0.5", "0", rid="d") == _submit(queue, "5E-1", "0.000", rid="d")
    assert len(queue.tasks()) == 2
    queue.close()

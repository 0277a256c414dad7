"""Live DPF-N: a NAMED demand of exactly one unlocked share (ε_g/N) is granted at its own
arrival, like any smaller one, and the share after it waits for the next arrival's unlock."""

from __future__ import annotations

from pathlib import Path

from blockbudget.budget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import Named
from tasks.tasks_support import SEED, Clock, make_platform


def test_exactly_one_share_is_granted_at_its_arrival(tmp_path: Path) -> None:
    p = make_platform(tmp_path, days=1)
    q = TaskQueue(p, scheduler="dpf-n:n=10", noise=SeededNoise(SEED), clock=Clock())
    kw = {"selector": Named(("s/2024-01-01",)), "context": "team", "principal": "ana"}
    first = q.wait(q.submit_budget("s", Budget(epsilon="0.1"), **kw).id, timeout=10)  # type: ignore[arg-type]
    assert first.state is TaskState.GRANTED, first.note
    # the second arrival unlocks one more share (0.2 in all): a bit more than a share waits
    more = q.submit_budget("s", Budget(epsilon="0.1000001"), **kw)  # type: ignore[arg-type]
    q.pump()
    assert q.task(more.id).state is TaskState.WAITING
    q.close()
    assert p.verify().ok
    p.close()

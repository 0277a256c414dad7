"""Two queues on one database (as two server processes): one decides at a time (the lock
file beside the SQLite database), both accept submissions, the other takes over when the
first dies."""

from __future__ import annotations

from pathlib import Path

from blockbudget.budget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.platform import Platform
from blockbudget.query import Query
from blockbudget.tasks.leader import FileLeadership
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks
from tasks.tasks_support import SEED, Clock, die, grant_reservations, make_platform


def _queue(p: Platform, clock: Clock) -> TaskQueue:
    return TaskQueue(
        p, scheduler="dpf-n:n=1", noise=SeededNoise(SEED), clock=clock, poll_seconds=0.0
    )


def test_one_decides_both_accept_and_the_other_takes_over(tmp_path: Path) -> None:
    p1 = make_platform(tmp_path)
    p2 = Platform(tmp_path, engine="arrow")
    clock = Clock()
    q1, q2 = _queue(p1, clock), _queue(p2, clock)
    assert isinstance(q1.leadership, FileLeadership)
    assert q1.leadership.held and not q2.leadership.held
    eps = Budget(epsilon="0.3")
    a = q2.submit_budget("s", eps, selector=AnyBlocks(1), context="team", principal="ana")
    assert a.state is TaskState.WAITING  # stored by the follower, not decided
    q2.pump()
    assert q2.task(a.id).state is TaskState.WAITING and grant_reservations(p1, "ana") == []
    q1.pump()  # the leader finds it and decides
    assert q1.task(a.id).state is TaskState.GRANTED
    # a query submitted to the follower runs once the new leader takes over
    b = q2.submit_query(
        "s", Query.count(epsilon=0.2), selector=AnyBlocks(2), context="team", principal="bo"
    )
    die(q1)
    done = q2.wait(b.id, timeout=20)
    assert q2.leadership.held and done.state is TaskState.DONE, done.note
    assert len(grant_reservations(p2, "ana")) == 1 and len(grant_reservations(p2, "bo")) == 1
    assert p2.verify().ok
    q2.close()
    p1.close()
    p2.close()

"""The default scheduler (``dpf-n:n=10,lend=1``, DPF with lending) grants a task that fits as
soon as no other waiting task competes for its blocks; under contention it decides as plain
DPF, and ``why`` names the competitors and the unlock a task waits for (issue 30, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget.budget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.platform import Platform
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import DEFAULT_SCHEDULER, TaskQueue
from blockbudget.tasks.selectors import Named, Newest
from tasks.tasks_support import SEED, Clock, grant_reservations, make_platform

BLOCKS = ("s/2024-01-01", "s/2024-01-02")


#: DPF-N with lending, the default scheduler.
LENDING = "dpf-n:n=10,lend=1"


def _queue(p: Platform, clock: Clock, scheduler: str | None = None) -> TaskQueue:
    return TaskQueue(p, scheduler=scheduler, noise=SeededNoise(SEED), clock=clock, poll_seconds=0.0)


def test_a_lone_task_that_fits_is_granted_within_one_pump(tmp_path: Path) -> None:
    """The issue's case, with the default scheduler (none given, none stored): ε 0.2 on the
    newest 4 blocks of a fresh stream (ε_g = 1; DPF-N with N = 10 unlocks 0.1 per arrival).
    Submitted to a follower (as a second server process stores it), one pump of the leader
    grants it; submitted to the leader, at once."""
    p = make_platform(tmp_path)
    leader_p = Platform(tmp_path, engine="arrow")
    clock = Clock()
    leader, follower = _queue(leader_p, clock), _queue(p, clock)
    assert leader.leadership.held and not follower.leadership.held
    assert leader.scheduler_for("s") == DEFAULT_SCHEDULER == LENDING
    task = follower.submit_budget(
        "s", Budget(epsilon="0.2"), selector=Newest(4), context="team", principal="ana"
    )
    assert task.state is TaskState.WAITING  # stored, not decided
    leader.pump()
    granted = leader.task(task.id)
    assert granted.state is TaskState.GRANTED, leader.why(task.id).reason
    assert len(granted.blocks) == 4 and len(grant_reservations(p, "ana")) == 1
    # on the leader: granted when the submission returns (the other four blocks' 0.2)
    again = leader.submit_budget(
        "s", Budget(epsilon="0.2"), selector=Newest(4), context="team", principal="bo"
    )
    assert again.state is TaskState.GRANTED, leader.why(again.id).reason
    # a task its blocks cannot afford waits for budget, and why says nothing competes
    big = leader.submit_budget(
        "s", Budget(epsilon="0.9"), selector=Newest(4), context="team", principal="bo"
    )
    assert big.state is TaskState.WAITING
    reason = leader.why(big.id).reason
    assert "no other task competes for its blocks" in reason and "can afford" in reason
    leader.close()
    follower.close()
    assert p.verify().ok
    leader_p.close()
    p.close()


def _contend(tmp_path: Path, scheduler: str | None) -> tuple[TaskQueue, TaskQueue, Clock]:
    p = make_platform(tmp_path)
    clock = Clock()
    return _queue(Platform(tmp_path, engine="arrow"), clock, scheduler), _queue(p, clock), clock


@pytest.mark.parametrize("scheduler", [None, "dpf-n:n=10"])
def test_under_contention_the_default_decides_as_dpf(tmp_path: Path, scheduler: str | None) -> None:
    """A (ε 0.25) and B (ε 0.3) arrive together on the same two blocks: 0.2 is unlocked, so
    neither runs, and neither may borrow (each competes with the other) — exactly plain DPF,
    whose decisions the default repeats step for step. C (ε 0.05) unlocks 0.3 and is granted
    at arrival; at the next pass A (smaller dominant share than B) takes the unlocked rest.
    Then B competes with nothing: the default lends it the block's locked budget, plain DPF
    (lend=0) keeps it waiting for arrivals."""
    leader, follower, clock = _contend(tmp_path, scheduler)

    def submit(eps: str, who: str) -> str:
        kw = {"selector": Named(BLOCKS), "context": "team", "principal": who}
        return follower.submit_budget("s", Budget(epsilon=eps), **kw).id  # type: ignore[arg-type]

    a, b = submit("0.25", "ana"), submit("0.3", "bo")
    leader.pump()
    assert [leader.task(t).state for t in (a, b)] == [TaskState.WAITING] * 2
    why_a, why_b = leader.why(a).reason, leader.why(b).reason
    assert f"with 1 other waiting task(s) ({b[:12]}; 0 of them come before it" in why_a, why_a
    assert f"({a[:12]}; 1 of them come before it" in why_b, why_b
    assert "it waits for 1 more arriving task(s) naming them (each unlocks 1/10" in why_a
    assert "it waits for 1 more arriving task(s)" in why_b, why_b  # alone; A comes first
    assert "2 block(s) can afford it" in why_a  # the ledger's side: they could, DPF does not
    c = submit("0.05", "cy")
    leader.pump()
    assert leader.task(c).state is TaskState.GRANTED  # its own unlock: the fast path
    assert leader.task(a).state is TaskState.WAITING  # A waits for the pass
    clock.t += 1.0  # one tick: DPF's pass over the blocks that unlocked
    leader.pump()
    assert leader.task(a).state is TaskState.GRANTED
    b_now = leader.task(b)
    if scheduler is None:
        assert b_now.state is TaskState.GRANTED, leader.why(b).reason  # lent: nothing competes
    else:
        assert b_now.state is TaskState.WAITING
        reason = leader.why(b).reason
        assert "no other task competes" in reason and "lends nothing (lend=0)" in reason
        assert "it waits for 3 more arriving task(s)" in reason, reason  # 0.6 of 0.3 unlocked
    p = leader.platform
    leader.close()
    follower.close()
    assert p.verify().ok
    p.close()
    follower.platform.close()


def test_a_take_over_does_not_lend_to_the_first_task_it_re_enters(tmp_path: Path) -> None:
    """A new leader re-enters waiting tasks one by one; it settles only once all are in, so
    two that compete are decided as DPF decides, not the first one lent to. When one is
    cancelled, the other is alone and is lent to at the next pump."""
    leader, follower, _ = _contend(tmp_path, None)
    kw = {"selector": Named(BLOCKS), "context": "team"}
    a = follower.submit_budget("s", Budget(epsilon="0.25"), principal="ana", **kw)  # type: ignore[arg-type]
    b = follower.submit_budget("s", Budget(epsilon="0.3"), principal="bo", **kw)  # type: ignore[arg-type]
    leader.close()  # no leader has seen them; the next pump takes the queue over
    leader.pump()
    assert [leader.task(t.id).state for t in (a, b)] == [TaskState.WAITING] * 2
    leader.cancel(b.id, by="bo")  # its competitor leaves: A is alone, lent at the next pump
    leader.pump()
    assert leader.task(a.id).state is TaskState.GRANTED, leader.why(a.id).reason
    p = leader.platform
    leader.close()
    follower.close()
    p.close()
    follower.platform.close()


def test_a_submission_is_decided_on_the_ledger_as_it_is_now(tmp_path: Path) -> None:
    """The leader decides a lone task when its submission arrives, so it first brings its
    pools to the ledger: a direct charge made since the last pump leaves the block 0.1, and a
    task for 0.3 there waits (it was lent to on the pool's stale view, and the ledger's refusal
    of that grant refused the task)."""
    p = make_platform(tmp_path)
    q = _queue(p, Clock())
    first = q.submit_budget("s", Budget(epsilon="0.1"), selector=Named(BLOCKS[1:]), context="team")
    assert first.state is TaskState.GRANTED  # the stream's pool exists from here on
    p.ledger.charge([BLOCKS[0]], Budget(epsilon="0.9"), context="team")
    t = q.submit_budget("s", Budget(epsilon="0.3"), selector=Named(BLOCKS[:1]), context="team")
    assert t.state is TaskState.WAITING, t.note
    assert "they cannot afford it" in q.why(t.id).reason
    q.close()
    assert p.verify().ok
    p.close()

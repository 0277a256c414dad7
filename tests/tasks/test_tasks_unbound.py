"""A selector task is never bound to — so never granted on — fewer blocks than it needs.

Schedulers that serve only tasks naming their blocks (DPF, DPack) bind a selector task when it
enters them. An ``AnyBlocks(k, min_k)`` task offered fewer than ``min_k`` blocks was bound to
those it could see and granted there (plain DPF at once for a fair-share demand, DPF with
lending at once for any demand that fits): it now waits unbound, ``why`` says it waits for
more blocks (naming none), and it enters its scheduler — bound to ``min_k`` blocks at least —
once enough exist. An ``InRange(k)`` whose range lost blocks to retirement is refused.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from userids_support import ShiftNoise

from blockbudget.budget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.platform import Platform
from blockbudget.store import Blocking, LatePolicy
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks, InRange
from blockbudget.userids import release_max_id
from tasks.tasks_support import SEED, Clock, add_days, grant_reservations, make_platform

#: Plain DPF, DPF lending to uncontended tasks, DPack: the NAMED-only schedulers.
NAMED_ONLY = ("dpf-n:n=10", "dpf-n:n=10,lend=1", "dpack")


def _queue(p: Platform, clock: Clock, scheduler: str) -> TaskQueue:
    return TaskQueue(p, scheduler=scheduler, noise=SeededNoise(SEED), clock=clock, poll_seconds=0.0)


def _unlock_dpack(q: TaskQueue, clock: Clock, scheduler: str, task_id: str) -> None:
    """DPack (T-unlocking over 10 s) grants once a bound task's new block unlocked enough:
    the task is bound and waits for DPack, not for blocks, until the clock moves on."""
    if scheduler == "dpack":
        assert q.task(task_id).state is TaskState.WAITING
        assert "it has not entered" not in q.why(task_id).reason  # bound now
        clock.t += 10.0
        q.pump()


@pytest.mark.parametrize("scheduler", NAMED_ONLY)
def test_an_any_task_waits_unbound_until_min_k_blocks_exist(tmp_path: Path, scheduler: str) -> None:
    """ε 0.05 (half of DPF's fair share ε_g/N, so DPF grants it at its own arrival) on at
    least 3 blocks of a 2-block stream: it waits, and nothing is reserved, however long (DPack
    unlocks a block over 10 s). The third block comes; within one pump it enters its scheduler
    bound to the 3 blocks and DPF grants it (DPack once the new block unlocked enough)."""
    p = make_platform(tmp_path, days=2)
    clock = Clock()
    q = _queue(p, clock, scheduler)
    t = q.submit_budget(
        "s", Budget(epsilon="0.05"), selector=AnyBlocks(3, min_k=3), context="team", principal="a"
    )
    for _ in range(3):
        clock.t += 10.0
        q.pump()
    assert q.task(t.id).state is TaskState.WAITING
    assert grant_reservations(p, "a") == [] and p.ledger.reservations() == []
    reason = q.why(t.id).reason
    assert "it needs 3 and 2 live one(s) exist: it waits for more blocks" in reason, reason
    assert "it has not entered its scheduler yet" in reason and "s/2024" not in reason, reason
    add_days(p, "2024-01-03", 1)
    q.pump()
    _unlock_dpack(q, clock, scheduler, t.id)
    done = q.task(t.id)
    assert done.state is TaskState.GRANTED, q.why(t.id).reason
    assert len(done.blocks) == 3 and len(grant_reservations(p, "a")) == 1
    q.close()
    assert p.verify().ok
    p.close()


@pytest.mark.parametrize("scheduler", NAMED_ONLY)
def test_an_any_task_stored_by_another_process_waits_unbound_too(
    tmp_path: Path, scheduler: str
) -> None:
    """The leader meets the task at a poll (as a second server process stores it) or at a
    take-over: the same rule, and the fourth block it waits for lets it in."""
    p = make_platform(tmp_path, days=2)
    clock = Clock()
    leader = _queue(Platform(tmp_path, engine="arrow"), clock, scheduler)
    follower = _queue(p, clock, scheduler)
    sel = AnyBlocks(4, min_k=4)
    t = follower.submit_budget("s", Budget(epsilon="0.05"), selector=sel, context="team")
    leader.pump()
    assert leader.task(t.id).state is TaskState.WAITING
    leader.close()  # the next pump takes the queue over and re-enters the waiting task
    add_days(p, "2024-01-03", 1)
    leader.pump()
    assert leader.task(t.id).state is TaskState.WAITING  # 3 of 4
    assert "it needs 4 and 3 live one(s) exist" in leader.why(t.id).reason
    add_days(p, "2024-01-04", 1)
    leader.pump()
    _unlock_dpack(leader, clock, scheduler, t.id)
    done = leader.task(t.id)
    assert done.state is TaskState.GRANTED and len(done.blocks) == 4, leader.why(t.id).reason
    leader.close()
    follower.close()
    leader.platform.close()
    p.close()


def test_an_unbound_task_expires_and_cancels_like_any_waiting_task(tmp_path: Path) -> None:
    p = make_platform(tmp_path, days=1)
    clock = Clock()
    q = _queue(p, clock, "dpf-n:n=10,lend=1")
    kw = {"selector": AnyBlocks(min_k=2), "context": "team"}
    due = q.submit_budget("s", Budget(epsilon="0.05"), deadline_seconds=5.0, **kw)  # type: ignore[arg-type]
    gone = q.submit_budget("s", Budget(epsilon="0.05"), **kw)  # type: ignore[arg-type]
    clock.t += 6.0
    q.pump()
    assert q.task(due.id).state is TaskState.EXPIRED
    assert q.cancel(gone.id, by="").state is TaskState.CANCELLED
    add_days(p, "2024-01-02", 1)
    q.pump()
    assert [q.task(t.id).state for t in (due, gone)] == [TaskState.EXPIRED, TaskState.CANCELLED]
    assert p.ledger.reservations() == []
    q.close()
    p.close()


def test_a_scheduler_change_keeps_an_unbound_task_waiting(tmp_path: Path) -> None:
    """A stream's new scheduler re-enters its waiting tasks: the unbound one too."""
    p = make_platform(tmp_path, days=1)
    q = _queue(p, Clock(), "dpf-n:n=10")
    t = q.submit_budget("s", Budget(epsilon="0.05"), selector=AnyBlocks(min_k=2), context="team")
    q.set_scheduler("s", "dpf-n:n=10,lend=1")
    q.pump()
    assert q.task(t.id).state is TaskState.WAITING
    add_days(p, "2024-01-02", 1)
    q.pump()
    assert q.task(t.id).state is TaskState.GRANTED, q.why(t.id).reason
    q.close()
    p.close()


@pytest.mark.parametrize("scheduler", [*NAMED_ONLY, "fcfs"])
def test_a_range_task_whose_blocks_retired_is_refused_not_bound_to_fewer(
    tmp_path: Path, scheduler: str
) -> None:
    """InRange(3) over a range of 3 blocks, one retired before the task enters its
    scheduler: it is refused (the range cannot hold 3 live blocks again), never granted on 2."""
    p = make_platform(tmp_path, days=3)
    clock = Clock()
    leader = _queue(Platform(tmp_path, engine="arrow"), clock, scheduler)
    follower = _queue(p, clock, scheduler)
    sel = InRange(3, datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 4, tzinfo=UTC))
    t = follower.submit_budget("s", Budget(epsilon="0.05"), selector=sel, context="team")
    p.ledger.retire(["s/2024-01-02"], reason="operator")
    leader.pump()
    refused = leader.task(t.id)
    assert refused.state is TaskState.REFUSED, refused
    assert "its range holds 2 live block(s); it needs 3" in refused.note, refused.note
    assert p.ledger.reservations() == []
    leader.close()
    follower.close()
    leader.platform.close()
    p.close()


def _release(p: Platform, shift: float, ctx: str) -> int:
    """A maximum-id release of stream ``u`` shifted by ``shift`` (charged in a new context
    ``ctx``, closed after); its safe maximum."""
    p.add_context(ctx)
    out = release_max_id(p, "u", context=ctx, epsilon=1e9, noise=ShiftNoise(shift))
    p.ledger.close_context(ctx)
    return out.safe_max


@pytest.mark.parametrize("scheduler", ["dpf-n:n=10", "dpf-n:n=10,lend=1"])
def test_on_a_user_stream_an_any_task_waits_for_a_release_that_makes_min_k_known(
    tmp_path: Path, scheduler: str
) -> None:
    """The case tests/service/test_max_id.py caught: users 0..24 in blocks of 10, a release
    that makes the first two blocks known. AnyBlocks(3, min_k=3) was bound to those two and
    granted (at once: ε 1e10 is within DPF's fair share ε_g/N); it now waits, and the next
    release, which makes the third block known, lets it in at the next pump."""
    p = Platform(tmp_path, engine="arrow")
    p.create_stream(
        "u",
        policy=Budget(epsilon=1e12),
        blocking=Blocking.by_user("uid", 10),
        late_policy=LatePolicy.DROP,
    )
    p.add_context("c")
    p.ingest("u", pd.DataFrame({"uid": range(25), "v": [1.0] * 25}))
    assert 19 <= _release(p, -3.0, "ids1") < 29  # blocks 0-9 and 10-19 known, 20-29 not
    q = _queue(p, Clock(), scheduler)
    sel = AnyBlocks(3, min_k=3)
    t = q.submit_budget("u", Budget(epsilon=1e10), selector=sel, context="c", principal="a")
    q.pump()
    assert q.task(t.id).state is TaskState.WAITING and grant_reservations(p, "a") == []
    reason = q.why(t.id).reason
    assert "it needs 3 and 2 live one(s) exist: it waits for more blocks" in reason, reason
    assert "u/u0" not in reason, reason
    assert _release(p, 10.0, "ids2") >= 29
    q.pump()
    done = q.task(t.id)
    assert done.state is TaskState.GRANTED and len(done.blocks) == 3, q.why(t.id).reason
    q.close()
    p.close()


def test_a_poll_retries_unbound_tasks_only_when_what_they_wait_for_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many unbound tasks cost a poll one read of the stream's known-id bound, not a try
    each: they try again when blocks come (or, on a user stream, a new release), not at every
    poll (2,000 of them made a pump take a second)."""
    from blockbudget.tasks.decider import Decider

    p = make_platform(tmp_path, days=2)
    clock = Clock()
    q = _queue(p, clock, "dpf-n:n=10")
    ids = [
        q.submit_budget(
            "s",
            Budget(epsilon="0.01"),
            selector=AnyBlocks(3, min_k=3),
            context="team",
            principal="a",
        ).id
        for _ in range(5)
    ]
    tries: list[str] = []
    enter = Decider._enter

    def counted(self: Decider, task: object) -> None:
        tries.append(task.id)  # type: ignore[attr-defined]
        enter(self, task)  # type: ignore[arg-type]

    monkeypatch.setattr(Decider, "_enter", counted)
    for _ in range(4):  # polls with nothing new: one retry round at most (the first poll)
        clock.t += 1.0
        q.pump()
    assert len(tries) <= len(ids), tries
    before = len(tries)
    for _ in range(3):
        clock.t += 1.0
        q.pump()
    assert len(tries) == before  # nothing changed: nobody tried again
    add_days(p, "2024-01-03", 1)
    q.pump()  # a new block: every one tries, and enters
    assert sorted(tries[before:]) == sorted(ids)
    assert all(q.task(t).state is TaskState.GRANTED for t in ids), q.why(ids[0]).reason
    q.close()
    assert p.verify().ok
    p.close()

"""The task queue's checks and controls: refused submissions, replays, BUDGET grants and
credits, deadlines, cancel, why, revoke, scheduler overrides, NAMED-only binding."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from blockbudget.budget import Budget
from blockbudget.errors import (
    BlockBudgetError,
    InvalidRequestError,
    RequestIdConflictError,
    TaskStateError,
    UnknownBlockError,
)
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.platform import Platform
from blockbudget.query import Query
from blockbudget.scheduling import Pool, Scheduler, TaskShape, TaskSpec, scheduler_classes
from blockbudget.tasks import schedspec
from blockbudget.tasks.leader import Leadership
from blockbudget.tasks.model import TaskState, WorkKind
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks, InRange, Named, Newest
from tasks.tasks_support import SEED, Clock, add_days, die, grant_reservations, make_platform

D = "s/2024-01-0"  # block ids are s/2024-01-01 ... s/2024-01-06


def _queue(p: Platform, spec: str, clock: Clock | None = None) -> TaskQueue:
    return TaskQueue(p, scheduler=spec, noise=SeededNoise(SEED), clock=clock or Clock())


@pytest.fixture
def p(tmp_path: Path) -> Iterator[Platform]:
    platform = make_platform(tmp_path)
    yield platform
    platform.close()


def test_refused_submissions_store_and_charge_nothing(p: Platform) -> None:
    q = _queue(p, "fcfs")
    seq = p.ledger.audit_seq()
    count = Query.count(epsilon=0.1)
    from datetime import UTC, datetime

    bad: list[Callable[[], object]] = [
        lambda: q.submit_query(
            "s",
            Query.mean("nope", epsilon=0.1, lower=0, upper=1),
            selector=AnyBlocks(),
            context="team",
        ),
        lambda: q.submit_query("s", count, selector=Named(("s/nope",)), context="team"),
        lambda: q.submit_query("s", count, selector=AnyBlocks(), context="nobody"),
        lambda: q.submit_query("zz", count, selector=AnyBlocks(), context="team"),
        lambda: q.submit_budget("s", Budget(epsilon=2), selector=AnyBlocks(), context="team"),
        lambda: q.submit_query(
            "s",
            count,
            context="team",
            selector=InRange(3, datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 3, tzinfo=UTC)),
        ),
        lambda: q.submit_budget(
            "s",
            Budget(epsilon="0.1"),
            selector=Named((f"{D}1",)),
            context="team",
            significance={f"{D}2": 1.0},
        ),
        lambda: q.submit_budget(
            "s", Budget(epsilon="0.1"), selector=AnyBlocks(), context="team", deadline_seconds=-1
        ),
    ]
    for submit in bad:
        with pytest.raises(BlockBudgetError):
            submit()
    assert q.tasks() == [] and p.ledger.audit_seq() == seq
    q.close()


def test_a_request_id_names_one_task(p: Platform) -> None:
    q = _queue(p, "dpf-n:n=10")
    kw = {"selector": Named((f"{D}1",)), "context": "team", "principal": "ana"}
    a = q.submit_budget("s", Budget(epsilon="0.5"), request_id="r1", **kw)  # type: ignore[arg-type]
    b = q.submit_budget("s", Budget(epsilon="0.5"), request_id="r1", **kw)  # type: ignore[arg-type]
    assert a.id == b.id and len(q.tasks()) == 1
    with pytest.raises(RequestIdConflictError):
        q.submit_budget("s", Budget(epsilon="0.4"), request_id="r1", **kw)  # type: ignore[arg-type]
    q.close()


def test_a_budget_grant_is_handed_over_and_what_it_leaves_comes_back(p: Platform) -> None:
    q = _queue(p, "dpf-n:n=1")
    one = Named((f"{D}1",))
    a = q.submit_budget("s", Budget(epsilon="0.6"), selector=one, context="team", principal="ana")
    assert a.state is TaskState.GRANTED and a.blocks == (f"{D}1",)
    assert a.reservation_id is not None
    res = p.ledger.reservation(a.reservation_id)
    assert res.holder == "ana" and res.cost == Budget(epsilon="0.6")
    # the holder spends 0.1 of it and releases the rest
    p.ledger.charge([f"{D}1"], Budget(epsilon="0.1"), reservation_id=res.id)
    p.ledger.release(res.id)
    q.pump()  # the pool learns of the release: 0.5 comes back
    b = q.submit_budget("s", Budget(epsilon="0.8"), selector=one, context="team", principal="bo")
    assert b.state is TaskState.GRANTED, b.note  # 0.1 + 0.8 fits; 0.6 + 0.8 would not
    assert grant_reservations(p, "ana") == [res.id] and len(grant_reservations(p, "bo")) == 1
    assert p.verify().ok
    q.close()


def test_a_charge_made_outside_the_queue_is_seen(p: Platform) -> None:
    q = _queue(p, "dpf-n:n=1")
    p.ledger.charge([f"{D}1"], Budget(epsilon="0.5"), context="team")
    t = q.submit_budget("s", Budget(epsilon="0.6"), selector=Named((f"{D}1",)), context="team")
    assert t.state is TaskState.WAITING  # the pool counts the direct charge
    why = q.why(t.id)
    assert why.affordable == 0 and [s.block for s in why.shortfall] == [f"{D}1"]
    # exact forms: 0.6 asked, 1 − 0.5 left (ε_g = 1, δ_g = 0)
    assert why.shortfall[0].needs == {"epsilon": "0.6", "delta": "0"}
    assert why.shortfall[0].has == {"epsilon": "0.5", "delta": "0"}
    assert "0 of the 1 block(s)" in why.reason and "DPF" in why.reason
    assert grant_reservations(p, "") == []
    q.close()


def test_named_only_schedulers_bind_selectors_to_the_blocks_with_most_budget_left(
    p: Platform,
) -> None:
    q = _queue(p, "dpf-n:n=1")
    eps = Budget(epsilon="0.1")
    first = q.submit_budget("s", eps, selector=AnyBlocks(2), context="team", principal="a")
    assert first.blocks == (f"{D}5", f"{D}6")  # all full: newest first on ties
    second = q.submit_budget("s", eps, selector=AnyBlocks(2), context="team", principal="a")
    assert second.blocks == (f"{D}3", f"{D}4")
    newest = q.submit_budget("s", eps, selector=Newest(1), context="team", principal="a")
    assert newest.blocks == (f"{D}6",)
    q.close()


def test_deadlines_expire(p: Platform) -> None:
    clock = Clock()
    q = _queue(p, "sage-block-conserve", clock)  # waits for blocks to arrive
    t = q.submit_budget(
        "s", Budget(epsilon="0.1"), selector=AnyBlocks(1), context="team", deadline_seconds=10
    )
    clock.t += 5
    q.pump()
    assert q.task(t.id).state is TaskState.WAITING
    clock.t += 6
    q.pump()
    assert q.task(t.id).state is TaskState.EXPIRED
    q.close()


class HoldForever(Scheduler):
    """Reserves a waiting task's demand on every block it may use and never grants."""

    name = "hold-forever"
    shapes = frozenset({TaskShape.NAMED, TaskShape.OPEN})

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        for block in pool.blocks:
            if task.may_use(block.block_id):
                pool.reserve(task.task_id, block.block_id, task.demand)


@pytest.fixture
def hold_forever(monkeypatch: pytest.MonkeyPatch) -> None:
    known = dict(scheduler_classes(), **{HoldForever.name: HoldForever})
    monkeypatch.setattr(schedspec, "scheduler_classes", lambda: known)


def test_why_explains_and_cancel_releases_holds(p: Platform, hold_forever: None) -> None:
    q = _queue(p, "hold-forever")
    p.ledger.charge([f"{D}1"], Budget(epsilon="0.95"), context="team")
    t = q.submit_budget(
        "s",
        Budget(epsilon="0.1"),
        selector=Named((f"{D}1", f"{D}2")),
        context="team",
        principal="ana",
    )
    why = q.why(t.id)
    assert why.state is TaskState.WAITING and why.affordable == 1
    assert [s.block for s in why.shortfall] == [f"{D}1"]
    assert "1 of the 2 block(s)" in why.reason and "hold-forever" in why.reason
    holds = [r for r in p.ledger.reservations() if r.holder == t.id]
    assert [r.blocks for r in holds] == [(f"{D}2",)] and holds[0].state.value == "open"
    with pytest.raises(UnknownBlockError):
        q.cancel(t.id, by="mallory")
    done = q.cancel(t.id, by="ana")
    assert done.state is TaskState.CANCELLED and "ana" in done.note
    assert p.ledger.reservation(holds[0].id).state.value == "closed"
    assert q.cancel(t.id, by="ana").state is TaskState.CANCELLED  # idempotent
    assert q.why(t.id).reason.startswith("cancelled")
    assert p.verify().ok
    q.close()


def test_a_new_leader_releases_a_dead_leaders_holds(p: Platform, hold_forever: None) -> None:
    q1 = _queue(p, "hold-forever")
    t = q1.submit_budget("s", Budget(epsilon="0.1"), selector=AnyBlocks(1), context="team")
    old = [r.id for r in p.ledger.reservations() if r.holder == t.id]
    assert len(old) == 6
    # q1's process dies (never closed); a new leader takes over
    die(q1)
    q2 = _queue(Platform(p.home, engine="arrow"), "hold-forever")
    assert {p.ledger.reservation(r).state.value for r in old} == {"closed"}
    again = [r for r in p.ledger.reservations() if r.holder == t.id and r.state.value == "open"]
    assert len(again) == 6  # the task is back in front of the scheduler, which holds again
    assert q2.task(t.id).state is TaskState.WAITING
    q2.close()


def test_cancelling_a_granted_budget_releases_its_reservation(p: Platform) -> None:
    q = _queue(p, "fcfs")
    t = q.submit_budget(
        "s", Budget(epsilon="0.5"), selector=AnyBlocks(1), context="team", principal="ana"
    )
    assert t.state is TaskState.GRANTED and t.reservation_id is not None
    q.cancel(t.id, by="admin", admin=True)
    assert p.ledger.reservation(t.reservation_id).state.value == "closed"
    run = q.submit_query(
        "s", Query.count(epsilon=0.1), selector=AnyBlocks(1), context="team", principal="ana"
    )
    assert q.wait(run.id, timeout=20).state is TaskState.DONE
    with pytest.raises(TaskStateError, match="already done"):
        q.cancel(run.id, by="ana")
    q.close()


def test_a_cancel_that_wins_the_race_with_a_grant_leaks_no_reservation(tmp_path: Path) -> None:
    p = make_platform(tmp_path, days=1)
    q = TaskQueue(p, scheduler="fcfs", poll_seconds=1e9, clock=Clock())
    p.ledger.charge([f"{D}1"], Budget(epsilon="0.9"), context="team")
    t = q.submit_budget(
        "s", Budget(epsilon="0.5"), selector=AnyBlocks(1), context="team", principal="ana"
    )
    assert t.state is TaskState.WAITING  # FCFS waits for a block that fits
    # another process cancels it; this leader has not looked yet
    assert q.rows.move(t.id, frm=(TaskState.WAITING,), to=TaskState.CANCELLED, when=1.0)
    add_days(p, "2024-01-02", 1)
    q.pump()  # the leader grants it: the row is no longer waiting, so the grant goes back
    assert q.task(t.id).state is TaskState.CANCELLED
    (rid,) = grant_reservations(p, "ana")
    assert p.ledger.reservation(rid).state.value == "closed"
    assert p.verify().ok
    q.close()
    p.close()


def test_revoke_cancels_a_principals_live_tasks_only(p: Platform) -> None:
    q = _queue(p, "sage-block-conserve")
    eps = Budget(epsilon="0.1")
    mine = [
        q.submit_budget("s", eps, selector=AnyBlocks(1), context="team", principal="ana")
        for _ in range(2)
    ]
    other = q.submit_budget("s", eps, selector=AnyBlocks(1), context="team", principal="bo")
    assert sorted(q.revoke("ana")) == sorted(t.id for t in mine)
    assert {q.task(t.id).state for t in mine} == {TaskState.CANCELLED}
    assert q.task(other.id).state is TaskState.WAITING
    assert q.revoke("ana") == []
    q.close()


def test_a_stream_scheduler_override_is_stored_and_applied(p: Platform) -> None:
    q = _queue(p, "sage-block-conserve")
    t = q.submit_budget("s", Budget(epsilon="0.1"), selector=AnyBlocks(1), context="team")
    assert q.task(t.id).state is TaskState.WAITING
    with pytest.raises(InvalidRequestError):
        q.set_scheduler("s", "offline-optimum")
    q.set_scheduler("s", "fcfs")  # its waiting tasks go to a fresh FCFS pool: granted
    assert q.scheduler_for("s") == "fcfs"
    assert q.task(t.id).state is TaskState.GRANTED
    other = TaskQueue(p, scheduler="dpack", leadership=_Follower())
    assert other.scheduler_for("s") == "fcfs"
    assert q.tasks(kind=WorkKind.BUDGET, state=TaskState.GRANTED)[0].id == t.id
    other.close()
    q.close()


class _Follower(Leadership):
    """A leadership another process holds."""

    @property
    def held(self) -> bool:
        return False

    def try_acquire(self) -> bool:
        return False

    def release(self) -> None:
        pass

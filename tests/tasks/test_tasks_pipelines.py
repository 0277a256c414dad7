"""The PIPELINE family on a real platform with a few days of flights: Sage's Block/Conserve
splits each new block evenly among the waiting pipelines (ledger reservations per pipeline),
an ACCEPT hands what the pipeline held to the others, every run is exactly one grant
reservation that the iteration draws from, cancel releases at once and discards a running
iteration's result, and failures say nothing of the data."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from training.conftest import CONTEXT, STREAM, flight_days, make_platform

from blockbudget.errors import InvalidRequestError
from blockbudget.ledger import ReservationState
from blockbudget.platform import Platform
from blockbudget.scheduling import DecisionKind
from blockbudget.tasks.model import Task, TaskState, WorkKind
from blockbudget.tasks.pipeline_work import PipelineWork
from blockbudget.tasks.pipelines import PipelineFamily, make_strategy
from blockbudget.tasks.selectors import AnyBlocks

#: ACCEPTs at its first run (ε = 0.5 on one day: the loss bound is about 2.6 with seed 7).
EASY = PipelineWork(kind="adassp-regression", target=1000.0, epsilon0=0.5)
#: RETRYs forever (no model has a loss below 1e-9).
NEVER = PipelineWork(kind="adassp-regression", target=1e-9, epsilon0=0.125)


class Rows:
    """The queue's task rows, as the family sees them: each task's state and every move."""

    def __init__(self) -> None:
        self.states: dict[str, list[tuple[TaskState, str, Mapping[str, Any] | None]]] = {}
        self.state: dict[str, TaskState] = {}

    def move(
        self,
        task_id: str,
        *,
        frm: Collection[TaskState],
        to: TaskState,
        when: float | None = None,
        note: str | None = None,
        reservation_id: str | None = None,
        blocks: tuple[str, ...] | None = None,
        result: Mapping[str, Any] | None = None,
    ) -> bool:
        now = self.state.get(task_id, TaskState.WAITING)
        if now not in frm:
            return False
        if not now.terminal:  # decided_at only when it leaves for good
            assert (when is not None) == to.terminal
        self.state[task_id] = to
        self.states.setdefault(task_id, []).append((to, note or "", result))
        return True

    def last(self, task_id: str) -> tuple[TaskState, str, Mapping[str, Any] | None]:
        return self.states[task_id][-1]


def _family(platform: Platform, **kwargs: Any) -> tuple[PipelineFamily, Rows, threading.RLock]:
    rows, lock = Rows(), threading.RLock()
    return PipelineFamily(platform, rows=rows, lock=lock, seed=7, **kwargs), rows, lock


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    p = make_platform(tmp_path / "p", 1)
    yield p
    p.close()


def _task(task_id: str, work: PipelineWork, *, deadline: float | None = None) -> Task:
    now = time.time()
    return Task(
        id=task_id,
        principal="ana",
        stream=STREAM,
        context=CONTEXT,
        kind=WorkKind.PIPELINE,
        selector=AnyBlocks(),
        demand=work.demand,
        submitted_at=now,
        state=TaskState.WAITING,
        work=work.to_json(),
        deadline=deadline,
    )


def _held(platform: Platform, holder: str, block: str) -> list[Any]:
    return [r for r in platform.ledger.reservations() if r.holder == holder and block in r.blocks]


def _runs(platform: Platform, task_id: str) -> list[Any]:
    return [
        r for r in platform.ledger.reservations() if f":pipeline:{task_id}:run:" in r.request_id
    ]


def test_even_split_accept_reallocates_and_each_run_is_one_grant(platform: Platform) -> None:
    family, host, lock = _family(platform)
    first = platform.blocks(STREAM)[0].block_id
    with lock:  # no run can finish before both pipelines wait and the new block arrives
        family.enter(_task("A", EASY))
        family.enter(_task("B", NEVER))
        platform.ingest(STREAM, flight_days(1, first=1)[0])
        family.pump()
        second = platform.blocks(STREAM)[1].block_id
        # the block that was there first went whole to the only pipeline waiting then
        whole = _held(platform, "A", first)[0]  # (its run then took part of it)
        assert 0.99 < float(whole.cost.epsilon) <= 1.0
        assert _held(platform, "B", first) == []
        # the new block: one reservation per pipeline, the same share each
        shares = [_held(platform, tid, second)[0] for tid in ("A", "B")]
        assert shares[0].cost == shares[1].cost
        assert 0.49 < float(shares[0].cost.epsilon) <= 0.5  # half of ε_g = 1
        assert [len(_runs(platform, t)) for t in ("A", "B")] == [1, 1]  # both started
    assert family.wait_idle(120)
    state, _, result = host.last("A")
    assert state is TaskState.DONE and result is not None
    assert [r["outcome"] for r in result["runs"]] == ["ACCEPT"]
    assert "AdaSSP" in result["model"] or result["model"]
    assert result["secure_noise"] is False  # seeded
    # what A still held (on both blocks) went to B, the one still waiting
    assert [r for r in _held(platform, "A", first) if r.state is ReservationState.OPEN] == []
    assert any(r.state is ReservationState.OPEN for r in _held(platform, "B", first))
    # every run: exactly one grant reservation, held by the principal, drawn from, closed
    events = [e for e in platform.ledger.events(0, limit=10_000) if e.kind.value == "charged"]
    drawn_from = {json.loads(e.payload_json).get("reservation_id") for e in events}
    for tid in ("A", "B"):
        grants = _runs(platform, tid)
        runs = host.last(tid)[2]
        assert runs is not None and len(grants) == len(runs["runs"]) >= 1
        assert all(g.holder == "ana" and g.state is ReservationState.CLOSED for g in grants)
        assert {g.id for g in grants} <= drawn_from
        assert [g.id for g in grants] == [r["reservation_id"] for r in runs["runs"]]
    # nothing was charged outside a run's grant
    assert drawn_from == {g.id for t in ("A", "B") for g in _runs(platform, t)}
    assert platform.verify().ok
    family.close()


def test_cancel_releases_at_once_and_discards_the_running_iteration(
    platform: Platform,
) -> None:
    family, host, lock = _family(platform)
    with lock:
        family.enter(_task("B", NEVER))
        assert len(_runs(platform, "B")) == 1  # its first run started
        live = (TaskState.WAITING, TaskState.RUNNING)  # the queue moves the row, then tells us
        assert host.move("B", frm=live, to=TaskState.CANCELLED, when=time.time())
        assert family.cancel("B", note="cancelled by ana")
        assert [r for r in platform.ledger.reservations() if r.holder == "B" and r.is_open] == []
    assert family.wait_idle(120)
    state, _, result = host.last("B")
    assert state is TaskState.CANCELLED and result is not None
    assert [r["outcome"] for r in result["runs"]] == ["DISCARDED"]  # it drew, unused
    assert len(_runs(platform, "B")) == 1  # and no run followed
    assert all(r.state is not ReservationState.OPEN for r in platform.ledger.reservations())
    assert not family.cancel("B", note="again")
    assert platform.verify().ok
    family.close()


def test_a_deadline_expires_the_pipeline_and_releases_its_shares(platform: Platform) -> None:
    family, host, lock = _family(platform, clock=lambda: 10**10)  # after any deadline
    with lock:
        family.enter(_task("B", NEVER, deadline=time.time() + 60))
    state, note, _ = host.last("B")
    assert state is TaskState.EXPIRED and "deadline" in note
    assert _runs(platform, "B") == []
    assert all(not r.is_open for r in platform.ledger.reservations())
    family.close()


def test_a_failing_run_fails_the_task_without_the_exception_text(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    import blockbudget.tasks.pipeline_runs as mod

    def broken(kind: str, target: float) -> Any:
        raise ValueError("could not convert string to float: 'secret cell 42'")

    monkeypatch.setattr(mod, "build_pipeline", broken)
    family, host, lock = _family(platform)
    with lock:
        family.enter(_task("B", NEVER))
    assert family.wait_idle(120)
    state, note, result = host.last("B")
    assert state is TaskState.FAILED and note == "pipeline_failed_data"
    assert result is not None and result["error"]["code"] == "pipeline_failed_data"
    assert "secret" not in json.dumps(result)
    assert all(not r.is_open for r in platform.ledger.reservations())
    # the run's grant went back undrawn: the strategy's pool learns it as a credit
    with lock:
        family.pump()
        (lane,) = family._lanes.values()
        credits = [d for d in lane.pool.decisions if d.kind is DecisionKind.CREDIT]
        assert [d.block_id for d in credits] == [platform.blocks(STREAM)[0].block_id]
        assert lane.pool.used_fraction()[0] < 1e-6  # nothing counted as used any more
    assert platform.verify().ok
    family.close()


def test_only_sage_strategies_schedule_pipelines() -> None:
    assert make_strategy("sage-block-aggressive").name == "sage-block-aggressive"
    assert make_strategy("sage-block-conserve").levels == 20  # every task's own ε0 fits
    assert make_strategy("sage-block-conserve:levels=3").levels == 3
    for bad in ("fcfs", "dpf-n", "sage-block-conserve:levels=x", "nope"):
        with pytest.raises(InvalidRequestError):
            make_strategy(bad)


def test_pipeline_work_checks_and_first_epsilon() -> None:
    assert PipelineWork(kind="average-speed", target=1.0).first_epsilon == 0.0625
    w = PipelineWork(kind="average-speed", target=1.0, epsilon0=0.1, max_epsilon=1.0)
    assert (w.levels, str(w.first_epsilon)) == (4, "0.0625")  # never above what was asked
    assert PipelineWork.from_json(w.to_json()) == w
    assert (w.delta, w.demand.delta) == (0.0, 0)  # pure ε-DP: no δ held from others
    assert PipelineWork(kind="adassp-regression", target=1.0).demand.delta == Decimal("1e-6")
    assert w.eta_of(1) + w.eta_of(2) + w.eta_of(3) < w.eta
    for bad in (
        {"kind": "dpsgd", "target": 1.0},
        {"kind": "average-speed", "target": 0.0},
        {"kind": "average-speed", "target": 1.0, "epsilon0": 2.0},
        {"kind": "average-speed", "target": 1.0, "min_window": 0},
        {"kind": "average-speed", "target": 1.0, "extra": 1},
        {"target": 1.0},
    ):
        with pytest.raises(InvalidRequestError):
            PipelineWork.from_json(bad)


def test_a_pipeline_cancelled_elsewhere_stops_before_its_run(platform: Platform) -> None:
    """Another process cancelled the row: the run's grant is given back unspent at once."""
    family, rows, lock = _family(platform)
    rows.state["B"] = TaskState.CANCELLED
    with lock:
        family.enter(_task("B", NEVER))
    assert family.running() == 0 and "B" not in rows.states  # no move: it was cancelled
    assert [r.state for r in _runs(platform, "B")] == [ReservationState.CLOSED]
    assert all(not r.is_open for r in platform.ledger.reservations())
    assert all(tuple(s.charged) == (0, 0) for s in platform.ledger.states(STREAM, CONTEXT))
    family.close()


def test_the_first_run_uses_the_tasks_own_epsilon0_and_window(platform: Platform) -> None:
    work = PipelineWork(kind="adassp-regression", target=1e-9, epsilon0=0.25, min_window=2)
    family, rows, lock = _family(platform)
    with lock:
        family.enter(_task("W", work))
        assert _runs(platform, "W") == []  # one block: below its window of 2
        platform.ingest(STREAM, flight_days(1, first=1)[0])
        family.pump()
        (grant,) = _runs(platform, "W")
    assert len(grant.blocks) == 2
    assert 0.2499 < float(grant.cost.epsilon) <= 0.25  # max_epsilon / 2**2, not the strategy's
    assert family.wait_idle(120)
    assert rows.last("W")[0] is TaskState.WAITING
    family.close()


def test_a_new_leader_goes_on_numbering_runs_and_recovers_running_ones(
    platform: Platform,
) -> None:
    first, rows, lock = _family(platform)
    with lock:
        first.enter(_task("B", NEVER))
    assert first.wait_idle(120)
    state, _, result = rows.last("B")
    assert state is TaskState.WAITING and result is not None
    before = len(result["runs"])
    with lock:
        first.step_down()
    first.close()
    for res in platform.ledger.reservations():  # what a new leader does to old shares
        if res.is_open and res.request_id.startswith("tasks-hold:"):
            platform.ledger.release(res.id)
    platform.ingest(STREAM, flight_days(1, first=1)[0])
    second, rows2, lock2 = _family(platform)
    waiting = replace(_task("B", NEVER), result=result)
    with lock2:
        second.enter(waiting)
    assert second.wait_idle(120)
    runs = rows2.last("B")[2]
    assert runs is not None and runs["runs"][:before] == result["runs"]
    ids = [r.request_id for r in _runs(platform, "B")]
    assert len(runs["runs"]) == len(ids) > before and len(set(ids)) == len(ids)
    # a task left running by a dead leader: failed, its run's grant released
    with lock2:
        assert second.cancel("B", note="make room")
    grant = platform.ledger.reserve(
        [platform.blocks(STREAM)[1].block_id], EASY.demand.scaled("0.01"), context=CONTEXT
    )
    running = replace(_task("R", EASY), state=TaskState.RUNNING, result={"grant": grant.id})
    rows2.state["R"] = TaskState.RUNNING
    with lock2:
        second.recover(None, running)
    assert rows2.last("R")[0] is TaskState.FAILED
    assert not platform.ledger.reservation(grant.id).is_open
    assert platform.verify().ok
    second.close()


def test_the_task_queue_runs_pipelines_through_the_family(platform: Platform) -> None:
    """TaskQueue.submit_pipeline → Sage's strategy → runs on grants → done; revoke stops."""
    from blockbudget.tasks.queue import TaskQueue

    queue = TaskQueue(platform, workers=2)
    family = queue._families[WorkKind.PIPELINE]
    assert isinstance(family, PipelineFamily)
    family.seed = 7  # seeded runs: the outcomes below cannot depend on chance
    try:
        easy = queue.submit_pipeline(
            STREAM, kind="adassp-regression", target=1000.0, context=CONTEXT,
            principal="ana", epsilon0=0.5, max_epsilon=1.0, min_window=1,
        )  # fmt: skip
        never = queue.submit_pipeline(
            STREAM, kind="adassp-regression", target=1e-9, context=CONTEXT,
            principal="bob", epsilon0=0.125, max_epsilon=1.0, min_window=1,
        )  # fmt: skip
        assert easy.kind is WorkKind.PIPELINE and easy.demand.epsilon == 1
        done = queue.wait(easy.id, 60)
        assert done.state is TaskState.DONE and done.result is not None, done
        assert [r["outcome"] for r in done.result["runs"]] == ["ACCEPT"]
        assert "AdaSSP" in str(done.result["model"]) or done.result["model"]
        platform.ingest(STREAM, flight_days(1, first=1)[0])
        queue.pump()  # the new block goes to the one pipeline still waiting
        assert any(
            r.is_open for r in _held(platform, never.id, platform.blocks(STREAM)[1].block_id)
        )
        assert queue.revoke("bob") == [never.id]
        assert queue.task(never.id).state is TaskState.CANCELLED
        held = [r for r in platform.ledger.reservations() if r.holder == never.id and r.is_open]
        assert held == []  # its shares went back at once
        grants = _runs(platform, easy.id)
        assert len(grants) == 1 and grants[0].holder == "ana"
    finally:
        queue.close()
    assert all(not r.is_open for r in platform.ledger.reservations())
    assert platform.verify().ok

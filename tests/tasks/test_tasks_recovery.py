"""A new leader recovers what a dead one left: running queries, grants whose row was not
written; partial grants run at the ε they hold; data failures are concealed."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget.budget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.platform import Platform
from blockbudget.query import Query
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks
from tasks.tasks_support import SEED, Clock, die, grant_reservations, make_platform

QUERY = Query.sum("v", epsilon=0.2, lower=0, upper=3)


def _queue(p: Platform, spec: str = "fcfs") -> TaskQueue:
    return TaskQueue(p, scheduler=spec, noise=SeededNoise(SEED), clock=Clock())


def _dies_before_running(q: TaskQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(q, "_start", lambda task_id: None)


def test_a_running_query_with_nothing_drawn_runs_again_under_the_new_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = make_platform(tmp_path)
    q1 = _queue(p)
    _dies_before_running(q1, monkeypatch)
    t = q1.submit_query("s", QUERY, selector=AnyBlocks(2), context="team", principal="ana")
    assert t.state is TaskState.RUNNING and t.reservation_id is not None
    # q1 is dropped without close; a second queue (another process) takes over
    die(q1)
    q2 = _queue(Platform(tmp_path, engine="arrow"))
    done = q2.wait(t.id, timeout=20)
    assert done.state is TaskState.DONE and done.reservation_id == t.reservation_id
    assert done.result is not None and tuple(done.result["blocks"]) == t.blocks
    assert grant_reservations(p, "ana") == [t.reservation_id]
    assert p.ledger.reservation(t.reservation_id).state.value == "closed"
    assert p.verify().ok
    q2.close()
    p.close()


def test_a_running_query_that_drew_fails_and_its_rest_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = make_platform(tmp_path)
    q1 = _queue(p)
    _dies_before_running(q1, monkeypatch)
    t = q1.submit_query("s", QUERY, selector=AnyBlocks(2), context="team", principal="ana")
    assert t.reservation_id is not None
    p.ledger.charge(list(t.blocks), Budget(epsilon="0.2"), reservation_id=t.reservation_id)
    die(q1)
    q2 = _queue(Platform(tmp_path, engine="arrow"))
    failed = q2.task(t.id)
    assert failed.state is TaskState.FAILED and failed.result is not None
    assert failed.result["code"] == "query_interrupted"
    assert p.ledger.reservation(t.reservation_id).state.value == "closed"
    q2.close()
    p.close()


def test_a_grant_whose_row_was_not_written_is_adopted_not_made_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = make_platform(tmp_path)
    q1 = _queue(p)
    monkeypatch.setattr(q1, "_granted", lambda *a, **k: None)  # dies right after reserving
    t = q1.submit_budget(
        "s", Budget(epsilon="0.3"), selector=AnyBlocks(1), context="team", principal="ana"
    )
    assert t.state is TaskState.WAITING
    (rid,) = grant_reservations(p, "ana")
    die(q1)
    q2 = _queue(Platform(tmp_path, engine="arrow"))
    got = q2.task(t.id)
    assert got.state is TaskState.GRANTED and got.reservation_id == rid
    assert grant_reservations(p, "ana") == [rid]
    q2.close()
    p.close()


def test_partial_grants_of_mixed_threshold_run_at_the_epsilon_they_hold(tmp_path: Path) -> None:
    p = make_platform(tmp_path)
    q = _queue(p, "mixed-threshold:seed=1")
    demand = Budget(epsilon="0.4")
    done = []
    for _ in range(4):
        t = q.submit_query(
            "s", Query.count(epsilon=0.4), selector=AnyBlocks(3), context="team", principal="ana"
        )
        assert t.demand == demand
        done.append(q.wait(t.id, timeout=20))
    assert all(t.state is TaskState.DONE for t in done), [t.note for t in done]
    for t in done:
        assert t.reservation_id is not None and t.result is not None
        held = p.ledger.reservation(t.reservation_id).cost
        assert isinstance(held, Budget) and held.epsilon < demand.epsilon  # Eq. (18)
        assert t.result["query"]["epsilon"] <= float(held.epsilon)
        assert Budget.from_json(t.result["cost"]) <= held
    assert p.verify().ok
    q.close()
    p.close()


def test_a_data_failure_is_stored_as_our_code_and_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = make_platform(tmp_path)
    q = _queue(p)
    _dies_before_running(q, monkeypatch)
    t = q.submit_query("s", QUERY, selector=AnyBlocks(1), context="team", principal="ana")
    for f in (tmp_path / "blocks").rglob("*.parquet"):
        f.unlink()
    q._work(t.id)  # what the worker thread runs
    failed = q.task(t.id)
    assert failed.state is TaskState.FAILED and failed.result is not None
    assert failed.result["code"] == "query_failed_data"
    assert "parquet" not in failed.note and str(tmp_path) not in failed.note
    assert t.reservation_id is not None
    assert p.ledger.reservation(t.reservation_id).state.value == "closed"
    q.close()
    p.close()


def test_a_budget_task_says_what_it_was_granted(tmp_path: Path) -> None:
    """A partial grant (seed 000 Alg. 3, Eq. (18)) holds less than the demand: the task's
    result says what its reservation holds on each block."""
    p = make_platform(tmp_path)
    q = _queue(p, "mixed-threshold:seed=1")
    demand = Budget(epsilon="0.4")
    for _ in range(3):
        t = q.submit_budget("s", demand, selector=AnyBlocks(3), context="team", principal="ana")
        t = q.wait(t.id, timeout=20)
        assert t.state is TaskState.GRANTED and t.reservation_id is not None, t.note
        assert t.result is not None
        held = p.ledger.reservation(t.reservation_id).cost
        assert Budget.from_json(t.result["granted"]) == held
        assert isinstance(held, Budget) and held.epsilon <= demand.epsilon
    q.close()
    p.close()

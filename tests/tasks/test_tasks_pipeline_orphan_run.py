"""A leader dies after reserving a pipeline run's grant but before the task's row says
RUNNING: the next leader releases that grant and redoes the run under a new request id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from training.conftest import CONTEXT, STREAM, make_platform

from blockbudget.platform import Platform
from blockbudget.tasks.bridge import run_task_of
from blockbudget.tasks.model import TaskState, WorkKind
from blockbudget.tasks.pipelines import PipelineFamily
from blockbudget.tasks.queue import TaskQueue

from .tasks_support import die


class _Died(Exception):
    """The leader's process ends here."""


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    p = make_platform(tmp_path / "p", 2, engine="arrow")
    yield p
    p.close()


def _run_grants(platform: Platform) -> list[Any]:
    return [r for r in platform.ledger.reservations() if run_task_of(r.request_id) is not None]


def test_a_run_grant_left_before_running_is_released_and_the_run_redone(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = TaskQueue(platform, poll_seconds=0.0)
    family = first._families[WorkKind.PIPELINE]
    assert isinstance(family, PipelineFamily)
    record = family._record

    def dies_before_running(task_id: str, state: TaskState, **kwargs: Any) -> bool:
        if state is TaskState.RUNNING:
            raise _Died
        return record(task_id, state, **kwargs)

    monkeypatch.setattr(family, "_record", dies_before_running)
    with pytest.raises(_Died):
        first.submit_pipeline(
            STREAM, kind="adassp-regression", target=1e-9, context=CONTEXT, principal="ana",
            epsilon0=0.125, max_epsilon=1.0, min_window=1,
        )  # fmt: skip
    die(first)
    [orphan] = _run_grants(platform)
    assert orphan.is_open
    task_id = run_task_of(orphan.request_id)
    assert task_id is not None
    assert first.task(task_id[1]).state is TaskState.WAITING  # the row never said RUNNING

    nxt = TaskQueue(platform, poll_seconds=0.0)  # takes over: the orphan goes back
    try:
        assert not platform.ledger.reservation(orphan.id).is_open
        task = nxt.task(task_id[1])
        assert task.state in (TaskState.WAITING, TaskState.RUNNING), task
        redone = [r for r in _run_grants(platform) if r.id != orphan.id]
        assert redone, "the next leader redoes the run"
        assert orphan.request_id not in {r.request_id for r in redone}
        nxt.cancel(task.id, by="ana")
    finally:
        nxt.close()
    assert [r for r in platform.ledger.reservations() if r.is_open] == []
    assert platform.verify().ok

"""The service's default scheduler is stored in the database: a queue built without one (a
local CLI on a server's database) decides with it, and follows it when it changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from blockbudget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.platform import Platform
from blockbudget.tasks.leader import Leadership
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import DEFAULT_SCHEDULER, TaskQueue
from blockbudget.tasks.selectors import AnyBlocks
from blockbudget.tasks.table import DEFAULT_KEY

from .tasks_support import SEED, Clock, make_platform


class _Held(Leadership):
    """A leadership that this process holds (``held=True``) or another one does."""

    def __init__(self, held: bool) -> None:
        self._held = held

    @property
    def held(self) -> bool:
        return self._held

    def try_acquire(self) -> bool:
        return self._held

    def release(self) -> None:
        pass


@pytest.fixture
def p(tmp_path: Path) -> Iterator[Platform]:
    platform = make_platform(tmp_path)
    yield platform
    platform.close()


def _queue(p: Platform, *, leads: bool, scheduler: str | None = None) -> TaskQueue:
    return TaskQueue(
        p,
        scheduler=scheduler,
        leadership=_Held(leads),
        noise=SeededNoise(SEED),
        clock=Clock(),
        poll_seconds=0.0,
    )


def _submit(q: TaskQueue) -> str:
    """ε = 0.3 of a block's 1.0: DPF-N (N = 10, lend=0) has unlocked 0.1, FCFS grants at
    once (so does the default, which lends to a task nothing competes with)."""
    task = q.submit_budget("s", Budget(epsilon="0.3"), selector=AnyBlocks(1), context="team")
    return task.id


def test_a_queue_without_a_scheduler_decides_with_the_stored_default(p: Platform) -> None:
    before = _queue(p, leads=False)
    assert before.scheduler_for("s") == DEFAULT_SCHEDULER  # nothing stored yet
    server = _queue(p, leads=False, scheduler="fcfs")
    server.store_default_scheduler()
    assert DEFAULT_KEY not in server.rows.overrides()  # not a stream's override
    cli = _queue(p, leads=True)
    assert cli.scheduler_for("s") == "fcfs"
    assert cli.task(_submit(cli)).state is TaskState.GRANTED
    explicit = _queue(p, leads=False, scheduler="dpack")
    assert explicit.scheduler_for("s") == "dpack"  # an explicit scheduler is kept
    for q in (before, server, cli, explicit):
        q.close()


def test_a_leader_follows_a_default_stored_after_it_started(p: Platform) -> None:
    cli = _queue(p, leads=True)
    assert cli.scheduler_for("s") == DEFAULT_SCHEDULER
    first = _queue(p, leads=False, scheduler="dpf-n:n=10")  # plain DPF: holds budget back
    first.store_default_scheduler()
    cli.pump()
    assert cli.scheduler_for("s") == "dpf-n:n=10"
    waiting = _submit(cli)
    assert cli.task(waiting).state is TaskState.WAITING  # DPF-N: not unlocked yet
    server = _queue(p, leads=False, scheduler="fcfs")
    server.store_default_scheduler()
    cli.pump()  # the stream has no override: its waiting tasks go to a fresh FCFS pool
    assert cli.scheduler_for("s") == "fcfs"
    assert cli.task(waiting).state is TaskState.GRANTED
    cli.set_scheduler("s", "dpf-n:n=10")  # a stream's override still wins
    assert cli.scheduler_for("s") == "dpf-n:n=10"
    first.close()
    server.close()
    cli.close()


def test_the_server_stores_its_scheduler_at_start(p: Platform) -> None:
    from blockbudget.service.app import create_app

    with TestClient(create_app(p, scheduler="fcfs", auth_cache_seconds=0)):
        pass
    cli = _queue(p, leads=False)
    assert cli.scheduler_for("s") == "fcfs"
    cli.close()

"""Every registered online scheduler decides live: tasks naming no blocks get granted, each
query spends exactly its grant (one reservation per grant), and the ledger verifies."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.query import Query
from blockbudget.scheduling import scheduler_classes
from blockbudget.tasks.model import TaskState
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks
from tasks.tasks_support import SEED, Clock, add_days, grant_reservations, make_platform

#: spec per scheduler; Sage's strategies give out the budget of blocks arriving after a task
SPECS = {
    "dpack": "dpack",
    "dpf-n": "dpf-n:n=1",
    "dpf-t": "dpf-t",
    "fcfs": "fcfs",
    "fcfs-t": "fcfs-t",
    "mixed-threshold": "mixed-threshold:seed=1",
    "online-threshold": "online-threshold:seed=1",
    "random-blocks": "random-blocks:seed=1",
    "round-robin": "round-robin",
    "rr-n": "rr-n:n=1",
    "rr-t": "rr-t",
    "sage-block-aggressive": "sage-block-aggressive",
    "sage-block-conserve": "sage-block-conserve",
    "sage-query-composition": "sage-query-composition",
    "sage-streaming-composition": "sage-streaming-composition",
    "streaming": "streaming:seed=1",
}


def test_every_online_scheduler_is_covered() -> None:
    online = {n for n, c in scheduler_classes().items() if not c.exact}
    assert online == set(SPECS)


def test_the_offline_optimum_is_refused_with_its_reason(tmp_path: Path) -> None:
    p = make_platform(tmp_path, days=1)
    with pytest.raises(InvalidRequestError, match="offline problem exactly"):
        TaskQueue(p, scheduler="offline-optimum")
    p.close()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_tasks_naming_no_blocks_are_granted_and_run_on_their_grant(
    tmp_path: Path, name: str
) -> None:
    p = make_platform(tmp_path)
    clock = Clock()
    q = TaskQueue(p, scheduler=SPECS[name], noise=SeededNoise(SEED), clock=clock)
    query = Query.sum("v", epsilon=0.1, lower=0, upper=3)

    def submit() -> str:
        task = q.submit_query("s", query, selector=AnyBlocks(2), context="team", principal="ana")
        return task.id

    done = []
    if name.startswith("sage"):
        # Sage gives out the budget of blocks that arrive while tasks wait
        ids = [submit() for _ in range(3)]
        add_days(p, "2024-01-07", 2)
        tasks = [q.wait(tid, timeout=20) for tid in ids]
    else:
        # one at a time, so that worker threads' timing cannot change a decision
        tasks = []
        for _ in range(3):
            tid = submit()
            for _ in range(3):  # time passes: DPF-T unlocks, round robin ticks
                clock.t += 30
                q.pump()
            tasks.append(q.wait(tid, timeout=20))
    for task in tasks:
        if name == "sage-streaming-composition" and task.state is TaskState.WAITING:
            continue  # each new block goes whole to one pipeline: 2 blocks, 2 tasks
        assert task.state is TaskState.DONE, (name, task.note)
        done.append(task)
    assert len(done) >= 2
    for task in done:
        assert task.result is not None and task.result["secure_noise"] is False
        assert 1 <= len(task.blocks) <= 2
        assert tuple(task.result["blocks"]) == task.blocks  # the blocks it got
        assert Budget.from_json(task.result["cost"]) <= Budget(epsilon="0.1")
    # exactly one reservation per granted task, each closed after its query
    grants = grant_reservations(p, "ana")
    assert len(grants) == len(done)
    assert {t.reservation_id for t in done} == set(grants)
    assert all(p.ledger.reservation(r).state.value == "closed" for r in grants)
    report = p.verify()
    assert report.ok, report
    q.close()
    p.close()

"""Significance reaches the scheduler: tables as given, free providers scored per block on
first use, paid providers scored once at entry (values stored, never paid twice) and refused
on selectors that do not bound their blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.platform import Platform
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks, Named
from tasks.tasks_support import SEED, Clock, die, make_platform

D = "s/2024-01-0"
PAID = {
    "provider": "loss-reduction",
    "column": "v",
    "lower": 0.0,
    "upper": 3.0,
    "validation": [2.0, 2.5],
    "epsilon": 0.1,
    "prior": 0.0,
}


def _queue(p: Platform, spec: str = "sage-block-conserve") -> TaskQueue:
    # Sage keeps AnyBlocks tasks for new blocks, DPF with a large N keeps every task waiting:
    # the tasks stay in the pool, where their specs can be read
    return TaskQueue(p, scheduler=spec, noise=SeededNoise(SEED), clock=Clock())


def _spec_significance(q: TaskQueue, task_id: str, block: str) -> float:
    (run,) = q._runs.values()
    return run.live.pool.tasks[task_id].significance_of(block)


def test_tables_and_free_providers_reach_the_scheduler(tmp_path: Path) -> None:
    p = make_platform(tmp_path)
    q = _queue(p)
    eps = Budget(epsilon="0.1")
    table = q.submit_budget(
        "s", eps, selector=AnyBlocks(1), context="team", significance={f"{D}2": 2.5}
    )
    assert _spec_significance(q, table.id, f"{D}2") == 2.5
    assert _spec_significance(q, table.id, f"{D}3") == 0.0
    recency = {"provider": "recency", "half_life_seconds": 86400.0}
    fresh = q.submit_budget("s", eps, selector=AnyBlocks(1), context="team", significance=recency)
    newest, oldest = (_spec_significance(q, fresh.id, f"{D}{i}") for i in (6, 1))
    assert newest > oldest > 0.0  # newer windows are worth more
    assert q.task(fresh.id).significance == recency  # free: the spec stays
    q.close()
    p.close()


def test_a_paid_provider_scores_once_at_entry_and_never_twice(tmp_path: Path) -> None:
    p = make_platform(tmp_path)
    q = _queue(p, "dpf-n:n=1000")
    with pytest.raises(InvalidRequestError, match="names the blocks"):
        q.submit_budget(
            "s", Budget(epsilon="0.1"), selector=AnyBlocks(2), context="team", significance=PAID
        )
    blocks = (f"{D}1", f"{D}2")
    before = p.ledger.audit_seq()
    t = q.submit_budget(
        "s", Budget(epsilon="0.1"), selector=Named(blocks), context="team", significance=PAID
    )
    stored = q.task(t.id).significance
    assert stored is not None and set(stored) == set(blocks)  # the DP values replace the spec
    charged = [e for e in p.ledger.events(before) if e.kind.value == "charged"]
    assert len(charged) == 2  # ε_s on each scored block, before the values were used
    die(q)
    q2 = _queue(Platform(tmp_path, engine="arrow"), "dpf-n:n=1000")  # re-enters: reads values
    assert [e for e in p.ledger.events(before) if e.kind.value == "charged"] == charged
    assert _spec_significance(q2, t.id, f"{D}1") == stored[f"{D}1"]
    q2.close()
    p.close()

"""RR-N / RR-T (PrivateKube OSDI'21 §6.1): DPF's unlocking, the unlocked budget water-filled
among every waiting pipeline of a block, a pipeline granted once it has accumulated its whole
demand on each block it names."""

from __future__ import annotations

import numpy as np
import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.scheduling import BlockSpec, TaskSpec, get_scheduler
from blockbudget.scheduling.rr import water_fill
from blockbudget.scheduling.simulator import simulate

ONE = Budget(epsilon=1.0)


def _run(name: str, tasks: list[TaskSpec], **spec: object) -> dict[str, str]:
    blocks = [BlockSpec("b0", 0.0, ONE)]
    r = simulate(get_scheduler(name, **spec), blocks, tasks, accounting=Accounting.BASIC)
    return {t: s.value for t, s in r.pool.status.items()}


def test_water_fill_is_max_min_fair() -> None:
    assert water_fill(np.array([0.1, 0.5, 0.5]), 0.7).tolist() == pytest.approx([0.1, 0.3, 0.3])
    assert water_fill(np.array([0.1, 0.2]), 1.0).tolist() == [0.1, 0.2]  # all fit
    assert water_fill(np.array([0.3, 0.3, 0.3]), 0.3).tolist() == pytest.approx([0.1] * 3)
    assert water_fill(np.array([0.3]), 0.0).tolist() == [0.0]
    parts = water_fill(np.array([0.05, 0.4, 0.01, 0.2]), 0.3)
    assert float(parts.sum()) == pytest.approx(0.3) and parts[2] == pytest.approx(0.01)


def test_rr_spreads_an_unlock_thin_where_dpf_completes_pipelines() -> None:
    """N = 10: each arrival unlocks 0.1. Two elephants (0.2) and a mouse (0.1) arrive: RR
    splits every unlock among all of them and completes none of them with the 0.3 unlocked;
    DPF hands the budget out whole and completes an elephant (the second, by its fast path at
    its own arrival) and the mouse."""
    tasks = [
        TaskSpec("e1", 0.0, Budget(epsilon=0.2), blocks=("b0",)),
        TaskSpec("e2", 1.0, Budget(epsilon=0.2), blocks=("b0",)),
        TaskSpec("m", 2.0, Budget(epsilon=0.1), blocks=("b0",)),
    ]
    assert set(_run("rr-n", tasks, n=10).values()) == {"expired"}
    assert _run("dpf-n", tasks, n=10) == {"e1": "expired", "e2": "granted", "m": "granted"}


def test_rr_n_grants_a_pipeline_once_its_shares_add_up() -> None:
    """A mouse needing 0.05 completes at its own arrival: the unlocked 0.1 splits as 0.05 to
    it and 0.05 to the waiting elephant."""
    tasks = [
        TaskSpec("e", 0.0, Budget(epsilon=0.3), blocks=("b0",)),
        TaskSpec("m", 1.0, Budget(epsilon=0.05), blocks=("b0",)),
    ]
    blocks = [BlockSpec("b0", 0.0, ONE)]
    r = simulate(get_scheduler("rr-n", n=10), blocks, tasks, accounting=Accounting.BASIC)
    assert r.pool.granted_at == {"m": 1.0}


def test_rr_t_splits_each_tick_among_the_waiting() -> None:
    """Lifetime 10, tick 1: 0.1 unlocks a tick. Two pipelines of 0.1 each get 0.05 a tick and
    both complete at the second tick (FCFS-T completes one at the first)."""
    tasks = [TaskSpec(f"t{i}", 0.0, Budget(epsilon=0.1), blocks=("b0",)) for i in range(2)]
    blocks = [BlockSpec("b0", 0.0, ONE)]
    spec = {"lifetime": 10.0, "tick": 1.0}
    rr = simulate(get_scheduler("rr-t", **spec), blocks, tasks, accounting=Accounting.BASIC)
    assert rr.pool.granted_at == {"t0": 2.0, "t1": 2.0}
    fcfs = simulate(get_scheduler("fcfs-t", **spec), blocks, tasks, accounting=Accounting.BASIC)
    assert fcfs.pool.granted_at == {"t0": 1.0, "t1": 2.0}


def test_an_expired_pipeline_gives_its_promised_budget_back() -> None:
    """The elephant holds the first 0.1 and times out; the next arrival's 0.1 and the returned
    0.1 complete a pipeline of 0.15 (the authors' simulator loses what a timed-out pipeline
    held: our documented difference)."""
    tasks = [
        TaskSpec("e", 0.0, Budget(epsilon=0.5), blocks=("b0",), timeout=1.5),
        TaskSpec("m", 2.0, Budget(epsilon=0.15), blocks=("b0",)),
    ]
    assert _run("rr-n", tasks, n=10) == {"e": "expired", "m": "granted"}


def test_rr_serves_basic_shaped_rules_only() -> None:
    rr = get_scheduler("rr-n")
    assert rr.serves("basic") and rr.serves("gdp") and not rr.serves("rdp")
    assert get_scheduler("rr-n", n=5).describe() == "rr-n(N=5)"
    assert get_scheduler("rr-t", lifetime=3.0, tick=0.5).describe() == "rr-t(lifetime=3, tick=0.5)"

"""The scheduler experiments' building blocks: the authors' end of run read off a drained run
equals a run stopped there, and the sweep's rows are consistent."""

from __future__ import annotations

import pytest

from blockbudget.experiments.dpack_contention import schedulers, sweep
from blockbudget.scheduling.alibaba import alibaba_dp
from blockbudget.scheduling.simulator import simulate


@pytest.mark.parametrize("name", sorted(schedulers()))
def test_the_authors_end_read_off_a_drained_run_is_a_run_stopped_there(name: str) -> None:
    online = 10
    w = alibaba_dp(n_blocks=14, initial_blocks=4, tasks_per_block=15, seed=1)
    make = schedulers()[name]
    drained = simulate(make(), w.blocks, w.tasks, accounting=w.accounting)
    last = max(t.arrival for t in w.tasks)
    assert online - 1 < last < online
    # the simulator's ticks run to the first one at or after the horizon: here the tick at 10
    stopped = simulate(make(), w.blocks, w.tasks, accounting=w.accounting, horizon=last)
    at_end = {t for t, when in drained.pool.granted_at.items() if when <= online}
    assert at_end == set(stopped.pool.granted_at)
    assert stopped.allocated <= drained.allocated


def test_contention_rows_are_consistent() -> None:
    rows = sweep(n_tasks=200, initial=4, online_counts=[10, 20], seed=1)
    assert len(rows) == 2 * len(schedulers())
    for row in rows:
        assert row["tasks"] == 200
        assert 0 <= row["allocated_authors_end"] <= row["allocated_drain"] <= row["tasks"]
        if row["scheduler"] == "dpf-t":
            assert row["over_dpf_t_authors_end"] == row["over_dpf_t_drain"] == 1.0
    # one task list: more online blocks, fewer tasks per block
    assert {r["tasks_per_block"] for r in rows} == {20.0, 10.0}


def test_privatekube_gaussian_demands_follow_the_authors_calibration() -> None:
    import math

    from blockbudget.accounting import Accounting
    from blockbudget.budget import ALPHAS, Budget, RdpCurve
    from blockbudget.scheduling.workloads import privatekube_micro

    sigma = math.sqrt(2 * math.log(1.25 / 1e-9)) / 0.01  # a mouse: ε = 0.01 · ε_G, ε_G = 1
    kw = dict(n_blocks=1, tasks_per_block=40, epsilon_g=1.0, delta_g=1e-6, gaussian_delta=1e-9)
    rdp = privatekube_micro(accounting=Accounting.RDP, **kw)
    basic = privatekube_micro(accounting=Accounting.BASIC, **kw)
    curves = [t.demand for t in rdp.tasks]
    assert all(isinstance(c, RdpCurve) for c in curves)
    k = ALPHAS.index(32)
    at_32 = {round(float(c.epsilons[k]), 12) for c in curves if isinstance(c, RdpCurve)}
    # a mouse's curve, and an elephant's (σ ten times smaller)
    assert at_32 == {round(32.0 / (2 * sigma**2), 12), round(32.0 / (2 * (sigma / 10) ** 2), 12)}
    assert Budget(epsilon=0.01, delta=1e-9) in {t.demand for t in basic.tasks}


def test_privatekube_single_block_matches_the_published_fcfs_and_dpf_ceiling() -> None:
    from blockbudget.experiments.privatekube_micro import settings

    single = settings(quick=True)[0]
    from blockbudget.experiments.privatekube_micro import run_setting

    rows = {(r["scheduler"], r["N"]): r["allocated"] for r in run_setting(single, seed=2)}
    # FCFS spends the block on the first ~30 arrivals (published: 28); DPF with N ≥ 200 gives
    # the block to mice, at most 100 of them (published: up to the maximum, 100)
    assert 20 <= rows[("fcfs", None)] <= 45  # 1 / E[demand] = 1 / 0.0325 ≈ 31
    assert rows[("dpf-n", 200)] == 100
    # RR splits each unlock among every waiting pipeline: elephants hold what mice would
    # complete with (published: RR ≤ 38, far below DPF); about FCFS at N = 100, below at 200
    assert all(rows[(rr, n)] < 60 for rr in ("rr-n", "rr-t") for n in single.ns)
    assert rows[("rr-n", 200)] < rows[("rr-n", 100)]

"""Regressions of an independent DP review of the live scheduler (one test per finding)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from blockbudget import Budget
from blockbudget.budget import UNIT
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks, Named
from tasks.tasks_support import SEED, Clock, make_platform


def _used(p: object, block: str) -> int:
    return int(p.ledger.state(block, "team").used[0])  # type: ignore[attr-defined]


def test_a_rebuilt_pool_pays_epsilon0_for_its_own_runs(tmp_path: Path) -> None:
    """set_scheduler builds a new pool whose decisions restart at 1: its ε0 charges must not
    reuse the old pool's request ids (the ledger would answer them as replays, uncharged)."""
    p = make_platform(tmp_path, days=1)
    b = p.ledger.states("s", "team")[0].block
    p.ledger.charge([b], Budget(epsilon="0.5"), context="team")  # past z0: Alg. 1 compares
    q = TaskQueue(
        p, scheduler="online-threshold:sensitivity=0.0001", noise=SeededNoise(SEED), clock=Clock()
    )
    eps0 = 10**16  # the default ε0 = 0.01 in the ledger's units (1e18 per ε)
    for k, spec in enumerate(
        [None, "online-threshold:sensitivity=0.0002", "online-threshold:sensitivity=0.0003"]
    ):
        if spec is not None:
            q.set_scheduler("s", spec)
            q.pump()
        before = _used(p, b)
        t = q.submit_budget(
            "s",
            Budget(epsilon="0.001"),
            selector=AnyBlocks(1),
            context="team",
            significance={b: 0.0},
        )
        q.pump()
        assert q.task(t.id).state.value == "refused", k  # p = 0 never passes T(z)
        assert _used(p, b) - before == eps0, k  # every new pool's run paid its ε0
    q.close()
    p.close()


def _threshold_queue(p: object) -> TaskQueue:
    return TaskQueue(
        p,  # type: ignore[arg-type]
        scheduler="online-threshold:sensitivity=0.0001",
        noise=SeededNoise(SEED),
        clock=Clock(),
    )


def test_epsilon0_is_in_the_ledger_before_the_comparison(tmp_path: Path) -> None:
    """A stale pool thinks ε0 fits while the ledger has no room: the run must not start (no
    threshold noise drawn, no comparison made) — the ε0 is charged durably first or not at all."""
    p = make_platform(tmp_path, days=1)
    b = p.ledger.states("s", "team")[0].block
    q = _threshold_queue(p)
    p.ledger.charge([b], Budget(epsilon="0.5"), context="team")
    q.pump()
    w = q.submit_budget(
        "s", Budget(epsilon="0.001"), selector=AnyBlocks(1), context="team", significance={b: 1e6}
    )
    q.pump()
    assert q.task(w.id).state.value == "granted"  # its run passed and closed
    sched = next(iter(q._runs.values())).live.scheduler  # type: ignore[attr-defined]
    assert (sched.runs_started, sched.comparisons) == (1, 1)
    p.ledger.charge([b], Budget(epsilon="0.485"), context="team")  # outside, not yet synced
    used = _used(p, b)
    t = q.submit_budget(
        "s", Budget(epsilon="0.001"), selector=AnyBlocks(1), context="team", significance={b: 0}
    )
    q.pump()
    assert q.task(t.id).state.value == "refused"
    assert (sched.runs_started, sched.comparisons) == (1, 1)  # no unpaid comparison
    assert _used(p, b) == used
    q.close()
    p.close()


def test_a_failing_decision_refuses_its_task_and_the_stream_goes_on(tmp_path: Path) -> None:
    """Applying one decision raises something that is not a ledger refusal: that task is
    refused with our words, the decision counter moves on, and the next task is granted."""
    p = make_platform(tmp_path, days=2)
    q = TaskQueue(p, scheduler="fcfs", noise=SeededNoise(SEED), clock=Clock())
    t0 = q.submit_budget("s", Budget(epsilon="0.1"), selector=AnyBlocks(1), context="team")
    q.pump()
    assert q.task(t0.id).state.value == "granted"
    run = next(iter(q._runs.values()))  # type: ignore[attr-defined]
    real = run.bridge.apply
    broken: list[str] = []

    def apply(d: object) -> None:
        if not broken and getattr(d, "kind", None) is not None and d.kind.value == "grant":  # type: ignore[attr-defined]
            broken.append(d.task_id)  # type: ignore[attr-defined]
            raise KeyError("boom")
        real(d)

    run.bridge.apply = apply
    t1 = q.submit_budget("s", Budget(epsilon="0.1"), selector=AnyBlocks(1), context="team")
    q.pump()
    t2 = q.submit_budget("s", Budget(epsilon="0.1"), selector=AnyBlocks(1), context="team")
    q.pump()
    assert broken == [t1.id]
    one = q.task(t1.id)
    assert one.state.value == "refused" and "internal error" in one.note
    assert "boom" not in one.note
    assert q.task(t2.id).state.value == "granted"
    assert run.bridge.applied == len(run.live.pool.decisions)
    q.close()
    p.close()


_PAID = {"provider": "loss-reduction", "column": "v", "lower": 0.0, "upper": 3.0,
         "validation": [2.0, 2.5], "epsilon": 0.5, "prior": 0.0}  # fmt: skip


@pytest.mark.parametrize("seed", [None, 123])
def test_a_seeded_significance_measurement_says_secure_noise_false(
    tmp_path: Path, seed: int | None
) -> None:
    """A Python caller may seed the paid measurement; the task then says it was not DP."""
    p = make_platform(tmp_path, days=1)
    b = p.ledger.states("s", "team")[0].block
    q = TaskQueue(p, scheduler="fcfs", noise=None, clock=Clock())  # secure, as served
    spec = dict(_PAID) if seed is None else {**_PAID, "seed": seed}
    t = q.submit_budget("s", Budget(epsilon="0.1"), selector=Named((b,)), context="team",
                        significance=spec)  # fmt: skip
    q.pump()
    got = q.task(t.id)
    assert got.state.value == "granted" and "provider" not in (got.significance or {})
    assert got.result is not None and set(got.result) == (
        {"granted"} if seed is None else {"granted", "significance_secure_noise"}
    )
    assert got.result.get("significance_secure_noise", True) is (seed is None)
    q.close()
    p.close()


def test_the_cli_refuses_a_seeded_significance_spec(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from blockbudget.cli import app

    spec = json.dumps({**_PAID, "seed": 1})
    out = CliRunner().invoke(
        app, ["task", "submit", "s", "--epsilon", "0.1", "--newest", "1", "--significance", spec,
              "--home", str(tmp_path)],
    )  # fmt: skip
    assert out.exit_code != 0 and "seed" in out.output, out.output


def test_private_significance_needs_a_scheduler_sensitivity_that_covers_its_ratio(
    tmp_path: Path,
) -> None:
    """A table computed from private rows (stated Δ = 5) compared by Alg. 1: the ratio
    p/(ε_j + ε0) has sensitivity 5/(0.1 + 0.01) ≈ 45.5, so a scheduler configured with Δ = 1 is
    refused (nothing stored or charged) and one with Δ = 50 serves it; public values and DP
    releases need nothing."""
    p = make_platform(tmp_path, days=1)
    b = p.ledger.states("s", "team")[0].block
    private = {"provider": "user", "values": {b: 3.0}, "sensitivity": 5.0}
    q = TaskQueue(p, scheduler="online-threshold", noise=SeededNoise(SEED), clock=Clock())
    before = _used(p, b)
    with pytest.raises(InvalidRequestError, match=r"sensitivity 1\.0"):
        q.submit_budget("s", Budget(epsilon="0.1"), selector=AnyBlocks(1), context="team",
                        significance=private)  # fmt: skip
    assert q.tasks() == [] and _used(p, b) == before
    for public in ({b: 3.0}, {"provider": "user", "values": {b: 3.0}}, _PAID):
        sel = Named((b,)) if "provider" in public and public is _PAID else AnyBlocks(1)
        q.submit_budget("s", Budget(epsilon="0.1"), selector=sel, context="team",
                        significance=public)  # fmt: skip
    q.set_scheduler("s", "online-threshold:sensitivity=50")
    t = q.submit_budget("s", Budget(epsilon="0.1"), selector=AnyBlocks(1), context="team",
                        significance=private)  # fmt: skip
    assert q.task(t.id).state.value in ("waiting", "granted")
    q.close()
    p.close()


def test_the_live_queue_refuses_strong_streams(tmp_path: Path) -> None:
    """The live pool cannot mirror a STRONG block's (ε, ε², g, δ) features from costs (it
    under-counted δ): tasks and scheduler changes on a STRONG stream are refused up front."""
    from blockbudget.accounting import Accounting
    from blockbudget.store import Blocking

    p = make_platform(tmp_path, days=1)
    p.create_stream(
        "strong",
        policy=Budget(epsilon=1, delta="1e-4"),
        blocking=Blocking.by_time("t"),
        accounting=Accounting.STRONG,
        slack_delta=1e-5,
    )
    q = TaskQueue(p, scheduler="online-threshold", noise=SeededNoise(SEED), clock=Clock())
    with pytest.raises(InvalidRequestError, match="strong"):
        q.submit_budget("strong", Budget(epsilon="0.001", delta="0.000005"),
                        selector=AnyBlocks(1), context="team")  # fmt: skip
    with pytest.raises(InvalidRequestError, match="strong"):
        q.set_scheduler("strong", "mixed-threshold")
    assert q.tasks() == [] and q.rows.overrides() == {}
    q.close()
    p.close()


def test_a_gaussian_query_runs_at_its_partial_grant(tmp_path: Path) -> None:
    """Alg. 3 grants a fraction f of a Gaussian query's (ε, δ): the query runs at (fε, fδ), its
    charge within the grant (it used to keep its full δ, cost more than held, and fail)."""
    import pandas as pd

    from blockbudget.platform import Platform
    from blockbudget.query import Query
    from blockbudget.store import Blocking

    p = Platform(tmp_path, engine="arrow")
    p.create_stream("g", policy=Budget(epsilon=1, delta="1e-5"), blocking=Blocking.by_time("t"))
    p.add_context("team")
    ts = pd.date_range("2024-01-01", periods=1, freq="D").repeat(3)
    p.ingest("g", pd.DataFrame({"t": ts, "v": [1.0, 2.0, 3.0]}))
    b = p.ledger.states("g", "team")[0].block
    spec = "mixed-threshold:upper=1,lower=1,comparison_epsilon=0.0001,sensitivity=0.000001"
    q = TaskQueue(p, scheduler=spec, noise=SeededNoise(SEED), clock=Clock())
    query = Query.count(epsilon=0.2, delta=1e-6, mechanism="gaussian")
    t = q.submit_query("g", query, selector=AnyBlocks(1), context="team", significance={b: 0.1})
    q.pump()
    done = q.wait(t.id, 30)
    assert done.state.value == "done", done.note
    held = p.ledger.reservation(done.reservation_id).cost  # type: ignore[arg-type]
    assert isinstance(held, Budget) and 0 < held.epsilon < Decimal("0.15")  # partial
    used = p.ledger.state(b, "team").used
    assert used[0] <= int(held.epsilon * UNIT) + 2 * 10**14  # the run's ε0s (0.0001 each)
    assert used[1] <= int(held.delta * UNIT)  # the query's δ within the grant
    q.close()
    p.close()

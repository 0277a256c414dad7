"""Regressions of an independent DP review of the live scheduler (one test per finding)."""

from __future__ import annotations

from pathlib import Path

from blockbudget import Budget
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.tasks.queue import TaskQueue
from blockbudget.tasks.selectors import AnyBlocks
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

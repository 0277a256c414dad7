"""DPF, Dominant Private block Fairness (PrivateKube, Luo et al., OSDI'21 §4.2).

Budget is unlocked progressively (N- or T-unlocking, :mod:`.unlocking`). Waiting pipelines are
sorted by their *dominant share* — the largest fraction of a block's capacity they demand, over
their blocks and features with positive capacity (under RDP its orders: PrivateKube's RDP DPF;
DPack's ``DominantShares`` metric) — smallest first, ties by the next largest share and then by
arrival; each is tried all-or-nothing against the unlocked budget. A pipeline whose demand is
within its fair share ε_G/N on every block is served by the same pass as soon as its own arrival
has unlocked that share (PrivateKube's fast path).

Reimplemented from the paper and from reading github columbia/PrivateKube and columbia/dpack
(``DominantShares``, ``NBudgetUnlocking``, ``TBudgetUnlocking``); no code copied.
"""

from __future__ import annotations

import numpy as np

from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.scheduling.base import Scheduler, TaskSpec
from blockbudget.scheduling.pool import IntArray, Pool
from blockbudget.scheduling.unlocking import UnlockingScheduler, UnlockMode, WaitingTask

__all__ = ["SCHEDULERS", "DpfN", "DpfT", "dominant_shares"]


def dominant_shares(pool: Pool, item: WaitingTask) -> tuple[float, float]:
    """(largest, second largest) share of block capacity the task demands."""
    cap = pool.capacity[item.blocks]
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(cap > 0, item.vec / np.where(cap > 0, cap, 1.0), 0.0)
    flat = np.sort(shares.ravel())[::-1]
    return float(flat[0]), float(flat[1]) if len(flat) > 1 else 0.0


class _Dpf(UnlockingScheduler):
    """DPF over an unlocking scheme (see the module docstring)."""

    def __init__(
        self,
        *,
        seed: int | None = None,
        noise: NoiseSource | None = None,
        n: int = 100,
        lifetime: float = 10.0,
        tick: float = 1.0,
        batch: bool = True,
    ) -> None:
        unlock = UnlockMode.N if self.name == "dpf-n" else UnlockMode.T
        super().__init__(
            seed=seed, noise=noise, n=n, unlock=unlock, lifetime=lifetime, tick=tick, batch=batch
        )
        self.keys: dict[str, tuple[float, float, float, str]] = {}

    def prepare(self, pool: Pool, task: TaskSpec) -> WaitingTask:
        item = super().prepare(pool, task)
        first, second = dominant_shares(pool, item)
        self.keys[task.task_id] = (first, second, task.arrival, task.task_id)
        return item

    def schedule(self, pool: Pool, changed: IntArray) -> None:
        if len(changed) == 0:
            return
        ids = self.waiting.touching(changed)
        if not ids:
            return
        items = [self.waiting.tasks[t] for t in ids if pool.is_pending(t)]
        for t in ids:
            if not pool.is_pending(t):
                self.waiting.remove(t)
        ok = self.runnable(pool, items)
        ready = [items[k] for k in np.flatnonzero(ok)]
        ready.sort(key=lambda w: self.keys[w.task.task_id])
        self.grant_in_order(pool, ready)
        self.drop_dead(pool, items, ok)

    def describe(self) -> str:
        extra = f", lifetime={self.lifetime:g}" if self.unlock is UnlockMode.T else ""
        return f"{self.name}(N={self.n}{extra})"


class DpfN(_Dpf):
    """DPF with N-unlocking: each arriving pipeline unlocks ε_G/N of every block it demands."""

    name = "dpf-n"


class DpfT(_Dpf):
    """DPF with T-unlocking: each block unlocks linearly over ``lifetime``."""

    name = "dpf-t"


SCHEDULERS: tuple[type[Scheduler], ...] = (DpfN, DpfT)

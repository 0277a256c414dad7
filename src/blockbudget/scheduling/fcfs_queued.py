"""FCFS that queues under T-unlocking: the online FCFS baseline of the DPack paper (EuroSys'25
§6) and of PrivateKube's simulator.

:class:`~blockbudget.scheduling.baselines.Fcfs` (``fcfs``) decides on arrival against a
block's *whole* capacity: a NAMED task that does not fit then is refused, one that fits is
granted at once. The authors' online FCFS is not that: it is the same batch scheduler as their
DPF-T and DPack (``privacypacking``'s ``schedule_queue`` with the ``Fcfs`` metric), so tasks
wait in a queue, blocks unlock linearly over their lifetime (T-unlocking, :mod:`.unlocking`),
and every batch (``tick``) grants the waiting tasks that fit the *unlocked* budget in arrival
order (ties: submission order), skipping those that do not fit — no head-of-line blocking. A
task that does not fit waits for more budget to unlock; one whose blocks are all fully unlocked
and cannot afford it is set aside (it stays pending until its timeout or the run's end, as in
the authors' code) and comes back if a live driver credits one of its blocks.

This is ``fcfs-t`` (spec ``fcfs-t:lifetime=SECONDS,tick=SECONDS``, the same options as
``dpf-t``). Comparing DPack with FCFS is only meaningful between schedulers that unlock and
batch alike: DPack / ``fcfs-t``, not DPack / ``fcfs`` (docs/results.md).

Reimplemented from reading github columbia/dpack (``schedulers/metrics.py``: ``Fcfs``,
``schedulers/scheduler.py``: ``schedule_queue``); no code copied.
"""

from __future__ import annotations

import numpy as np

from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.scheduling.base import Scheduler, TaskSpec
from blockbudget.scheduling.pool import IntArray, Pool
from blockbudget.scheduling.unlocking import UnlockingScheduler, UnlockMode

__all__ = ["SCHEDULERS", "FcfsT"]


class FcfsT(UnlockingScheduler):
    """First come, first served over T-unlocked budget, in batches (see the module docstring).

    Args:
        n: unused by T-unlocking (kept so that the unlocking options match ``dpf-t``'s).
        lifetime: data lifetime: a block is fully unlocked ``lifetime`` after it arrives.
        tick: the batch period.
    """

    name = "fcfs-t"

    def __init__(
        self,
        *,
        seed: int | None = None,
        noise: NoiseSource | None = None,
        n: int = 100,
        lifetime: float = 10.0,
        tick: float = 1.0,
    ) -> None:
        super().__init__(
            seed=seed, noise=noise, n=n, unlock=UnlockMode.T, lifetime=lifetime, tick=tick
        )

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        """Queue the task: nothing is decided until the next batch."""
        self.waiting.add(self.prepare(pool, task))

    def on_tick(self, pool: Pool) -> None:
        """Unlock, then one batch over every waiting task."""
        self._unlock_t(pool)
        self.schedule(pool, np.arange(pool.n_blocks))

    def schedule(self, pool: Pool, changed: IntArray) -> None:
        """Grant, in arrival then submission order, the waiting tasks touching ``changed``
        that fit the unlocked budget; set aside those that never will."""
        if len(changed) == 0:
            return
        ids = self.waiting.touching(changed)
        items = [self.waiting.tasks[t] for t in ids if pool.is_pending(t)]
        for t in ids:
            if not pool.is_pending(t):
                self.waiting.remove(t)
        if not items:
            return
        items.sort(key=lambda w: (w.task.arrival, pool.seq[w.task.task_id]))
        ok = self.runnable(pool, items)
        self.grant_in_order(pool, [items[k] for k in np.flatnonzero(ok)])
        self.drop_dead(pool, items, ok)

    def describe(self) -> str:
        return f"fcfs-t(lifetime={self.lifetime:g}, tick={self.tick_interval:g})"


SCHEDULERS: tuple[type[Scheduler], ...] = (FcfsT,)

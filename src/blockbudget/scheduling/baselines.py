"""Baseline schedulers: FCFS, round robin, Sage-style random block choice, Streaming.

Source of the Sage and Streaming baselines: seed ``000_de3e86489c8646aa.txt``, §VII-D.

* :class:`Fcfs` — first come, first served: a task is granted on arrival if its demand fits
  on every named block (OPEN tasks: the most recent blocks that fit, up to c_j); OPEN tasks that
  do not fit wait and are retried, oldest first, when a block arrives. PrivateKube's FCFS
  baseline (OSDI'21 §6.1), without unlocking.
* :class:`RoundRobin` — a round robin without unlocking: at every tick and arrival, waiting
  tasks are tried in rotating order (the start moves by one each pass), so no task starves
  behind an elephant at the head of the queue. PrivateKube's RR baseline, which unlocks like
  DPF and splits the unlocked budget among the waiting tasks, is :mod:`.rr` (``rr-n``,
  ``rr-t``).
* :class:`RandomBlocks` — Sage's access control as seed 000 §VII-D describes it: a query gets
  blocks chosen at random among those that can still afford its demand (up to c_j, stopping
  early when the task's validator passes); blocks are reused until their budget runs out.
* :class:`Streaming` — seed 000 §VII-D "Streaming" (Dwork 2010): each block serves at most one
  query, chosen at random; used blocks are gone.

The random choices of RandomBlocks and Streaming are public randomness (they never look at data,
and no noise is drawn): ``self.rng``, from OS entropy unless an experiment passes a ``seed``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.scheduling.base import BlockSpec, Scheduler, TaskShape, TaskSpec
from blockbudget.scheduling.pool import IntArray, Pool

__all__ = [
    "SCHEDULERS",
    "Fcfs",
    "RandomBlocks",
    "RoundRobin",
    "Streaming",
    "newest_first",
    "serve_open_in_order",
]


def newest_first(pool: Pool, task: TaskSpec) -> IntArray:
    """The blocks a task may use, newest first (O(its eligible blocks) for a restricted task)."""
    order: IntArray = pool.usable_indices(task.task_id)[::-1]
    return order


def serve_open_in_order(
    pool: Pool, task: TaskSpec, order: Sequence[int] | IntArray, *, usable: bool = False
) -> bool:
    """Charge an OPEN task's demand on blocks taken in ``order`` while they fit, up to c_j or
    until its validator passes; grant if it got at least ``min_blocks``, else reject nothing
    and return False (the caller decides). Blocks the task may not use
    (:attr:`TaskSpec.eligible`) are skipped (one vectorized mask) unless the caller says the
    order holds only ``usable`` ones."""
    arr = np.asarray(order, dtype=np.int64)
    if not usable and pool.restricted(task.task_id) and len(arr):
        arr = arr[pool.usable_mask(task.task_id)[arr]]
    if not len(arr):
        return False
    limit = task.access_limit or len(arr)
    vec = pool.vector(task.demand)
    ok = pool.fits_many(arr, vec)
    chosen = [int(i) for i in arr[np.flatnonzero(ok)[:limit]]]
    if len(chosen) < task.min_blocks:
        return False
    if task.validator is None:
        costs = {pool.blocks[i].block_id: task.demand for i in chosen}
        return pool.grant(task.task_id, costs)
    for i in chosen:
        bid = pool.blocks[i].block_id
        if not pool.charge(task.task_id, {bid: task.demand}):
            continue
        if task.validator(tuple(pool.charged_blocks[task.task_id])):
            break
    if len(pool.charged_blocks[task.task_id]) >= task.min_blocks:
        return pool.grant(task.task_id)
    return False


class Fcfs(Scheduler):
    """First come, first served (PrivateKube OSDI'21 §6.1; DPack's ``Fcfs`` metric): tasks are
    tried in arrival order, each granted as soon as it fits; see the module docstring.

    A NAMED task that does not fit when it arrives never will (its blocks only lose budget), so
    it is rejected at once. OPEN tasks wait for new blocks and are retried, oldest first, when
    one arrives (no head-of-line blocking: a task that does not fit is skipped).
    """

    name = "fcfs"
    shapes = frozenset({TaskShape.NAMED, TaskShape.OPEN})

    def __init__(self, *, seed: int | None = None, noise: NoiseSource | None = None) -> None:
        super().__init__(seed=seed, noise=noise)
        self.queue: list[str] = []

    def _try(self, pool: Pool, task: TaskSpec) -> bool:
        if task.blocks is not None:
            return pool.grant(task.task_id)
        return serve_open_in_order(pool, task, newest_first(pool, task), usable=True)

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        if self._try(pool, task) or not pool.is_pending(task.task_id):
            return
        if task.blocks is not None:
            pool.reject(task.task_id, note="does not fit its blocks")
        else:
            self.queue.append(task.task_id)

    def on_block(self, pool: Pool, block: BlockSpec) -> None:
        self._retry(pool, (block.block_id,))

    def on_credit(self, pool: Pool, block_ids: Sequence[str]) -> None:
        self._retry(pool, block_ids)

    def _retry(self, pool: Pool, block_ids: Sequence[str]) -> None:
        """Retry, oldest first, the waiting tasks that may use one of ``block_ids`` (a block
        a task may not use changes nothing for it)."""
        still = []
        for tid in self.queue:
            if not pool.is_pending(tid):
                continue
            task = pool.tasks[tid]
            if any(task.may_use(b) for b in block_ids) and self._try(pool, task):
                continue
            if pool.is_pending(tid):
                still.append(tid)
        self.queue = still


class RoundRobin(Scheduler):
    """Round robin without unlocking; see the module docstring."""

    name = "round-robin"
    shapes = frozenset({TaskShape.NAMED, TaskShape.OPEN})
    tick_interval = 1.0

    def __init__(self, *, seed: int | None = None, noise: NoiseSource | None = None) -> None:
        super().__init__(seed=seed, noise=noise)
        self.waiting: list[str] = []
        self.start = 0

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        self.waiting.append(task.task_id)

    def on_block(self, pool: Pool, block: BlockSpec) -> None:
        self._pass(pool)

    def on_tick(self, pool: Pool) -> None:
        self._pass(pool)

    def on_credit(self, pool: Pool, block_ids: Sequence[str]) -> None:
        """Retry, in the current turn order (the turn does not move), the waiting tasks that
        may use a credited block."""
        self._pass(pool, block_ids)

    def _pass(self, pool: Pool, block_ids: Sequence[str] | None = None) -> None:
        self.waiting = [t for t in self.waiting if pool.is_pending(t)]
        if not self.waiting:
            return
        n = len(self.waiting)
        start = self.start % n
        order = self.waiting[start:] + self.waiting[:start]
        if block_ids is None:
            self.start += 1
        for tid in order:
            task = pool.tasks[tid]
            if block_ids is not None and not any(task.may_use(b) for b in block_ids):
                continue
            if not pool.is_pending(tid):
                continue
            if task.blocks is not None:
                pool.grant(tid)
            else:
                serve_open_in_order(pool, task, newest_first(pool, task), usable=True)


class RandomBlocks(Scheduler):
    """Sage-style random block choice (seed 000 §VII-D "Sage"); see the module docstring."""

    name = "random-blocks"
    shapes = frozenset({TaskShape.OPEN})

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        order = self.rng.permutation(pool.n_blocks)  # serve_open_in_order masks eligibility
        if not serve_open_in_order(pool, task, order) and pool.is_pending(task.task_id):
            pool.reject(task.task_id, note="no block can afford the demand")


class Streaming(Scheduler):
    """Streaming (seed 000 §VII-D): every block serves at most one query; see the module
    docstring."""

    name = "streaming"
    shapes = frozenset({TaskShape.OPEN})

    def __init__(self, *, seed: int | None = None, noise: NoiseSource | None = None) -> None:
        super().__init__(seed=seed, noise=noise)
        self.used: set[int] = set()

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        fresh = np.ones(pool.n_blocks, dtype=bool)
        fresh[list(self.used)] = False
        unused = np.flatnonzero(fresh)
        order = unused[self.rng.permutation(len(unused))]  # eligibility masked when served
        if serve_open_in_order(pool, task, order):
            for bid in pool.charged_blocks[task.task_id]:
                self.used.add(pool.index(bid))
        elif pool.is_pending(task.task_id):
            for bid in pool.charged_blocks[task.task_id]:
                self.used.add(pool.index(bid))
            pool.reject(task.task_id, note="no unused block can afford the demand")


SCHEDULERS: tuple[type[Scheduler], ...] = (Fcfs, RoundRobin, RandomBlocks, Streaming)

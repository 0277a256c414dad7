"""Budget unlocking and the waiting-task index shared by DPF and DPack.

PrivateKube (OSDI'21 §4.2, github columbia/PrivateKube) does not hand a block's whole budget out
at once: it *unlocks* it progressively, and tasks may only consume unlocked budget.

* N-unlocking: every arriving task that demands block b unlocks ε_G/N of it (until all of it is
  unlocked).
* T-unlocking: block b unlocks linearly over its data lifetime: a fraction min(1, age/lifetime)
  is unlocked (PrivateKube unlocks ε_G/N every lifetime/N; the limit N → ∞ is the linear form).

A task (NAMED shape, all-or-nothing) can run when, on every block it names, its demand fits in
the block's unlocked budget minus what is already charged or reserved there, by the shape of
the rule's fit test (:class:`~blockbudget.accounting.Combine`) — ALL: every feature (basic's ε
and δ, μ-GDP's μ², advanced composition's Σε² and Σδ); ANY: some feature with positive capacity
(an RDP order α: PrivateKube's "exists α" rule).

The unlock limit is a fairness rule, not a safety bound: a fraction u of the filter's nominal
capacity (:attr:`Pool.nominal_capacity`), with a relative :data:`UNLOCK_TOLERANCE` so that a
demand of exactly one share (ε_G/N under N-unlocking) fits once its share is unlocked although
the pool's float demands are nudged up, and never more than the nominal capacity plus the
pool's float margin, so that N shares of ε_G/N all fit. Every grant then goes through the
pool's own fit test, which decides by the exact integer features near capacity
(:mod:`.pool`): nothing beyond what the ledger admits is ever granted, and the block's last
share is.

:class:`Waiting` keeps the waiting tasks indexed by block, so that a pass only looks at tasks
touching blocks whose available budget grew (a grant only shrinks availability, so a task that
cannot run cannot become runnable through another grant). Feasibility of many tasks is tested
in one vectorized step.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt

from blockbudget.accounting import Combine
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.scheduling.base import (
    BlockSpec,
    Scheduler,
    TaskShape,
    TaskSpec,
    check_positive,
)
from blockbudget.scheduling.pool import CAPACITY_MARGIN, FloatArray, IntArray, Pool

__all__ = ["UNLOCK_TOLERANCE", "UnlockMode", "UnlockingScheduler", "Waiting", "WaitingTask"]

#: Relative tolerance of the unlock limit: covers the ulp the pool's float demands are nudged up
#: by and the rounding of summed unlock fractions, so that exactly one unlocked share fits (it
#: never lets the pool itself admit more: see the module docstring).
UNLOCK_TOLERANCE = 1e-8


class UnlockMode(Enum):
    """How a block's budget is unlocked (PrivateKube OSDI'21 §4.2)."""

    N = "n"  # each arriving task unlocks 1/N of the blocks it demands
    T = "t"  # linear over the data lifetime
    NONE = "none"  # everything unlocked at once


@dataclass
class WaitingTask:
    """A waiting NAMED task, preprocessed: block indices, demand features, one row per block."""

    task: TaskSpec
    blocks: IntArray
    vec: FloatArray
    rows: FloatArray


class Waiting:
    """Waiting tasks, indexed by the blocks they name."""

    def __init__(self) -> None:
        self.tasks: dict[str, WaitingTask] = {}
        self.by_block: dict[int, set[str]] = defaultdict(set)

    def add(self, item: WaitingTask) -> None:
        self.tasks[item.task.task_id] = item
        for b in item.blocks.tolist():
            self.by_block[b].add(item.task.task_id)

    def remove(self, task_id: str) -> None:
        item = self.tasks.pop(task_id, None)
        if item is None:
            return
        for b in item.blocks.tolist():
            ids = self.by_block.get(b)
            if ids is not None:
                ids.discard(task_id)
                if not ids:
                    del self.by_block[b]

    def touching(self, blocks: npt.ArrayLike) -> list[str]:
        """Ids of waiting tasks naming any of ``blocks`` (in no particular order: callers
        sort by a key that ends with the submission order, :attr:`Pool.seq`)."""
        out: set[str] = set()
        for b in np.asarray(blocks, dtype=np.int64).tolist():
            ids = self.by_block.get(b)
            if ids:
                out.update(ids)
        return list(out)

    def prune(self, pool: Pool) -> None:
        """Forget tasks that are no longer pending (expired)."""
        for tid in [t for t in self.tasks if not pool.is_pending(t)]:
            self.remove(tid)


class UnlockingScheduler(Scheduler):
    """Base of DPF and DPack: unlocking state, waiting index, vectorized feasibility.

    Args:
        n: N, the number of fair shares per block (PrivateKube default 100).
        unlock: the unlocking scheme.
        lifetime: data lifetime for T-unlocking (time units).
        tick: interval between T-unlocking steps and batched scheduling passes.
        batch: schedule in passes every ``tick`` over the tasks touching blocks whose unlocked
            budget grew since the last pass (an arriving task that fits at once is still
            served at once: PrivateKube's fast path); False runs a pass at every arrival.
    """

    shapes = frozenset({TaskShape.NAMED})
    combines = frozenset({Combine.ALL, Combine.ANY})

    def __init__(
        self,
        *,
        seed: int | None = None,
        noise: NoiseSource | None = None,
        n: int = 100,
        unlock: UnlockMode = UnlockMode.N,
        lifetime: float = 10.0,
        tick: float = 1.0,
        batch: bool = True,
    ) -> None:
        super().__init__(seed=seed, noise=noise)
        n = plain_number(n)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidRequestError(f"N must be an int >= 1, got {n!r}")
        if isinstance(unlock, str) and unlock in {m.value for m in UnlockMode}:
            unlock = UnlockMode(unlock)  # "n" / "t" / "none", e.g. from a CLI option
        if not isinstance(unlock, UnlockMode):
            known = ", ".join(m.value for m in UnlockMode)
            raise InvalidRequestError(f"unlock must be an UnlockMode ({known}), got {unlock!r}")
        lifetime = check_positive(lifetime, name="lifetime")
        tick = check_positive(tick, name="tick")
        if isinstance(batch, float) or batch not in (True, False):  # 0/1 from a CLI option
            raise InvalidRequestError(f"batch must be a bool, got {batch!r}")
        batch = bool(batch)
        self.n = n
        self.unlock = unlock
        self.lifetime = lifetime
        self.batch = batch
        self.tick_interval = tick if (unlock is UnlockMode.T or batch) else None
        self.drain_time = lifetime if unlock is UnlockMode.T else 0.0
        self.changed: set[int] = set()
        self.unlocked = np.zeros(16)
        self.waiting = Waiting()
        # waiting tasks dropped as dead (fully unlocked, not fitting): a credit revives them
        self.dormant = Waiting()

    # --- unlocking ---------------------------------------------------------------------------

    def on_block(self, pool: Pool, block: BlockSpec) -> None:
        if len(self.unlocked) < pool.n_blocks:
            self.unlocked = np.concatenate([self.unlocked, np.zeros(max(16, pool.n_blocks))])
        self.unlocked[pool.n_blocks - 1] = 1.0 if self.unlock is UnlockMode.NONE else 0.0

    def _unlock_t(self, pool: Pool) -> IntArray:
        n = pool.n_blocks
        arrivals = np.array([b.arrival for b in pool.blocks])
        new = np.minimum(1.0, (pool.now - arrivals) / self.lifetime)
        changed = np.flatnonzero(new > self.unlocked[:n])
        self.unlocked[:n] = np.maximum(self.unlocked[:n], new)
        return changed

    def limits(self, pool: Pool, blocks: IntArray) -> FloatArray:
        """Unlocked budget per feature on ``blocks`` (−inf where the capacity is not positive):
        the unlocked fraction of the nominal capacity within :data:`UNLOCK_TOLERANCE`, never
        above the nominal capacity plus the pool's float margin."""
        cap = pool.capacity[blocks]
        unlocked = np.minimum(self.unlocked[blocks] * (1 + UNLOCK_TOLERANCE), 1 + CAPACITY_MARGIN)
        share = pool.nominal_capacity[blocks] * unlocked[:, None]  # ≥ 0 where cap > 0
        lim: FloatArray = np.where(cap > 0, share, -np.inf)
        if pool.combine is Combine.ALL:
            lim = np.where(cap > 0, lim, cap)  # ALL: a zero capacity (δ_g = 0) is a real 0
        retired = pool.retired[blocks]
        if retired.any():  # a retired block unlocks nothing more (the pool refuses it)
            lim = np.where(retired[:, None], -np.inf, lim)
        return lim

    def available(self, pool: Pool, blocks: IntArray) -> FloatArray:
        """Unlocked budget not yet charged or reserved, per feature."""
        used = pool.charged[blocks] + pool.reserved[blocks]
        out: FloatArray = self.limits(pool, blocks) - used
        return out

    def runnable(self, pool: Pool, items: list[WaitingTask]) -> npt.NDArray[np.bool_]:
        """Whether each task's demand fits the unlocked, available budget of all its blocks."""
        if not items:
            return np.zeros(0, dtype=bool)
        if len(items) == 1:
            blocks, vecs = items[0].blocks, items[0].rows
        else:
            blocks = np.concatenate([w.blocks for w in items])
            vecs = np.concatenate([w.rows for w in items])
        left = self.available(pool, blocks)
        if pool.combine is Combine.ALL:
            ok_rows = np.all(vecs <= left, axis=1)
        else:
            ok_rows = np.any(vecs <= left, axis=1)
        if len(items) == 1:
            return np.array([bool(np.all(ok_rows))])
        starts = np.cumsum([0] + [len(w.blocks) for w in items[:-1]])
        ok: npt.NDArray[np.bool_] = np.logical_and.reduceat(ok_rows, starts)
        return ok

    def drop_dead(self, pool: Pool, items: list[WaitingTask], ok: npt.NDArray[np.bool_]) -> None:
        """Set aside waiting tasks that cannot run and never will without a credit: every
        block they name is fully unlocked, and availability only shrinks from here (in a
        simulation). They stay PENDING in the pool (until their timeout or the end of the
        run), as in PrivateKube; a live driver's credit on one of their blocks brings them
        back (:meth:`on_credit`)."""
        if not items:
            return
        blocks = np.concatenate([w.blocks for w in items])
        starts = np.cumsum([0] + [len(w.blocks) for w in items[:-1]])
        full = np.logical_and.reduceat(self.unlocked[blocks] >= 1.0, starts)
        for k in np.flatnonzero(full & ~ok).tolist():
            self.waiting.remove(items[k].task.task_id)
            self.dormant.add(items[k])

    def prepare(self, pool: Pool, task: TaskSpec) -> WaitingTask:
        assert task.blocks is not None
        index = pool.index
        idx = np.fromiter((index(b) for b in task.blocks), dtype=np.int64, count=len(task.blocks))
        vec = pool.vector(task.demand)
        rows = np.repeat(vec[None, :], len(idx), axis=0)  # a copy: cheaper than broadcast_to
        return WaitingTask(task, idx, vec, rows)

    # --- the run -----------------------------------------------------------------------------

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        item = self.prepare(pool, task)
        self.waiting.add(item)
        if self.unlock is UnlockMode.N:
            self.unlocked[item.blocks] = np.minimum(1.0, self.unlocked[item.blocks] + 1.0 / self.n)
        if not self.batch:
            self.schedule(pool, item.blocks)
            return
        # fast path; a block with nothing unlocked (T-unlocking: a task naming the newest
        # block) cannot fit a demand, so the test is skipped there
        if (
            self.unlocked[item.blocks].all()
            and self.runnable(pool, [item])[0]
            and pool.grant(task.task_id)
        ):
            self.waiting.remove(task.task_id)
        if self.unlock is UnlockMode.N:
            self.changed.update(item.blocks.tolist())

    def on_tick(self, pool: Pool) -> None:
        changed = self._unlock_t(pool) if self.unlock is UnlockMode.T else np.zeros(0, np.int64)
        if self.changed:
            changed = np.union1d(changed, np.fromiter(self.changed, dtype=np.int64))
            self.changed.clear()
        self.schedule(pool, changed)

    def on_credit(self, pool: Pool, block_ids: Sequence[str]) -> None:
        """Budget came back to ``block_ids``: the tasks set aside as dead that name one of
        them wait again, and a scheduling pass runs over the tasks touching them (in the
        scheduler's own order)."""
        idx = np.array(
            sorted(i for b in block_ids if (i := pool.block_index.get(b)) is not None),
            dtype=np.int64,
        )
        if not len(idx):
            return
        self.revive(pool, idx)
        self.schedule(pool, idx)

    def revive(self, pool: Pool, blocks: IntArray) -> list[str]:
        """Put the dormant tasks naming one of ``blocks`` back in the waiting index; forget
        those no longer pending. Returns the ids revived."""
        revived = []
        for tid in self.dormant.touching(blocks):
            item = self.dormant.tasks[tid]
            self.dormant.remove(tid)
            if pool.is_pending(tid):
                self.waiting.add(item)
                revived.append(tid)
        return revived

    def schedule(self, pool: Pool, changed: IntArray) -> None:
        """One scheduling pass over the tasks touching ``changed`` blocks."""
        raise NotImplementedError

    def grant_in_order(self, pool: Pool, ordered: list[WaitingTask]) -> int:
        """Grant tasks in order while each still fits (re-checked one by one, against the
        unlock limits computed once for the pass: granting changes usage, not unlocking)."""
        if not ordered:
            return 0
        lim = self.limits(pool, np.arange(pool.n_blocks))
        test = np.all if pool.combine is Combine.ALL else np.any
        granted = 0
        for item in ordered:
            tid = item.task.task_id
            if not pool.is_pending(tid):
                self.waiting.remove(tid)
                continue
            b = item.blocks
            left = lim[b] - pool.charged[b] - pool.reserved[b]
            if test(item.rows <= left, axis=1).all() and pool.grant(tid):
                self.waiting.remove(tid)
                granted += 1
        return granted

"""DPF, Dominant Private block Fairness (PrivateKube, Luo et al., OSDI'21 §4.2).

Budget is unlocked progressively (N- or T-unlocking, :mod:`.unlocking`). Waiting pipelines are
sorted by their *dominant share* — the largest fraction of a block's capacity they demand, over
their blocks and features with positive capacity (under RDP its orders: PrivateKube's RDP DPF;
DPack's ``DominantShares`` metric) — smallest first, ties by the next largest share, then by
arrival, then by submission order (queue order, as in the authors' code; never by the task id
as a string, which would put "t10" before "t2"); each is tried all-or-nothing against the
unlocked budget. A pipeline whose demand is within its fair share ε_G/N on every block is
served by the same pass as soon as its own arrival has unlocked that share (PrivateKube's fast
path).

**Lending** (``lend``, a fraction of a block; 0, the paper's DPF, by default): a waiting task
that no other waiting task competes with — none names any of its blocks — is granted as soon as
its blocks can afford it and its usage stays within ``max(unlocked, lend)`` of every block's
capacity, and the unlock of those blocks is advanced to cover it (as if the arrivals whose shares
it used had come). Under contention nothing changes: only unlocked budget is given out, smallest
dominant share first, and since lending keeps usage within the unlocked budget, each later
arrival still unlocks one fresh share that a fair-share task gets at once — until the block is
fully unlocked, which lending brings closer: the budget an uncontended task borrowed is the
budget the last arrivals would have unlocked. Lending decides in :meth:`Scheduler.on_settle`
(after every task the driver knows of has entered: a live leader taking over re-enters tasks
one by one and must not lend to the first before it sees the others) and in every pass.

Reimplemented from the paper and from reading github columbia/PrivateKube and columbia/dpack
(``DominantShares``, ``NBudgetUnlocking``, ``TBudgetUnlocking``); no code copied.
"""

from __future__ import annotations

import math

import numpy as np

from blockbudget.accounting import Combine
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.scheduling.base import TERMINAL_KINDS, Scheduler, TaskSpec
from blockbudget.scheduling.pool import FloatArray, IntArray, Pool
from blockbudget.scheduling.unlocking import (
    UNLOCK_TOLERANCE,
    UnlockingScheduler,
    UnlockMode,
    WaitingTask,
)

__all__ = ["SCHEDULERS", "DpfN", "DpfT", "dominant_shares"]


def dominant_shares(pool: Pool, item: WaitingTask) -> tuple[float, float]:
    """(largest, second largest) share of block capacity the task demands."""
    cap = pool.capacity[item.blocks]
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(cap > 0, item.vec / np.where(cap > 0, cap, 1.0), 0.0)
    flat = shares.ravel()
    if len(flat) < 2:
        return float(flat[0]), 0.0
    top = np.partition(flat, len(flat) - 2)[-2:]  # the two largest, in order
    return float(top[1]), float(top[0])


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
        lend: float = 0.0,
    ) -> None:
        unlock = UnlockMode.N if self.name == "dpf-n" else UnlockMode.T
        super().__init__(
            seed=seed, noise=noise, n=n, unlock=unlock, lifetime=lifetime, tick=tick, batch=batch
        )
        lend = plain_number(lend)
        if isinstance(lend, bool):  # lend=true from a spec: lend the whole block
            lend = float(lend)
        if not isinstance(lend, int | float) or not 0.0 <= lend <= 1.0:
            raise InvalidRequestError(f"lend must be a fraction in [0, 1], got {lend!r}")
        self.lend = float(lend)
        self.keys: dict[str, tuple[float, float, float, int]] = {}
        self._unsettled: set[int] = set()  # blocks of arrivals lending has not looked at
        self._seen = 0  # decisions already scanned for tasks that left the queue

    def prepare(self, pool: Pool, task: TaskSpec) -> WaitingTask:
        item = super().prepare(pool, task)
        first, second = dominant_shares(pool, item)
        self.keys[task.task_id] = (first, second, task.arrival, pool.seq[task.task_id])
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
        if self.lend > 0:
            self._unsettled.update(changed.tolist())
            self.on_settle(pool)

    # --- lending -----------------------------------------------------------------------------

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        super().on_task(pool, task)
        item = self.waiting.tasks.get(task.task_id)
        if self.lend > 0 and item is not None:
            self._unsettled.update(item.blocks.tolist())

    def on_tick(self, pool: Pool) -> None:
        super().on_tick(pool)
        self.on_settle(pool)

    def on_settle(self, pool: Pool) -> None:
        """Lend to the uncontended tasks among those touching blocks where something arrived
        or a task left the queue (granted, refused, expired, cancelled) since the last look."""
        if self.lend <= 0:
            return
        blocks = self._unsettled
        self._unsettled = set()
        for d in pool.decisions[self._seen :]:
            if d.kind in TERMINAL_KINDS:
                for queue in (self.waiting, self.dormant):
                    item = queue.tasks.get(d.task_id)
                    if item is not None:
                        blocks.update(item.blocks.tolist())
                        queue.remove(d.task_id)
        self._seen = len(pool.decisions)
        if not blocks:
            return
        ids = self.waiting.touching(np.fromiter(blocks, dtype=np.int64))
        items = [self.waiting.tasks[t] for t in ids if pool.is_pending(t)]
        for item in sorted(items, key=lambda w: self.keys[w.task.task_id]):
            self._lend(pool, item)
        self._seen = len(pool.decisions)

    def competitors(self, pool: Pool, task_id: str) -> list[str]:
        """Other pending waiting tasks naming one of the task's blocks, in DPF's order."""
        item = self.waiting.tasks.get(task_id) or self.dormant.tasks.get(task_id)
        if item is None:
            return []
        ids = [t for t in self.waiting.touching(item.blocks) if t != task_id and pool.is_pending(t)]
        return sorted(ids, key=lambda t: self.keys[t])

    def needed(self, pool: Pool, item: WaitingTask) -> FloatArray:
        """Per block, the unlocked fraction the block's usage would need with the task
        granted (ALL: the largest feature's; ANY: the best feature's; inf where no feature
        with positive capacity can hold it)."""
        b = item.blocks
        cap = pool.capacity[b]
        nominal = pool.nominal_capacity[b]
        used = pool.charged[b] + pool.reserved[b] + item.rows
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(cap > 0, used / np.where(nominal > 0, nominal, 1.0), np.nan)
        if pool.combine is Combine.ALL:
            out: FloatArray = np.max(np.where(np.isnan(frac), 0.0, frac), axis=1)
        else:
            out = np.min(np.where(np.isnan(frac), np.inf, frac), axis=1)
        return out

    def _lend(self, pool: Pool, item: WaitingTask) -> bool:
        tid = item.task.task_id
        if tid not in self.waiting.tasks or not pool.is_pending(tid):
            return False
        if self.competitors(pool, tid):
            return False
        need = self.needed(pool, item)
        ceiling = np.maximum(self.unlocked[item.blocks], self.lend) * (1 + UNLOCK_TOLERANCE)
        if np.any(need > ceiling) or not pool.grant(tid):
            return False
        self.waiting.remove(tid)
        self.unlocked[item.blocks] = np.maximum(self.unlocked[item.blocks], np.minimum(1.0, need))
        return True

    # --- why ---------------------------------------------------------------------------------

    def why(self, pool: Pool, task_id: str) -> str:
        """Why a pending task waits, in DPF's terms: the waiting tasks it competes with (by
        id prefix, and how many come first in DPF's order) and the unlock it waits for. Names
        no block (a user stream's block ids are not every reader's to see)."""
        own = "DPF grants waiting tasks smallest dominant share first, within the budget it unlocks"
        if task_id in self.dormant.tasks:
            return (
                f"{own}; every block it names is fully unlocked and cannot afford it: it waits "
                "for budget to come back (a grant that spends less, a cancelled grant)"
            )
        item = self.waiting.tasks.get(task_id)
        if item is None or not pool.is_pending(task_id):
            return ""
        rivals = self.competitors(pool, task_id)
        need = self.needed(pool, item)
        unlocked = self.unlocked[item.blocks]
        short = need > unlocked * (1 + UNLOCK_TOLERANCE)
        parts = [own]
        if rivals:
            mine = self.keys[task_id]
            ahead = sum(1 for t in rivals if self.keys[t] < mine)
            shown = ", ".join(t[:12] for t in rivals[:3])
            more = f" and {len(rivals) - 3} more" if len(rivals) > 3 else ""
            parts.append(
                f"it competes for its blocks with {len(rivals)} other waiting task(s) "
                f"({shown}{more}; {ahead} of them come before it, dominant share "
                f"{mine[0]:.3g} for it): while tasks compete, only unlocked budget is given"
            )
        elif self.lend > 0 and not np.any(need > 1 + UNLOCK_TOLERANCE):
            parts.append(
                f"no other task competes for its blocks, but it needs {float(need.max()):.3g} "
                f"of a block and lending stops at lend={self.lend:g}"
            )
        elif self.lend > 0:
            parts.append("no other task competes for its blocks; they cannot afford it")
        else:
            parts.append(
                "no other task competes for its blocks, but this DPF lends nothing (lend=0): "
                "budget not yet unlocked is kept for later arrivals"
            )
        if short.any() and not np.any(need[short] > 1 + UNLOCK_TOLERANCE):
            gap = float(np.max(need[short] - unlocked[short]))
            if self.unlock is UnlockMode.N:
                k = max(1, math.ceil(gap * self.n - 1e-9))
                parts.append(
                    f"{int(short.sum())} of its {len(short)} block(s) have not unlocked enough: "
                    f"it waits for {k} more arriving task(s) naming them (each unlocks 1/{self.n} "
                    "of a block)"
                )
            else:
                parts.append(
                    f"{int(short.sum())} of its {len(short)} block(s) have not unlocked enough: "
                    f"about {gap * self.lifetime:.3g} more time unit(s) unlock it (T-unlocking "
                    f"over {self.lifetime:g})"
                )
        elif not short.any():
            parts.append(
                "its blocks have unlocked enough: the next pass grants it unless a task before "
                "it takes that budget"
            )
        return "; ".join(parts)

    def describe(self) -> str:
        extra = f", lifetime={self.lifetime:g}" if self.unlock is UnlockMode.T else ""
        extra += f", lend={self.lend:g}" if self.lend > 0 else ""
        return f"{self.name}(N={self.n}{extra})"


class DpfN(_Dpf):
    """DPF with N-unlocking: each arriving pipeline unlocks ε_G/N of every block it demands."""

    name = "dpf-n"


class DpfT(_Dpf):
    """DPF with T-unlocking: each block unlocks linearly over ``lifetime``."""

    name = "dpf-t"


SCHEDULERS: tuple[type[Scheduler], ...] = (DpfN, DpfT)

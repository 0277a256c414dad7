"""RR-N and RR-T: PrivateKube's round-robin baselines over unlocked budget (Luo et al., OSDI'21
§6, the evaluation's "RR" baseline; github columbia/PrivateKube,
``simulator/dpsched/DP_simulator.py``:
``_rr_nn_subloop_unlock_quota_n_sched``, ``_rr_t_subloop_unlock_quota_n_sched``,
``utils/misc.py``: ``max_min_fair_allocation``).

Budget unlocks exactly as under DPF (:mod:`.unlocking`: RR-N, every arriving pipeline unlocks
ε_G/N of each block it names; RR-T, a block unlocks linearly over its lifetime, at every
``tick``). What differs is who gets the unlocked budget: DPF hands it out whole, smallest
dominant share first; RR splits it, on each block separately, among *all* the waiting pipelines
that name the block, max-min fairly (water-filling: each gets an equal part, a pipeline that
needs less than its part gets what it needs and the rest is split among the others). A
pipeline keeps what it was given and accumulates it over unlocks; it is granted once it has
accumulated its whole demand on every block it names. Budget promised to a waiting pipeline
is spent for every other one, so when many pipelines wait the unlocked budget is spread thin
and elephants hold budget that mice could have completed with — the inefficiency the paper's
evaluation shows (§6.2: "RR ≤ 38" pipelines on one block). The semantics here are those of
the authors' simulator, which their microbenchmark scripts (``evaluation/microbenchmark``) run
for the paper's figures.

In units: a pipeline's need on a block is the largest fraction of the block's nominal capacity
its outstanding demand takes in any feature (its dominant share there), and what it is given is
a fraction of its demand vector, so that a part x of the block covers x of the block in every
feature (with pure-ε demands under basic accounting this is the authors' split of ε). The
residual split at a pass is the unlocked budget minus what is charged, reserved and promised.

Choices where our model differs from the authors' simulator:

* Promises are the scheduler's, not pool reservations: the pool charges a pipeline's whole
  demand at its grant (one all-or-nothing charge, as every NAMED grant), and nothing is charged
  for a pipeline that never completes. A pipeline that leaves unfinished (timeout, end of run)
  gives its promised budget back to the block; the authors' simulator loses it. With the
  microbenchmark's single block no pipeline times out before the run ends (timeout 300
  arrivals, 236 arrive), so the counts there are not affected.
* Basic-shaped rules only (``Combine.ALL``): the authors' simulator has no RR over RDP
  ("no rdp x RR"), and a split of an RDP curve's "some order" test is not defined.
* A pipeline that cannot complete stays pending until its timeout or the run's end (the
  authors reject those on a block that has stopped releasing; the count of grants is the same).

Reimplemented from the paper and from reading the authors' simulator; no code copied.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from blockbudget.accounting import Combine
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.scheduling.base import Scheduler, TaskSpec
from blockbudget.scheduling.pool import FloatArray, IntArray, Pool
from blockbudget.scheduling.unlocking import UnlockingScheduler, UnlockMode, WaitingTask

__all__ = ["SCHEDULERS", "RrN", "RrT", "water_fill"]

#: A pipeline whose outstanding need is within this fraction of its demand is complete (the
#: authors' ``sim.numerical_delta`` plays the same role).
DONE_TOLERANCE = 1e-9


def water_fill(needs: FloatArray, capacity: float) -> FloatArray:
    """Max-min fair split of ``capacity`` among ``needs`` (the authors'
    ``max_min_fair_allocation``): everyone gets ``min(need, level)``, the level chosen so the
    parts sum to ``capacity`` (or everyone gets their need when that fits).

    Example:
        >>> water_fill(np.array([0.1, 0.5, 0.5]), 0.7).tolist()
        [0.1, 0.3, 0.3]
    """
    if len(needs) == 0 or capacity <= 0:
        return np.zeros(len(needs))
    if float(needs.sum()) <= capacity:
        return needs.copy()
    order = np.argsort(needs, kind="stable")
    ranked = needs[order]
    before = np.concatenate([[0.0], np.cumsum(ranked)[:-1]])  # need of the smaller ones
    levels = (capacity - before) / (len(ranked) - np.arange(len(ranked)))
    over = np.flatnonzero(ranked > levels)
    level = float(levels[over[0]])  # not everyone fits: some need exceeds its level
    out: FloatArray = np.minimum(needs, level)
    return out


class _RoundRobin(UnlockingScheduler):
    """Round robin over an unlocking scheme (see the module docstring).

    Args:
        n: N, the fair shares per block (RR-N: each arrival unlocks 1/N of its blocks).
        lifetime: RR-T: a block is fully unlocked ``lifetime`` after it arrives.
        tick: RR-T: the interval between unlocks (and splits).
    """

    combines = frozenset({Combine.ALL})

    def __init__(
        self,
        *,
        seed: int | None = None,
        noise: NoiseSource | None = None,
        n: int = 100,
        lifetime: float = 10.0,
        tick: float = 1.0,
    ) -> None:
        unlock = UnlockMode.N if self.name == "rr-n" else UnlockMode.T
        super().__init__(
            seed=seed,
            noise=noise,
            n=n,
            unlock=unlock,
            lifetime=lifetime,
            tick=tick,
            batch=unlock is UnlockMode.T,  # RR-N splits at every arrival, as the authors
        )
        #: per waiting task, the fraction of its demand promised on each of its blocks
        self.got: dict[str, FloatArray] = {}
        #: per waiting task, its dominant share of each of its blocks (the need of a whole demand)
        self.share: dict[str, FloatArray] = {}
        #: per waiting task, the position of each of its blocks in its block list
        self.pos: dict[str, dict[int, int]] = {}

    def prepare(self, pool: Pool, task: TaskSpec) -> WaitingTask:
        item = super().prepare(pool, task)
        nominal = pool.nominal_capacity[item.blocks]
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(nominal > 0, item.rows / np.where(nominal > 0, nominal, 1.0), 0.0)
        # a positive demand on a feature of zero capacity never fits: an infinite need
        impossible = np.any((nominal <= 0) & (item.rows > 0), axis=1)
        self.share[task.task_id] = np.where(impossible, np.inf, frac.max(axis=1))
        self.got[task.task_id] = np.zeros(len(item.blocks))
        self.pos[task.task_id] = {b: k for k, b in enumerate(item.blocks.tolist())}
        return item

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        """Queue the task; RR-N unlocks 1/N of its blocks and splits them at once, RR-T at the
        next tick."""
        item = self.prepare(pool, task)
        self.waiting.add(item)
        if self.unlock is UnlockMode.N:
            self.unlocked[item.blocks] = np.minimum(1.0, self.unlocked[item.blocks] + 1.0 / self.n)
            self.schedule(pool, item.blocks)
        else:
            self.changed.update(item.blocks.tolist())

    def on_tick(self, pool: Pool) -> None:
        """RR-T: unlock, then split every block some task waits on (a block whose unlock did
        not grow may hold budget a task left, or have tasks that arrived since)."""
        if self.unlock is UnlockMode.T:
            self._unlock_t(pool)
        self.changed.clear()
        self.schedule(pool, np.fromiter(sorted(self.waiting.by_block), dtype=np.int64))

    def _forget(self, task_id: str) -> None:
        self.waiting.remove(task_id)
        self.got.pop(task_id, None)
        self.share.pop(task_id, None)
        self.pos.pop(task_id, None)

    def _split(self, pool: Pool, block: int, lim: FloatArray) -> list[str]:
        """Water-fill one block's residual among the tasks waiting on it; the ids served."""
        ids = [t for t in self.waiting.by_block.get(block, ()) if pool.is_pending(t)]
        if not ids:
            return []
        ids.sort(key=lambda t: pool.seq[t])  # the split is symmetric; this fixes float sums
        pos = [self.pos[t][block] for t in ids]
        got = np.array([self.got[t][k] for t, k in zip(ids, pos, strict=True)])
        share = np.array([self.share[t][k] for t, k in zip(ids, pos, strict=True)])
        vecs = np.stack([self.waiting.tasks[t].vec for t in ids])
        promised = (got[:, None] * vecs).sum(axis=0)
        used = pool.charged[block] + pool.reserved[block] + promised
        nominal = pool.nominal_capacity[block]
        live = nominal > 0
        if not live.any():
            return []
        residual = float(np.min((lim[block][live] - used[live]) / nominal[live]))
        needs = np.where(np.isfinite(share), (1.0 - got) * share, 0.0)
        parts = water_fill(needs, max(0.0, residual))
        served = []
        for k, t in enumerate(ids):
            if parts[k] <= 0 or share[k] <= 0 or not np.isfinite(share[k]):
                continue
            new = got[k] + parts[k] / share[k]
            if new >= 1.0 - DONE_TOLERANCE:
                new = 1.0
            self.got[t][pos[k]] = new
            served.append(t)
        # a zero demand on this block needs nothing from it
        for k, t in enumerate(ids):
            if share[k] == 0:
                self.got[t][pos[k]] = 1.0
                served.append(t)
        return served

    def schedule(self, pool: Pool, changed: IntArray) -> None:
        """Split the residual of each ``changed`` block, then grant (in queue order) the tasks
        that have accumulated their whole demand on every block they name."""
        if len(changed) == 0:
            return
        for t in [t for t in self.waiting.touching(changed) if not pool.is_pending(t)]:
            self._forget(t)  # expired: what it was promised goes back to its blocks
        lim = self.limits(pool, np.arange(pool.n_blocks))
        touched: set[str] = set()
        for b in np.unique(changed).tolist():
            touched.update(self._split(pool, b, lim))
        self._grant_done(pool, touched)

    def _grant_done(self, pool: Pool, ids: Iterable[str]) -> None:
        done = [t for t in ids if t in self.got and bool(np.all(self.got[t] >= 1.0))]
        for t in sorted(done, key=lambda t: pool.seq[t]):
            if pool.is_pending(t) and pool.grant(t):
                self._forget(t)

    def describe(self) -> str:
        if self.unlock is UnlockMode.T:
            return f"{self.name}(lifetime={self.lifetime:g}, tick={self.tick_interval:g})"
        return f"{self.name}(N={self.n})"


class RrN(_RoundRobin):
    """RR with N-unlocking: each arriving pipeline unlocks ε_G/N of every block it names."""

    name = "rr-n"


class RrT(_RoundRobin):
    """RR with T-unlocking: each block unlocks linearly over ``lifetime``."""

    name = "rr-t"


SCHEDULERS: tuple[type[Scheduler], ...] = (RrN, RrT)

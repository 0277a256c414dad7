"""A discrete-event simulator: blocks and tasks arriving over time, one scheduler deciding.

Events are processed in time order; at equal times blocks come before tasks and ticks last
(a task arriving with a block can use it, as in PrivateKube's simulator). Before each event the
pool expires tasks past their deadline. Each scheduler callback is timed; the sum is the
scheduler time reported (the pool's own bookkeeping included, the simulator's excluded).

Metrics (:class:`SimulationResult`): tasks allocated (granted), profit of granted tasks,
realized significance Σ p_ij over the blocks charged to granted tasks (seed
``000_de3e86489c8646aa.txt`` §IV-B, the objective of Eq. (5)), mean and p95 delay of granted
tasks, the fraction of fair-share tasks served (PrivateKube OSDI'21 §6: a task whose demand is
at most 1/N of a block's capacity), budget used, and scheduler wall time.

How a *partial* grant counts (seed 000 Alg. 3, Eq. (18): a block grants ε_ij < ε_j) is an
explicit mode, :class:`PartialCredit`, stated on every result:

* ``FULL`` (the default) — a block charged to a granted task earns the task's whole p_ij,
  whatever ε it got: Eq. (5)'s Σ p_ij x_ij with x_ij = 1 for every block the task used. This is
  the seed's accounting in the proof of Thm. 5 (§VI-C, Eq. (20): ALG ≥ T·ε_g), and the only one
  under which Thm. 5's ratio 1 + ln(U/L) can hold (tests/scheduling/test_competitive_ratio.py).
* ``PRO_RATA`` — p_ij × (charged ε / demanded ε), capped at p_ij per charge: the value of a
  partial grant if quality grew linearly with ε. Thm. 5 does not hold under it (a drain of
  density-L queries before density-U ones exceeds the bound). Use it where an online result is
  compared with the offline optimum of Eq. (5), which grants whole demands only.

Without partial grants (Alg. 2, every NAMED scheduler) the two modes agree.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from blockbudget.accounting import Accounting, Combine
from blockbudget.errors import InvalidRequestError
from blockbudget.scheduling.base import BlockSpec, DecisionKind, Scheduler, TaskSpec, TaskStatus
from blockbudget.scheduling.pool import Pool

_BLOCK, _TASK, _TICK = 0, 1, 2


class PartialCredit(Enum):
    """How realized significance values a partial grant (see the module docstring).

    Example:
        >>> PartialCredit("pro-rata") is PartialCredit.PRO_RATA
        True
    """

    FULL = "full"  # the whole p_ij per block used: seed 000 Eq. (5), Thm. 5's accounting
    PRO_RATA = "pro-rata"  # p_ij × granted ε / demanded ε


@dataclass(frozen=True)
class SimulationResult:
    """What one run produced.

    Attributes:
        scheduler: the scheduler's description.
        pool: the final pool (decision log, per-block state).
        allocated: number of granted tasks.
        submitted: number of tasks submitted.
        profit: Σ profit of granted tasks.
        significance: realized significance, partial grants valued by ``partial_credit``.
        mean_delay: mean (grant time − arrival) over granted tasks (nan if none).
        p95_delay: 95th percentile of the same.
        fair_share_served: fraction of fair-share tasks granted (nan if none).
        budget_used: mean used fraction of the blocks at the end.
        scheduler_seconds: wall time inside scheduler callbacks.
        secure_noise: False when the scheduler's DP decisions used a SeededNoise (experiments
            and tests only; see :class:`~blockbudget.scheduling.base.Scheduler`).
        partial_credit: how ``significance`` values partial grants (:class:`PartialCredit`).
    """

    scheduler: str
    pool: Pool
    allocated: int
    submitted: int
    profit: float
    significance: float
    mean_delay: float
    p95_delay: float
    fair_share_served: float
    budget_used: float
    scheduler_seconds: float
    secure_noise: bool = True
    partial_credit: PartialCredit = PartialCredit.FULL

    def row(self) -> dict[str, Any]:
        """The metrics as a flat dict (for CSV rows)."""
        return {
            "scheduler": self.scheduler,
            "allocated": self.allocated,
            "submitted": self.submitted,
            "profit": round(self.profit, 6),
            "significance": round(self.significance, 6),
            "partial_credit": self.partial_credit.value,
            "mean_delay": round(self.mean_delay, 6),
            "p95_delay": round(self.p95_delay, 6),
            "fair_share_served": round(self.fair_share_served, 6),
            "budget_used": round(self.budget_used, 6),
            "scheduler_seconds": round(self.scheduler_seconds, 6),
        }


def simulate(
    scheduler: Scheduler,
    blocks: Sequence[BlockSpec],
    tasks: Sequence[TaskSpec],
    *,
    accounting: Accounting,
    fair_share_n: int = 100,
    horizon: float | None = None,
    slack_delta: float | None = None,
    partial_credit: PartialCredit = PartialCredit.FULL,
) -> SimulationResult:
    """Run ``scheduler`` over arriving ``blocks`` and ``tasks``.

    Args:
        scheduler: a fresh scheduler (it keeps state).
        blocks: the blocks, any order (sorted by arrival here).
        tasks: the tasks, any order (sorted by arrival here).
        accounting: the accounting rule of every block.
        fair_share_n: N of the fair-share metric.
        horizon: last tick time (default: the last arrival plus the longer of the longest
            timeout and the scheduler's ``drain_time``).
        slack_delta: the slack of rules that take one (strong, whitehouse; default δ_g/2).
        partial_credit: how the result's significance values partial grants (default FULL,
            the seed's accounting; see the module docstring).

    Raises:
        InvalidRequestError: the scheduler does not support the accounting rule.
    """
    if not isinstance(partial_credit, PartialCredit):
        raise InvalidRequestError(f"partial_credit must be a PartialCredit, got {partial_credit!r}")
    scheduler.check_serves(accounting)
    pool = Pool(accounting, slack_delta=slack_delta)
    events: list[tuple[float, int, int]] = []
    for k, b in enumerate(blocks):
        events.append((b.arrival, _BLOCK, k))
    for k, t in enumerate(tasks):
        events.append((t.arrival, _TASK, k))
    last = max((e[0] for e in events), default=0.0)
    if horizon is None:
        timeouts = [t.timeout for t in tasks if t.timeout is not None]
        horizon = last + max(max(timeouts, default=0.0), scheduler.drain_time)
    interval = scheduler.tick_interval
    if interval is not None and interval > 0:
        start = min((e[0] for e in events), default=0.0)
        n_ticks = int((horizon - start) // interval) + 1
        events.extend((start + k * interval, _TICK, k) for k in range(1, n_ticks + 1))
    heapq.heapify(events)
    spent = _run_events(scheduler, pool, events, blocks, tasks)
    return summarize(
        scheduler.describe(),
        pool,
        fair_share_n=fair_share_n,
        seconds=spent,
        secure_noise=scheduler.secure_noise,
        partial_credit=partial_credit,
    )


def _run_events(
    scheduler: Scheduler,
    pool: Pool,
    events: list[tuple[float, int, int]],
    blocks: Sequence[BlockSpec],
    tasks: Sequence[TaskSpec],
) -> float:
    """Process the event heap; returns the seconds spent inside scheduler callbacks."""
    spent = 0.0
    has_timeouts = any(t.timeout is not None for t in tasks)
    while events:
        when, kind, k = heapq.heappop(events)
        pool.now = when
        if has_timeouts:
            pool.expire_due()
        if kind == _BLOCK:
            pool.add_block(blocks[k])
            t0 = time.perf_counter()
            scheduler.on_block(pool, blocks[k])
            spent += time.perf_counter() - t0
        elif kind == _TASK:
            task = tasks[k]
            pool.submit(task)
            t0 = time.perf_counter()
            if task.shape in scheduler.shapes:
                scheduler.on_task(pool, task)
            else:
                pool.reject(task.task_id, note=f"{scheduler.name} does not serve this shape")
            spent += time.perf_counter() - t0
        else:
            t0 = time.perf_counter()
            scheduler.on_tick(pool)
            spent += time.perf_counter() - t0
        if not events or events[0][0] > when:  # the instant is over: every arrival is in
            t0 = time.perf_counter()
            scheduler.on_settle(pool)
            spent += time.perf_counter() - t0
    t0 = time.perf_counter()
    scheduler.on_finish(pool)
    spent += time.perf_counter() - t0
    pool.close()
    return spent


def summarize(
    name: str,
    pool: Pool,
    *,
    fair_share_n: int,
    seconds: float,
    secure_noise: bool = True,
    partial_credit: PartialCredit = PartialCredit.FULL,
) -> SimulationResult:
    """Compute the metrics of a finished pool."""
    granted = [t for t, s in pool.status.items() if s is TaskStatus.GRANTED]
    delays = np.array([pool.granted_at[t] - pool.tasks[t].arrival for t in granted])
    profit = float(sum(pool.tasks[t].profit for t in granted))
    significance = realized_significance(pool, partial_credit=partial_credit)
    fair = [t for t in pool.tasks if is_fair_share(pool, pool.tasks[t], fair_share_n)]
    served_fair = sum(1 for t in fair if pool.status[t] is TaskStatus.GRANTED)
    used = pool.used_fraction() if pool.n_blocks else np.zeros(1)
    return SimulationResult(
        scheduler=name,
        pool=pool,
        allocated=len(granted),
        submitted=len(pool.tasks),
        profit=profit,
        significance=significance,
        mean_delay=float(delays.mean()) if len(delays) else float("nan"),
        p95_delay=float(np.percentile(delays, 95)) if len(delays) else float("nan"),
        fair_share_served=served_fair / len(fair) if fair else float("nan"),
        budget_used=float(np.mean(used)),
        scheduler_seconds=seconds,
        secure_noise=secure_noise,
        partial_credit=partial_credit,
    )


def realized_significance(
    pool: Pool, *, partial_credit: PartialCredit = PartialCredit.FULL
) -> float:
    """Σ over granted tasks of their p_ij on the blocks they were charged (seed 000 Eq. (5)).

    FULL: each block a granted task used counts once, with its whole p_ij. PRO_RATA: each
    charge counts p_ij × (charged ε / demanded ε), capped at 1 per charge. For full grants the
    two agree.

    Example:
        >>> from blockbudget.accounting import Accounting
        >>> from blockbudget.budget import Budget
        >>> from blockbudget.scheduling import BlockSpec, Pool, TaskSpec
        >>> pool = Pool(Accounting.BASIC)
        >>> _ = pool.add_block(BlockSpec("b", 0.0, Budget(epsilon=1.0)))
        >>> pool.submit(TaskSpec("q", 0.0, Budget(epsilon=0.5), significance={"b": 2.0}))
        >>> pool.grant("q", {"b": Budget(epsilon=0.125)})  # a partial grant: 1/4 of ε_j
        True
        >>> realized_significance(pool), realized_significance(
        ...     pool, partial_credit=PartialCredit.PRO_RATA)
        (2.0, 0.5)
    """
    total = 0.0
    counted: set[tuple[str, str]] = set()
    for d in pool.decisions:
        if d.kind is not DecisionKind.CHARGE or d.block_id is None or d.cost is None:
            continue
        if pool.status.get(d.task_id) is not TaskStatus.GRANTED:
            continue  # a refused task, or a live driver's synthetic task
        task = pool.tasks[d.task_id]
        if partial_credit is PartialCredit.FULL:
            if (d.task_id, d.block_id) not in counted:
                counted.add((d.task_id, d.block_id))
                total += task.significance_of(d.block_id)
            continue
        want = float(np.max(pool.vector(task.demand)))
        got = float(np.max(pool.vector(d.cost)))
        share = 1.0 if want <= 0 else min(1.0, got / want)
        total += task.significance_of(d.block_id) * share
    return total


def is_fair_share(pool: Pool, task: TaskSpec, n: int) -> bool:
    """Whether N copies of the task's demand fit on an empty block (PrivateKube's fair share)."""
    if pool.n_blocks == 0:
        return False
    cap = pool.capacity[:1]
    vec = pool.vector(task.demand) * n
    if pool.combine is Combine.ALL:
        return bool(np.all(vec <= cap[0]))
    if pool.combine is Combine.ANY:
        return bool(np.any(vec <= cap[0]))
    return False  # a non-linear filter: N copies are not N times one

"""A discrete-event simulator: blocks and tasks arriving over time, one scheduler deciding.

Events are processed in time order; at equal times blocks come before tasks and ticks last
(a task arriving with a block can use it, as in PrivateKube's simulator). Before each event the
pool expires tasks past their deadline. Each scheduler callback is timed; the sum is the
scheduler time reported (the pool's own bookkeeping included, the simulator's excluded).

Metrics (:class:`SimulationResult`): tasks allocated (granted), profit of granted tasks,
realized significance Σ p_ij over charged blocks weighted by the fraction of the demand charged
(seed 000 Eq. (5) objective, Alg. 3's partial grants counted pro rata), mean and p95 delay of
granted tasks, the fraction of fair-share tasks served (PrivateKube OSDI'21 §6: a task whose
demand is at most 1/N of a block's capacity), budget used, and scheduler wall time.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockbudget.accounting import Accounting
from blockbudget.errors import InvalidRequestError
from blockbudget.scheduling.base import BlockSpec, DecisionKind, Scheduler, TaskSpec, TaskStatus
from blockbudget.scheduling.pool import Pool

_BLOCK, _TASK, _TICK = 0, 1, 2


@dataclass(frozen=True)
class SimulationResult:
    """What one run produced.

    Attributes:
        scheduler: the scheduler's description.
        pool: the final pool (decision log, per-block state).
        allocated: number of granted tasks.
        submitted: number of tasks submitted.
        profit: Σ profit of granted tasks.
        significance: realized significance (see the module docstring).
        mean_delay: mean (grant time − arrival) over granted tasks (nan if none).
        p95_delay: 95th percentile of the same.
        fair_share_served: fraction of fair-share tasks granted (nan if none).
        budget_used: mean used fraction of the blocks at the end.
        scheduler_seconds: wall time inside scheduler callbacks.
        secure_noise: False when the scheduler's DP decisions used a SeededNoise (experiments
            and tests only; see :class:`~blockbudget.scheduling.base.Scheduler`).
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

    def row(self) -> dict[str, Any]:
        """The metrics as a flat dict (for CSV rows)."""
        return {
            "scheduler": self.scheduler,
            "allocated": self.allocated,
            "submitted": self.submitted,
            "profit": round(self.profit, 6),
            "significance": round(self.significance, 6),
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
        slack_delta: δ̃ for STRONG accounting.

    Raises:
        InvalidRequestError: the scheduler does not support the accounting rule.
    """
    if accounting not in scheduler.accountings:
        raise InvalidRequestError(
            f"scheduler {scheduler.name!r} does not support {accounting.value} accounting"
        )
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
    t0 = time.perf_counter()
    scheduler.on_finish(pool)
    spent += time.perf_counter() - t0
    pool.close()
    return spent


def summarize(
    name: str, pool: Pool, *, fair_share_n: int, seconds: float, secure_noise: bool = True
) -> SimulationResult:
    """Compute the metrics of a finished pool."""
    granted = [t for t, s in pool.status.items() if s is TaskStatus.GRANTED]
    delays = np.array([pool.granted_at[t] - pool.tasks[t].arrival for t in granted])
    profit = float(sum(pool.tasks[t].profit for t in granted))
    significance = realized_significance(pool)
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
    )


def realized_significance(pool: Pool) -> float:
    """Σ over granted tasks and charged blocks of p_ij × (charged ε / demanded ε), capped at 1.

    For full grants the factor is 1, so this is seed 000 Eq. (5)'s objective Σ p_ij x_ij.
    """
    total = 0.0
    for d in pool.decisions:
        if d.kind is not DecisionKind.CHARGE or d.block_id is None or d.cost is None:
            continue
        if pool.status[d.task_id] is not TaskStatus.GRANTED:
            continue
        task = pool.tasks[d.task_id]
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
    if pool.accounting is Accounting.BASIC:
        return bool(np.all(vec <= cap[0]))
    if pool.accounting is Accounting.RDP:
        return bool(np.any(vec <= cap[0]))
    return False

"""Shared helpers of the scheduler contract suite: small random workloads and exact checks.

The checks read only the decision log and recompute every block's usage with the real
per-block filter in exact fixed-point integers — independent of the pool's float bookkeeping.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from blockbudget.accounting import Accounting, Noise, NoisePart, Release, add_vectors, make_filter
from blockbudget.budget import Budget, Cost
from blockbudget.scheduling import BlockSpec, DecisionKind, Pool, TaskShape, TaskSpec, TaskStatus
from blockbudget.scheduling.base import TERMINAL_KINDS
from blockbudget.scheduling.workloads import block_capacity

CAPACITY = Budget(epsilon=1.0, delta=1e-6)


def demand(rng: np.random.Generator, accounting: Accounting, scale: float) -> Cost:
    """A random demand of about ``scale`` × ε_g, as the rule prices it: a Gaussian or a
    Laplace mechanism under a rule that prices noise (RDP curves, μ-GDP), else (ε, δ) with
    δ = 0 where the rule guards pure blocks and 1e-9 elsewhere."""
    rule = accounting.rule
    if rule.prices_noise:
        if rng.random() < 0.5:
            part = NoisePart(Noise.GAUSSIAN, scale=1.0 / (scale * 4.0), sensitivity=1.0)
        else:
            part = NoisePart(Noise.LAPLACE, scale=1.0 / (scale * 2.0), sensitivity=1.0)
        return rule.price(Release.of(epsilon=round(scale, 4), parts=(part,)))
    delta = 1e-9 if block_capacity(rule, 1.0).delta > 0 else 0
    return rule.price(Release.of(epsilon=round(scale, 4), delta=delta))


def workload(
    seed: int, accounting: Accounting, shape: TaskShape, *, n_blocks: int = 6, n_tasks: int = 40
) -> tuple[list[BlockSpec], list[TaskSpec]]:
    """Blocks arriving at t = 0, 1, ...; tasks arriving in between, mice and elephants, some
    with timeouts, significance and access limits; NAMED tasks ask for the last 1–3 blocks."""
    rng = np.random.default_rng(seed)
    blocks = [BlockSpec(f"b{i}", float(i), CAPACITY) for i in range(n_blocks)]
    tasks = []
    for j in range(n_tasks):
        arrival = float(rng.uniform(0, n_blocks))
        scale = 0.05 if rng.random() < 0.75 else 0.3
        cost = demand(rng, accounting, scale * float(rng.uniform(0.5, 1.5)))
        timeout = None if rng.random() < 0.5 else float(rng.uniform(0.5, 3))
        if shape is TaskShape.NAMED:
            last = int(arrival)
            k = int(rng.integers(1, 4))
            names = tuple(f"b{i}" for i in range(max(0, last - k + 1), last + 1))
            tasks.append(TaskSpec(f"t{j}", arrival, cost, blocks=names, timeout=timeout))
        else:
            sig = {f"b{i}": float(rng.uniform(0.1, 1.0)) for i in range(n_blocks)}
            tasks.append(
                TaskSpec(
                    f"t{j}",
                    arrival,
                    cost,
                    max_blocks=int(rng.integers(1, 4)),
                    significance=sig,
                    timeout=timeout,
                )
            )
    return blocks, tasks


def eligible_workload(
    seed: int, accounting: Accounting, *, n_blocks: int = 6, n_tasks: int = 40
) -> tuple[list[BlockSpec], list[TaskSpec]]:
    """OPEN tasks as a live selector makes them: about a third with an ``eligible`` set of 2–4
    blocks (some not yet arrived: "any 2 of this time range"), a third NAMED-shaped (eligible =
    k blocks, min_blocks = max_blocks = k: "these blocks" or "the newest k"), the rest free."""
    rng = np.random.default_rng(seed + 1000)
    blocks, base = workload(seed, accounting, TaskShape.OPEN, n_blocks=n_blocks, n_tasks=n_tasks)
    ids = [b.block_id for b in blocks]
    tasks = []
    for t in base:
        kind = rng.integers(0, 3)
        if kind == 0:
            chosen = frozenset(rng.choice(ids, int(rng.integers(2, 5)), replace=False).tolist())
            limit = min(t.max_blocks or 1, len(chosen))
            t = replace(t, eligible=chosen, max_blocks=limit)
        elif kind == 1:
            last = min(int(t.arrival), n_blocks - 1)
            k = int(rng.integers(1, 4))
            newest = frozenset(ids[max(0, last - k + 1) : last + 1])
            t = replace(t, eligible=newest, max_blocks=len(newest), min_blocks=len(newest))
        tasks.append(t)
    return blocks, tasks


def check_eligibility(pool: Pool) -> None:
    """No reservation, charge or scheduler overhead lands on a block its task may not use, and a
    granted OPEN task has at least ``min_blocks`` (NAMED-shaped: exactly its k) blocks."""
    for d in pool.decisions:
        if d.kind in (DecisionKind.RESERVE, DecisionKind.CHARGE, DecisionKind.OVERHEAD):
            assert d.block_id is not None
            assert pool.tasks[d.task_id].may_use(d.block_id), (d.task_id, d.block_id, d.kind)
    for tid, task in pool.tasks.items():
        if task.shape is TaskShape.OPEN and pool.status[tid] is TaskStatus.GRANTED:
            got = set(pool.charged_blocks[tid])
            assert len(got) >= task.min_blocks and got <= (task.eligible or got)
            if task.eligible is not None and task.min_blocks == len(task.eligible):
                assert got == task.eligible


def exact_usage(pool: Pool) -> dict[str, tuple[int, ...]]:
    """Per block: the exact integer features of everything charged (CHARGE + OVERHEAD), less
    what was credited back (CREDIT: a live grant spent less), never below zero per feature."""
    filt = make_filter(pool.accounting, capacity=CAPACITY)
    usage: dict[str, tuple[int, ...]] = defaultdict(filt.zero)
    for d in pool.decisions:
        if d.kind in (DecisionKind.CHARGE, DecisionKind.OVERHEAD, DecisionKind.CREDIT):
            assert d.block_id is not None and d.cost is not None
            usage[d.block_id] = _apply(d.kind, usage[d.block_id], filt.features(d.cost))
    return dict(usage)


def _apply(kind: DecisionKind, used: tuple[int, ...], f: tuple[int, ...]) -> tuple[int, ...]:
    if kind is DecisionKind.CREDIT:
        return tuple(max(0, a - b) for a, b in zip(used, f, strict=True))
    return add_vectors(used, f)


def check_no_overspend(pool: Pool) -> None:
    """Every block's charges (and, at every moment, charges + reservations) fit its filter."""
    filt = make_filter(pool.accounting, capacity=CAPACITY)
    for block, used in exact_usage(pool).items():
        assert filt.fits(used), f"block {block} overspent: {used}"
    # replay reservations too: at every step, charged + reserved fits
    used_now: dict[str, tuple[int, ...]] = defaultdict(filt.zero)
    held: dict[tuple[str, str], tuple[int, ...]] = {}
    for d in pool.decisions:
        if d.block_id is None or d.cost is None:
            continue
        f = filt.features(d.cost)
        key = (d.task_id, d.block_id)
        if d.kind is DecisionKind.RESERVE:
            held[key] = add_vectors(held.get(key, filt.zero()), f)
            used_now[d.block_id] = add_vectors(used_now[d.block_id], f)
        elif d.kind is DecisionKind.RELEASE:
            # a release returns everything the task held there (the pieces, each rounded up)
            pieces = held.pop(key)
            assert all(0 <= h - r <= 64 for h, r in zip(pieces, f, strict=True)), (
                "a release returned more or less than was held"
            )
            used_now[d.block_id] = tuple(
                a - b for a, b in zip(used_now[d.block_id], pieces, strict=True)
            )
        else:  # CHARGE, OVERHEAD add; CREDIT subtracts (clamped at zero)
            used_now[d.block_id] = _apply(d.kind, used_now[d.block_id], f)
        assert filt.fits(used_now[d.block_id]), f"block {d.block_id} over at decision {d.seq}"
    assert not held, "reservations left open after the run"


def check_irrevocable(pool: Pool) -> None:
    """Exactly one terminal decision per task, nothing after it, and statuses that agree."""
    closed: dict[str, DecisionKind] = {}
    for d in pool.decisions:
        if d.kind is DecisionKind.CREDIT:
            assert d.task_id not in pool.tasks, "a CREDIT is logged under the driver's task"
            continue
        assert d.task_id not in closed, f"decision {d.seq} after task {d.task_id} was closed"
        if d.kind in TERMINAL_KINDS:
            closed[d.task_id] = d.kind
    assert set(closed) == set(pool.tasks)
    expected = {
        DecisionKind.GRANT: TaskStatus.GRANTED,
        DecisionKind.REJECT: TaskStatus.REJECTED,
        DecisionKind.EXPIRE: TaskStatus.EXPIRED,
    }
    for tid, kind in closed.items():
        assert pool.status[tid] is expected[kind]
    times = [d.time for d in pool.decisions]
    assert times == sorted(times), "decisions out of time order"


def check_task_rules(pool: Pool) -> None:
    """NAMED grants charge exactly the demand on every named block; OPEN tasks respect c_j;
    nothing is charged before a task arrives or after its deadline."""
    charged: dict[str, dict[str, list[Cost]]] = defaultdict(lambda: defaultdict(list))
    for d in pool.decisions:
        if d.kind is DecisionKind.CREDIT:  # the ledger's, not a task's (check_irrevocable)
            continue
        task = pool.tasks[d.task_id]
        assert d.time >= task.arrival
        if d.kind is DecisionKind.CHARGE:
            assert d.block_id is not None and d.cost is not None
            assert d.time <= task.deadline
            charged[d.task_id][d.block_id].append(d.cost)
    for tid, task in pool.tasks.items():
        got = charged.get(tid, {})
        if task.blocks is not None and pool.status[tid] is TaskStatus.GRANTED:
            assert set(got) == set(task.blocks)
            for costs in got.values():
                assert (
                    len(costs) == 1
                    and pool.vector(costs[0]).tolist() == pool.vector(task.demand).tolist()
                )
        if task.blocks is not None:
            assert set(got) <= set(task.blocks)
        limit = task.access_limit
        if limit is not None:
            assert len(got) <= limit
        for costs in got.values():  # never more than the demand on one block
            total = np.sum([pool.vector(c) for c in costs], axis=0)
            assert np.all(total <= pool.vector(task.demand) * (1 + 1e-9) + 1e-15)

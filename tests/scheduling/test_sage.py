"""Sage's allocation strategies (seed 004 §3.3, §5.4) beyond the shared scheduler contract:
the even split, privacy-adaptive doubling, reallocation on ACCEPT, exclusive streaming blocks,
the 4× budget bound, and Block/Conserve beating Block/Aggressive under contention."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError
from blockbudget.outcome import Outcome
from blockbudget.scheduling import BlockSpec, DecisionKind, TaskSpec, TaskStatus
from blockbudget.scheduling.sage import (
    BlockAggressive,
    BlockConserve,
    QueryComposition,
    SageStrategy,
    StreamingComposition,
)
from blockbudget.scheduling.simulator import simulate

CAP = Budget(epsilon=1.0, delta=1e-6)
DEMAND = Budget(epsilon=1.0, delta=1e-7)


@dataclass(frozen=True)
class Need:
    """ACCEPT once the run read at least ``min_blocks`` blocks and ε-fraction × blocks reaches
    ``resources`` — a model needs some data whatever its ε, and DP noise shrinks with ε·n
    (partitioned queries need 4× both)."""

    resources: float
    min_blocks: int = 1

    def outcome(self, *, epsilon_fraction: float, blocks: int, partitioned: bool) -> Outcome:
        k = 4 if partitioned else 1
        enough = blocks >= self.min_blocks * k
        ok = enough and epsilon_fraction * blocks >= self.resources * k * (1 - 1e-5)
        return Outcome.ACCEPT if ok else Outcome.RETRY


def blocks(n: int) -> list[BlockSpec]:
    return [BlockSpec(f"b{i:03d}", float(i), CAP) for i in range(n)]


def run(strategy: SageStrategy, tasks: list[TaskSpec], n_blocks: int):  # type: ignore[no-untyped-def]
    return simulate(strategy, blocks(n_blocks), tasks, accounting=Accounting.BASIC)


def test_each_new_block_is_split_evenly_among_waiting_pipelines() -> None:
    tasks = [TaskSpec(f"t{k}", -1.0, DEMAND) for k in range(4)]
    profiles = {t.task_id: Need(100.0) for t in tasks}  # never satisfied
    result = run(BlockConserve(profiles=profiles), tasks, 1)
    first = [d for d in result.pool.decisions if d.kind is DecisionKind.RESERVE][:4]
    assert {d.task_id for d in first} == {"t0", "t1", "t2", "t3"}
    shares = [float(d.cost.epsilon) for d in first]  # type: ignore[union-attr]
    assert max(shares) == pytest.approx(min(shares)) and sum(shares) == pytest.approx(1.0, rel=1e-6)


def test_conserve_doubles_epsilon_then_data_and_stays_within_the_4x_bound() -> None:
    task = TaskSpec("t", -1.0, DEMAND)
    strategy = BlockConserve(profiles={"t": Need(1.5)}, levels=3, min_window=1)
    result = run(strategy, [task], 6)
    assert result.pool.status["t"] is TaskStatus.GRANTED
    charges = [d for d in result.pool.decisions if d.kind is DecisionKind.CHARGE]
    runs: dict[str, list[str]] = defaultdict(list)
    for d in charges:
        runs[d.note].append(d.block_id)  # type: ignore[arg-type]
    eps = [float(next(d.cost.epsilon for d in charges if d.note == note)) for note in runs]  # type: ignore[union-attr]
    sizes = [len(b) for b in runs.values()]
    # 1/8, 1/4, 1/2 on one block (ε doubles while the allocation allows: 1 would overspend
    # the block), then the data doubles: 2 blocks, then 4, at 1/2
    assert eps == pytest.approx([0.125, 0.25, 0.5, 0.5, 0.5], rel=1e-5)
    assert sizes == [1, 1, 1, 2, 4]
    resources = [e * s for e, s in zip(eps, sizes, strict=True)]
    assert sum(resources) <= 4 * resources[-1] and sum(resources) < 2 * resources[-1]


def test_accepted_pipelines_hand_their_remainder_to_the_waiting_ones() -> None:
    tasks = [TaskSpec("quick", -1.0, DEMAND), TaskSpec("slow", -1.0, DEMAND)]
    profiles = {"quick": Need(0.0625), "slow": Need(100.0)}
    result = run(BlockConserve(profiles=profiles, levels=4), tasks, 1)
    log = result.pool.decisions
    grant = next(d.seq for d in log if d.kind is DecisionKind.GRANT and d.task_id == "quick")
    after = [d for d in log if d.seq > grant and d.kind is DecisionKind.RESERVE]
    assert after and all(d.task_id == "slow" and d.block_id == "b000" for d in after)
    # quick spent 1/16 of its demand from its half; the rest (1/2 − 1/16) is merged into slow's
    # half in one reservation: slow holds 1 − 1/16 of the block right after the grant
    quick_spent = sum(
        float(d.cost.epsilon)  # type: ignore[union-attr]
        for d in log
        if d.kind is DecisionKind.CHARGE and d.task_id == "quick"
    )
    assert quick_spent == pytest.approx(0.0625, rel=1e-5)
    assert float(after[0].cost.epsilon) == pytest.approx(1.0 - 0.0625, rel=1e-5)  # type: ignore[union-attr]
    # slow then doubles ε through 1/16 … 1/2 on it (15/16 in all) and never spends beyond it
    slow_spent = sum(
        float(d.cost.epsilon)  # type: ignore[union-attr]
        for d in log
        if d.kind is DecisionKind.CHARGE and d.task_id == "slow"
    )
    assert slow_spent == pytest.approx(0.9375, rel=1e-5)
    assert quick_spent + slow_spent <= 1.0


def test_streaming_gives_each_block_to_one_pipeline() -> None:
    tasks = [TaskSpec(f"t{k}", -1.0, DEMAND) for k in range(3)]
    profiles = {t.task_id: Need(1.9) for t in tasks}
    result = run(StreamingComposition(profiles=profiles, min_window=2), tasks, 12)
    owners: dict[str, set[str]] = defaultdict(set)
    for d in result.pool.decisions:
        if d.kind in (DecisionKind.RESERVE, DecisionKind.CHARGE):
            owners[d.block_id].add(d.task_id)  # type: ignore[index]
    assert owners and all(len(v) == 1 for v in owners.values())
    assert all(s is TaskStatus.GRANTED for s in result.pool.status.values())


def test_query_composition_needs_more_data_than_block_composition() -> None:
    task = TaskSpec("t", -1.0, DEMAND)
    block = run(BlockConserve(profiles={"t": Need(2.0)}), [task], 40)
    query = run(QueryComposition(profiles={"t": Need(2.0)}), [task], 40)
    assert block.pool.granted_at["t"] < query.pool.granted_at["t"]


def charged_epsilon(result) -> float:  # type: ignore[no-untyped-def]
    return sum(
        float(d.cost.epsilon)  # type: ignore[union-attr]
        for d in result.pool.decisions
        if d.kind is DecisionKind.CHARGE
    )


def test_conserve_spends_less_than_aggressive_for_the_same_releases() -> None:
    """The mechanism behind seed 004 §5.4: Block/Conserve releases the same pipelines while
    charging less of the blocks' budget, which stays available to later pipelines."""
    rng = np.random.default_rng(0)
    tasks, profiles = [], {}
    for k in range(30):
        tid = f"t{k}"
        tasks.append(TaskSpec(tid, float(rng.uniform(0, 30)), DEMAND))
        profiles[tid] = Need(float(rng.choice([0.05, 0.1, 0.2])), int(rng.choice([1, 2, 4])))
    results = {
        cls.name: run(cls(profiles=profiles, levels=8), tasks, 60)
        for cls in (BlockConserve, BlockAggressive, QueryComposition, StreamingComposition)
    }
    conserve, aggressive = results["sage-block-conserve"], results["sage-block-aggressive"]
    assert conserve.allocated == aggressive.allocated == 30
    assert charged_epsilon(conserve) < charged_epsilon(aggressive)
    # per pipeline, the conserving search stays within 2× its accepted run (§3.3's bound)
    for tid in profiles:
        runs: dict[str, list[float]] = defaultdict(list)
        for d in conserve.pool.decisions:
            if d.kind is DecisionKind.CHARGE and d.task_id == tid:
                runs[d.note].append(float(d.cost.epsilon))  # type: ignore[union-attr]
        resources = [sum(v) for v in runs.values()]
        assert sum(resources) <= 2 * resources[-1] * (1 + 1e-6)
    # without block composition pipelines wait much longer (or are never released)
    for name in ("sage-query-composition", "sage-streaming-composition"):
        other = results[name]
        assert other.allocated < 30 or other.mean_delay > 2 * conserve.mean_delay


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="levels"):
        BlockConserve(levels=-1)
    with pytest.raises(InvalidRequestError, match="min_window"):
        BlockAggressive(min_window=0)


def test_a_pipeline_bound_to_blocks_already_here_gets_their_unallocated_budget() -> None:
    """A selector's blocks (``eligible``) may all be in the past: the pipeline gets an even
    share of what is unallocated on them at arrival and runs at once; an unrestricted pipeline
    keeps Sage's rule (fresh blocks only). One whose window outgrows its blocks is refused
    instead of waiting for blocks that cannot come."""
    bound = TaskSpec("bound", 5.0, DEMAND, eligible=frozenset({"b001", "b002"}), min_blocks=2)
    free = TaskSpec("free", 5.0, DEMAND)
    greedy = TaskSpec("greedy", 5.0, DEMAND, eligible=frozenset({"b003"}))
    profiles = {"bound": Need(0.5, min_blocks=2), "free": Need(0.1), "greedy": Need(5.0)}
    result = run(BlockConserve(profiles=profiles, levels=2), [bound, free, greedy], 4)
    pool = result.pool
    assert pool.status["bound"] is TaskStatus.GRANTED
    assert set(pool.charged_blocks["bound"]) == {"b001", "b002"}
    first = [d for d in pool.decisions if d.task_id == "bound" and d.kind is DecisionKind.RESERVE]
    assert {d.block_id for d in first[:2]} == {"b001", "b002"}
    assert float(first[0].cost.epsilon) == pytest.approx(1.0, rel=1e-5)  # type: ignore[union-attr]
    assert not [d for d in pool.decisions if d.task_id == "free" and d.kind is DecisionKind.RESERVE]
    assert pool.status["free"] is TaskStatus.EXPIRED  # no block arrived after it
    assert pool.status["greedy"] is TaskStatus.REJECTED
    rejected = [d for d in pool.decisions if d.task_id == "greedy"]
    note = next(d.note for d in rejected if d.kind is DecisionKind.REJECT)
    assert "exceeds its 1 blocks" in note

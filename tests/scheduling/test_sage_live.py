"""Sage strategies with asynchronous outcomes (live pipelines): a profile answers None while
the run executes; ``SageStrategy.report`` resumes the pipeline exactly where a synchronous
outcome would have taken it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from blockbudget.accounting import Accounting
from blockbudget.errors import InvalidRequestError
from blockbudget.outcome import Outcome
from blockbudget.scheduling import BlockSpec, DecisionKind, Pool, TaskSpec, TaskStatus
from blockbudget.scheduling.sage import (
    BlockAggressive,
    BlockConserve,
    RunRequest,
    SageStrategy,
)
from blockbudget.scheduling.simulator import simulate

from .test_sage import CAP, DEMAND, Need, blocks


@dataclass
class Pending:
    """A live pipeline's profile: every run executes (None); what was asked is recorded."""

    asked: list[tuple[float, int]] = field(default_factory=list)

    def outcome(self, *, epsilon_fraction: float, blocks: int, partitioned: bool) -> None:
        self.asked.append((epsilon_fraction, blocks))


class Driver:
    """A minimal live driver: blocks and tasks enter one at a time; after each event every run
    the strategy started is executed by ``truth`` and reported."""

    def __init__(self, strategy: SageStrategy, truth: dict[str, Need]) -> None:
        self.pool = Pool(Accounting.BASIC)
        self.strategy = strategy
        self.truth = truth
        self.reported: list[RunRequest] = []

    def task(self, task: TaskSpec) -> None:
        self.pool.now = task.arrival
        self.pool.submit(task)
        self.strategy.on_task(self.pool, task)
        self.settle()

    def block(self, block: BlockSpec) -> None:
        self.pool.now = block.arrival
        self.pool.add_block(block)
        self.strategy.on_block(self.pool, block)
        self.settle()

    def settle(self) -> None:
        while runs := self.strategy.running():
            run = runs[0]
            self.reported.append(run)
            need = self.truth[run.task_id]
            outcome = need.outcome(
                epsilon_fraction=run.fraction, blocks=len(run.blocks), partitioned=False
            )
            assert self.strategy.report(self.pool, run.task_id, outcome)


def test_one_pipeline_live_matches_the_simulator_decision_for_decision() -> None:
    task = TaskSpec("t", -1.0, DEMAND)
    sync = simulate(
        BlockConserve(profiles={"t": Need(1.5)}, levels=3),
        blocks(6),
        [task],
        accounting=Accounting.BASIC,
    )
    live = Driver(BlockConserve(profiles={"t": Pending()}, levels=3), {"t": Need(1.5)})
    live.task(task)
    for b in blocks(6):
        live.block(b)
    assert [d.key() for d in live.pool.decisions] == [d.key() for d in sync.pool.decisions]
    # the runs a live driver executed: ε doubles on one block, then the window doubles
    assert [(r.iteration, r.fraction, len(r.blocks)) for r in live.reported] == [
        (0, 0.125, 1),
        (1, 0.25, 1),
        (2, 0.5, 1),
        (3, 0.5, 2),
        (4, 0.5, 4),
    ]
    assert live.pool.status["t"] is TaskStatus.GRANTED


@pytest.mark.parametrize("cls", [BlockConserve, BlockAggressive])
def test_contending_pipelines_live_are_served_as_in_the_simulator(
    cls: type[SageStrategy],
) -> None:
    tasks = [TaskSpec("quick", -1.0, DEMAND), TaskSpec("slow", -1.0, DEMAND)]
    truth = {"quick": Need(0.0625), "slow": Need(1.2)}
    sync = simulate(cls(profiles=truth, levels=4), blocks(4), tasks, accounting=Accounting.BASIC)
    live = Driver(cls(profiles={t.task_id: Pending() for t in tasks}, levels=4), truth)
    for t in tasks:
        live.task(t)
    for b in blocks(4):
        live.block(b)
    live.pool.close()  # the end of the simulated run: what still waits expires
    assert live.pool.status == sync.pool.status
    assert live.pool.granted_at == sync.pool.granted_at

    def charges(pool: Pool) -> list[tuple[str, str | None, str]]:
        return sorted(
            (d.task_id, d.block_id, str(d.cost))
            for d in pool.decisions
            if d.kind is DecisionKind.CHARGE
        )

    assert charges(live.pool) == charges(sync.pool)


def test_a_running_pipeline_keeps_its_reservations_and_is_not_run_again() -> None:
    seen: list[RunRequest] = []
    profiles = {"a": Pending(), "b": Pending()}
    strategy = BlockConserve(profiles=profiles, levels=2, on_run=seen.append)
    pool = Pool(Accounting.BASIC)
    for tid in ("a", "b"):
        pool.submit(TaskSpec(tid, 0.0, DEMAND))
        strategy.on_task(pool, pool.tasks[tid])
    b0, b1 = (BlockSpec(f"b{i}", float(i), CAP) for i in range(2))
    pool.add_block(b0)
    strategy.on_block(pool, b0)
    run = strategy.started("a")
    assert run == RunRequest("a", 0, 0.25, ("b0",), DEMAND.scaled(0.25 * (1 - 1e-6)), False)
    assert [r.task_id for r in seen] == ["a", "b"] and strategy.running() == tuple(seen)
    # the run's grant, as a live driver reserves it: its CHARGE decisions
    charged = [d for d in pool.decisions if d.kind is DecisionKind.CHARGE and d.task_id == "a"]
    assert [(d.block_id, d.cost, d.note) for d in charged] == [("b0", run.cost, "run 0")]
    held_before = pool.held("a")["b0"].copy()
    pool.add_block(b1)
    strategy.on_block(pool, b1)  # an even split, and no second run while the first executes
    assert len([d for d in pool.decisions if d.kind is DecisionKind.CHARGE]) == 2
    assert pool.held("a")["b0"].tolist() == held_before.tolist()
    assert float(pool.held_cost("a", "b1").epsilon) == pytest.approx(0.5, rel=1e-6)  # type: ignore[union-attr]
    assert profiles["a"].asked == [(0.25, 1)]
    # RETRY: a holds 1/4 on b0 (1/2 on b1), too little for ε = 1/2 on its window (b0): the
    # window doubles and the next run takes b0 and b1 at 1/4 at once
    assert strategy.report(pool, "a", Outcome.RETRY)
    cost = DEMAND.scaled(0.25 * (1 - 1e-6))
    assert strategy.started("a") == RunRequest("a", 1, 0.25, ("b0", "b1"), cost, False)
    # ACCEPT: granted, and what it still held goes to the pipeline still waiting
    assert strategy.report(pool, "a", Outcome.ACCEPT)
    assert pool.status["a"] is TaskStatus.GRANTED and strategy.started("a") is None
    last_grant = max(d.seq for d in pool.decisions if d.kind is DecisionKind.GRANT)
    after = [d for d in pool.decisions if d.seq > last_grant and d.kind is DecisionKind.RESERVE]
    assert after and {d.task_id for d in after} == {"b"}
    # REJECT ends the other one
    assert strategy.report(pool, "b", Outcome.REJECT)
    assert pool.status["b"] is TaskStatus.REJECTED and strategy.running() == ()


def test_retry_that_cannot_double_epsilon_doubles_the_window_and_waits() -> None:
    strategy = BlockConserve(profiles={"t": Pending()}, levels=1)
    pool = Pool(Accounting.BASIC)
    pool.submit(TaskSpec("t", 0.0, DEMAND))
    strategy.on_task(pool, pool.tasks["t"])
    b0 = BlockSpec("b0", 0.0, CAP)
    pool.add_block(b0)
    strategy.on_block(pool, b0)
    assert strategy.report(pool, "t", Outcome.RETRY)  # 1/2 → 1 on b0 would exceed 1/2 left
    assert strategy.started("t") is None and pool.is_pending("t")  # waits for a 2nd block
    b1 = BlockSpec("b1", 1.0, CAP)
    pool.add_block(b1)
    strategy.on_block(pool, b1)
    run = strategy.started("t")
    assert run is not None and run.blocks == ("b0", "b1") and run.iteration == 1


def test_report_refuses_what_it_cannot_apply_and_forgets_cancelled_runs() -> None:
    strategy = BlockConserve(profiles={"t": Pending(), "u": Pending()})
    pool = Pool(Accounting.BASIC)
    for tid in ("t", "u"):
        pool.submit(TaskSpec(tid, 0.0, DEMAND))
        strategy.on_task(pool, pool.tasks[tid])
    with pytest.raises(InvalidRequestError, match="no run in progress"):
        strategy.report(pool, "t", Outcome.ACCEPT)  # no block yet: nothing runs
    with pytest.raises(InvalidRequestError, match="never submitted"):
        strategy.report(pool, "nobody", Outcome.ACCEPT)
    b0 = BlockSpec("b0", 0.0, CAP)
    pool.add_block(b0)
    strategy.on_block(pool, b0)
    with pytest.raises(InvalidRequestError, match="must be an Outcome"):
        strategy.report(pool, "t", "accept")  # type: ignore[arg-type]
    pool.reject("t", note="cancelled by its owner")  # the driver cancels it mid-run
    assert not strategy.report(pool, "t", Outcome.ACCEPT)
    assert pool.status["t"] is TaskStatus.REJECTED
    assert [r.task_id for r in strategy.running()] == ["u"]
    assert pool.held("t") == {}

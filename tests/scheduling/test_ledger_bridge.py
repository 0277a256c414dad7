"""Every scheduler's decisions, replayed on a real Ledger, are never refused and never overspend."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget.accounting import Accounting, rule_names
from blockbudget.errors import InvalidBudgetError
from blockbudget.ledger import Ledger
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.scheduling import BlockSpec, TaskShape, TaskSpec, scheduler_classes
from blockbudget.scheduling.ledger_bridge import LedgerBridge
from blockbudget.scheduling.pool import Pool
from blockbudget.scheduling.simulator import simulate

from .contract import CAPACITY, eligible_workload, exact_usage, workload

CASES = [
    pytest.param(name, Accounting(rule), shape, id=f"{name}-{rule}-{shape.value}")
    for name, cls in sorted(scheduler_classes().items())
    for rule in rule_names()
    if cls.serves(rule)
    for shape in sorted(cls.shapes, key=lambda s: s.value)[:1]
]


ELIGIBLE = [
    pytest.param(name, Accounting(rule), id=f"{name}-{rule}-eligible")
    for name, cls in sorted(scheduler_classes().items())
    for rule in rule_names()
    if cls.serves(rule) and TaskShape.OPEN in cls.shapes and not cls.exact
]


@pytest.mark.parametrize(("name", "accounting", "shape"), CASES)
def test_decisions_replay_on_a_real_ledger(
    tmp_path: Path, name: str, accounting: Accounting, shape: TaskShape
) -> None:
    blocks, tasks = workload(3, accounting, shape, n_blocks=4, n_tasks=25)
    replay(tmp_path, name, accounting, blocks, tasks)


@pytest.mark.parametrize(("name", "accounting"), ELIGIBLE)
def test_eligible_decisions_replay_on_a_real_ledger(
    tmp_path: Path, name: str, accounting: Accounting
) -> None:
    """Selector-shaped OPEN tasks (eligible sets; k blocks all or nothing) replay too."""
    blocks, tasks = eligible_workload(3, accounting, n_blocks=4, n_tasks=25)
    replay(tmp_path, name, accounting, blocks, tasks)


def replay(
    tmp_path: Path,
    name: str,
    accounting: Accounting,
    blocks: list[BlockSpec],
    tasks: list[TaskSpec],
) -> None:
    _skip_unless_the_ledger_accounts(accounting)
    cls = scheduler_classes()[name]
    result = simulate(cls(seed=3, noise=SeededNoise(3)), blocks, tasks, accounting=accounting)
    pool: Pool = result.pool
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.add_context("default")  # the bridge's context (a new ledger has none)
    try:
        bridge = LedgerBridge(ledger, stream="s", run_id="run1")
        applied = bridge.apply_new(pool)  # raises BudgetExceededError on any refusal
        assert applied == len(pool.decisions)
        assert bridge.apply_new(pool) == 0  # nothing applied twice
        report = ledger.verify()
        assert report.ok, report
        usage = exact_usage(pool)
        for state in ledger.states(stream="s"):
            assert not any(state.reserved), "reservations left open in the ledger"
            assert state.charged == usage.get(state.block, tuple(0 for _ in state.charged))
            assert state.remaining_fraction >= 0
    finally:
        ledger.dispose()


def _skip_unless_the_ledger_accounts(accounting: Accounting) -> None:
    """Skip a rule whose cost kind this checkout's ledger does not store yet (the ledger says
    so with InvalidBudgetError on a first reservation); every other failure still fails."""
    probe = Ledger("sqlite://")
    try:
        probe.add_context("c")
        probe.add_blocks(["p"], stream="p", capacity=CAPACITY, accounting=accounting)
        cost = accounting.rule.pure(0.01)
        try:
            probe.reserve(["p"], cost, context="c")
        except InvalidBudgetError as exc:
            pytest.skip(f"the ledger does not account {cost.kind} costs here: {exc}")
    finally:
        probe.dispose()

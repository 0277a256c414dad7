"""DPF's lending (``lend``): an uncontended task is granted once its blocks afford it, within
``max(unlocked, lend)`` of each block; contended tasks are decided as by plain DPF."""

from __future__ import annotations

import pytest

from blockbudget.accounting import Accounting, rule_names
from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.scheduling import BlockSpec, TaskShape, TaskSpec, TaskStatus, get_scheduler
from blockbudget.scheduling.simulator import simulate

from .contract import check_irrevocable, check_no_overspend, check_task_rules, workload

ONE = Budget(epsilon=1.0)


def _run(spec: dict[str, object], tasks: list[TaskSpec], name: str = "dpf-n") -> dict[str, str]:
    blocks = [BlockSpec("b0", 0.0, ONE), BlockSpec("b1", 0.0, ONE)]
    r = simulate(get_scheduler(name, **spec), blocks, tasks, accounting=Accounting.BASIC)
    return {t: s.value for t, s in r.pool.status.items()}


@pytest.mark.parametrize("name", ["dpf-n", "dpf-t"])
@pytest.mark.parametrize("rule", rule_names())
def test_lending_keeps_the_contract(name: str, rule: str) -> None:
    accounting = Accounting(rule)
    if not get_scheduler(name).serves(rule):
        pytest.skip(f"{name} does not serve {rule}")
    for seed in (1, 2):
        blocks, tasks = workload(seed, accounting, TaskShape.NAMED)
        plain = simulate(get_scheduler(name, seed=seed), blocks, tasks, accounting=accounting)
        lent = simulate(
            get_scheduler(name, seed=seed, lend=1.0, noise=SeededNoise(seed)),
            blocks,
            tasks,
            accounting=accounting,
        )
        for r in (plain, lent):
            check_no_overspend(r.pool)
            check_irrevocable(r.pool)
            check_task_rules(r.pool)
        assert lent.allocated >= 1


def test_a_lone_task_is_granted_at_its_arrival_up_to_lend() -> None:
    lone = [TaskSpec("t", 0.5, Budget(epsilon=0.2), blocks=("b0", "b1"))]
    assert _run({"n": 10}, lone) == {"t": "expired"}  # plain DPF: 0.1 unlocked, forever
    assert _run({"n": 10, "lend": 1}, lone) == {"t": "granted"}
    assert _run({"n": 10, "lend": 0.1}, lone) == {"t": "expired"}  # lending stops at 0.1
    big = [TaskSpec("t", 0.5, Budget(epsilon=0.9), blocks=("b0",))]
    assert _run({"n": 10, "lend": 0.5}, big) == {"t": "expired"}
    assert _run({"n": 10, "lend": 1}, big) == {"t": "granted"}
    assert _run({"lifetime": 100.0, "lend": 1}, lone, name="dpf-t") == {"t": "granted"}


def test_contended_tasks_are_decided_as_plain_dpf_until_one_is_alone() -> None:
    """A and B arrive at the same instant on b0: neither borrows. C's arrival unlocks 0.3;
    DPF serves C, then A (smaller share); B, alone now, is lent the rest by lend=1 only."""
    tasks = [
        TaskSpec("a", 0.5, Budget(epsilon=0.25), blocks=("b0",)),
        TaskSpec("b", 0.5, Budget(epsilon=0.3), blocks=("b0",)),
        TaskSpec("c", 2.5, Budget(epsilon=0.05), blocks=("b0",)),
    ]
    plain = _run({"n": 10}, tasks)
    lent = _run({"n": 10, "lend": 1}, tasks)
    assert plain == {"a": "granted", "b": "expired", "c": "granted"}
    assert lent == {"a": "granted", "b": "granted", "c": "granted"}
    blocks = [BlockSpec("b0", 0.0, ONE), BlockSpec("b1", 0.0, ONE)]
    for spec in ({"n": 10}, {"n": 10, "lend": 1}):
        r = simulate(get_scheduler("dpf-n", **spec), blocks, tasks, accounting=Accounting.BASIC)
        assert r.pool.granted_at["c"] == 2.5 and r.pool.granted_at["a"] == 3.0
        if spec.get("lend"):
            assert r.pool.granted_at["b"] == 3.0  # once A leaves, B is alone


def test_why_names_competitors_and_the_unlock() -> None:
    from blockbudget.scheduling import Pool

    pool = Pool(Accounting.BASIC)
    dpf = get_scheduler("dpf-n", n=10, lend=1)
    for b in ("b0", "b1"):
        pool.add_block(BlockSpec(b, 0.0, ONE))
        dpf.on_block(pool, pool.blocks[-1])
    for tid, eps in (("a" * 16, 0.25), ("b" * 16, 0.3)):
        task = TaskSpec(tid, 0.0, Budget(epsilon=eps), blocks=("b0",))
        pool.submit(task)
        dpf.on_task(pool, task)
    dpf.on_settle(pool)
    assert pool.status["a" * 16] is TaskStatus.PENDING
    why = dpf.why(pool, "b" * 16)
    assert "competes for its blocks with 1 other waiting task(s) (aaaaaaaaaaaa; 1 of" in why
    assert "1 more arriving task(s)" in why and "1/10" in why
    assert dpf.describe() == "dpf-n(N=10, lend=1)"


@pytest.mark.parametrize("bad", [-0.1, 1.5, "x"])
def test_lend_is_a_fraction(bad: object) -> None:
    with pytest.raises(InvalidRequestError, match="lend must be a fraction"):
        get_scheduler("dpf-n", lend=bad)

"""The task-queue benchmark runs in its --quick form and a pump's database work does not grow
with the waiting tasks or the blocks (statement counts, never times)."""

from __future__ import annotations

from bench_support import run_quick


def test_quick_tasks_pump_benchmark() -> None:
    lines = run_quick("tasks_pump.py", timeout=600)
    by = {(x["name"], x["tasks"]): x for x in lines}
    names = ("submit", "pump_idle", "pump_charge", "pump_block", "cancel")
    assert set(by) == {(n, t) for n in names for t in (100, 300)}
    assert by[("submit", 300)]["waiting"] == 300  # every task waits (DPF, huge N)
    assert by[("pump_idle", 300)]["sql_statements"] == 1  # one read of the audit log
    for name in names[1:]:  # 3x the tasks, 2x the blocks: the same statements
        assert by[(name, 300)]["sql_statements"] == by[(name, 100)]["sql_statements"]

"""A task's dry run promises only what it knows: that the blocks have enough budget now. A grant
now follows only under a scheduler that grants whenever the budget suffices (fcfs)."""

from __future__ import annotations

from pathlib import Path

from .support import invoke, invoke_json, make_home


def test_dry_run_names_the_scheduler_and_promises_a_grant_only_under_fcfs(tmp_path: Path) -> None:
    home = tmp_path / "h"
    make_home(home).close()
    args = ["task", "submit", "b", "--epsilon", "0.1", "--newest", "2", "--dry-run"]
    h = ["--context", "a", "--home", str(home)]
    code, doc = invoke_json(*args, *h)
    assert code == 0 and doc["ok"] is True and doc["scheduler"].startswith("dpf")
    r = invoke(*args, *h)
    flat = " ".join(r.output.split())
    assert "whether and when it is granted is up to the scheduler dpf" in flat, flat
    assert "could be granted now" not in flat
    assert invoke("task", "scheduler", "b", "fcfs", "--home", str(home)).exit_code == 0
    flat = " ".join(invoke(*args, *h).output.split())
    assert "could be granted now" in flat and "fcfs" in flat, flat
    over = ["task", "submit", "b", "--epsilon", "1.5", "--newest", "2", "--dry-run", *h]
    flat = " ".join(invoke(*over).output.split())
    assert "do NOT have enough budget now" in flat, flat

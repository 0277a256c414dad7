"""``task why``/``task show``: the shortfall is exact (``{"epsilon", "delta"}`` or ``{"rdp"}``
decimal strings) in JSON and plain ``ε=…, δ=…`` text for people, never escaped JSON."""

from __future__ import annotations

from pathlib import Path

from blockbudget.budget import Budget

from .support import ids, invoke, invoke_json, make_home


def test_why_shows_exact_needs_and_has(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = make_home(home)
    b = ids(p, "b")
    p.ledger.charge([b[0]], Budget(epsilon="0.75"), context="a")
    p.close()
    h = ["--context", "a", "--home", str(home)]
    code, task = invoke_json(
        "task", "submit", "b", "--epsilon", "0.5", "--block", b[0], "--wait", "0", *h
    )
    assert code == 0 and task["state"] == "waiting", task
    code, doc = invoke_json("task", "why", task["id"], "--home", str(home))
    (row,) = doc["why"]["shortfall"]
    assert row["needs"] == {"epsilon": "0.5", "delta": "0"}
    assert row["has"] == {"epsilon": "0.25", "delta": "0.000001"} and row["retired"] is False
    r = invoke("task", "why", task["id"], "--home", str(home))
    flat = " ".join(r.output.split())
    assert f"{b[0]}: needs ε=0.5, δ=0, has ε=0.25, δ=0.000001" in flat, flat
    assert '\\"' not in r.output and '"ε' not in r.output

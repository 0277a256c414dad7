"""What people read: the blocks every answer used (and when ``--last`` moved to older ones),
refusals with the remaining budget and the shortfall as decimals, readable times, and
brackets printed literally."""

from __future__ import annotations

import re
from pathlib import Path

from blockbudget.budget import Budget

from .support import ids, invoke, invoke_json, ledger_snapshot, make_home


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_last_says_when_it_moved_to_older_blocks(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = make_home(home)
    b = ids(p, "b")
    p.ledger.charge([b[2]], Budget(epsilon="0.8"), context="a")  # the newest keeps 0.2
    p.close()
    q = ["query", "count", "b", "--epsilon", "0.5", "--context", "a", "--home", str(home)]
    r = invoke(*q, "--last", "2")
    assert r.exit_code == 0, r.output
    out = _flat(r.output)
    assert f"blocks used (2): {b[0]}, {b[1]}" in out
    assert "--last 2 moved to older blocks" in out and f"were skipped ({b[2]})" in out
    code, doc = invoke_json(*q, "--last", "1")
    assert code == 0 and doc["blocks"] == [b[1]]
    assert doc["last"] == {"n": 1, "newest_live": [b[2]], "moved_to_older": True, "skipped": [b[2]]}
    r = invoke(*q, "--block", b[0], "--dry-run")
    assert r.exit_code == 0 and f"blocks it would use (1): {b[0]}" in _flat(r.output)


def test_a_refusal_by_last_gives_remaining_and_shortfall(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = make_home(home)
    b = ids(p, "b")
    p.ledger.charge(b, Budget(epsilon="0.75"), context="a")
    before = ledger_snapshot(p)
    p.close()
    r = invoke("query", "count", "b", "--epsilon", "0.3", "--context", "a", "--home", str(home))
    assert r.exit_code == 2
    out = _flat(r.output)
    assert "NothingAffordableError" in out
    assert "has ε=0.25, δ=0.000001 left there, short by ε=0.05, δ=0" in out, out
    assert "`blockbudget afford" in out  # the hint names the command that says what fits
    from blockbudget.platform import Platform

    again = Platform(home, engine="arrow")
    assert ledger_snapshot(again) == before  # refused: nothing charged or reserved
    again.close()


def test_times_print_readable_and_brackets_survive(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = make_home(home)
    p.add_context("team", description="regex [a-z0-9]+ and [bold]not bold[/]")
    p.close()
    r = invoke("context", "list", "--home", str(home))
    assert r.exit_code == 0
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", r.output), r.output
    assert not re.search(r"\d{10}\.\d", r.output)  # no Unix timestamps
    out = _flat(r.output)
    assert "[a-z0-9]+" in out and "[bold]not" in out  # cells wrap; the markup is text
    # A context name cannot hold brackets (the ledger refuses it); its refusal prints them.
    r = invoke("context", "add", "t[a-z0-9]", "--home", str(home))
    assert r.exit_code == 2 and "got 't[a-z0-9]'" in _flat(r.output)


def test_histogram_prints_as_a_table(tmp_path: Path) -> None:
    home = tmp_path / "h"
    make_home(home).close()
    r = invoke(
        "query",
        "histogram",
        "b",
        "--epsilon",
        "0.5",
        "--column",
        "c",
        "--categories",
        "x,y",
        "--context",
        "a",
        "--home",
        str(home),
    )
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert any(re.fullmatch(r"┃ category ┃ DP value ┃", line) for line in lines), r.output
    rows = [line for line in lines if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["x", "y"]
    assert "[(" not in r.output and "[[" not in r.output  # no Python object

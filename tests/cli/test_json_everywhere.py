"""Every command takes ``--json`` (one JSON document on stdout, sorted keys, exact decimal
budgets, ISO 8601 times), errors in ``--json`` mode are one JSON document too, and
``--version`` prints the installed version."""

from __future__ import annotations

import re
from decimal import Decimal
from importlib.metadata import version
from pathlib import Path
from typing import Any

import typer

from blockbudget.budget import Budget
from blockbudget.cli import app

from .support import ids, invoke, invoke_json, make_home

#: Commands without ``--json``, and why.
NO_JSON = {
    "serve": "runs the server until stopped; prints only its log",
    "demo": "a guided tour for people, in rich text",
    # the admin engineer's principal commands (cli/server.py), and the migrate engineer's `db`
    "principal add": "owned by the admin commands (cli/server.py); they add --json there",
    "principal grant": "owned by the admin commands (cli/server.py); they add --json there",
}
#: Groups owned elsewhere whose commands are checked by their owners.
NO_JSON_GROUPS = {"db": "the schema commands (migrate) add --json themselves"}


def _commands(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every leaf command of Typer's (click) command tree, by its path."""
    out: list[tuple[str, Any]] = []
    for name, command in sorted(group.commands.items()):
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):  # a group
            if name not in NO_JSON_GROUPS:
                out.extend(_commands(command, f"{path} "))
        else:
            out.append((path, command))
    return out


def test_every_registered_command_has_a_json_option() -> None:
    root = typer.main.get_command(app)
    commands = _commands(root)
    assert len(commands) > 25  # the walk found the tree, not an empty group
    missing = [
        path
        for path, command in commands
        if path not in NO_JSON
        and not any("--json" in getattr(p, "opts", ()) for p in command.params)
    ]
    assert missing == []
    assert set(NO_JSON) <= {path for path, _ in commands}  # no stale exemption


def test_version() -> None:
    r = invoke("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"blockbudget {version('blockbudget')}"


def test_json_documents_of_the_local_commands(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = make_home(home)
    b = ids(p, "b")
    p.ledger.charge([b[0]], Budget(epsilon="0.1", delta="0.0000001"), context="a")
    p.close()
    h = ["--home", str(home)]
    code, doc = invoke_json("stream", "list", *h)
    assert code == 0
    policy = {s["name"]: s["policy"] for s in doc["streams"]}
    assert policy["b"] == {"epsilon": "1", "delta": "0.000001"}
    code, doc = invoke_json("context", "list", *h)
    iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
    assert code == 0 and all(iso.match(c["created_at"]) for c in doc["contexts"])
    code, doc = invoke_json("blocks", "b", "--context", "a", *h)
    first = doc["blocks"][0]
    assert first["remaining"]["a"] == {"epsilon": "0.9", "delta": "9E-7"}  # canonical_decimal
    assert Decimal(first["remaining"]["a"]["delta"]) == Decimal("0.0000009")
    assert first["remaining_display"]["a"] == "(ε=0.9, δ=9e-07)"
    code, doc = invoke_json("query", "count", "b", "--epsilon", "0.5", "--context", "a", *h)
    assert code == 0 and doc["cost"] == {"epsilon": "0.5", "delta": "0"}
    assert doc["blocks"] == b and doc["last"]["moved_to_older"] is False
    code, doc = invoke_json("audit", "log", "--limit", "2", *h)
    assert code == 0 and len(doc["events"]) == 2 and iso.match(doc["events"][0]["ts"])
    code, doc = invoke_json("audit", "verify", *h)
    assert code == 0 and doc["ok"] is True
    code, doc = invoke_json("context", "add", "new", "--description", "d", *h)
    assert code == 0 and doc["name"] == "new" and doc["closed_at"] is None
    code, doc = invoke_json("context", "close", "new", *h)  # irreversible: needs --yes
    assert code == 2 and "--yes" in doc["error"]["message"]
    code, doc = invoke_json("context", "close", "new", "--yes", *h)
    assert code == 0 and iso.match(doc["closed_at"])
    code, doc = invoke_json("task", "scheduler", "b", "fcfs", *h)
    assert code == 0 and doc["scheduler"].startswith("fcfs")
    code, doc = invoke_json(
        "task", "submit", "b", "--epsilon", "0.25", "--newest", "1", "--context", "a", *h
    )
    assert code == 0 and doc["state"] == "granted" and iso.match(doc["submitted_at"])
    assert doc["demand"] == {"epsilon": "0.25", "delta": "0"}
    code, doc = invoke_json("task", "list", *h)
    assert code == 0 and [t["state"] for t in doc["tasks"]] == ["granted"]
    code, doc = invoke_json(
        "release", "recommend", "--domain-size", "4", "--min-users", "100", "--epsilon", "1"
    )
    assert code == 0 and doc["best"] and doc["forecasts"]
    code, doc = invoke_json("experiment", "list")
    assert code == 0 and doc["experiments"]


def test_errors_in_json_mode_are_one_document_and_keep_brackets(tmp_path: Path) -> None:
    home = tmp_path / "h"
    make_home(home).close()
    h = ["--home", str(home)]
    code, doc = invoke_json("query", "count", "b", "--epsilon", "0.1", "--context", "x", *h)
    assert code == 2 and doc["error"]["type"] == "UnknownContextError"
    assert "`blockbudget context add NAME`" in doc["error"]["message"]
    code, doc = invoke_json(
        "query", "count", "b", "--epsilon", "0.1", "--context", "a", "--block", "b/[a-z0-9]", *h
    )
    assert code == 2 and "'b/[a-z0-9]'" in doc["error"]["message"]
    # The same error as text: one red line, the brackets printed literally.
    r = invoke(
        "query", "count", "b", "--epsilon", "0.1", "--context", "a", "--block", "[a-z0-9]", *h
    )
    assert r.exit_code == 2 and "'[a-z0-9]'" in r.output, r.output
    # A budget refusal in --json mode carries the exact remaining budget and shortfall.
    code, doc = invoke_json("query", "count", "b", "--epsilon", "1.5", "--context", "a", *h)
    assert code == 2 and doc["error"]["type"] == "NothingAffordableError"
    assert doc["error"]["refusal"]["blocks"] == [
        {
            "remaining": {"epsilon": "1", "delta": "0.000001"},
            "shortfall": {"epsilon": "0.5", "delta": "0"},
        }
    ]

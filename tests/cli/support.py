"""Helpers of the CLI tests: a small local platform with three daily blocks per accounting
rule, and a snapshot of everything a refused or priced request must leave unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from typer.testing import CliRunner

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.platform import Platform
from blockbudget.store import Blocking

runner = CliRunner()
#: One (ε_g, δ_g) for every stream: ε_g = 1, δ_g = 1e-6.
POLICY = Budget(epsilon=1, delta="0.000001")
STREAMS = {"b": Accounting.BASIC, "s": Accounting.STRONG, "r": Accounting.RDP}


def make_home(home: Path) -> Platform:
    """Streams ``b`` (basic), ``s`` (strong) and ``r`` (RDP), each with three daily blocks of
    24 hourly rows, and contexts ``a`` and ``z``."""
    p = Platform(home, engine="arrow")
    frame = pd.DataFrame(
        {
            "time": pd.date_range("2024-03-01", periods=72, freq="h"),
            "v": [float(i % 10) for i in range(72)],
            "c": [["x", "y"][i % 2] for i in range(72)],
        }
    )
    for name, accounting in STREAMS.items():
        p.create_stream(
            name, policy=POLICY, blocking=Blocking.by_time("time"), accounting=accounting
        )
        p.ingest(name, frame)
    p.add_context("a")
    p.add_context("z")
    return p


def ids(p: Platform, stream: str) -> list[str]:
    return [b.block_id for b in p.blocks(stream)]


def ledger_snapshot(p: Platform) -> tuple[Any, ...]:
    """The audit log's length, every block's charged and reserved vectors in every context,
    and the open reservations: what a dry run must not change."""
    states = sorted((s.block, s.context, s.charged, s.reserved) for s in p.ledger.states())
    open_res = sorted((r.id, r.state.value) for r in p.ledger.reservations())
    return len(p.ledger.events()), tuple(states), tuple(open_res)


def invoke(*args: str) -> Any:
    return runner.invoke(__import__("blockbudget.cli", fromlist=["app"]).app, list(args))


def invoke_json(*args: str) -> Any:
    """Run a command with ``--json``; its stdout must be exactly one JSON document with sorted
    keys (the form :func:`blockbudget.cli.common.emit_json` promises)."""
    r = invoke(*args, "--json")
    text = r.stdout.strip()
    doc = json.loads(text)
    assert json.dumps(doc, sort_keys=True) == text, text
    return r.exit_code, doc

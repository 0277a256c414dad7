"""kill -9 during group commits: every charge acknowledged before the kill is in the ledger, and
the ledger still verifies (acknowledged means committed durably)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_support import BACKENDS, postgres_database

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.ledger import Ledger

WORKER = Path(__file__).with_name("group_commit_worker.py")


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        with postgres_database() as pg:
            yield pg


def test_acknowledged_charges_survive_kill_9(url: str) -> None:
    led = Ledger(url)
    led.add_context("default")  # a new ledger has no context
    led.add_blocks(
        [f"b{i}" for i in range(4)],
        stream="s",
        capacity=Budget(epsilon=1000),
        accounting=Accounting.BASIC,
    )
    led.dispose()
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), url], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert proc.stdout is not None
    acked: list[str] = []
    for line in proc.stdout:
        acked.append(line.strip())
        if len(acked) >= 400:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    again = Ledger(url)
    missing = [r for r in acked if again.request(r) is None]
    assert not missing, f"{len(missing)} acknowledged charges lost, e.g. {missing[:5]}"
    report = again.verify()
    assert report.ok, report.problems[:5]
    charged = sum(1 for e in again.events() if e.kind.value == "charged")
    assert charged >= len(acked)  # commits whose answers the kill cut off may be there too
    again.dispose()

"""kill -9: acknowledged charges survive a SIGKILL of the writer, nothing is overspent, the
ledger verifies and keeps working; a killed reservation holder's budget is released by expiry,
never charged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ledger_support import BACKENDS, POSTGRES_URL, postgres_schema
from sqlalchemy import Engine, create_engine

from blockbudget.accounting import Accounting, add_vectors, make_filter
from blockbudget.budget import Budget
from blockbudget.ledger import EventKind, Ledger, ReservationState

WORKER = Path(__file__).with_name("ledger_workers.py")
CAP = Budget(epsilon=1.0)
ONE = make_filter(Accounting.BASIC, capacity=CAP).features(Budget(epsilon="0.0001"))


def spawn(mode: str, url: str, *extra: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), mode, url, *extra],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def kill(proc: subprocess.Popen[str]) -> list[str]:
    """SIGKILL the child; return the complete lines it had printed but we had not read yet."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout is not None
    rest = proc.stdout.read()
    proc.stdout.close()
    return [line for line in rest.split("\n")[:-1] if line]  # a cut-off last line is dropped


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def crash_after(url: str, env: dict[str, str], prefix: str, acks: int) -> list[str]:
    """Run a charging child, SIGKILL it after ``acks`` acknowledged charges (while it is in
    the middle of the next ones); return the acknowledged request ids it printed."""
    proc = spawn("charge-loop", url, prefix, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    acked = []
    while len(acked) < acks:
        line = proc.stdout.readline()
        assert line, "the child died on its own"
        acked.append(line.strip())
    acked += kill(proc)  # printed before the kill: acknowledged too
    return acked


def check_after_crash(ledger: Ledger, acked: list[str], prefix: str) -> None:
    for rid in acked:
        record = ledger.request(rid)
        assert record is not None, f"acknowledged charge {rid} was lost"
    charges = [
        e
        for e in ledger.events()
        if e.kind is EventKind.CHARGED and (e.request_id or "").startswith(prefix)
    ]
    assert {e.request_id for e in charges} >= set(acked)
    # Only the charge in flight when the kill came may have committed unacknowledged (its
    # id, or the end of it, was not printed).
    assert len(charges) - len(acked) in (0, 1)
    f = make_filter(Accounting.BASIC, capacity=CAP)
    for block in ("k/a", "k/b"):
        s = ledger.state(block)
        assert f.fits(add_vectors(s.charged, s.reserved))
    report = ledger.verify()
    assert report.ok, report.problems


Target = tuple[str, dict[str, str], Callable[[], Ledger]]


def with_default(ledger: Ledger) -> Ledger:
    """Register the ``default`` context the children charge in (a new ledger has none)."""
    ledger.add_context("default")
    return ledger


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """(url, env for children, ledger opener) per backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'crash.db'}"
        yield url, child_env({}), lambda: with_default(Ledger(url))
    else:
        assert POSTGRES_URL is not None
        with postgres_schema() as args:
            env = child_env({"PGOPTIONS": args["options"]})
            engines: list[Engine] = []

            def opener() -> Ledger:
                eng = create_engine(POSTGRES_URL, connect_args=args)
                engines.append(eng)
                return with_default(Ledger(eng))

            yield POSTGRES_URL, env, opener
            for eng in engines:
                eng.dispose()


def test_acknowledged_charges_survive_kill_9(target: Target) -> None:
    url, env, open_ledger = target
    ledger = open_ledger()
    ledger.add_blocks(["k/a", "k/b"], stream="k", capacity=CAP, accounting=Accounting.BASIC)
    first = crash_after(url, env, "run1", acks=40)
    check_after_crash(ledger, first, "run1")
    second = crash_after(url, env, "run2", acks=90)  # again, on the reopened file
    check_after_crash(ledger, second, "run2")
    reopened = open_ledger()
    n_charged = sum(1 for e in reopened.events() if e.kind is EventKind.CHARGED)
    assert reopened.state("k/a").charged == tuple(n_charged * v for v in ONE)
    # The ledger keeps working after the crashes.
    receipt = reopened.charge(["k/a", "k/b"], Budget(epsilon=0.5), request_id="after")
    assert receipt.seq == len(reopened.events())
    assert reopened.verify().ok
    reopened.dispose()
    ledger.dispose()


def test_a_killed_holder_is_released_by_expiry_never_charged(target: Target) -> None:
    url, env, open_ledger = target
    ledger = open_ledger()
    ledger.add_blocks(["k/a", "k/b"], stream="k", capacity=CAP, accounting=Accounting.BASIC)
    proc = spawn("hold", url, env=env)
    assert proc.stdout is not None
    rid = proc.stdout.readline().strip()
    kill(proc)
    res = ledger.reservation(rid)
    assert res.state is ReservationState.OPEN and res.holder == "doomed"
    assert ledger.state("k/a").reserved == make_filter(Accounting.BASIC, capacity=CAP).features(
        Budget(epsilon=0.5)
    )
    assert ledger.expire_reservations(now=time.time()) == []  # not yet past its TTL
    assert ledger.expire_reservations(now=res.expires_at) == [rid]
    assert ledger.reservation(rid).state is ReservationState.EXPIRED
    for block in ("k/a", "k/b"):
        s = ledger.state(block)
        assert s.charged == (0, 0) and s.reserved == (0, 0)
    kinds = [e.kind for e in ledger.events()]
    assert EventKind.CHARGED not in kinds and kinds[-1] is EventKind.EXPIRED
    ledger.charge(["k/a", "k/b"], Budget(epsilon=1.0))  # the whole budget is back
    assert ledger.verify().ok
    ledger.dispose()

"""Leadership: one holder per database, handed over on release, lost with the holder's process
(SIGKILL) or connection — on a SQLite file (flock) and on PostgreSQL (advisory lock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from pg_support import POSTGRES_URL, postgres_database

from blockbudget.errors import InvalidRequestError
from blockbudget.tasks.leader import (
    AlwaysLeader,
    FileLeadership,
    Leadership,
    PostgresLeadership,
    leadership_for,
    leadership_key,
)

SRC = str(Path(__file__).resolve().parents[2] / "src")
NAME = "scheduler"

HOLDER = """
import sys, time
import sqlalchemy as sa
from blockbudget.tasks.leader import leadership_for
lead = leadership_for(sa.create_engine(sys.argv[1]), name=sys.argv[2])
while not lead.try_acquire():
    time.sleep(0.05)
print("held", flush=True)
time.sleep(600)
"""


@dataclass
class Database:
    url: str
    engines: list[sa.Engine]

    def leadership(self) -> Leadership:
        engine = sa.create_engine(self.url)
        self.engines.append(engine)
        return leadership_for(engine, name=NAME)


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    with ExitStack() as stack:
        if request.param == "postgres":
            if POSTGRES_URL is None:
                pytest.skip("no PostgreSQL: BLOCKBUDGET_TEST_POSTGRES_URL is not set")
            url = stack.enter_context(postgres_database())
        else:
            url = f"sqlite:///{tmp_path / 'ledger.db'}"
        db = Database(url, [])
        yield db
        for engine in db.engines:
            engine.dispose()


def _eventually(predicate: Callable[[], bool], *, within: float = 30.0) -> bool:
    """Poll ``predicate`` (generously: the bound is for a stuck test, not a timing claim)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_only_one_holds_and_release_hands_over(database: Database) -> None:
    a, b = database.leadership(), database.leadership()
    assert not a.held and not b.held
    assert a.try_acquire()
    assert a.try_acquire()  # re-entrant for the holder
    assert not b.try_acquire()
    assert a.held and not b.held
    a.release()
    assert not a.held
    assert b.try_acquire()
    assert b.held
    assert not a.try_acquire()
    b.release()
    b.release()  # a no-op when not held
    assert a.try_acquire()
    a.release()


def test_holder_killed_with_sigkill_hands_over(database: Database) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, database.url, NAME],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        other = database.leadership()
        assert not other.try_acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert _eventually(other.try_acquire)
        assert other.held
        other.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()


def test_postgres_connection_lost_means_leadership_lost() -> None:
    if POSTGRES_URL is None:
        pytest.skip("no PostgreSQL: BLOCKBUDGET_TEST_POSTGRES_URL is not set")
    with postgres_database() as url:
        engine = sa.create_engine(url)
        try:
            a = leadership_for(engine, name=NAME)
            b = leadership_for(engine, name=NAME)
            assert isinstance(a, PostgresLeadership)
            assert a.try_acquire() and not b.try_acquire()
            key = leadership_key(NAME)
            with engine.connect() as admin:
                killed = admin.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks"
                        " WHERE locktype = 'advisory' AND granted AND objsubid = 1"
                        " AND classid = CAST(:hi AS bigint)::oid"
                        " AND objid = CAST(:lo AS bigint)::oid"
                    ),
                    {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF},
                ).all()
            assert killed == [(True,)]  # exactly the holder's session
            assert not a.held
            assert _eventually(b.try_acquire)
            assert not a.try_acquire()  # a fresh connection, and the lock is b's now
            b.release()
            assert a.try_acquire()
            a.release()
        finally:
            engine.dispose()


def test_postgres_pooled_connections_never_keep_the_lock() -> None:
    """The lock lives on a connection outside the pool: after release, every pooled
    connection is free of it and a second engine can take it."""
    if POSTGRES_URL is None:
        pytest.skip("no PostgreSQL: BLOCKBUDGET_TEST_POSTGRES_URL is not set")
    with postgres_database() as url:
        engine, other = sa.create_engine(url), sa.create_engine(url)
        try:
            a = leadership_for(engine, name=NAME)
            assert a.try_acquire()
            with engine.connect() as conn:
                assert not conn.execute(
                    sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": leadership_key(NAME)}
                ).scalar_one()
            a.release()
            b = leadership_for(other, name=NAME)
            assert b.try_acquire()
            b.release()
        finally:
            engine.dispose()
            other.dispose()


def test_file_lock_replaced_means_leadership_lost(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db.scheduler.leader.lock"
    a, b = FileLeadership(path), FileLeadership(path)
    assert a.try_acquire()
    assert path.read_text() == f"{os.getpid()}\n"
    path.unlink()  # an operator deleted it: b could lock a new file, so a must not hold
    assert not a.held
    assert b.try_acquire()
    assert not a.try_acquire()
    b.release()


def test_leadership_for_picks_by_database(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    lead = leadership_for(sa.create_engine(f"sqlite:///{db}"), name="scheduler")
    assert isinstance(lead, FileLeadership)
    assert lead.path == tmp_path / "ledger.db.scheduler.leader.lock"
    for memory in ("sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?uri=true"):
        assert isinstance(leadership_for(sa.create_engine(memory), name="s"), AlwaysLeader)
    mock = sa.create_mock_engine(sa.make_url("mysql://"), lambda *_a, **_k: None)
    with pytest.raises(InvalidRequestError, match="not 'mysql'"):
        leadership_for(mock, name="s")  # type: ignore[arg-type]
    for bad in ("", "a/b", "x" * 65):
        with pytest.raises(InvalidRequestError, match="leadership name"):
            leadership_for(sa.create_engine("sqlite://"), name=bad)
    with pytest.raises(InvalidRequestError, match="PostgreSQL engine"):
        PostgresLeadership(sa.create_engine("sqlite://"), 1)


def test_key_is_stable_and_64_bit() -> None:
    # A fixed value: every process of every version must contend for the same lock.
    assert leadership_key("scheduler") == 918435440980297251
    assert leadership_key("scheduler") != leadership_key("scheduler-2")
    assert -(2**63) <= leadership_key("scheduler") < 2**63


def test_always_leader() -> None:
    lead = AlwaysLeader()
    assert not lead.held
    with lead:
        assert lead.held and lead.try_acquire()
    assert not lead.held

"""Rollback-proof budgets: a database restored from a backup older than its last charge is
refused (it would give back budget already released), reconciled conservatively, and never
spends anything twice — on SQLite (the file copied with SQLite's online backup, as pg_dump
would copy a server) and on PostgreSQL (a copy through ``CREATE DATABASE … TEMPLATE``), with
the block files and the mark on a directory or on an S3-compatible store."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa
from pg_support import BACKENDS, POSTGRES_URL

from blockbudget import Budget
from blockbudget.errors import (
    LedgerBehindMarkError,
    MarkUnavailableError,
    RetiredBlockError,
)
from blockbudget.ledger import EventKind
from blockbudget.platform import Platform
from blockbudget.store import Blocking
from blockbudget.store.files import DataFiles
from blockbudget.store.markfiles import MarkFiles
from blockbudget.store.watermark import BEFORE_ANSWERS, Mark, MarkState

D1, D2, D3, D5 = (f"s/2024-01-0{d}" for d in (1, 2, 3, 5))


def frame(*days: int) -> pd.DataFrame:
    ts = [pd.Timestamp(f"2024-01-0{d} 06:00") for d in days]
    return pd.DataFrame({"t": ts, "v": [float(d) for d in days]})


# --- backups of either database ------------------------------------------------------------------


@dataclass
class Db:
    """One ledger database and its backup/restore, as an operator would do them."""

    url: str | None  # None: the SQLite file in the home folder
    home: Path
    backup: Callable[[], None]
    restore: Callable[[], None]
    fresh: Callable[[], str]  # the URL of a new, empty database


def _sqlite_db(home: Path) -> Db:
    db, saved = home / "platform.db", home.parent / "backup.db"

    def backup() -> None:  # an online, consistent copy (what pg_dump is for PostgreSQL)
        src, dst = sqlite3.connect(db), sqlite3.connect(saved)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()

    def restore() -> None:
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        db.write_bytes(saved.read_bytes())

    def fresh() -> str:
        return f"sqlite:///{home.parent / f'fresh-{uuid.uuid4().hex[:6]}.db'}"

    return Db(None, home, backup, restore, fresh)


def _pg_db(home: Path, made: list[str]) -> Db:
    assert POSTGRES_URL is not None
    admin = sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    name = f"bb_{uuid.uuid4().hex[:12]}"
    saved = f"{name}_bak"

    def run(sql: str) -> None:
        with admin.connect() as conn:
            conn.execute(sa.text(sql))

    def url_of(db: str) -> str:
        return sa.engine.make_url(POSTGRES_URL).set(database=db).render_as_string(False)

    run(f'CREATE DATABASE "{name}"')
    made.extend([name, saved])

    def backup() -> None:  # the servers are stopped: nobody is connected
        run(f'CREATE DATABASE "{saved}" TEMPLATE "{name}"')

    def restore() -> None:
        run(f'DROP DATABASE "{name}" WITH (FORCE)')
        run(f'CREATE DATABASE "{name}" TEMPLATE "{saved}"')

    def fresh() -> str:
        other = f"{name}_new"
        made.append(other)
        run(f'CREATE DATABASE "{other}"')
        return url_of(other)

    return Db(url_of(name), home, backup, restore, fresh)


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    home = tmp_path / "home"
    home.mkdir()
    if request.param == "sqlite":
        yield _sqlite_db(home)
        return
    made: list[str] = []
    yield _pg_db(home, made)
    admin = sa.create_engine(str(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for name in made:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def open_platform(db: Db, data_root: str | None = None, **kwargs: object) -> Platform:
    return Platform(
        db.home,
        database_url=db.url,
        data_root=data_root,
        engine="arrow",
        **kwargs,  # type: ignore[arg-type]
    )


def setup(db: Db, data_root: str | None = None, **kwargs: object) -> Platform:
    """Stream ``s`` (ε_g = 1, daily blocks 2024-01-01..03), context ``a``, 0.1 spent on D1."""
    p = open_platform(db, data_root, **kwargs)
    p.add_context("a")
    p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
    p.ingest("s", frame(1, 2, 3))
    p.charge([D1], Budget(epsilon="0.1"), context="a")
    return p


def spend_after_backup(p: Platform) -> None:
    """What the restore will lose: D1 0.9 → 0.4, and a new block D5 spent."""
    assert p.afford("s", [D1], context="a").epsilon == Decimal("0.9")
    p.charge([D1], Budget(epsilon="0.5"), context="a")
    assert p.afford("s", [D1], context="a").epsilon == Decimal("0.4")
    p.ingest("s", frame(5))
    p.charge([D5], Budget(epsilon="0.7"), context="a")


def back_up_spend_restore(db: Db, data_root: str | None = None, **kwargs: object) -> int:
    """The review's scenario; returns the seq of the mark the restore leaves behind."""
    p = setup(db, data_root, **kwargs)
    p.close()
    db.backup()
    p = open_platform(db, data_root, **kwargs)
    spend_after_backup(p)
    status = p.mark_status(refresh=True)
    assert status is not None and status.state is MarkState.OK
    assert status.mark is not None and status.mark.seq == p.audit_seq()  # nothing unmarked
    p.close()
    db.restore()
    return status.mark.seq


# --- the scenario --------------------------------------------------------------------------------


def test_a_restored_database_is_refused_reconciled_and_never_spends_twice(db: Db) -> None:
    mark_seq = back_up_spend_restore(db)
    p = open_platform(db)
    try:
        # the restore gave the budget back on paper (a read) ...
        assert p.afford("s", [D1], context="a").epsilon == Decimal("0.9")
        assert p.audit_seq() < mark_seq
        assert p.verify(full=True).ok  # a restored database is a consistent past
        # ... but nothing may spend it, nor change anything
        events = p.audit_seq()
        with pytest.raises(LedgerBehindMarkError, match="blockbudget db reconcile") as caught:
            p.charge([D1], Budget(epsilon="0.5"), context="a")
        assert caught.value.state == "behind" and caught.value.mark_seq == mark_seq
        for write in (
            lambda: p.charge([D2], Budget(epsilon="0.1"), context="a"),
            lambda: p.reserve("s", [D3], Budget(epsilon="0.1"), context="a"),
            lambda: p.ingest("s", frame(4)),
            lambda: p.add_context("b"),
            lambda: p.create_stream("t", policy=Budget(epsilon=1), blocking=Blocking.by_time("t")),
            lambda: p.remove_orphans(),
            lambda: p.expire(),
        ):
            with pytest.raises(LedgerBehindMarkError):
                write()
        assert p.audit_seq() == events and p.streams()[0].name == "s" and len(p.streams()) == 1
        status = p.mark_status()
        assert status is not None and status.refusing and "db reconcile" in str(status.message)

        report = p.reconcile_rollback()
        assert report.changed and report.state is MarkState.BEHIND and not report.replayed
        # every block the lost events could have touched counts as spent, in every context:
        # the restored blocks (live) and D5, which only the lost history had (its part files
        # stayed behind as orphans)
        assert report.retired == (D1, D2, D3) and report.tombstones == (D5,)
        assert report.after is not None and report.before is not None
        assert report.after.key > report.before.key  # a new epoch: the mark never goes back
        assert report.after.seq == p.audit_seq()
        full = p.verify(full=True)
        assert full.ok, full.problems
        assert p.verify().ok
        kinds = [e.kind for e in p.events()[-2:]]
        assert kinds == [EventKind.RETIRED, EventKind.RECONCILED]

        # nothing is spendable twice: every block is retired, D5's data comes back retired
        for block in (D1, D2, D3, D5):
            with pytest.raises(RetiredBlockError):
                p.charge([block], Budget(epsilon="0.01"), context="a")
        p.ingest("s", frame(5))
        assert {b.block_id: b.retired for b in p.blocks("s")} == {
            D1: True,
            D2: True,
            D3: True,
            D5: True,
        }
        # new data gets new budget
        p.ingest("s", frame(6))
        p.charge(["s/2024-01-06"], Budget(epsilon="0.5"), context="a")
        assert p.verify(full=True).ok

        again = p.reconcile_rollback()  # idempotent: nothing to do now
        assert not again.changed and again.state is MarkState.OK
        assert [e.kind for e in p.events()].count(EventKind.RECONCILED) == 1
    finally:
        p.close()


def test_reconcile_is_crash_safe(db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash after the reconciliation committed and before the mark moved: the database is
    still refused (its log is still behind the old mark); running the command again finds the
    reconciliation committed (same request id), writes nothing more and moves the mark."""
    back_up_spend_restore(db)
    p = open_platform(db)
    real = MarkFiles.write

    def crash(self: MarkFiles, mark: object) -> None:
        raise OSError("the process died here")

    monkeypatch.setattr(MarkFiles, "write", crash)
    with pytest.raises(MarkUnavailableError):
        p.reconcile_rollback()
    p.close()
    monkeypatch.setattr(MarkFiles, "write", real)
    p = open_platform(db)
    try:
        seq = p.audit_seq()
        with pytest.raises(LedgerBehindMarkError):
            p.charge([D1], Budget(epsilon="0.1"), context="a")
        report = p.reconcile_rollback()
        assert report.changed and report.replayed and p.audit_seq() == seq
        assert [e.kind for e in p.events()].count(EventKind.RECONCILED) == 1
        assert p.verify(full=True).ok
        p.ingest("s", frame(7))  # writes go through again
    finally:
        p.close()


def test_a_restore_written_to_since_is_diverged(db: Db) -> None:
    """Restored, then written to without the mark's check (an older release, or the mark
    turned off): the log reaches past the mark's seq with another history — refused all the
    same, and reconciled the same way."""
    back_up_spend_restore(db)
    p = open_platform(db, mark_every="off")
    # an older release, without the guard (the mark off still checks: test below)
    p.ledger.set_guard(None)
    p.watermark = None
    p.charge([D1], Budget(epsilon="0.2"), context="a")
    p.ingest("s", frame(8, 9))
    p.charge([D2], Budget(epsilon="0.3"), context="a")
    p.close()
    p = open_platform(db)
    try:
        with pytest.raises(LedgerBehindMarkError, match="another event") as caught:
            p.charge([D3], Budget(epsilon="0.1"), context="a")
        assert caught.value.state == "diverged"
        report = p.reconcile_rollback()
        assert report.state is MarkState.DIVERGED
        # blocks the restored history created after the mark are retired too: a re-ingest of
        # lost data gets a lost block's id back
        assert set(report.retired) == {D1, D2, D3, "s/2024-01-08", "s/2024-01-09"}
        assert report.tombstones == (D5,)
        assert p.verify(full=True).ok
    finally:
        p.close()


def test_the_mark_never_moves_backwards(db: Db) -> None:
    p = setup(db)
    try:
        keys = []
        for i in range(5):
            p.charge([D2], Budget(epsilon="0.01"), context="a", request_id=f"c{i}")
            status = p.mark_status(refresh=True)
            assert status is not None and status.mark is not None
            keys.append(status.mark.key)
        assert keys == sorted(keys) and len(set(keys)) == 5
        assert keys[-1][1] == p.audit_seq()
        files = MarkFiles(p.store.files)
        newest = files.read()
        assert newest is not None and newest.key == keys[-1]
        # an old copy of the marks mirrored back (a store restored without deletion) adds
        # older names: the mark stays where it was
        files.write(Mark(epoch=0, seq=3, hash="a" * 64, database=newest.database, ts=0.0))
        assert files.read() == newest
        p.charge([D2], Budget(epsilon="0.01"), context="a", request_id="c-last")
        last = files.read()
        assert last is not None and last.seq == p.audit_seq()
        # a replayed request writes no event and leaves the mark as it is
        p.charge([D2], Budget(epsilon="0.01"), context="a", request_id="c-last")
        assert files.read() == last
    finally:
        p.close()


def test_a_fresh_database_on_another_databases_store(db: Db) -> None:
    """A new, empty database on block files whose mark belongs to another database (a wrong
    BLOCKBUDGET_DATABASE, a lost database): refused, and not reconciled unless adopted."""
    p = setup(db)
    p.close()
    other = Platform(db.home, database_url=db.fresh(), engine="arrow")
    try:
        status = other.mark_status()
        assert status is not None and status.state is MarkState.FOREIGN
        with pytest.raises(LedgerBehindMarkError, match="another database") as caught:
            other.add_context("a")
        assert caught.value.state == "foreign" and "--adopt" in str(caught.value)
        with pytest.raises(LedgerBehindMarkError, match="only with --adopt"):
            other.reconcile_rollback()
        assert other.audit_seq() == 0
        report = other.reconcile_rollback(adopt=True)
        assert report.changed and report.state is MarkState.FOREIGN
        # the other database's blocks are tombstones now: its data gets no budget here
        assert report.tombstones == (D1, D2, D3) and report.retired == ()
        assert other.verify(full=True).ok
        other.add_context("a")
        other.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
        other.ingest("s", frame(1, 2, 3, 4))
        assert [b.block_id for b in other.blocks("s") if not b.retired] == ["s/2024-01-04"]
        with pytest.raises(RetiredBlockError):
            other.charge([D1], Budget(epsilon="0.1"), context="a")
    finally:
        other.close()
    # and the first database is the foreign one now
    p = open_platform(db)
    try:
        with pytest.raises(LedgerBehindMarkError, match="another database"):
            p.charge([D1], Budget(epsilon="0.1"), context="a")
    finally:
        p.close()


def test_tombstones_name_the_lost_blocks_exactly(db: Db) -> None:
    """The lost history's blocks are found by their part files' paths: a sub-day key stored
    percent-encoded (``07%3A00``) and a late block (``#2``) get their exact ids back."""
    p = open_platform(db)
    p.add_context("a")
    hourly = Blocking.by_time("t", window=timedelta(hours=1))
    p.create_stream("h", policy=Budget(epsilon=1), blocking=hourly)

    def at(*times: str) -> pd.DataFrame:
        return pd.DataFrame({"t": [pd.Timestamp(t) for t in times], "v": [1.0] * len(times)})

    p.ingest("h", at("2024-01-01 06:10"))
    p.close()
    db.backup()
    p = open_platform(db)
    p.ingest("h", at("2024-01-01 07:10"))
    with p.request("h", blocks=["h/2024-01-01T07:00"], budget=Budget(epsilon="0.5"),
                   context="a") as grant:  # fmt: skip
        grant.draw(Budget(epsilon="0.5"), label="lost")  # seals the block
    p.ingest("h", at("2024-01-01 07:20"))  # late: a second block for the key
    p.charge(["h/2024-01-01T07:00#2"], Budget(epsilon="0.9"), context="a")
    assert (db.home / "blocks" / "h" / "2024-01-01T07%3A00" / "2").is_dir()
    p.close()
    db.restore()
    p = open_platform(db)
    try:
        report = p.reconcile_rollback()
        assert report.retired == ("h/2024-01-01T06:00",)
        assert report.tombstones == ("h/2024-01-01T07:00", "h/2024-01-01T07:00#2")
        p.ingest("h", at("2024-01-01 07:10"))  # the lost data again: no budget comes back
        assert all(b.retired for b in p.blocks("h"))
        assert p.verify(full=True).ok
    finally:
        p.close()


# --- the mark while serving ----------------------------------------------------------------------


def test_a_restore_underneath_a_running_process_is_caught_at_its_next_commit(db: Db) -> None:
    p = setup(db)
    try:
        p.ledger.engine.dispose()
        p.store.engine.dispose()
        db.backup()
        p.charge([D1], Budget(epsilon="0.5"), context="a")
        p.charge([D2], Budget(epsilon="0.5"), context="a")
        p.ledger.engine.dispose()
        p.store.engine.dispose()
        db.restore()  # the servers were not stopped
        seq = p.audit_seq()
        with pytest.raises(LedgerBehindMarkError):  # committed, but the answer is withheld
            p.charge([D1], Budget(epsilon="0.5"), context="a")
        assert p.audit_seq() == seq + 1
        with pytest.raises(LedgerBehindMarkError):  # and nothing more goes through
            p.charge([D3], Budget(epsilon="0.1"), context="a")
        assert p.reconcile_rollback().changed
        assert p.verify(full=True).ok
    finally:
        p.close()


def test_a_mark_that_cannot_be_written_withholds_the_answer(
    db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = setup(db)
    try:
        real = MarkFiles.write

        def down(self: MarkFiles, mark: object) -> None:
            raise OSError("the block store is down")

        monkeypatch.setattr(MarkFiles, "write", down)
        with pytest.raises(MarkUnavailableError, match="withheld"):
            p.charge([D2], Budget(epsilon="0.25"), context="a", request_id="q")
        assert p.afford("s", [D2], context="a").epsilon == Decimal("0.75")  # spent, answer withheld
        with pytest.raises(MarkUnavailableError):  # the next write first catches the mark up
            p.charge([D3], Budget(epsilon="0.25"), context="a")
        assert p.afford("s", [D3], context="a").epsilon == Decimal(1)  # refused before it
        monkeypatch.setattr(MarkFiles, "write", real)
        p.charge([D3], Budget(epsilon="0.25"), context="a")
        status = p.mark_status(refresh=True)
        assert status is not None and status.mark is not None
        assert status.mark.seq == p.audit_seq() and not status.refusing
    finally:
        p.close()


def test_group_commit_advances_the_mark_once_per_batch(db: Db) -> None:
    p = setup(db, group_commit=True)
    try:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: p.charge([D2], Budget(epsilon="0.01"), context="a"), range(32)))
        status = p.mark_status(refresh=True)
        assert status is not None and status.mark is not None
        assert status.mark.seq == p.audit_seq() and status.state is MarkState.OK
    finally:
        p.close()
    db.backup()
    p = open_platform(db, group_commit=True)
    p.charge([D1], Budget(epsilon="0.5"), context="a")
    p.close()
    db.restore()
    p = open_platform(db, group_commit=True)
    try:
        with pytest.raises(LedgerBehindMarkError):
            p.charge([D1], Budget(epsilon="0.5"), context="a")
        assert p.reconcile_rollback().changed and p.verify(full=True).ok
    finally:
        p.close()


def test_the_default_marks_before_every_answer_and_the_rest_within_a_second(db: Db) -> None:
    """With the default policy a charge (after which an answer may leave) is under the mark
    when it returns; a write that releases nothing (a reservation, a release, an ingest) is
    within a second — a restore that loses only those gives no budget back that an answer
    used."""
    p = setup(db)
    files = MarkFiles(p.store.files)

    def marked() -> int:
        found = files.read()
        return 0 if found is None else found.seq

    try:
        assert marked() == p.audit_seq()
        res = p.reserve("s", [D2], Budget(epsilon="0.2"), context="a")
        assert marked() == p.audit_seq() - 1  # the reservation is not under it yet
        p.charge_reservation(res, Budget(epsilon="0.1"))
        assert marked() == p.audit_seq()  # the draw is, before an answer can follow
        p.release(res.id)
        p.ingest("s", frame(4))
        assert marked() < p.audit_seq()
        deadline = time.monotonic() + 10
        while marked() < p.audit_seq() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marked() == p.audit_seq()  # the background flush, about a second later
    finally:
        p.close()


def test_concurrent_commits_report_in_any_order(db: Db) -> None:
    """Without group commit, threads commit one by one but report their commits in any order:
    a report below the mark, in a log that holds the mark's event, is late, not a rollback."""
    p = setup(db)
    try:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda i: p.charge([D2, D3], Budget(epsilon="0.001"), context="a"),
                    range(80),
                )
            )
        guard = p.watermark
        assert guard is not None
        seq = p.audit_seq()
        early = p.events(after_seq=seq - 2)[0]
        guard.committed(early.seq, early.hash)  # a late report: nothing happens
        status = p.mark_status(refresh=True)
        assert status is not None and status.state is MarkState.OK
        assert status.mark is not None and status.mark.seq == seq
    finally:
        p.close()


def test_a_batched_mark_lags_by_its_window_and_catches_up_on_close(db: Db) -> None:
    p = setup(db, mark_every="5")
    try:
        status = p.mark_status(refresh=True)
        assert status is not None and status.policy == "5"
        first = status.mark.seq if status.mark is not None else 0
        for _ in range(3):
            p.charge([D2], Budget(epsilon="0.01"), context="a")
        status = p.mark_status()
        assert status is not None and (status.mark.seq if status.mark else 0) == first
        assert p.audit_seq() - first == 3  # the window: events a restore could hide
        for _ in range(2):
            p.charge([D2], Budget(epsilon="0.01"), context="a")
        status = p.mark_status()
        assert status is not None and status.mark is not None
        assert status.mark.seq == p.audit_seq()
        p.charge([D2], Budget(epsilon="0.01"), context="a")
    finally:
        p.close()
    newest = MarkFiles(DataFiles(db.home / "blocks")).read()
    assert newest is not None
    p = open_platform(db)
    try:
        assert newest.seq == p.audit_seq()  # close() marked the tail
    finally:
        p.close()


# --- the block files and the mark on object storage ----------------------------------------------


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_an_s3_store_keeps_the_mark(db: Db, s3_root: str) -> None:
    import pyarrow.fs as pafs

    mark_seq = back_up_spend_restore(db, s3_root)
    assert not (db.home / "blocks").exists()  # nothing went to the home folder
    fs, base = pafs.FileSystem.from_uri(s3_root)
    marks = fs.get_file_info(pafs.FileSelector(f"{base}/_blockbudget/marks"))
    assert marks and all(i.base_name.startswith("mark-") for i in marks)
    p = open_platform(db, s3_root)
    try:
        with pytest.raises(LedgerBehindMarkError, match="db reconcile") as caught:
            p.charge([D1], Budget(epsilon="0.5"), context="a")
        assert caught.value.mark_seq == mark_seq
        report = p.reconcile_rollback()
        assert report.retired == (D1, D2, D3) and report.tombstones == (D5,)
        assert p.verify(full=True).ok
        status = p.mark_status(refresh=True)
        assert status is not None and status.state is MarkState.OK
        assert status.where.startswith("s3://") and "endpoint" not in status.where
    finally:
        p.close()


def test_the_mark_is_off_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = Platform(tmp_path / "h", engine="arrow", mark_every="off")
    try:
        assert p.watermark is not None and not p.watermark.policy.enabled
        assert p.budget_refusal() is None
        p.add_context("a")
        p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
        p.ingest("s", frame(1))
        p.charge([D1], Budget(epsilon="0.1"), context="a")
        status = p.mark_status(refresh=True)
        assert status is not None and status.mark is None and status.policy == "off"
    finally:
        p.close()
    assert not (tmp_path / "h" / "blocks" / "_blockbudget").exists()  # no mark written
    monkeypatch.delenv("BLOCKBUDGET_MARK_EVERY", raising=False)
    q = Platform(tmp_path / "h", engine="arrow")
    try:
        assert q.watermark is not None and q.watermark.policy == BEFORE_ANSWERS
        assert q.watermark.policy.before_answers
    finally:
        q.close()


def test_the_mark_off_still_refuses_a_restored_database(db: Db) -> None:
    """``off`` writes no mark, but a process with it (a script, a misconfigured worker) on a
    restored database is refused as any other: the mark the block files hold is checked."""
    back_up_spend_restore(db)
    p = open_platform(db, mark_every="off")
    try:
        with pytest.raises(LedgerBehindMarkError, match="db reconcile"):
            p.charge([D1], Budget(epsilon="0.2"), context="a")
        with pytest.raises(LedgerBehindMarkError):
            p.ingest("s", frame(8))
        assert p.afford("s", [D1], context="a").epsilon == Decimal("0.9")  # reads answer
        report = p.reconcile_rollback()
        assert D1 in report.retired
        assert p.verify(full=True).ok
    finally:
        p.close()

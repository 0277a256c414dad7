"""Adversarial review of the rollback-proof budgets (d763d00): budget is never spendable twice
after a restore, a fork of the database, a crash or a retry."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from blockbudget import Budget
from blockbudget.errors import BlockBudgetError, BudgetExceededError, HighWaterMarkError
from blockbudget.platform import Platform
from blockbudget.store import Blocking

D1, D2, D3 = (f"s/2024-01-0{d}" for d in (1, 2, 3))


def frame(*days: int) -> pd.DataFrame:
    ts = [pd.Timestamp(f"2024-01-0{d} 06:00") for d in days]
    return pd.DataFrame({"t": ts, "v": [float(d) for d in days]})


def copy_db(src: Path, dst: Path) -> None:
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    try:
        a.backup(b)
    finally:
        a.close()
        b.close()


def open_at(home: Path, url: str, root: Path) -> Platform:
    return Platform(home, database_url=url, data_root=str(root), engine="arrow")


def spent_released(p: Platform, block: str) -> Decimal:
    return Decimal(1) - p.afford("s", [block], context="a").epsilon


def test_a_forked_database_on_the_same_store_never_spends_the_same_budget(tmp_path: Path) -> None:
    """Two servers on the same block files, one on the live database and one on a copy of it
    (a restore onto a second database, a failover to a stale replica): each was judged OK when
    it started; within its recheck window each writes its own history and marks it. Only one
    history may ever release an answer after the fork."""
    root = tmp_path / "blocks"
    live = tmp_path / "live.db"
    p1 = open_at(tmp_path / "h1", f"sqlite:///{live}", root)
    p1.add_context("a")
    p1.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
    p1.ingest("s", frame(1, 2, 3))
    p1.charge([D1], Budget(epsilon="0.1"), context="a")
    p1.ledger.engine.dispose()
    p1.store.engine.dispose()
    fork = tmp_path / "fork.db"
    copy_db(live, fork)
    p2 = open_at(tmp_path / "h2", f"sqlite:///{fork}", root)
    released: list[tuple[str, str]] = []
    try:
        for who, p, eps in (
            ("p2", p2, "0.1"),
            ("p1", p1, "0.8"),
            ("p2", p2, "0.8"),
            ("p1", p1, "0.05"),
            ("p2", p2, "0.05"),
        ):
            try:
                p.charge([D1], Budget(epsilon=eps), context="a")
            except (HighWaterMarkError, BudgetExceededError):
                continue
            released.append((who, eps))
        histories = {who for who, _ in released}
        assert len(histories) <= 1, f"both histories released answers on D1: {released}"
        assert sum(Decimal(e) for _, e in released) <= Decimal("0.9")
        # the history that lost stays refused, in this process and in a fresh one
        loser = p2 if histories == {"p1"} else p1
        with pytest.raises(HighWaterMarkError):
            loser.charge([D2], Budget(epsilon="0.01"), context="a")
        url = str(loser.database_url)
        fresh = open_at(tmp_path / "h3", url, root)
        try:
            with pytest.raises(HighWaterMarkError):
                fresh.charge([D2], Budget(epsilon="0.01"), context="a")
        finally:
            fresh.close()
    finally:
        p1.close()
        p2.close()


def test_a_restore_underneath_a_process_whose_mark_is_stale(tmp_path: Path) -> None:
    """Process A last judged the mark at seq n; process B (same database) moved it to n+2; the
    database is restored to n+1 (a backup between): A's next charge reuses seq n+2, which is
    above what A knows — the store's mark at n+2 names another event."""
    root = tmp_path / "blocks"
    db = tmp_path / "live.db"
    url = f"sqlite:///{db}"
    a = open_at(tmp_path / "ha", url, root)
    a.add_context("a")
    a.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
    a.ingest("s", frame(1, 2, 3))
    a.charge([D1], Budget(epsilon="0.1"), context="a")  # A judged and marked here
    b = open_at(tmp_path / "hb", url, root)
    saved = tmp_path / "backup.db"
    try:
        b.charge([D1], Budget(epsilon="0.3"), context="a")
        b.ledger.engine.dispose()
        copy_db(db, saved)
        b.charge([D1], Budget(epsilon="0.6"), context="a")  # released: D1 is spent up to 1.0
        b.close()
        a.ledger.engine.dispose()
        a.store.engine.dispose()
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        db.write_bytes(saved.read_bytes())
        with pytest.raises(HighWaterMarkError):
            a.charge([D1], Budget(epsilon="0.6"), context="a")  # 0.6 was released already
    finally:
        a.close()


def test_a_backup_taken_between_an_ingests_catalog_and_ledger_commits(tmp_path: Path) -> None:
    """A consistent backup (pg_dump, SQLite's online backup) can fall between an ingest's
    catalog commit and its ledger registration: the restored catalog names the new block's
    part files (no orphans), the restored ledger does not know the block. The lost history
    registered it and spent it; after the reconciliation, the routine repair of a crashed
    ingest (``Platform.reconcile``, or the ingest's retry) must not give it a fresh budget."""
    root = tmp_path / "blocks"
    db = tmp_path / "live.db"
    url = f"sqlite:///{db}"
    p = open_at(tmp_path / "h", url, root)
    p.add_context("a")
    p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
    p.ingest("s", frame(1, 2, 3))
    p.charge([D1], Budget(epsilon="0.1"), context="a")
    report = p.store.ingest("s", frame(5))  # the ingest's catalog commit, not yet its ledger's
    d5 = report.new_blocks[0]
    p.close()
    saved = tmp_path / "backup.db"
    copy_db(db, saved)
    p = open_at(tmp_path / "h", url, root)
    assert p.reconcile("s") == [d5]  # the lost history: registered ...
    p.charge([d5], Budget(epsilon="0.7"), context="a")  # ... and spent, its answer released
    p.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.write_bytes(saved.read_bytes())
    p = open_at(tmp_path / "h", url, root)
    try:
        assert p.reconcile_rollback().changed
        p.reconcile("s")  # the routine repair of a crashed ingest
        with pytest.raises(BlockBudgetError):
            p.charge([d5], Budget(epsilon="0.7"), context="a")
    finally:
        p.close()


def test_a_remote_pipeline_workers_draws_are_under_the_mark_before_its_run_returns(
    tmp_path: Path,
) -> None:
    """A Ray worker (``run_remote``) opens a ledger of its own to charge its draws on the
    driver's reservation: those charges must be under the high-water mark before the run (a
    DP release) goes back to the driver — else a restore to a backup taken before them hides
    them, the mark being none the wiser, and their budget is spent twice."""
    from training.conftest import CONTEXT, STREAM, make_platform

    from blockbudget.apps.flights.features import Granularity
    from blockbudget.apps.flights.pipelines import AverageSpeedPipeline
    from blockbudget.store.markfiles import MarkFiles
    from blockbudget.training import PipelineJob
    from blockbudget.training.executors import GrantHandle, run_remote

    job = PipelineJob(
        AverageSpeedPipeline(target=300.0, granularity=Granularity.WEEK_OF_MONTH),
        Decimal("0.25"),
        Decimal(0),
        0.05,
        seed=8,
    )
    platform = make_platform(tmp_path / "p", 3)
    try:
        grant = platform.request(
            STREAM,
            blocks=[b.block_id for b in platform.blocks(STREAM)],
            budget=Budget(epsilon=job.epsilon, delta=job.delta),
            context=CONTEXT,
        )
        handle = GrantHandle.of(grant, database_url=platform.database_url)
        before = platform.audit_seq()
        run_remote(job, handle)
        after = platform.audit_seq()
        assert after > before  # the worker charged its draws
        mark = MarkFiles(platform.store.files).read()
        assert mark is not None and mark.seq == after
        grant.close()
    finally:
        platform.close()


def test_a_second_restore_after_the_orphans_were_removed(tmp_path: Path) -> None:
    """Restore, reconcile (D5 of the lost history is tombstoned from its orphan part files),
    remove the orphans (allowed now), then restore the same backup again: the tombstone went
    with the reconciled database and the evidence went with the orphan sweep — D5's data
    ingested again must still not get a fresh budget."""
    from datetime import timedelta

    from blockbudget.errors import RetiredBlockError

    root = tmp_path / "blocks"
    db = tmp_path / "live.db"
    url = f"sqlite:///{db}"
    d5 = "s/2024-01-05"
    p = open_at(tmp_path / "h", url, root)
    p.add_context("a")
    p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
    p.ingest("s", frame(1, 2, 3))
    p.charge([D1], Budget(epsilon="0.1"), context="a")
    p.close()
    saved = tmp_path / "backup.db"
    copy_db(db, saved)

    def restore() -> None:
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        db.write_bytes(saved.read_bytes())

    p = open_at(tmp_path / "h", url, root)
    p.ingest("s", frame(5))
    p.charge([d5], Budget(epsilon="0.7"), context="a")  # released, then lost
    p.close()
    restore()
    p = open_at(tmp_path / "h", url, root)
    assert p.reconcile_rollback().tombstones == (d5,)
    assert p.remove_orphans(older_than=timedelta(0))  # D5's part files
    p.close()
    restore()
    p = open_at(tmp_path / "h", url, root)
    try:
        assert p.reconcile_rollback().changed
        p.ingest("s", frame(5))
        with pytest.raises(RetiredBlockError):
            p.charge([d5], Budget(epsilon="0.7"), context="a")
    finally:
        p.close()

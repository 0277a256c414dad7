"""The Alembic head is the platform's schema: an empty database upgraded to the head, and one
whose tables its modules created lazily, both equal the union of every table set's metadata
(Alembic's ``compare_metadata`` finds no difference) — so a table or column added without a
revision fails here."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from migrations_support import CHAIN

from blockbudget.dbrevision import HEAD_REVISION, LEGACY_TABLES
from blockbudget.ledger import AUDIT_TRIGGERS
from blockbudget.migrations import SchemaState, script_directory, status, target_metadata, upgrade


def differences(url: str) -> list[object]:
    """What Alembic finds different between the database and the metadata."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn), target_metadata()))
    finally:
        engine.dispose()


def triggers(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                sql = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
            else:
                sql = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
            return {r[0] for r in conn.exec_driver_sql(sql)}
    finally:
        engine.dispose()


def test_the_revision_constant_is_the_scripts_head() -> None:
    heads = script_directory().get_heads()
    assert heads == [HEAD_REVISION]


def test_the_legacy_tables_are_the_baselines() -> None:
    baseline = script_directory().get_revision("0001_baseline")
    assert baseline is not None
    assert set(baseline.module.baseline_metadata().tables) == LEGACY_TABLES


def test_an_upgraded_empty_database_is_the_metadata(empty_url: str) -> None:
    assert status(empty_url).state is SchemaState.EMPTY
    report = upgrade(empty_url)
    assert report.before is None and report.applied == CHAIN
    assert differences(empty_url) == []
    sqlite = empty_url.startswith("sqlite")
    absent = "ledger_audit_no_truncate" if sqlite else "ledger_audit_no_delete"
    assert triggers(empty_url) == set(AUDIT_TRIGGERS) - {absent}
    assert status(empty_url).state is SchemaState.CURRENT


def test_a_lazily_created_database_is_the_metadata(empty_url: str, tmp_path: Path) -> None:
    """Opening a fresh database stamps the head and each table set creates itself."""
    from blockbudget.platform import Platform
    from blockbudget.service.auth import KeyStore
    from blockbudget.service.blocknames import _load_secret
    from blockbudget.service.dashboard_index import StreamEventIndex
    from blockbudget.tasks.rows import TaskRows
    from blockbudget.userids import _engine as releases_engine

    platform = Platform(tmp_path / "home", database_url=empty_url)
    try:
        engine = platform.ledger.engine
        KeyStore(engine)
        TaskRows(engine)
        _load_secret(engine)
        releases_engine(platform)
        StreamEventIndex(engine).catch_up()
    finally:
        platform.close()
    assert status(empty_url).state is SchemaState.CURRENT
    assert differences(empty_url) == []
    assert upgrade(empty_url).applied == ()

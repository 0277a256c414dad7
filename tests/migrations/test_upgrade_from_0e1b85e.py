"""Upgrading a database written by the release before schema revisions (commit 0e1b85e), with
data in every table set, on SQLite and PostgreSQL: it is refused until ``blockbudget db
upgrade`` runs, the upgrade runs once (a second one is a no-op), and afterwards the audit chain
verifies and every row is there.

The fixtures were written by that release's code (``tests/fixtures/make_0e1b85e_db.py`` says
how and what they hold): ``home_0e1b85e/`` (SQLite) and ``schema_0e1b85e_postgres.sql``
(``pg_dump``)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from migrations_support import CHAIN
from pg_support import POSTGRES_URL, postgres_database
from test_head_matches_metadata import differences
from typer.testing import CliRunner

from blockbudget.budget import Budget
from blockbudget.cli import app
from blockbudget.dbrevision import HEAD_REVISION
from blockbudget.errors import SchemaRevisionError
from blockbudget.ledger import ReservationState
from blockbudget.migrations import SchemaState, require_current, status, upgrade
from blockbudget.platform import Platform

FIXTURES = Path(__file__).parent.parent / "fixtures"
runner = CliRunner()


@dataclass(frozen=True)
class Old:
    """An old-schema database: its home (block files) and URL; ``args`` select it on the
    command line."""

    home: Path
    url: str
    args: tuple[str, ...]


def _load_postgres(url: str) -> None:
    """Run the ``pg_dump`` script in the empty database at ``url``."""
    engine = sa.create_engine(url)
    try:
        raw = engine.raw_connection()
        try:
            with raw.cursor() as cursor:
                cursor.execute((FIXTURES / "schema_0e1b85e_postgres.sql").read_text())
            raw.commit()
        finally:
            raw.close()
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def old(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Old]:
    home = tmp_path / "home"
    shutil.copytree(FIXTURES / "home_0e1b85e", home)
    if request.param == "sqlite":
        yield Old(home, f"sqlite:///{home / 'platform.db'}", ("--home", str(home)))
        return
    if POSTGRES_URL is None:
        pytest.skip("no PostgreSQL: BLOCKBUDGET_TEST_POSTGRES_URL is not set")
    with postgres_database() as url:
        _load_postgres(url)
        yield Old(home, url, ("--database", url))


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_every_open_refuses_an_old_database_and_changes_nothing(old: Old) -> None:
    before = _tables(old.url)
    assert "alembic_version" not in before and "ledger_audit" in before
    with pytest.raises(SchemaRevisionError, match="`blockbudget db upgrade`"):
        Platform(old.home, database_url=old.url)
    from blockbudget.service.auth import KeyStore
    from blockbudget.store import BlockStore
    from blockbudget.tasks.rows import TaskRows

    engine = sa.create_engine(old.url)
    try:
        for open_ in (KeyStore, TaskRows, lambda e: BlockStore(e, old.home / "blocks")):
            with pytest.raises(SchemaRevisionError, match="before schema revisions"):
                open_(engine)
    finally:
        engine.dispose()
    assert _tables(old.url) == before
    assert status(old.url).state is SchemaState.BEHIND


def test_serve_refuses_to_start_on_an_old_database(old: Old) -> None:
    with pytest.raises(SchemaRevisionError, match="run `blockbudget db upgrade"):
        require_current(old.url)
    result = runner.invoke(app, ["serve", *old.args, "--port", "1"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "SchemaRevisionError" in text and "blockbudget db upgrade" in text
    assert "serving on" not in text and "created principal" not in text
    assert "alembic_version" not in _tables(old.url)


def _db(*args: str) -> tuple[int, dict[str, object]]:
    result = runner.invoke(app, ["db", *args, "--json"])
    return result.exit_code, json.loads(result.output)


def test_db_upgrade_adopts_the_old_database_once_and_the_data_verifies(old: Old) -> None:
    code, found = _db("check", *old.args)
    assert code == 1 and found["state"] == "behind" and found["revision"] is None
    code, report = _db("upgrade", *old.args)
    assert code == 0, report
    assert report["before"] is None and report["applied"] == list(CHAIN)
    assert report["changed"] is True
    code, again = _db("upgrade", *old.args)
    assert code == 0 and again["applied"] == [] and again["changed"] is False
    code, found = _db("check", *old.args)
    assert code == 0 and found["state"] == "current" and found["revision"] == HEAD_REVISION
    assert differences(old.url) == []
    _check_data(old)


def _check_data(old: Old) -> None:
    """Everything the fixture wrote is there, the chain verifies, and the platform works."""
    from blockbudget.service.auth import KeyStore, PrincipalState
    from blockbudget.tasks.rows import TaskRows
    from blockbudget.userids import latest_release

    platform = Platform(old.home, database_url=old.url, engine="arrow")
    try:
        report = platform.verify(full=True)
        assert report.ok, report.problems
        assert platform.contexts() == ["ml", "ops"]
        assert [s.name for s in platform.streams()] == ["events", "users"]
        first, second, third = (m.block_id for m in platform.store.blocks("events"))
        assert platform.ledger.state(first, "ops").remaining == "(ε=0.75, δ=0)"
        assert platform.ledger.state(second, "ml").remaining == "(ε=0.5, δ=0)"
        opened = platform.ledger.reservations(state=ReservationState.OPEN)
        assert sorted(r.blocks for r in opened) == [(second,), (third,)]
        release = latest_release(platform, "users")
        assert release is not None and release.safe_max == 21 and release.secure_noise is False
        keys = KeyStore(platform.ledger.engine)
        principals = {p.name: p for p in keys.principals()}
        assert sorted(principals) == ["admin", "ana"] and principals["ana"].contexts == ("ops",)
        # 0002 added the principal's state and the keys' expiry: the old ones stay usable.
        assert keys.record("ana").state is PrincipalState.ACTIVE
        (ana_key,) = keys.keys("ana")
        assert ana_key.expires_at is None and ana_key.valid_at(time.time())
        (task,) = TaskRows(platform.ledger.engine).select(stream="events")
        assert task.principal == "ana" and task.request_id == "task-1"
        # The upgraded platform keeps working: the open reservation draws, the audit grows.
        with platform.request(
            "events", blocks=[first], budget=Budget(epsilon="0.5"), context="ops"
        ) as g:
            g.draw(Budget(epsilon="0.5"), label="after the upgrade")
        assert platform.ledger.state(first, "ops").remaining == "(ε=0.25, δ=0)"
        assert platform.verify().ok
    finally:
        platform.close()


def test_a_ledger_of_an_unknown_version_is_refused_by_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE ledger_head (id INTEGER PRIMARY KEY, schema_version INTEGER)")
    con.execute("INSERT INTO ledger_head VALUES (1, 1)")
    con.commit()
    con.close()
    with pytest.raises(SchemaRevisionError, match="ledger schema version 1"):
        upgrade(f"sqlite:///{path}")
    assert _tables(f"sqlite:///{path}") == {"ledger_head"}


def test_an_older_version_2_database_is_adopted_to_exactly_the_head(tmp_path: Path) -> None:
    """``tests/fixtures/v2_home`` (ledger schema version 2, no ``closed_at``, sweeps,
    checkpoints, store order index or service tables): the baseline brings it to exactly the
    head schema, and its chain still verifies."""
    home = tmp_path / "home"
    shutil.copytree(FIXTURES / "v2_home", home)
    url = f"sqlite:///{home / 'platform.db'}"
    assert upgrade(url).applied == CHAIN
    assert differences(url) == []
    con = sqlite3.connect(home / "platform.db")
    assert con.execute("SELECT schema_version FROM ledger_head").fetchone() == (4,)
    con.close()
    platform = Platform(home)
    try:
        assert platform.verify(full=True).ok
    finally:
        platform.close()

"""``blockbudget db upgrade|current|check`` on empty, current and unknown (newer) databases."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from migrations_support import CHAIN
from typer.testing import CliRunner

from blockbudget.cli import app
from blockbudget.dbrevision import HEAD_REVISION
from blockbudget.errors import SchemaRevisionError
from blockbudget.ledger import Ledger
from blockbudget.migrations import SchemaState, require_current, status, upgrade

runner = CliRunner()


def _db(*args: str) -> tuple[int, dict[str, object]]:
    result = runner.invoke(app, ["db", *args, "--json"])
    return result.exit_code, json.loads(result.output)


def test_reading_a_missing_database_creates_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for command in ("current", "check"):
        code, found = _db(command, "--home", str(home))
        assert code == 0 and found["state"] == "empty" and found["revision"] is None
        assert found["head"] == HEAD_REVISION and found["usable"] is True
    assert not home.exists()


def test_upgrade_creates_a_fresh_database_at_the_head_and_then_does_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    code, report = _db("upgrade", "--home", str(home))
    assert code == 0 and report["applied"] == list(CHAIN) and report["before"] is None
    assert report["fresh"] is True
    code, report = _db("upgrade", "--home", str(home))
    assert code == 0 and report == {
        "after": HEAD_REVISION,
        "applied": [],
        "before": HEAD_REVISION,
        "changed": False,
        "database": f"sqlite:///{(home / 'platform.db').resolve()}",
        "fresh": False,
    }
    text = runner.invoke(app, ["db", "current", "--home", str(home)]).output
    assert f"revision {HEAD_REVISION}, head {HEAD_REVISION}" in text and "current" in text


def test_a_revision_from_a_newer_release_is_refused_everywhere(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'platform.db'}"
    Ledger(url).dispose()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_future'"))
    engine.dispose()
    assert status(url).state is SchemaState.UNKNOWN
    code, found = _db("check", "--home", str(tmp_path))
    assert code == 1 and found["state"] == "unknown" and found["usable"] is False
    with pytest.raises(SchemaRevisionError, match="newer release"):
        upgrade(url)
    with pytest.raises(SchemaRevisionError, match="newer release"):
        require_current(url)
    with pytest.raises(SchemaRevisionError, match=r"'9999_future'.*`blockbudget db upgrade`"):
        Ledger(url)


def test_the_cli_imports_no_database_library_at_start() -> None:
    """``blockbudget --help`` stays quick: the db commands import Alembic only when run."""
    import subprocess

    code = (
        "import sys, blockbudget.cli; "
        "print(sorted(m for m in ('alembic', 'sqlalchemy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_upgrade_the_role_may_not_make_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    import blockbudget.migrations as migrations

    def refused(url: str) -> None:
        orig = psycopg.errors.InsufficientPrivilege("permission denied for schema public")
        raise sa.exc.ProgrammingError("CREATE TABLE store_x (…)", {}, orig)

    monkeypatch.setattr(migrations, "upgrade", refused)
    home = ["--home", str(tmp_path / "home")]
    code, doc = _db("upgrade", *home)
    error = doc["error"]
    assert code == 2 and isinstance(error, dict) and error["type"] == "InvalidRequestError"
    message = error["message"]
    assert message.startswith("the database refused the upgrade: permission denied for schema")
    assert "CREATE on the schema" in message and message.endswith("nothing was changed")
    result = runner.invoke(app, ["db", "upgrade", *home])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) <= 3  # one message (wrapped on a terminal)


def test_upgrade_of_a_fresh_database_says_it_created_the_schema(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "home")]
    result = runner.invoke(app, ["db", "upgrade", *home], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # whatever the console width wrapped
    assert "no revision" not in text.lower() and "which was empty" in text, text
    assert f"at schema revision {HEAD_REVISION}" in text
    code, doc = _db("upgrade", *home)  # the second: nothing to do, not fresh
    assert code == 0 and doc["fresh"] is False and doc["changed"] is False

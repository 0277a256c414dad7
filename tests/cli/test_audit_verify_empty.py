"""``audit verify`` names the database it checked and fails loudly on an empty ledger (a shell
without $BLOCKBUDGET_DATABASE, a wrong --home), without creating a home folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from pg_support import POSTGRES_URL, postgres_database
from typer.testing import CliRunner

from blockbudget.cli import app
from blockbudget.platform import Platform

runner = CliRunner()


@pytest.mark.parametrize("full", [[], ["--full"]])
def test_a_missing_home_is_an_empty_ledger_and_is_not_created(
    tmp_path: Path, full: list[str]
) -> None:
    home = tmp_path / "nothing-here"
    r = runner.invoke(app, ["audit", "verify", *full, "--home", str(home)], env=_NO_DB)
    assert r.exit_code == 1, r.output
    text = " ".join(r.output.split())
    assert f"the ledger at sqlite:///{home / 'platform.db'} is empty" in text
    assert "BLOCKBUDGET_DATABASE/--home" in text and "OK" not in text
    assert not home.exists()


def test_an_empty_ledger_in_json(tmp_path: Path) -> None:
    home = tmp_path / "h"
    Platform(home).close()  # the tables exist, no event does
    r = runner.invoke(app, ["audit", "verify", "--json", "--home", str(home)], env=_NO_DB)
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert doc["ok"] is False and doc["empty"] is True and doc["events"] == 0
    assert doc["database"] == f"sqlite:///{home.resolve() / 'platform.db'}"
    assert "is empty" in doc["problems"][0]


def test_a_ledger_with_events_names_its_database(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = Platform(home)
    p.add_context("a")
    p.close()
    r = runner.invoke(app, ["audit", "verify", "--home", str(home)], env=_NO_DB)
    assert r.exit_code == 0, r.output
    assert f"database: sqlite:///{home.resolve() / 'platform.db'}" in " ".join(r.output.split())
    assert "audit verify: OK" in r.output
    r = runner.invoke(app, ["audit", "verify", "--json", "--home", str(home)], env=_NO_DB)
    doc = json.loads(r.output)
    assert r.exit_code == 0 and doc["ok"] is True and doc["empty"] is False


@pytest.mark.skipif(POSTGRES_URL is None, reason="needs BLOCKBUDGET_TEST_POSTGRES_URL")
def test_an_empty_postgres_database_is_named_without_its_password(tmp_path: Path) -> None:
    with postgres_database() as url:
        with_password = sa.engine.make_url(url).set(password="pw-not-shown")
        shown = with_password.render_as_string(hide_password=True)
        env = {"BLOCKBUDGET_DATABASE": with_password.render_as_string(hide_password=False)}
        r = runner.invoke(app, ["audit", "verify", "--json", "--home", str(tmp_path)], env=env)
        assert "pw-not-shown" not in r.output
        assert r.exit_code == 1, r.output  # the test server trusts loopback: no password needed
        assert json.loads(r.output)["database"] == shown
        assert "***" in shown


_NO_DB = {"BLOCKBUDGET_DATABASE": "", "BLOCKBUDGET_DATA_ROOT": ""}

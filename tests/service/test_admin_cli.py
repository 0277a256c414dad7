"""``blockbudget principal …`` on a home folder and against a server: the same JSON documents
either way, keys listed without secrets, rotation and revocation, and refusals for non-admins."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from blockbudget.cli import app
from blockbudget.service import create_app
from service.support import Seeded, thread_server

runner = CliRunner()


def _run(*args: str) -> Any:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _script(run: Callable[..., Any]) -> None:
    """One admin session; ``run(*args)`` runs ``blockbudget principal *args --json``."""
    created = run("add", "cy", "--role", "analyst", "--context", "team-a")
    key = created["api_key"]
    key_id = key.split("_")[1]
    assert created["principal"]["name"] == "cy" and created["principal"]["contexts"] == ["team-a"]
    assert [k["key_id"] for k in created["principal"]["keys"]] == [key_id]
    listed = {p["name"]: p for p in run("list")["principals"]}
    assert listed["cy"] == run("show", "cy")
    assert key.split("_")[2] not in json.dumps(listed)
    assert run("role", "cy", "owner")["role"] == "owner"
    assert run("contexts", "cy", "--context", "team-a", "--context", "team-b")["contexts"] == [
        "team-a",
        "team-b",
    ]
    granted = {"principal": "cy", "stream": "flights", "permission": "read"}
    assert run("grant", "cy", "flights") == granted  # the shape an owner gets too
    assert run("acl", "flights")["principals"]["cy"] == "read"
    assert run("revoke", "cy", "flights") == {**granted, "permission": None}
    assert run("show", "cy")["streams"] == {}
    assert "cy" not in run("acl", "flights")["principals"]
    second = run("key", "create", "cy")["api_key"]
    rotated = run("key", "rotate", "cy", key_id, "--grace", "1h")
    assert rotated["replaced"]["key_id"] == key_id and rotated["replaced"]["expires"] is not None
    keys = {k["key_id"]: k for k in run("key", "list", "cy")["keys"]}
    assert keys[key_id]["active"] and set(keys) == {key_id, second.split("_")[1], rotated["key_id"]}
    revoked = run("key", "revoke", "cy", key_id)
    assert [k["revoked"] for k in revoked["keys"] if k["key_id"] == key_id] == [True]
    assert run("disable", "cy")["state"] == "disabled"
    assert run("enable", "cy")["state"] == "active"
    gone = run("delete", "cy", "--yes")
    assert gone["state"] == "deleted" and all(k["revoked"] for k in gone["keys"])


def test_principal_commands_on_a_home(seeded: Seeded, database_url: str | None) -> None:
    home = ["--home", str(seeded.platform.home)]
    if database_url is not None:
        home += ["--database", database_url]
    _script(lambda *args: _run("principal", *args, "--json", *home))
    # tables for people
    r = runner.invoke(app, ["principal", "list", *home])
    assert r.exit_code == 0 and "olga" in r.output and "deleted" in r.output
    r = runner.invoke(app, ["principal", "key", "list", "ana", *home])
    assert r.exit_code == 0 and seeded.analyst.split("_")[1] in r.output and "UTC" in r.output
    r = runner.invoke(app, ["principal", "key", "rotate", "ana", "nope", "--grace", "2w", *home])
    assert r.exit_code == 2 and "--grace must look like" in r.output
    ana_key = seeded.analyst.split("_")[1]
    before = seeded.keys.keys("ana")
    r = runner.invoke(app, ["principal", "key", "rotate", "ana", ana_key, "--grace", "91d", *home])
    assert r.exit_code == 2 and "--grace must be at most 90 days" in r.output
    assert "Input should be" not in r.output
    assert seeded.keys.keys("ana") == before  # nothing issued, nothing retired


def test_principal_commands_against_a_server(seeded: Seeded) -> None:
    application = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    with thread_server(application) as url:
        remote = ["--server", url, "--api-key", seeded.admin]
        _script(lambda *args: _run("principal", *args, "--json", *remote))
        for key in (seeded.owner, seeded.analyst):
            as_other = ["--server", url, "--api-key", key]
            for args in (("list",), ("show", "ana"), ("key", "list", "ana"), ("disable", "bob")):
                r = runner.invoke(app, ["principal", *args, *as_other])
                assert r.exit_code == 2 and "HTTP 403" in r.output, r.output
        assert seeded.keys.record("bob").state.value == "active"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_unknown_principal_and_stream_are_errors(seeded: Seeded, tmp_path: Path) -> None:
    home = ["--home", str(seeded.platform.home)]
    for args in (("show", "nobody"), ("acl", "nostream"), ("role", "ana", "boss")):
        r = runner.invoke(app, ["principal", *args, *home])
        assert r.exit_code == 2, r.output


def test_local_admin_changes_are_logged_as_the_os_user(
    seeded: Seeded, database_url: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    import getpass

    home = ["--home", str(seeded.platform.home)]
    if database_url is not None:
        home += ["--database", database_url]
    with caplog.at_level("INFO", logger="blockbudget.admin"):
        _run("principal", "role", "ana", "owner", "--json", *home)
        _run("principal", "disable", "ana", "--json", *home)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "blockbudget.admin"]
    actor = f"local:{getpass.getuser()}"
    assert [(x["actor"], x["action"], x["target"]) for x in lines] == [
        (actor, "set_role", "ana"),
        (actor, "disable", "ana"),
    ]
    assert lines[0]["role"] == "owner" and lines[0]["was"] == "analyst"

"""Usage errors keep ``--json`` one JSON document on stdout (exit 2); our own option checks are
one clear ``InvalidRequestError`` line; irreversible commands need ``--yes`` without a prompt
on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blockbudget.cli import main

from .support import invoke, invoke_json, make_home


def _main_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--json"])
    out = capsys.readouterr().out
    return int(exit_.value.code or 0), json.loads(out)


def test_click_usage_errors_are_json_documents(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _main_json(capsys, "stream", "list", "--jsn")  # an unknown option
    assert code == 2 and doc["error"]["type"] == "UsageError"
    assert "No such option: --jsn" in doc["error"]["message"]
    code, doc = _main_json(capsys, "afford")  # a missing argument
    assert code == 2 and "Missing argument" in doc["error"]["message"]
    code, doc = _main_json(capsys, "afford", "s", "--last", "x")  # a value of the wrong type
    assert code == 2 and "--last" in doc["error"]["message"]


def test_text_usage_errors_are_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["stream", "list", "--jsn"])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "No such option" in captured.err


def test_our_checks_are_invalid_request_errors(tmp_path: Path) -> None:
    home = tmp_path / "h"
    make_home(home).close()
    h = ["--home", str(home), "--context", "a"]
    for args, says in (
        (("afford", "b", *h), "give exactly one of --block"),
        (("task", "submit", "b", "--epsilon", "0.1", *h), "give exactly one of --block"),
        (("task", "submit", "b", "--newest", "1", *h), "give --epsilon"),
        (("task", "submit", "b", "--range", "a", "b", "--epsilon", "0.1", *h), "needs --k K"),
        (("stream", "list", "--server", "http://127.0.0.1:9"), "--server needs --api-key"),
        (("principal", "add", "x", "--role", "boss", *h[:2]), "role must be admin"),
        (("principal", "key", "rotate", "x", "k", "--grace", "2w", *h[:2]), "--grace must"),
    ):
        code, doc = invoke_json(*args)
        assert code == 2 and doc["error"]["type"] == "InvalidRequestError", (args, doc)
        assert says in doc["error"]["message"], (args, doc)


def test_irreversible_commands_need_yes_with_json_or_without_a_terminal(tmp_path: Path) -> None:
    home = tmp_path / "h"
    make_home(home).close()
    h = ["--home", str(home)]
    code, doc = invoke_json("principal", "add", "cy", *h)
    assert code == 0
    code, doc = invoke_json("principal", "delete", "cy", *h)
    assert code == 2 and "pass --yes" in doc["error"]["message"]
    code, doc = invoke_json("principal", "show", "cy", *h)
    assert doc["state"] == "active"  # nothing was deleted
    r = invoke("context", "close", "z", *h)  # CliRunner's stdin is no terminal: no prompt
    assert r.exit_code == 2 and "pass --yes" in r.output and "[y/N]" not in r.output
    code, doc = invoke_json("context", "close", "z", "--yes", *h)
    assert code == 0 and doc["closed_at"] is not None
    code, doc = invoke_json("principal", "delete", "cy", "--yes", *h)
    assert code == 0 and doc["state"] == "deleted"

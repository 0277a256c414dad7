"""``--help`` without a terminal (issue 30, item 5): piped into a file or ``| cat``, every
command's help is laid out wide enough that nothing is clipped — every option's ``[env var:
…]`` shows in full (at rich's default of 80 columns ``serve`` printed ``[env var:
BLOCKBUDGET_DATA…``). A width the user set (``$COLUMNS``) is kept, and the console entry leaves
no trace of its own setting in the process."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

import blockbudget
from blockbudget.cli import WIDTH_VAR, app, help_width, main

SRC = str(Path(blockbudget.__file__).resolve().parent.parent)
#: An ellipsis that ends a table cell: text rich cut off (a literal ``…`` in prose is not).
CLIPPED = re.compile(r"…\s*│")

#: Run the console entry once per command, stdout a pipe, each help behind a marker line.
SCRIPT = """
import json, sys
from blockbudget.cli import main
for argv in json.loads(sys.argv[1]):
    print("=== " + " ".join(argv), flush=True)
    try:
        main([*argv, "--help"])
    except SystemExit:
        pass
    sys.stdout.flush()
"""


def _commands() -> dict[str, list[str]]:
    """Every command path (groups included) → the env vars of its options."""
    out: dict[str, list[str]] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        envvars = [p.envvar for p in cmd.params if isinstance(getattr(p, "envvar", None), str)]
        out[" ".join(path)] = envvars
        if hasattr(cmd, "list_commands"):
            ctx = type(cmd).context_class(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", WIDTH_VAR)}
    return {**env, "PYTHONPATH": SRC, **extra}


def _helps(paths: list[str], env: dict[str, str]) -> dict[str, str]:
    argvs = [p.split() for p in paths]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(argvs)],
        capture_output=True,  # stdout a pipe, not a terminal
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    chunks = out.stdout.split("=== ")[1:]
    return {c.split("\n", 1)[0].strip(): c.split("\n", 1)[1] for c in chunks}


def test_piped_help_shows_every_env_var_unclipped() -> None:
    commands = _commands()
    assert "serve" in commands and "BLOCKBUDGET_DATA_ROOT" in commands["serve"]
    helps = _helps(list(commands), _env())
    assert set(helps) == set(commands)
    for path, envvars in commands.items():
        text = helps[path]
        assert not CLIPPED.search(text), (path, text)
        flat = " ".join(text.replace("│", " ").split())  # the boxes, unwrapped
        for var in envvars:
            assert f"[env var: {var}]" in flat, (path, var, text)


def test_the_console_script_through_a_pipe() -> None:
    """``blockbudget serve --help | cat``, as a shell runs it."""
    script = Path(sys.executable).parent / "blockbudget"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "blockbudget.cli"]
    out = subprocess.run(
        [*argv, "serve", "--help"], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert not CLIPPED.search(out.stdout), out.stdout
    assert "[env var: BLOCKBUDGET_DATA_ROOT]" in out.stdout
    assert "[env var: BLOCKBUDGET_DATABASE]" in out.stdout


def test_a_width_the_user_set_is_kept() -> None:
    helps = _helps(["serve"], _env(COLUMNS="100"))
    widths = {len(line) for line in helps["serve"].splitlines() if line.strip()}
    assert max(widths) <= 100


def test_the_entry_leaves_no_setting_behind(capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """In one process (stdout captured, not a terminal) the width is set only while it runs."""
    from typer import rich_utils

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv(WIDTH_VAR, raising=False)
    monkeypatch.setattr(rich_utils, "MAX_WIDTH", None)
    with contextlib.suppress(SystemExit):
        main(["serve", "--help"])
    assert "[env var: BLOCKBUDGET_DATA_ROOT]" in capsys.readouterr().out
    assert WIDTH_VAR not in os.environ
    assert rich_utils.MAX_WIDTH is None
    with help_width():
        assert os.environ[WIDTH_VAR] == "120" and rich_utils.MAX_WIDTH == 120
    assert WIDTH_VAR not in os.environ and rich_utils.MAX_WIDTH is None

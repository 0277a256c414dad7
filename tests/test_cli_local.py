"""The local command line: a query is checked before anything is sealed or reserved, the context
that pays is always named (``--context`` or ``$BLOCKBUDGET_CONTEXT``), and the CLI starts
without importing the service, OpenDP, torch, Ray or matplotlib — so it works without the
service extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import blockbudget
from blockbudget.budget import Budget
from blockbudget.cli import app
from blockbudget.errors import InvalidRequestError
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, run

runner = CliRunner()
SRC = str(Path(blockbudget.__file__).resolve().parent.parent)


def _csv(path: Path, hours: range) -> Path:
    start = pd.Timestamp("2024-03-01")
    pd.DataFrame(
        {
            "time": [start + pd.Timedelta(hours=h) for h in hours],
            "delay": [float(h) for h in hours],
            "carrier": ["AA" if h % 2 else "UA" for h in hours],
        }
    ).to_csv(path, index=False)
    return path


def _home(tmp_path: Path) -> list[str]:
    home = ["--home", str(tmp_path / "h")]
    for args in (
        ["stream", "create", "s", "--epsilon", "1", "--column", "time"],
        ["context", "add", "a"],
        ["ingest", "s", str(_csv(tmp_path / "one.csv", range(0, 6)))],
    ):
        r = runner.invoke(app, [*args, *home])
        assert r.exit_code == 0, r.output
    return home


def _query(home: list[str], kind: str, column: str) -> list[str]:
    return ["query", kind, "s", "--epsilon", "0.1", "--column", column, "--context", "a", *home]


def test_a_query_over_a_bad_column_seals_and_charges_nothing(tmp_path: Path) -> None:
    home = _home(tmp_path)
    platform = Platform(tmp_path / "h")
    events = len(platform.ledger.events())
    platform.close()
    bounds = ["--lower", "0", "--upper", "10"]
    cats = ["--categories", "AA"]
    for kind, column, extra, error, why in (
        ("sum", "nosuch", bounds, "UnknownColumnError", "no column(s) ['nosuch']"),
        ("mean", "carrier", bounds, "InvalidRequestError", "needs a numeric column"),
        ("histogram", "nosuch", cats, "UnknownColumnError", "no column(s) ['nosuch']"),
        ("histogram", "carrier", [*cats, *bounds], "InvalidRequestError", "takes no clipping"),
        ("count", "carrier", ["--where", "carrier == 3"], "InvalidRequestError", "not match"),
        ("count", "carrier", ["--group-by", "carrier"], "InvalidRequestError", "domain"),
    ):
        r = runner.invoke(app, [*_query(home, kind, column), *extra])
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
        assert error in r.output and why in " ".join(r.output.split()), r.output
    r = runner.invoke(app, [*_query(home, "sum", "delay"), "--upper", "10"])
    assert r.exit_code == 2 and "lower < upper" in " ".join(r.output.split())
    # Nothing was sealed: the same day's next rows land in the same block (no `#2` block).
    r = runner.invoke(app, ["ingest", "s", str(_csv(tmp_path / "two.csv", range(6, 9))), *home])
    assert r.exit_code == 0 and "0 new block(s), 1 appended" in r.output, r.output
    platform = Platform(tmp_path / "h")
    try:
        assert [m.block_id for m in platform.store.blocks("s")] == ["s/2024-03-01"]
        assert len(platform.ledger.events()) == events  # nothing reserved, nothing charged
    finally:
        platform.close()
    r = runner.invoke(app, [*_query(home, "sum", "delay"), *bounds])
    assert r.exit_code == 0 and "DP answer" in r.output, r.output


def test_the_python_query_path_checks_before_it_seals(tmp_path: Path) -> None:
    _home(tmp_path)
    platform = Platform(tmp_path / "h")
    try:
        events = len(platform.ledger.events())
        builds: list[Callable[[], Query]] = [
            lambda: Query.sum("nosuch", epsilon=0.1, lower=0, upper=1),
            lambda: Query.mean("carrier", epsilon=0.1, lower=0, upper=1),
            lambda: Query.mean("delay", epsilon=0.1, lower=1, upper=0),
            lambda: Query.histogram("carrier", [], epsilon=0.1),
            lambda: Query.histogram("carrier", [3], epsilon=0.1),
        ]
        for build in builds:
            with pytest.raises(InvalidRequestError):
                run(platform, "s", build(), blocks=Last(1), context="a")
        with pytest.raises(InvalidRequestError, match="no column"):
            platform.request(
                "s", blocks=Last(1), budget=Budget(epsilon=0.1), context="a", columns=["nosuch"]
            )
        assert not any(m.sealed for m in platform.store.blocks("s"))
        assert len(platform.ledger.events()) == events
    finally:
        platform.close()


def test_the_context_is_named_or_configured_never_implicit(tmp_path: Path) -> None:
    home = _home(tmp_path)
    count = ["query", "count", "s", "--epsilon", "0.1", *home]
    r = runner.invoke(app, count, env={"BLOCKBUDGET_CONTEXT": None})
    assert r.exit_code == 2 and "--context" in r.output and "BLOCKBUDGET_CONTEXT" in r.output
    r = runner.invoke(app, count, env={"BLOCKBUDGET_CONTEXT": "a"})
    assert r.exit_code == 0 and "in context 'a'" in r.output, r.output
    r = runner.invoke(app, ["context", "close", "a", *home])  # no terminal: --yes is required
    assert r.exit_code == 2 and "pass --yes" in r.output, r.output
    r = runner.invoke(app, ["context", "close", "a", "--yes", *home])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, count, env={"BLOCKBUDGET_CONTEXT": "a"})
    assert r.exit_code == 2 and "ClosedContextError" in r.output
    r = runner.invoke(app, ["audit", "verify", *home])
    assert r.exit_code == 0 and "audit verify: OK" in r.output


# --- start-up: lazy imports, no service extra needed ---------------------------------------------

HEAVY = ("fastapi", "httpx", "uvicorn", "opendp.prelude", "torch", "ray", "matplotlib", "pandas")

#: Runs the CLI once per argv list (in one process); with ``block``, importing the service
#: extra's packages fails as if they were not installed. Prints the exit codes and which heavy
#: modules were imported, as JSON, on its last line.
RUNNER = """
import importlib.abc, json, sys
BLOCK = {block!r}
HEAVY = {heavy!r}

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
from blockbudget.cli import app
codes, loaded = [], []
for argv in {runs!r}:
    try:
        app(argv, prog_name="blockbudget")
    except SystemExit as exc:
        codes.append(exc.code or 0)
    loaded.append(sorted(m for m in HEAVY if m in sys.modules))
print(json.dumps({{"codes": codes, "loaded": loaded}}))
"""


def _run_cli(
    runs: list[list[str]], *, block: tuple[str, ...]
) -> tuple[dict[str, list[object]], str]:
    script = RUNNER.format(block=block, heavy=HEAVY, runs=runs)
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "200"}
    env.pop("BLOCKBUDGET_CONTEXT", None)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stdout


def test_help_imports_no_heavy_module() -> None:
    result, _ = _run_cli([["--help"], ["query", "--help"]], block=())
    assert result["codes"] == [0, 0]
    assert result["loaded"] == [[], []]


def test_the_cli_works_without_the_service_extra(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    data = str(_csv(tmp_path / "d.csv", range(0, 30)))
    runs = [
        ["--help"],
        ["stream", "create", "s", "--epsilon", "1", "--column", "time", *home],
        ["context", "add", "a", *home],
        ["ingest", "s", data, *home],
        ["query", "count", "s", "--epsilon", "0.1", "--context", "a", *home],
        ["blocks", "s", *home],
        ["stream", "list", "--server", "http://127.0.0.1:9", "--api-key", "k"],
        ["serve", *home],
    ]
    result, stdout = _run_cli(runs, block=("fastapi", "httpx", "uvicorn", "starlette"))
    assert result["codes"] == [0, 0, 0, 0, 0, 0, 2, 2], stdout
    assert "DP answer" in stdout
    flat = " ".join(stdout.split())
    assert "--server needs the service extra (httpx is not installed)" in flat
    assert "serve needs the service extra" in flat
    assert flat.count("pip install 'blockbudget[service]'") == 2
    assert "Traceback" not in stdout


def test_any_registered_rule_is_a_stream_accounting_and_gdp_costs_print(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    r = runner.invoke(
        app, ["stream", "create", "x", "--epsilon", "1", "--accounting", "nope", *home]
    )
    text = " ".join(r.output.replace("│", " ").split())  # the error box, unwrapped
    assert r.exit_code == 2 and "not a registered accounting rule" in text
    assert "basic, strong, rdp, gdp, whitehouse" in text
    for args in (
        ["stream", "create", "s", "--epsilon", "1", "--column", "time", "--accounting", "gdp"],
        ["context", "add", "a"],
        ["ingest", "s", str(_csv(tmp_path / "one.csv", range(0, 6)))],
    ):
        r = runner.invoke(app, [*args, *home])
        assert r.exit_code == 0, r.output
    platform = Platform(tmp_path / "h")
    assert platform.stream("s").accounting == "gdp"
    platform.close()
    gaussian = ["--mechanism", "gaussian", "--delta", "1e-7"]
    r = runner.invoke(app, [*_query(home, "count", "delay"), *gaussian])
    assert r.exit_code == 0, r.output
    assert "-GDP" in r.output and "μ=" in r.output

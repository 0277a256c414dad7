"""A dry run that does not fit answers as a refused task does: exit code 2, per block the
remaining budget and the shortfall (exact decimals), and a next step naming a command the
caller may run — locally and against a server (``refusal`` on ``…/query/price`` and, with
``epsilon``, on ``…/afford``). One that fits exits 0 as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from blockbudget import Budget
from blockbudget.cli import app

from .test_task_refusals import _home

runner = CliRunner()
WIDE = {"COLUMNS": "300"}  # one line per message


def test_a_dry_run_that_does_not_fit_exits_2_with_its_shortfall_locally(tmp_path: Path) -> None:
    from blockbudget.platform import Platform

    home, blocks = _home(tmp_path)
    p = Platform(home)
    p.ledger.charge([blocks[0]], Budget(epsilon="0.7"), context="team")
    p.close()
    where = ["--home", str(home), "--context", "team", "--dry-run"]

    def dry(*args: str) -> Any:
        return runner.invoke(app, ["task", "submit", "s", *args, *where], env=WIDE)

    fits = dry("--epsilon", "0.3", "--block", blocks[0], "--json")
    assert fits.exit_code == 0, fits.output
    doc = json.loads(fits.output)
    assert doc["ok"] is True and doc.get("refusal") is None
    short = dry("--epsilon", "0.5", "--block", blocks[0], "--block", blocks[1], "--json")
    assert short.exit_code == 2, short.output
    doc = json.loads(short.output)
    assert doc["ok"] is False and doc["reserved"] is False
    refusal = doc["refusal"]
    assert (refusal["considered"], refusal["affordable"], refusal["needed"]) == (2, 1, 2)
    (row,) = refusal["blocks"]
    assert row["block"] == blocks[0]
    assert row["remaining"] == {"epsilon": "0.3", "delta": "0"}
    assert row["shortfall"] == {"epsilon": "0.2", "delta": "0"}
    assert "blockbudget afford s --context team" in refusal["next"]
    # --any K: every live block is a candidate; K of them must afford the demand
    anyk = dry("--epsilon", "0.5", "--any", "2", "--min-k", "2", "--json")
    assert anyk.exit_code == 2, anyk.output
    refusal = json.loads(anyk.output)["refusal"]
    assert (refusal["considered"], refusal["affordable"], refusal["needed"]) == (2, 1, 2)
    # as text: the same lines as a refused task's, and exit 2
    text = dry("--statistic", "count", "--epsilon", "0.5", "--block", blocks[0])
    assert text.exit_code == 2, text.output
    said = " ".join(text.output.split())  # whatever the console width wrapped
    assert "NOT have enough budget" in said
    assert "remaining ε=0.3, δ=0, short by ε=0.2, δ=0" in said
    assert "next: `blockbudget afford s --context team" in said
    ok = dry("--statistic", "count", "--epsilon", "0.25", "--block", blocks[0])
    assert ok.exit_code == 0 and "short by" not in ok.output, ok.output


def test_a_dry_run_that_does_not_fit_exits_2_with_its_shortfall_on_a_server(
    tmp_path: Path,
) -> None:
    from service.support import seed, thread_server

    from blockbudget.service import create_app

    seeded = seed(tmp_path / "server-home")
    p = seeded.platform
    blocks = [m.block_id for m in p.store.blocks("flights")]
    p.ledger.charge([blocks[-1]], Budget(epsilon="0.75"), context="team-a")
    with thread_server(create_app(p, keys=seeded.keys, auth_cache_seconds=0)) as url:

        def dry(*args: str) -> Any:
            srv = ["--server", url, "--api-key", seeded.analyst]
            return runner.invoke(
                app, ["task", "submit", "flights", *args, "--dry-run", *srv], env=WIDE
            )

        fits = dry("--epsilon", "0.25", "--newest", "2", "--json")
        assert fits.exit_code == 0, fits.output
        assert json.loads(fits.output).get("refusal") is None
        # a budget: POST …/afford with the demand's epsilon answers the refusal
        short = dry("--epsilon", "0.5", "--newest", "2", "--json")
        assert short.exit_code == 2, short.output
        refusal = json.loads(short.output)["refusal"]
        assert (refusal["considered"], refusal["affordable"], refusal["needed"]) == (2, 1, 2)
        (row,) = refusal["blocks"]
        assert row["remaining"]["epsilon"] == "0.25" and row["shortfall"]["epsilon"] == "0.25"
        assert "blockbudget afford flights --context team-a" in refusal["next"]
        # a query: POST …/query/price answers it
        query = dry("--statistic", "count", "--epsilon", "0.5", "--block", blocks[-1], "--json")
        assert query.exit_code == 2, query.output
        refusal = json.loads(query.output)["refusal"]
        assert (refusal["affordable"], refusal["needed"]) == (0, 1)
        assert refusal["blocks"][0]["shortfall"]["epsilon"] == "0.25"
        text = dry("--epsilon", "0.5", "--newest", "2")
        assert text.exit_code == 2, text.output
        assert "short by ε=0.25" in text.output and "next: `blockbudget afford" in text.output
    assert not p.ledger.reservations()

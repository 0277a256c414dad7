"""The command line, end to end, through Typer's runner (same code path as the console script)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from blockbudget.cli import app

runner = CliRunner()


def _flat(text: str) -> str:
    """The output with rich's line wrapping undone (every run of whitespace one space)."""
    return " ".join(text.split())


def _csv(path: Path) -> Path:
    rng = np.random.default_rng(1)
    n = 300
    frame = pd.DataFrame(
        {
            "time": pd.Timestamp("2024-03-01")
            + pd.to_timedelta(rng.integers(0, 3 * 86_400, n), unit="s"),
            "delay": rng.normal(5, 3, n),
            "carrier": rng.choice(["AA", "UA"], n),
        }
    )
    frame.to_csv(path, index=False)
    return path


def test_stream_ingest_blocks_query_and_verify(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    r = runner.invoke(app, ["stream", "create", "s", "--epsilon", "1", "--column", "time", *home])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["ingest", "s", str(_csv(tmp_path / "d.csv")), *home])
    assert r.exit_code == 0, r.output
    assert "300 rows: 3 new block(s)" in r.output
    # Contexts are registered by an administrator; an unknown one is refused.
    r = runner.invoke(app, ["query", "count", "s", "--epsilon", "0.1", "--context", "a", *home])
    assert r.exit_code == 2 and "UnknownContextError" in r.output
    for name in ("a", "b"):
        r = runner.invoke(app, ["context", "add", name, "--description", f"team {name}", *home])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["context", "list", *home])
    assert "team a" in r.output and "default" not in r.output  # no context of its own
    r = runner.invoke(app, ["stream", "list", *home])
    assert "s" in r.output and r.exit_code == 0
    r = runner.invoke(
        app, ["query", "count", "s", "--epsilon", "0.4", "--context", "a", "--last", "3", *home]
    )
    assert r.exit_code == 0, r.output
    assert "DP answer" in r.output
    r = runner.invoke(
        app,
        [
            "query",
            "mean",
            "s",
            "--epsilon",
            "0.4",
            "--column",
            "delay",
            "--lower",
            "-10",
            "--upper",
            "20",
            "--context",
            "a",
            *home,
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "query",
            "histogram",
            "s",
            "--epsilon",
            "0.1",
            "--column",
            "carrier",
            "--categories",
            "AA,UA",
            "--context",
            "b",
            *home,
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["blocks", "s", *home])
    assert r.exit_code == 0 and "s/2024-03-01" in r.output
    assert "20.0%" in r.output  # 1 − 0.4 − 0.4 left in context a
    assert "2 contexts count (a, b)" in _flat(r.output) and "2 × ε_g = 2" in _flat(r.output)
    # A refused query: clear message, exit code 2, nothing charged.
    r = runner.invoke(
        app,
        [
            "query",
            "count",
            "s",
            "--epsilon",
            "0.5",
            "--context",
            "a",
            "--block",
            "2024-03-01",
            *home,
        ],
    )
    assert r.exit_code == 2
    assert "BudgetExceededError" in r.output and "Nothing was charged" in r.output
    r = runner.invoke(app, ["audit", "verify", *home])
    assert r.exit_code == 0 and "audit verify: OK" in r.output
    r = runner.invoke(app, ["audit", "verify", *home])  # nothing new since the checkpoint
    assert r.exit_code == 0 and "(0 replayed after the checkpoint at seq" in r.output
    r = runner.invoke(app, ["audit", "verify", "--full", *home])
    assert r.exit_code == 0 and "events replayed over" in r.output


def test_bad_input_gives_clear_errors(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    r = runner.invoke(app, ["stream", "create", "s", "--epsilon", "-1", *home])
    assert r.exit_code == 2 and "epsilon" in r.output
    r = runner.invoke(app, ["stream", "create", "s", "--epsilon", "1", "--window", "3x", *home])
    assert r.exit_code != 0
    runner.invoke(app, ["stream", "create", "s", "--epsilon", "1", *home])
    bad = tmp_path / "bad.csv"
    bad.write_text("other\n1\n2\n")
    r = runner.invoke(app, ["ingest", "s", str(bad), *home])
    assert r.exit_code == 2 and "DataError" in r.output


def test_demo_quick(tmp_path: Path) -> None:
    r = runner.invoke(app, ["demo", "--days", "20", "--home", str(tmp_path / "demo")])
    assert r.exit_code == 0, r.output
    assert "audit verify: OK" in r.output
    assert "retired" in r.output
    # The demo registers its two contexts and nothing else: a coalition of both teams could
    # learn 2 × ε_g (it said 3 × ε_g when every ledger registered `default` by itself).
    assert "2 contexts count (ml, ops)" in _flat(r.output)
    assert "2 × ε_g = 2" in _flat(r.output)
    assert (tmp_path / "demo" / "answers.csv").exists()


def test_user_stream_queries_reserve_the_group_cost(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    data = tmp_path / "u.csv"
    # users 1..201 (user 1 with 10 rows): ids 0-99 are known after the release below unless its
    # Laplace(1/0.3) noise is under -93 (probability ~1e-13)
    uids = [1] * 10 + list(range(2, 202))
    pd.DataFrame({"uid": uids, "v": range(len(uids))}).to_csv(data, index=False)
    r = runner.invoke(
        app,
        [
            "stream",
            "create",
            "u",
            "--epsilon",
            "1",
            "--by",
            "user",
            "--column",
            "uid",
            "--ids-per-block",
            "100",
            "--rows-per-user",
            "3",
            *home,
        ],
    )
    assert r.exit_code == 0, r.output
    runner.invoke(app, ["context", "add", "a", *home])
    assert runner.invoke(app, ["ingest", "u", str(data), *home]).exit_code == 0
    # A user stream's blocks are selectable only below a DP maximum id (charged in "ids": 3 × 0.3).
    runner.invoke(app, ["context", "add", "ids", *home])
    release = ["stream", "max-id", "u", "--epsilon", "0.3", "--context", "ids", *home]
    assert runner.invoke(app, release).exit_code == 0
    r = runner.invoke(app, ["query", "count", "u", "--epsilon", "0.2", "--context", "a", *home])
    assert r.exit_code == 0, r.output
    assert "cost per block: (ε=0.6, δ=0)" in r.output  # the group cost of (ε=0.2), k = 3
    r = runner.invoke(app, ["blocks", "u", "--context", "a", *home])
    assert "40.0%" in r.output  # 1 − 3 × 0.2 left: the group cost was charged


def test_cli_as_a_client_of_a_running_server(tmp_path: Path) -> None:
    """The same commands against `blockbudget serve` (a real uvicorn on loopback), as principals
    of different roles: what the key may do works, the rest is refused with the HTTP status."""
    from service.support import seed, thread_server

    from blockbudget.service import create_app

    seeded = seed(tmp_path / "server-home")
    app_ = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    with thread_server(app_) as url:

        def as_(key: str, *args: str) -> object:
            return runner.invoke(app, [*args, "--server", url, "--api-key", key])

        r = as_(seeded.analyst, "stream", "list")
        assert r.exit_code == 0 and "flights" in r.output and "secret" not in r.output
        r = as_(seeded.analyst, "blocks", "flights")
        assert r.exit_code == 0 and "flights/2013-01-01" in r.output
        assert "rows" not in r.output  # exact counts are for owners and admins
        r = as_(seeded.owner, "blocks", "flights")
        assert r.exit_code == 0 and "rows" in r.output
        r = as_(
            seeded.analyst,
            "query",
            "count",
            "flights",
            "--epsilon",
            "0.5",
            "--context",
            "team-a",
            "--last",
            "2",
        )
        assert r.exit_code == 0 and "DP answer" in r.output, r.output
        r = as_(
            seeded.analyst,
            "query",
            "mean",
            "flights",
            "--epsilon",
            "0.2",
            "--context",
            "team-a",
            "--column",
            "dep_delay",
            "--lower",
            "-30",
            "--upper",
            "120",
        )
        assert r.exit_code == 0 and "DP answer" in r.output, r.output
        r = as_(
            seeded.analyst, "query", "count", "flights", "--epsilon", "0.1", "--context", "team-b"
        )
        assert r.exit_code == 2 and "HTTP 403" in r.output and "bound context" in r.output
        r = as_(
            seeded.analyst,
            "query",
            "count",
            "flights",
            "--epsilon",
            "0.6",
            "--context",
            "team-a",
            "--block",
            "2013-01-04",
        )
        assert r.exit_code == 2 and "HTTP 409 BudgetExceededError" in r.output
        assert "Nothing was charged" in r.output
        r = as_(seeded.analyst, "context", "add", "mine")
        assert r.exit_code == 2 and "HTTP 403" in r.output
        # The scheduler queue (server mode): a task on the newest block, then the queue.
        first = seeded.platform.ledger.states("flights", "team-a")[-1]
        r = as_(
            seeded.analyst, "task", "submit", "flights", "--epsilon", "0.05", "--context",
            "team-a", "--newest", "1", "--timeout", "600",
        )  # fmt: skip
        assert r.exit_code == 0 and "task " in r.output, r.output
        task_id = r.output.split()[1].rstrip(":")
        task = app_.state.tasks.task(task_id)
        assert task.principal == "ana" and task.selector.to_json() == {"kind": "newest", "n": 1}
        assert task.blocks in ((), (first.block,))  # granted ones: the newest block
        assert task.state.value in r.output
        r = as_(seeded.analyst, "task", "list")
        assert r.exit_code == 0 and task_id[:12] in r.output and "dpf-n" in r.output, r.output
        r = as_(seeded.other, "task", "list")
        assert r.exit_code == 0 and task_id[:12] not in r.output  # only one's own tasks
        r = as_(seeded.analyst, "audit", "verify")
        assert r.exit_code == 2 and "HTTP 403" in r.output
        # A data owner creates and fills a stream; the admin verifies and reads the log.
        r = as_(seeded.owner, "stream", "create", "mine", "--epsilon", "2", "--column", "time")
        assert r.exit_code == 0 and "created stream mine" in r.output, r.output
        r = as_(seeded.owner, "ingest", "mine", str(_csv(tmp_path / "d.csv")))
        assert r.exit_code == 0 and "300 rows: 3 new block(s)" in r.output, r.output
        r = as_(seeded.admin, "context", "add", "team-c", "--description", "third team")
        assert r.exit_code == 0
        r = as_(
            seeded.admin, "principal", "add", "carl", "--role", "analyst", "--context", "team-c"
        )
        assert r.exit_code == 0 and "bbk_" in r.output
        r = as_(seeded.owner, "principal", "grant", "carl", "mine", "--json")
        # an owner's grant has the admin's shape: the right on the stream afterwards
        assert r.exit_code == 0 and json.loads(r.output) == {
            "permission": "read",
            "principal": "carl",
            "stream": "mine",
        }
        carl = r.output and seeded.keys.create_key("carl")
        r = as_(
            carl, "query", "count", "mine", "--epsilon", "0.5", "--context", "team-c", "--last", "3"
        )
        assert r.exit_code == 0, r.output
        r = as_(seeded.admin, "audit", "verify")
        assert r.exit_code == 0 and "audit verify: OK" in r.output
        r = as_(seeded.admin, "audit", "verify", "--full")
        assert r.exit_code == 0 and "events replayed over" in r.output
        r = as_(seeded.admin, "audit", "log", "--limit", "5")
        assert r.exit_code == 0 and "charged" in r.output
        # Environment variables instead of options.
        r = runner.invoke(
            app,
            ["context", "list"],
            env={"BLOCKBUDGET_SERVER": url, "BLOCKBUDGET_API_KEY": seeded.analyst},
        )
        assert r.exit_code == 0 and "team-a" in r.output and "team-b" not in r.output
        r = runner.invoke(app, ["stream", "list", "--server", url])
        assert r.exit_code != 0 and "--api-key" in r.output
    assert seeded.platform.verify().ok
    seeded.platform.close()


def test_principal_commands_on_a_local_home(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "h")]
    runner.invoke(app, ["stream", "create", "s", "--epsilon", "1", *home])
    r = runner.invoke(
        app, ["principal", "add", "ann", "--role", "analyst", "--context", "nope", *home]
    )
    assert r.exit_code != 0 and "unknown context" in r.output
    r = runner.invoke(app, ["principal", "add", "ann", "--role", "boss", *home])
    assert r.exit_code != 0 and "admin, owner or analyst" in r.output
    r = runner.invoke(app, ["principal", "add", "ann", "--role", "analyst", *home])
    assert r.exit_code == 0 and "bbk_" in r.output
    r = runner.invoke(app, ["principal", "grant", "ann", "s", *home])
    assert r.exit_code == 0 and "may now read stream s" in r.output
    r = runner.invoke(app, ["principal", "grant", "ann", "nostream", *home])
    assert r.exit_code == 2


def test_serve_bootstraps_an_admin_and_serves(tmp_path: Path) -> None:
    """`blockbudget serve` as a process: the first start creates the admin and prints its key
    once; the key works; the schema and the dashboard are served."""
    import re
    import subprocess
    import sys

    import httpx
    from service.support import free_port, wait_ready

    exe = Path(sys.executable).with_name("blockbudget")
    port = free_port()
    proc = subprocess.Popen(
        [str(exe), "serve", "--home", str(tmp_path / "h"), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout=90)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(bbk_[0-9a-f]{16}_[0-9a-f]{64})", line)
        assert match, line
        key = match.group(1)
        me = httpx.get(f"{url}/v1/whoami", headers={"Authorization": f"Bearer {key}"}).json()
        assert me["name"] == "admin" and me["role"] == "admin"
        assert "/v1/streams/{stream}/charges" in httpx.get(f"{url}/openapi.json").json()["paths"]
        assert "dashboard.js" in httpx.get(f"{url}/dashboard").text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # A second start finds the principal and prints no key.
    from blockbudget.service.server import bootstrap_admin

    assert bootstrap_admin(tmp_path / "h", None) is None

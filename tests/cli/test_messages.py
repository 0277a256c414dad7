"""Error texts name what a CLI user runs (and HTTP/Python beside it, never Python alone),
times in ISO 8601 UTC, and ``--last`` as the option."""

from __future__ import annotations

import re
from pathlib import Path

from .support import invoke_json, make_home


def test_messages_name_commands_and_read_as_people_read(tmp_path: Path) -> None:
    home = tmp_path / "h"
    make_home(home).close()
    h = ["--home", str(home)]
    code, doc = invoke_json("afford", "nope", "--last", "1", "--context", "a", *h)
    msg = doc["error"]["message"]
    assert code == 2 and "`blockbudget stream create nope`" in msg and "POST /v1/streams" in msg
    code, doc = invoke_json("afford", "b", "--last", "1", "--context", "ghost", *h)
    msg = doc["error"]["message"]
    assert "command line: `blockbudget context add NAME`" in msg
    assert "Python: Ledger.add_context" in msg  # the Python clause is left as Python
    for args in (
        ("afford", "b", "--last", "0"),
        ("query", "count", "b", "--epsilon", "0.1", "--last", "0"),
    ):
        code, doc = invoke_json(*args, "--context", "a", *h)
        assert code == 2 and doc["error"]["message"].startswith("--last must be at least 1"), doc
    code, _ = invoke_json("context", "close", "z", "--yes", *h)
    code, doc = invoke_json("query", "count", "b", "--epsilon", "0.1", "--context", "z", *h)
    msg = doc["error"]["message"]
    assert code == 2 and "Unix time" not in msg
    assert re.search(r"closed by an administrator at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", msg), msg


def test_unknown_things_have_their_own_error_class_and_cancel_reads_once(tmp_path: Path) -> None:
    from blockbudget.errors import UnknownBlockError, UnknownKeyError, UnknownTaskError

    assert issubclass(UnknownTaskError, UnknownBlockError)  # still a 404 over HTTP
    assert issubclass(UnknownKeyError, UnknownBlockError)
    from blockbudget.budget import Budget

    from .support import invoke

    home = tmp_path / "h"
    p = make_home(home)
    p.ledger.charge(["b/2024-03-01"], Budget(epsilon="0.95"), context="a")  # the task waits
    p.close()
    h = ["--home", str(home)]
    for args, kind in (
        (("task", "show", "nope"), "UnknownTaskError"),
        (("principal", "show", "nobody"), "UnknownPrincipalError"),
    ):
        code, doc = invoke_json(*args, *h)
        assert code == 2 and doc["error"]["type"] == kind, (args, doc)
    code, _ = invoke_json("principal", "add", "cy", *h)
    code, doc = invoke_json("principal", "key", "revoke", "cy", "k1", *h)
    assert code == 2 and doc["error"]["type"] == "UnknownKeyError", doc
    code, task = invoke_json(
        "task", "submit", "b", "--epsilon", "0.1", "--block", "b/2024-03-01", "--wait", "0",
        "--context", "a", *h,
    )  # fmt: skip
    assert code == 0 and task["state"] == "waiting", task
    out = " ".join(invoke("task", "cancel", task["id"], *h).output.split())
    assert "cancelled (by " in out and "cancelled cancelled" not in out, out

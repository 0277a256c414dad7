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

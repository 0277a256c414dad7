"""``principal list``/``key list``: JSON objects like every other list; times to the minute."""

from __future__ import annotations

import re
from pathlib import Path

from .support import invoke, invoke_json, make_home


def test_lists_are_objects_and_times_are_minutes(tmp_path: Path) -> None:
    home = tmp_path / "h"
    make_home(home).close()
    h = ["--home", str(home)]
    code, _ = invoke_json("principal", "add", "cy", *h)
    assert code == 0
    code, doc = invoke_json("principal", "list", *h)
    assert code == 0 and [p["name"] for p in doc["principals"]] == ["cy"]
    code, doc = invoke_json("principal", "key", "list", "cy", *h)
    assert code == 0 and doc["principal"] == "cy" and len(doc["keys"]) == 1
    for args in (("principal", "list"), ("principal", "key", "list", "cy")):
        out = invoke(*args, *h).output
        assert re.search(r"\d{4}-\d\d-\d\d", out) and re.search(r"\d\d:\d\d UTC", out), out
        assert not re.search(r"\d\d:\d\d:\d\d", out), out  # no seconds, no fractions

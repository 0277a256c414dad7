"""Requesting exactly what ``afford`` reports fits, locally and through a server, on basic,
strong and RDP streams; one ulp (a float's) or one 1e-18 (an exact string's) more is refused.
``epsilon`` is the largest float-carried ε (its shortest decimal is at most the exact answer);
``epsilon_exact`` is the exact answer, requested as a decimal string."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import pytest

from blockbudget.accounting.afford import largest_float_at_most
from blockbudget.budget import Budget

from .support import ids, invoke_json, ledger_snapshot, make_home


def test_largest_float_at_most_steps_below_the_exact_value() -> None:
    exact = Decimal("0.341279519435449196")
    assert Decimal(repr(float(exact))) > exact  # the float a client would send: over budget
    got = largest_float_at_most(exact)
    assert got <= exact and Decimal(repr(float(got))) == got
    assert Decimal(repr(math.nextafter(float(got), math.inf))) > exact  # the largest such
    assert largest_float_at_most(Decimal("0.7")) == Decimal("0.7")
    assert largest_float_at_most(Decimal(0)) == 0


def _request(stream: str, block: str, eps: str, *where: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    return invoke_json("query", "count", stream, "--epsilon", eps, "--block", block, *where)  # type: ignore[no-any-return]


def _check_stream(p, stream: str, where: list[str]) -> None:  # type: ignore[no-untyped-def]
    b = ids(p, stream)
    code, doc = invoke_json("afford", stream, "--block", b[0], "--block", b[1], *where)
    assert code == 0, doc
    exact, as_float = Decimal(doc["epsilon_exact"]), doc["epsilon"]
    assert Decimal(as_float) <= exact and Decimal(repr(float(as_float))) == Decimal(as_float)
    before = ledger_snapshot(p)
    over_float = repr(math.nextafter(float(as_float), math.inf))
    code, refused = _request(stream, b[0], over_float, *where)
    assert code == 2 and "BudgetExceeded" in refused["error"]["type"], refused
    code, refused = _request(stream, b[1], str(exact + Decimal("1e-18")), *where)
    assert code == 2 and "BudgetExceeded" in refused["error"]["type"], refused
    assert ledger_snapshot(p) == before  # refusals change nothing
    code, ok = _request(stream, b[0], as_float, *where)
    assert code == 0, ok
    code, ok = _request(stream, b[1], doc["epsilon_exact"], *where)
    assert code == 0, ok


# An odd spend, so that the answers have 18 significant digits on every rule.
SPENT = {
    "b": Budget(epsilon="0.123456789012345678"),
    "s": Budget(epsilon="0.001234567890123456"),  # strong's next charge is small already
    "r": Budget(epsilon="0.123456789012345678"),
}


@pytest.mark.parametrize("stream", ["b", "s", "r"])
def test_requesting_the_afforded_epsilon_fits_locally(tmp_path: Path, stream: str) -> None:
    p = make_home(tmp_path / "h")
    b = ids(p, stream)
    p.ledger.charge(b[:2], SPENT[stream], context="a")
    _check_stream(p, stream, ["--context", "a", "--home", str(tmp_path / "h")])


def test_requesting_the_afforded_epsilon_fits_through_a_server(tmp_path: Path) -> None:
    from service.support import thread_server

    from blockbudget.service import KeyStore, Role, create_app

    p = make_home(tmp_path / "h")
    keys = KeyStore(p.ledger.engine)
    keys.add_principal("root", Role.ADMIN)
    key = keys.create_key("root")
    for stream in ("b", "s", "r"):
        p.ledger.charge(ids(p, stream)[:2], SPENT[stream], context="z")
    with thread_server(create_app(p, keys=keys, auth_cache_seconds=0)) as url:
        for stream in ("b", "s", "r"):
            _check_stream(p, stream, ["--context", "z", "--server", url, "--api-key", key])


def test_query_json_form_takes_exact_decimal_strings(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = make_home(home)
    b = ids(p, "b")
    spec = '{"statistic": "count", "epsilon": "0.05"}'
    where = ["--context", "a", "--home", str(home), "--block", b[0]]
    code, doc = invoke_json("query", "run", "b", "--spec", spec, *where)
    assert code == 0, doc
    code, doc = invoke_json("afford", "b", "--block", b[0], "--context", "a", "--home", str(home))
    assert doc["epsilon_exact"] == "0.95"
    code, doc = invoke_json("query", "run", "b", "--spec", spec.replace("0.05", "x"), *where)
    assert code == 2 and doc["error"]["type"] == "InvalidRequestError"
    code, doc = invoke_json(
        "query", "run", "b", "--spec", '{"statistic": "count", "epsilon": 5e-2}', *where
    )
    assert code == 0, doc  # numbers still work

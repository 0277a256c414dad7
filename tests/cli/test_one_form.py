"""Local and server ``--json`` agree: the same keys for blocks and for (grouped) answers."""

from __future__ import annotations

from pathlib import Path

from .support import ids, invoke_json, make_home


def test_local_and_server_emit_the_same_keys(tmp_path: Path) -> None:
    from service.support import thread_server

    from blockbudget.service import KeyStore, Role, create_app

    home = tmp_path / "h"
    p = make_home(home)
    keys = KeyStore(p.ledger.engine)
    keys.add_principal("root", Role.ADMIN)
    key = keys.create_key("root")
    b = ids(p, "b")
    grouped = ["query", "count", "b", "--epsilon", "0.1", "--group-by", "c=x,y", "--context", "a"]
    with thread_server(create_app(p, keys=keys, auth_cache_seconds=0)) as url:
        srv = ["--server", url, "--api-key", key]
        code, local = invoke_json("blocks", "b", "--home", str(home))
        code2, remote = invoke_json("blocks", "b", *srv)
        assert code == code2 == 0
        assert [sorted(x) for x in local["blocks"]] == [sorted(x) for x in remote["blocks"]]
        assert "retiring" in local["blocks"][0]
        code, local = invoke_json(*grouped, "--block", b[0], "--home", str(home))
        code2, remote = invoke_json(*grouped, "--block", b[1], *srv)
        assert code == code2 == 0, (local, remote)
        assert local["value"] is None and local["interval"] is None
        assert set(local) == set(remote), set(local) ^ set(remote)


def test_rdp_remaining_carries_its_orders(tmp_path: Path) -> None:
    from blockbudget.budget import ALPHAS

    home = tmp_path / "h"
    make_home(home).close()
    code, doc = invoke_json("blocks", "r", "--home", str(home))
    left = doc["blocks"][0]["remaining"]["a"]
    assert code == 0 and left["orders"] == list(ALPHAS) and len(left["rdp"]) == len(ALPHAS)

"""What admin changes do elsewhere: a second server on the same database sees key rotation,
revocation and deletion at once (keys are checked against the database); reservations show what
was drawn and what is left; owners see their streams' budgets; analysts spend in their only
context by default."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal

import pytest
from fastapi.testclient import TestClient

from blockbudget.query import Query, to_dict
from blockbudget.service import Permission, Role, create_app, open_platform
from blockbudget.service.auth import KeyStore
from service.support import Seeded, ledger_snapshot


@contextmanager
def second_server(seeded: Seeded) -> Iterator[TestClient]:
    """Another app with its own platform and key store on the same database (no auth cache:
    every request looks the key up)."""
    platform = open_platform(seeded.platform.home, seeded.platform.database_url, group_commit=False)
    app = create_app(platform, keys=KeyStore(platform.ledger.engine), auth_cache_seconds=0)
    try:
        with TestClient(app) as c:
            yield c
    finally:
        platform.close()


RELEASE = {
    "item_column": "origin",
    "user_column": "carrier",
    "domain": ["EWR", "JFK", "LGA"],
    "min_users": 5,
    "epsilon": 0.5,
    "window": 2,
}


def _id(key: str) -> str:
    return key.split("_")[1]


def test_a_second_server_refuses_rotated_revoked_and_deleted_keys(
    seeded: Seeded, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from blockbudget.service import auth

    h = seeded.headers(seeded.admin)
    with second_server(seeded) as other:

        def works(key: str) -> bool:
            status = other.get("/v1/whoami", headers=seeded.headers(key)).status_code
            assert status in (200, 401)
            return status == 200

        assert works(seeded.analyst) and works(seeded.owner) and works(seeded.other)
        # rotation without grace: the old key stops at once, the new one works
        r = client.post(f"/v1/principals/ana/keys/{_id(seeded.analyst)}/rotate", headers=h)
        ana_new = r.json()["api_key"]
        assert not works(seeded.analyst) and works(ana_new)
        # rotation with a grace period: both work until it ends, then only the new one
        r = client.post(
            f"/v1/principals/olga/keys/{_id(seeded.owner)}/rotate",
            headers=h,
            json={"grace_seconds": 3600},
        )
        olga_new = r.json()["api_key"]
        assert works(seeded.owner) and works(olga_new)
        later = auth.now() + 3601
        monkeypatch.setattr(auth, "now", lambda: later)
        assert not works(seeded.owner) and works(olga_new)
        # revocation and deletion
        r = client.delete(f"/v1/principals/ana/keys/{_id(ana_new)}", headers=h)
        assert r.status_code == 200 and not works(ana_new)
        assert client.delete("/v1/principals/bob", headers=h).status_code == 200
        assert not works(seeded.other)
        # and the other way round: a key issued by the second server works on the first
        r = other.post("/v1/principals/olga/keys", headers=h)
        assert client.get("/v1/whoami", headers=seeded.headers(r.json()["api_key"])).is_success


def test_a_reservation_shows_what_was_drawn_and_what_is_left(
    seeded: Seeded, client: TestClient
) -> None:
    ha = seeded.headers(seeded.analyst)
    r = client.post(
        "/v1/streams/flights/reservations",
        headers=ha,
        json={"last": 2, "epsilon": 0.5, "delta": 1e-7},
    )
    assert r.status_code == 201, r.text
    res = r.json()
    blocks = res["blocks"]
    assert [u["block"] for u in res["usage"]] == blocks
    zero = {"epsilon": "0", "delta": "0"}
    full = {"epsilon": "0.5", "delta": "1E-7"}
    assert all(u["drawn"] == zero and u["left"] == full for u in res["usage"])
    r = client.post(
        f"/v1/reservations/{res['id']}/charges",
        headers=ha,
        json={"blocks": blocks[:1], "epsilon": 0.2},
    )
    assert r.status_code == 200, r.text
    r = client.get(f"/v1/reservations/{res['id']}", headers=ha)
    out = r.json()
    assert (out["holder"], out["context"], out["state"]) == ("ana", "team-a", "open")
    usage = {u["block"]: u for u in out["usage"]}
    assert usage[blocks[0]]["drawn"] == {"epsilon": "0.2", "delta": "0"}
    assert usage[blocks[0]]["left"] == {"epsilon": "0.3", "delta": "1E-7"}
    assert usage[blocks[1]] == {"block": blocks[1], "drawn": zero, "left": full}
    assert Decimal(usage[blocks[0]]["left"]["epsilon"]) + Decimal("0.2") == Decimal("0.5")
    # the holder's view only (another principal gets an unknown reservation's 404); after
    # release nothing is left and drawn is no longer known
    assert (
        client.get(
            f"/v1/reservations/{res['id']}", headers=seeded.headers(seeded.other)
        ).status_code
        == 404
    )
    r = client.post(f"/v1/reservations/{res['id']}/release", headers=ha)
    assert r.json()["state"] == "closed"
    assert all(u["drawn"] is None and u["left"] == zero for u in r.json()["usage"])


def test_owners_see_their_streams_budget_in_every_context(
    seeded: Seeded, client: TestClient
) -> None:
    first = sorted(b.block_id for b in seeded.platform.store.blocks("flights"))[0]
    r = client.post(
        "/v1/streams/flights/charges",
        headers=seeded.headers(seeded.analyst),
        json={"blocks": [first], "epsilon": 0.25},
    )
    assert r.status_code == 200, r.text
    owner = client.get("/v1/streams/flights/blocks", headers=seeded.headers(seeded.owner)).json()
    seen = {b["block_id"]: b for b in owner}
    assert seen[first]["remaining_fraction"] == {"team-a": 0.75, "team-b": 1.0}
    assert all(set(b["remaining_fraction"]) == {"team-a", "team-b"} for b in owner)
    assert all(b["rows"] is not None for b in owner)
    r = client.get(
        "/v1/streams/flights/blocks",
        headers=seeded.headers(seeded.owner),
        params={"context": "team-b"},
    )
    assert r.status_code == 200 and all(set(b["remaining"]) == {"team-b"} for b in r.json())
    # analysts: their bound contexts only, as before; owners only on streams they own
    analyst = client.get("/v1/streams/flights/blocks", headers=seeded.headers(seeded.analyst))
    assert all(set(b["remaining"]) == {"team-a"} for b in analyst.json())
    r = client.get(
        "/v1/streams/flights/blocks",
        headers=seeded.headers(seeded.analyst),
        params={"context": "team-b"},
    )
    assert r.status_code == 403
    r = client.get("/v1/streams/secret/blocks", headers=seeded.headers(seeded.owner))
    assert r.status_code == 403


def test_one_bound_context_is_the_default_and_several_are_listed(
    seeded: Seeded, client: TestClient
) -> None:
    body = {"query": to_dict(Query.count(epsilon=0.1)), "last": 1}
    r = client.post("/v1/streams/flights/query", headers=seeded.headers(seeded.analyst), json=body)
    assert r.status_code == 200, r.text
    task = {"epsilon": 0.1, "last": 1}
    r = client.post("/v1/streams/flights/tasks", headers=seeded.headers(seeded.analyst), json=task)
    assert r.status_code == 201 and r.json()["context"] == "team-a", r.text
    seeded.keys.add_principal("cy", Role.ANALYST, contexts=("team-a", "team-b"))
    seeded.keys.grant("cy", "flights", Permission.READ)
    two = seeded.headers(seeded.keys.create_key("cy"))
    before = ledger_snapshot(seeded.platform)
    for path, payload in (
        ("/v1/streams/flights/query", body),
        ("/v1/streams/flights/tasks", task),
        ("/v1/streams/flights/reservations", {"last": 1, "epsilon": 0.1}),
        ("/v1/streams/flights/releases/x", RELEASE),
    ):
        r = client.post(path, headers=two, json=payload)
        assert r.status_code == 422, (path, r.text)
        assert "(team-a, team-b)" in r.json()["detail"], r.text
    assert ledger_snapshot(seeded.platform) == before

"""Administration over HTTP: principals, roles, keys, stream ACLs and contexts — admins do it,
owners and analysts are refused with 403 and nothing changes; no secret is ever listed."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from blockbudget.service.auth import api_keys, principals, stream_acl
from service.support import Seeded, ledger_snapshot

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def _key_id(key: str) -> str:
    return key.split("_")[1]


def _tables(seeded: Seeded) -> tuple[list[Any], ...]:
    """Every row of the principal, key and ACL tables (equal before and after ⇔ no change)."""
    with seeded.platform.ledger.engine.connect() as conn:
        return tuple(
            sorted(tuple(r) for r in conn.execute(t.select()).all())
            for t in (principals, api_keys, stream_acl)
        )


def _admin_requests(seeded: Seeded) -> list[tuple[str, str, dict[str, Any] | None]]:
    ana_key = _key_id(seeded.analyst)
    return [
        ("GET", "/v1/principals", None),
        ("POST", "/v1/principals", {"name": "zed", "role": "analyst"}),
        ("GET", "/v1/principals/ana", None),
        ("PUT", "/v1/principals/ana/role", {"role": "admin"}),
        ("PUT", "/v1/principals/ana/contexts", {"contexts": ["team-b"]}),
        ("POST", "/v1/principals/ana/disable", None),
        ("POST", "/v1/principals/ana/enable", None),
        ("GET", "/v1/principals/ana/keys", None),
        ("POST", "/v1/principals/ana/keys", None),
        ("POST", f"/v1/principals/ana/keys/{ana_key}/rotate", {"grace_seconds": 60}),
        ("DELETE", f"/v1/principals/ana/keys/{ana_key}", None),
        ("GET", "/v1/streams/flights/acl", None),
        ("PUT", "/v1/principals/olga/streams/secret", {"permission": "own"}),
        ("DELETE", "/v1/principals/bob/streams/secret", None),
        ("POST", "/v1/contexts", {"name": "team-z"}),
        ("POST", "/v1/contexts/team-b/close", None),
        ("DELETE", "/v1/principals/bob", None),
    ]


def test_only_admins_may_call_the_admin_routes(seeded: Seeded, client: TestClient) -> None:
    before = (_tables(seeded), ledger_snapshot(seeded.platform), seeded.platform.contexts())
    for key in (seeded.owner, seeded.analyst):
        for method, path, body in _admin_requests(seeded):
            r = client.request(method, path, headers=seeded.headers(key), json=body)
            assert r.status_code == 403, (method, path, r.text)
    after = (_tables(seeded), ledger_snapshot(seeded.platform), seeded.platform.contexts())
    assert after == before
    h = seeded.headers(seeded.admin)  # and an admin may call every one of them
    for method, path, body in _admin_requests(seeded):
        r = client.request(method, path, headers=h, json=body)
        assert r.status_code in (200, 201), (method, path, r.text)


def test_the_principal_list_shows_rights_and_key_ids_never_secrets(
    seeded: Seeded, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    h = seeded.headers(seeded.admin)
    with caplog.at_level("INFO", logger="blockbudget.admin"):
        r = client.post(
            "/v1/principals",
            headers=h,
            json={"name": "cy", "role": "analyst", "contexts": ["team-a"]},
        )
    assert r.status_code == 201
    new_key = r.json()["api_key"]
    logged = [
        json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "blockbudget.admin"
    ]
    assert logged == [
        {
            "event": "admin",
            "actor": "root",
            "action": "add_principal",
            "target": "cy",
            "role": "analyst",
            "key_id": _key_id(new_key),
        }
    ]
    r = client.get("/v1/principals", headers=h)
    assert r.status_code == 200
    listed = {p["name"]: p for p in r.json()}
    assert sorted(listed) == ["ana", "bob", "cy", "olga", "root"]
    ana = listed["ana"]
    assert ana["role"] == "analyst" and ana["state"] == "active"
    assert ana["contexts"] == ["team-a"] and ana["streams"] == {"flights": "read"}
    assert listed["olga"]["streams"] == {"flights": "own"}
    assert [k["key_id"] for k in ana["keys"]] == [_key_id(seeded.analyst)]
    assert ana["keys"][0]["active"] and not ana["keys"][0]["revoked"]
    assert ISO.match(ana["created"]) and ISO.match(ana["keys"][0]["created"])
    assert listed["cy"]["keys"][0]["key_id"] == _key_id(new_key)
    text = r.text
    for key in (seeded.admin, seeded.owner, seeded.analyst, seeded.other, new_key):
        assert key.split("_")[2] not in text  # no secret
    assert "sha256" not in text
    r = client.get("/v1/principals/cy", headers=h)
    assert r.json() == listed["cy"]
    assert client.get("/v1/principals/nobody", headers=h).status_code == 404


def test_roles_change_what_a_key_may_do(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.admin)
    ha = seeded.headers(seeded.analyst)
    assert client.get("/v1/audit/verify", headers=ha).status_code == 403
    r = client.put("/v1/principals/ana/role", headers=h, json={"role": "admin"})
    assert r.status_code == 200 and r.json()["role"] == "admin"
    assert r.json()["contexts"] == ["team-a"]  # kept
    assert client.get("/v1/audit/verify", headers=ha).status_code == 200
    r = client.put("/v1/principals/ana/role", headers=h, json={"role": "analyst"})
    assert client.get("/v1/audit/verify", headers=ha).status_code == 403
    r = client.put("/v1/principals/ana/role", headers=h, json={"role": "boss"})
    assert r.status_code == 422
    # an admin never demotes, disables or deletes itself
    before = _tables(seeded)
    for method, path, body in (
        ("PUT", "/v1/principals/root/role", {"role": "owner"}),
        ("POST", "/v1/principals/root/disable", None),
        ("DELETE", "/v1/principals/root", None),
    ):
        r = client.request(method, path, headers=h, json=body)
        assert r.status_code == 422 and "another admin" in r.json()["detail"], r.text
    assert _tables(seeded) == before


def test_disable_enable_and_delete(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.admin)
    ha = seeded.headers(seeded.analyst)
    assert client.get("/v1/whoami", headers=ha).status_code == 200
    r = client.post("/v1/principals/ana/disable", headers=h)
    assert r.status_code == 200 and r.json()["state"] == "disabled"
    assert client.get("/v1/whoami", headers=ha).status_code == 401
    r = client.post("/v1/principals/ana/enable", headers=h)
    assert r.json()["state"] == "active"
    assert client.get("/v1/whoami", headers=ha).status_code == 200
    r = client.delete("/v1/principals/ana", headers=h)
    assert r.status_code == 200
    gone = r.json()
    assert gone["state"] == "deleted" and gone["streams"] == {} and gone["contexts"] == []
    assert all(k["revoked"] and not k["active"] for k in gone["keys"])
    assert client.get("/v1/whoami", headers=ha).status_code == 401
    # a deleted principal never returns: not enabled, no new key, its name not reused
    for method, path, body in (
        ("POST", "/v1/principals/ana/enable", None),
        ("POST", "/v1/principals/ana/keys", None),
        ("PUT", "/v1/principals/ana/streams/flights", {"permission": "read"}),
        ("POST", "/v1/principals", {"name": "ana", "role": "analyst"}),
    ):
        r = client.request(method, path, headers=h, json=body)
        assert r.status_code == 422, (path, r.text)
    assert client.delete("/v1/principals/ana", headers=h).json()["state"] == "deleted"


def test_stream_acl_grant_list_revoke(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.admin)
    r = client.get("/v1/streams/flights/acl", headers=h)
    assert r.json() == {"stream": "flights", "principals": {"ana": "read", "olga": "own"}}
    r = client.put("/v1/principals/bob/streams/flights", headers=h, json={"permission": "read"})
    assert r.status_code == 200
    assert client.get("/v1/streams/flights/acl", headers=h).json()["principals"] == {
        "ana": "read",
        "bob": "read",
        "olga": "own",
    }
    assert (
        client.get("/v1/streams/flights", headers=seeded.headers(seeded.other)).status_code == 200
    )
    r = client.delete("/v1/principals/bob/streams/flights", headers=h)
    assert r.status_code == 200
    assert "bob" not in client.get("/v1/streams/flights/acl", headers=h).json()["principals"]
    assert (
        client.get("/v1/streams/flights", headers=seeded.headers(seeded.other)).status_code == 403
    )
    assert client.get("/v1/streams/nope/acl", headers=h).status_code == 404


def test_contexts_show_iso_times_and_close(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.admin)
    r = client.post("/v1/contexts", headers=h, json={"name": "team-c", "description": "c"})
    assert r.status_code == 201
    out = r.json()
    assert ISO.match(out["created"]) and out["closed"] is None and out["closed_at"] is None
    r = client.post("/v1/contexts/team-c/close", headers=h)
    assert ISO.match(r.json()["closed"]) and r.json()["closed_at"] >= out["created_at"]
    listed = {c["name"]: c for c in client.get("/v1/contexts", headers=h).json()}
    assert listed["team-c"]["closed"] == r.json()["closed"]
    analyst_view = client.get("/v1/contexts", headers=seeded.headers(seeded.analyst)).json()
    assert [c["name"] for c in analyst_view] == ["team-a"]


@pytest.mark.parametrize("grace", [0.0, 600.0])
def test_keys_list_and_rotate(
    seeded: Seeded, client: TestClient, grace: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    from blockbudget.service import auth

    h = seeded.headers(seeded.admin)
    old = seeded.analyst
    r = client.post(
        f"/v1/principals/ana/keys/{_key_id(old)}/rotate", headers=h, json={"grace_seconds": grace}
    )
    assert r.status_code == 200, r.text
    out = r.json()
    new = out["api_key"]
    assert out["key_id"] == _key_id(new) and out["replaced"]["key_id"] == _key_id(old)
    assert client.get("/v1/whoami", headers=seeded.headers(new)).status_code == 200
    old_works = client.get("/v1/whoami", headers=seeded.headers(old)).status_code
    listed = {k["key_id"]: k for k in client.get("/v1/principals/ana/keys", headers=h).json()}
    if grace == 0:
        assert old_works == 401 and out["replaced"]["revoked"]
        assert not listed[_key_id(old)]["active"]
    else:
        assert old_works == 200 and ISO.match(out["replaced"]["expires"])
        assert listed[_key_id(old)]["active"] and not listed[_key_id(old)]["revoked"]
        later = auth.now() + grace + 1
        monkeypatch.setattr(auth, "now", lambda: later)  # past the grace period
        assert client.get("/v1/whoami", headers=seeded.headers(old)).status_code == 401
        assert client.get("/v1/whoami", headers=seeded.headers(new)).status_code == 200
        listed = {k["key_id"]: k for k in client.get("/v1/principals/ana/keys", headers=h).json()}
        assert not listed[_key_id(old)]["active"] and not listed[_key_id(old)]["revoked"]
    assert listed[_key_id(new)]["active"]
    # a revoked or expired key is not rotated again; an unknown one is a 404
    r = client.post(f"/v1/principals/ana/keys/{_key_id(old)}/rotate", headers=h, json={})
    assert r.status_code == 422
    r = client.post("/v1/principals/ana/keys/0123456789abcdef/rotate", headers=h, json={})
    assert r.status_code == 404
    r = client.post(
        f"/v1/principals/ana/keys/{_key_id(new)}/rotate", headers=h, json={"grace_seconds": -1}
    )
    assert r.status_code == 422
    over = {"grace_seconds": 91 * 86_400}
    keys_before_over = len(seeded.keys.keys("ana"))
    r = client.post(f"/v1/principals/ana/keys/{_key_id(new)}/rotate", headers=h, json=over)
    assert r.status_code == 422 and r.json()["error"] == "InvalidRequestError"
    assert r.json()["detail"] == (
        "the grace period must be at most 90 days (7776000 seconds), got 91 days (7862400 seconds)"
    )
    assert len(seeded.keys.keys("ana")) == keys_before_over  # nothing issued

"""Ownership is an admin's decision: a stream's owner manages its readers, but cannot demote or
remove a co-owner an admin appointed (nor itself)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from blockbudget.service import Role
from service.support import Seeded


def test_an_owner_cannot_demote_or_remove_a_co_owner(seeded: Seeded, client: TestClient) -> None:
    ho, hroot = seeded.headers(seeded.owner), seeded.headers(seeded.admin)
    seeded.keys.add_principal("otto", Role.OWNER)
    r = client.put("/v1/principals/otto/streams/flights", json={"permission": "own"}, headers=hroot)
    assert r.status_code == 200 and r.json()["streams"]["flights"] == "own"
    # olga (an owner of flights) may neither demote nor remove otto, nor herself ...
    for name in ("otto", "olga"):
        r = client.put(
            f"/v1/principals/{name}/streams/flights", json={"permission": "read"}, headers=ho
        )
        assert r.status_code == 403 and "only an admin" in r.json()["detail"], r.text
        r = client.delete(f"/v1/principals/{name}/streams/flights", headers=ho)
        assert r.status_code == 403 and "only an admin" in r.json()["detail"], r.text
        assert seeded.keys.principal(name).permission("flights") is not None
        assert seeded.keys.principal(name).permission("flights").value == "own"  # type: ignore[union-attr]
    # ... but still manages readers: grant READ, revoke it.
    r = client.put("/v1/principals/bob/streams/flights", json={"permission": "read"}, headers=ho)
    assert r.status_code == 200 and r.json()["permission"] == "read"
    r = client.delete("/v1/principals/bob/streams/flights", headers=ho)
    assert r.status_code == 200 and r.json()["permission"] is None
    r = client.delete("/v1/principals/ana/streams/flights", headers=ho)
    assert r.status_code == 200 and r.json()["permission"] is None
    assert seeded.keys.principal("ana").permission("flights") is None
    # An admin changes ownership freely.
    r = client.put(
        "/v1/principals/otto/streams/flights", json={"permission": "read"}, headers=hroot
    )
    assert r.status_code == 200 and r.json()["streams"]["flights"] == "read"
    r = client.delete("/v1/principals/otto/streams/flights", headers=hroot)
    assert r.status_code == 200 and "flights" not in r.json()["streams"]

"""On a user-blocked stream an analyst sees and names blocks by opaque ids only: a block key
(``u4242000-4242999``) would tell that some user id in that range exists. Owners and admins
keep the real keys; time-blocked streams keep theirs (days are public)."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from blockbudget.service import create_app
from service.support import Seeded, owned_stream

#: Users in three id ranges; 4242xxx is the one whose existence must not leak.
USERS = [17, 18, 1500, 4242001, 4242002, 4242003]


def _user_stream(client: TestClient, seeded: Seeded) -> list[dict[str, Any]]:
    csv = "uid,spend\n" + "".join(f"{u},{(u % 7) + 1.5}\n" for u in USERS)
    return owned_stream(client, seeded, "users", by="user", column="uid", csv=csv)


def test_an_analyst_sees_and_uses_only_opaque_block_ids_on_a_user_stream(
    seeded: Seeded, client: TestClient
) -> None:
    real = _user_stream(client, seeded)
    keys = [b["key"] for b in real]
    assert "u4242000-4242999" in keys and len(keys) == 3  # the owner sees the real keys
    ha = seeded.headers(seeded.analyst)
    texts: list[str] = []

    def call(method: str, path: str, **kw: Any) -> Any:
        r = client.request(method, path, headers=ha, **kw)
        texts.append(r.text)
        return r

    shown = call("GET", "/v1/streams/users/blocks").json()
    ids = [b["block_id"] for b in shown]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert all(re.fullmatch(r"users/b[0-9a-f]{24}", b) for b in ids), ids
    assert [b["key"] for b in shown] == [b.partition("/")[2] for b in ids]
    target = ids[keys.index("u4242000-4242999")]  # the analyst only knows it as one of three
    q = {"epsilon": 0.01, "context": "team-a"}
    # Queries name blocks by opaque id (full or its token) and answer with opaque ids.
    r = call("POST", "/v1/streams/users/queries/count", json={**q, "blocks": [target]})
    assert r.status_code == 200 and r.json()["blocks"] == [target], r.text
    r = call(
        "POST",
        "/v1/streams/users/queries/sum",
        json={**q, "blocks": [target.partition("/")[2]], "column": "spend", "lower": 0, "upper": 9},
    )
    assert r.status_code == 200 and r.json()["blocks"] == [target], r.text
    r = call("POST", "/v1/streams/users/queries/count", json={**q, "last": 3})
    assert r.status_code == 200 and sorted(r.json()["blocks"]) == sorted(ids), r.text
    # A real key, a real block id, or a key that does not exist: the same refusal, no echo.
    refusals = set()
    for name in ("u4242000-4242999", "users/u4242000-4242999", "u9999000-9999999"):
        r = call("POST", "/v1/streams/users/queries/count", json={**q, "blocks": [name]})
        assert r.status_code == 404, r.text
        refusals.add(r.text)
    assert len(refusals) == 1
    # Reservations, draws, release.
    r = call("POST", "/v1/streams/users/reservations", json={**q, "blocks": [target]})
    assert r.status_code == 201 and r.json()["blocks"] == [target], r.text
    rid = r.json()["id"]
    r = call("POST", f"/v1/reservations/{rid}/charges", json={"epsilon": 0.005, "blocks": [target]})
    assert r.status_code == 200 and r.json()["blocks"] == [target], r.text
    r = call("POST", f"/v1/reservations/{rid}/charges", json={"epsilon": 0.5, "blocks": [target]})
    assert r.status_code == 409, r.text  # over what the reservation holds: names no key
    assert call("GET", f"/v1/reservations/{rid}").json()["blocks"] == [target]
    assert call("POST", f"/v1/reservations/{rid}/release").json()["blocks"] == [target]
    # Direct and batch charges; a budget refusal names the opaque id.
    charge = {"blocks": [target], "epsilon": 0.01, "context": "team-a"}
    r = call("POST", "/v1/streams/users/charges", json=charge)
    assert r.status_code == 200 and r.json()["blocks"] == [target], r.text
    r = call(
        "POST",
        "/v1/streams/users/charges/batch",
        json={"charges": [charge, {**charge, "epsilon": 5.0}]},
    )
    results = r.json()["results"]
    assert results[0]["charge"]["blocks"] == [target] and results[1]["status"] == 409, r.text
    assert target in results[1]["detail"]
    r = call(
        "POST", "/v1/streams/users/queries/count", json={**q, "epsilon": 5.0, "blocks": [target]}
    )
    assert r.status_code == 409 and target in r.json()["detail"], r.text
    # The scheduler queue: blocks and significance by opaque id.
    task = {**q, "blocks": [target], "significance": {target: 2.0}}
    r = call("POST", "/v1/streams/users/tasks", json=task)
    assert r.status_code == 201, r.text
    assert r.json()["blocks"] == [target] and r.json()["significance"] == {target: 2.0}
    assert call("GET", f"/v1/tasks/{r.json()['id']}").json()["blocks"] == [target]
    assert [t["blocks"] for t in call("GET", "/v1/tasks").json()["tasks"]] == [[target]]
    r = call("POST", "/v1/streams/users/tasks", json={**q, "epsilon": 9.0, "blocks": [target]})
    assert r.status_code == 422, r.text  # more than any block holds: refused, names no key
    # A waiting task says why by opaque id: 0.9 charged leaves less than it needs (on all
    # three blocks, the target among them: no scheduler grants it, however much it lends).
    r = call("POST", "/v1/streams/users/charges", json={**charge, "epsilon": 0.9})
    assert r.status_code == 200, r.text
    every = {"any": {"k": 3, "min_k": 3}}
    r = call("POST", "/v1/streams/users/tasks", json={**q, "epsilon": 0.3, "selector": every})
    assert r.status_code == 201, r.text
    waiting = call("GET", f"/v1/tasks/{r.json()['id']}").json()
    assert waiting["state"] == "waiting", waiting["note"]
    why = waiting["why"]
    assert target in [row["block"] for row in why["shortfall"]], why
    assert {row["block"] for row in why["shortfall"]} <= set(ids), why
    # The dashboard.
    dash = call("GET", "/v1/dashboard?stream=users").json()
    assert [b["block_id"] for b in dash["blocks"]] == ids
    assert sorted(dash["heatmap"]["blocks"]) == sorted(ids)
    # No real key (or its id range) appears in anything the analyst received.
    leaked = [t for t in texts for k in keys if k in t or k.split("-")[0] in t]
    assert not leaked, leaked
    # The owner and the admin still see real keys; the ids are stable across app instances.
    again = TestClient(create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0))
    with again:
        assert [
            b["block_id"] for b in again.get("/v1/streams/users/blocks", headers=ha).json()
        ] == ids
        admin = again.get("/v1/streams/users/blocks", headers=seeded.headers(seeded.admin)).json()
        assert [b["key"] for b in admin] == keys


def test_time_streams_keep_their_public_day_keys(seeded: Seeded, client: TestClient) -> None:
    shown = client.get("/v1/streams/flights/blocks", headers=seeded.headers(seeded.analyst)).json()
    assert [b["key"] for b in shown][:2] == ["2013-01-01", "2013-01-02"]
    r = client.post(
        "/v1/streams/flights/queries/count",
        headers=seeded.headers(seeded.analyst),
        json={"epsilon": 0.01, "context": "team-a", "blocks": ["2013-01-02"]},
    )
    assert r.status_code == 200 and r.json()["blocks"] == ["flights/2013-01-02"], r.text

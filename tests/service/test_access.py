"""Authentication and authorization: every refusal is a clear 401/403 and changes nothing;
an analyst cannot read another stream, charge another context, or read raw rows."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.support import Seeded, ledger_snapshot

COUNT = {"epsilon": 0.1, "context": "team-a", "last": 2}


def test_no_key_or_a_bad_key_is_401_and_changes_nothing(seeded: Seeded, client: TestClient) -> None:
    before = ledger_snapshot(seeded.platform)
    r = client.post("/v1/streams/flights/queries/count", json=COUNT)
    assert r.status_code == 401 and "API key is required" in r.json()["detail"]
    assert r.headers["www-authenticate"] == "Bearer"
    forged = seeded.analyst[:-4] + "0000"
    for key in ("nonsense", forged, "bbk_" + "0" * 16 + "_" + "0" * 64):
        r = client.post(
            "/v1/streams/flights/queries/count", json=COUNT, headers=seeded.headers(key)
        )
        assert r.status_code == 401, key
    assert ledger_snapshot(seeded.platform) == before


def test_keys_are_hashed_at_rest_and_revocable(seeded: Seeded, client: TestClient) -> None:
    import sqlalchemy as sa

    with seeded.platform.ledger.engine.connect() as conn:
        stored = [tuple(r) for r in conn.execute(sa.text("SELECT * FROM service_api_keys"))]
    secret = seeded.analyst.split("_")[2]
    assert stored and all(secret not in str(row) for row in stored)
    key_id = seeded.analyst.split("_")[1]
    assert client.get("/v1/whoami", headers=seeded.headers(seeded.analyst)).json()["name"] == "ana"
    seeded.keys.revoke_key(key_id)
    assert client.get("/v1/whoami", headers=seeded.headers(seeded.analyst)).status_code == 401


def test_analyst_cannot_read_another_stream(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.analyst)
    before = ledger_snapshot(seeded.platform)
    names = [s["name"] for s in client.get("/v1/streams", headers=h).json()]
    assert names == ["flights"]  # the secret stream is not even listed
    for method, path, body in [
        ("GET", "/v1/streams/secret", None),
        ("GET", "/v1/streams/secret/blocks", None),
        ("POST", "/v1/streams/secret/queries/count", COUNT),
        ("POST", "/v1/streams/secret/reservations", COUNT),
        ("GET", "/v1/dashboard?stream=secret", None),
        ("GET", "/v1/streams/no-such-stream/blocks", None),  # 403, not 404: no probing
    ]:
        r = client.request(method, path, json=body, headers=h)
        assert r.status_code == 403, (path, r.text)
        assert "no read access to stream" in r.json()["detail"]
    # Charging a block of the secret stream through the stream it may read is refused too.
    secret_block = seeded.platform.store.blocks("secret")[0].block_id
    r = client.post(
        "/v1/streams/flights/charges",
        json={"blocks": [secret_block], "epsilon": 0.1, "context": "team-a"},
        headers=h,
    )
    assert r.status_code == 403 and "not blocks of stream 'flights'" in r.json()["detail"]
    assert ledger_snapshot(seeded.platform) == before


def test_analyst_cannot_charge_another_context(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.analyst)
    before = ledger_snapshot(seeded.platform)
    block = seeded.platform.store.blocks("flights")[0].block_id
    for path, body in [
        ("/v1/streams/flights/queries/count", {**COUNT, "context": "team-b"}),
        ("/v1/streams/flights/queries/count", {**COUNT, "context": "default"}),
        ("/v1/streams/flights/reservations", {**COUNT, "context": "team-b"}),
        ("/v1/streams/flights/charges", {"blocks": [block], "epsilon": 0.1, "context": "team-b"}),
    ]:
        r = client.post(path, json=body, headers=h)
        assert r.status_code == 403, (path, r.text)
        assert "bound context(s) (team-a)" in r.json()["detail"]
    assert ledger_snapshot(seeded.platform) == before
    # Another analyst's reservation cannot be drawn on or released.
    res = client.post(
        "/v1/streams/secret/reservations",
        json={"epsilon": 0.2, "context": "team-b", "last": 1},
        headers=seeded.headers(seeded.other),
    ).json()
    mid = ledger_snapshot(seeded.platform)
    for path in (f"/v1/reservations/{res['id']}/charges", f"/v1/reservations/{res['id']}/release"):
        r = client.post(path, json={"epsilon": 0.1} if "charges" in path else None, headers=h)
        # as an unknown reservation, word for word: whether it exists does not leak
        assert r.status_code == 404 and "unknown reservation" in r.json()["detail"]
    assert ledger_snapshot(seeded.platform) == mid


def test_analyst_never_sees_raw_rows_or_exact_counts(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.analyst)
    blocks = client.get("/v1/streams/flights/blocks", headers=h).json()
    assert blocks and all(b["rows"] is None for b in blocks)  # exact counts are for owners
    owner_view = client.get("/v1/streams/flights/blocks", headers=seeded.headers(seeded.owner))
    assert all(isinstance(b["rows"], int) and b["rows"] > 0 for b in owner_view.json())
    # No route hands out rows: every path in the schema is one of the known, row-free ones.
    paths = set(client.get("/openapi.json").json()["paths"])
    assert not any("rows" in p or "data" in p or "records" in p for p in paths), paths
    for path in ("/v1/streams/flights/rows", "/v1/streams/flights/data"):
        assert client.get(path, headers=h).status_code == 404
    # A DP answer carries the noisy value and public metadata only.
    r = client.post("/v1/streams/flights/queries/count", json=COUNT, headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"kind", "value", "cost", "blocks", "context", "noise", "secure_noise"}
    assert body["secure_noise"] is True and isinstance(body["value"], float)
    # The dashboard's data for an analyst has no row counts either.
    dash = client.get("/v1/dashboard", headers=h).json()
    assert all(b["rows"] is None for b in dash["blocks"])


def test_roles_gate_administration(seeded: Seeded, client: TestClient) -> None:
    ha, ho = seeded.headers(seeded.analyst), seeded.headers(seeded.owner)
    before = ledger_snapshot(seeded.platform)
    for h in (ha, ho):
        assert client.post("/v1/contexts", json={"name": "mine"}, headers=h).status_code == 403
        assert client.get("/v1/audit/verify", headers=h).status_code == 403
        assert client.get("/v1/audit/events", headers=h).status_code == 403
        r = client.post("/v1/principals", json={"name": "x", "role": "admin"}, headers=h)
        assert r.status_code == 403
    r = client.post("/v1/streams", json={"name": "mine", "epsilon": 1}, headers=ha)
    assert r.status_code == 403 and "has role analyst; this needs admin, owner" in r.text
    r = client.post(
        "/v1/streams/flights/ingest",
        headers={**ha, "Content-Type": "text/csv"},
        content=b"time,dep_delay,carrier,origin\n2013-01-02 10:00:00,1,AA,JFK\n",
    )
    assert r.status_code == 403
    # An owner may not ingest into a stream it does not own, nor make someone an owner.
    r = client.post(
        "/v1/streams/secret/ingest",
        headers={**ho, "Content-Type": "text/csv"},
        content=b"time,dep_delay,carrier,origin\n2013-01-10 10:00:00,1,AA,JFK\n",
    )
    assert r.status_code == 403
    r = client.put("/v1/principals/bob/streams/flights", json={"permission": "own"}, headers=ho)
    assert r.status_code == 403
    assert ledger_snapshot(seeded.platform) == before
    # ... but may let an analyst read its stream.
    r = client.put("/v1/principals/bob/streams/flights", json={"permission": "read"}, headers=ho)
    assert r.status_code == 200 and r.json()["permission"] == "read"
    names = [
        s["name"] for s in client.get("/v1/streams", headers=seeded.headers(seeded.other)).json()
    ]
    assert names == ["flights", "secret"]


def test_admin_issues_keys_and_binds_contexts(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.admin)
    r = client.post(
        "/v1/principals", json={"name": "cara", "role": "analyst", "contexts": ["nope"]}, headers=h
    )
    assert r.status_code == 422 and "unknown context" in r.json()["detail"]
    r = client.post(
        "/v1/principals",
        json={"name": "cara", "role": "analyst", "contexts": ["team-b"]},
        headers=h,
    )
    assert r.status_code == 201
    key = r.json()["api_key"]
    assert client.get("/v1/whoami", headers=seeded.headers(key)).json()["contexts"] == ["team-b"]
    r = client.post("/v1/principals", json={"name": "cara", "role": "analyst"}, headers=h)
    assert r.status_code == 422 and "already exists" in r.json()["detail"]
    client.put("/v1/principals/cara/contexts", json={"contexts": ["team-a"]}, headers=h)
    client.put("/v1/principals/cara/streams/flights", json={"permission": "read"}, headers=h)
    r = client.post("/v1/streams/flights/queries/count", json=COUNT, headers=seeded.headers(key))
    assert r.status_code == 200, r.text


def test_request_ids_of_a_colon_named_principal_do_not_collide(
    seeded: Seeded, client: TestClient
) -> None:
    """Principal ``ana`` sending ``x:r1`` and principal ``ana:x`` sending ``r1`` are two
    requests: neither replays (nor reads the receipt of) the other's charge."""
    from decimal import Decimal

    from blockbudget.budget import UNIT
    from blockbudget.service import Permission, Role

    seeded.keys.add_principal("ana:x", Role.ANALYST, contexts=("team-a",))
    seeded.keys.grant("ana:x", "flights", Permission.READ)
    colon_key = seeded.keys.create_key("ana:x")
    block = sorted(s.block for s in seeded.platform.ledger.states("flights", "team-a"))[0]
    body = {"blocks": [block], "epsilon": 0.1, "context": "team-a"}
    r1 = client.post(
        "/v1/streams/flights/charges",
        headers=seeded.headers(seeded.analyst),
        json={**body, "request_id": "x:r1"},
    )
    r2 = client.post(
        "/v1/streams/flights/charges",
        headers=seeded.headers(colon_key),
        json={**body, "request_id": "r1"},
    )
    assert r1.status_code == 200 and r2.status_code == 200, (r1.text, r2.text)
    assert r1.json()["request_id"] != r2.json()["request_id"]
    assert r1.json()["seq"] != r2.json()["seq"]
    (state,) = [s for s in seeded.platform.ledger.states("flights", "team-a") if s.block == block]
    assert Decimal(state.charged[0]) / UNIT == Decimal("0.2")  # charged twice, once each


def test_a_revoked_stream_acl_stops_drawing_on_an_open_reservation(
    seeded: Seeded, client: TestClient
) -> None:
    """A reservation outlives its holder's read access to the stream, but spends nothing
    after the ACL is revoked (403, nothing charged); releasing it still works."""
    h = seeded.headers(seeded.analyst)
    r = client.post(
        "/v1/streams/flights/reservations",
        headers=h,
        json={"epsilon": 0.3, "context": "team-a", "last": 2},
    )
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    seeded.keys.revoke("ana", "flights")
    before = ledger_snapshot(seeded.platform)
    r = client.post(f"/v1/reservations/{rid}/charges", headers=h, json={"epsilon": 0.1})
    assert r.status_code == 403 and "'flights'" in r.json()["detail"], r.text
    assert ledger_snapshot(seeded.platform) == before
    r = client.post(f"/v1/reservations/{rid}/release", headers=h)
    assert r.status_code == 200 and r.json()["state"] == "closed", r.text


def test_the_dashboard_time_axis_ignores_streams_the_caller_cannot_read(
    seeded: Seeded, client: TestClient
) -> None:
    """The heatmap's buckets span the shown stream's own history: a later charge on
    ``secret`` (which ana cannot read) does not move ana's time axis for ``flights``."""
    import time

    h = seeded.headers(seeded.analyst)
    block = sorted(s.block for s in seeded.platform.ledger.states("flights", "team-a"))[0]
    r = client.post(
        "/v1/streams/flights/charges",
        headers=h,
        json={"blocks": [block], "epsilon": 0.1, "context": "team-a"},
    )
    assert r.status_code == 200, r.text
    first = client.get("/v1/dashboard?stream=flights", headers=h).json()["heatmap"]
    time.sleep(0.05)
    secret = sorted(s.block for s in seeded.platform.ledger.states("secret", "team-b"))[0]
    r = client.post(
        "/v1/streams/secret/charges",
        headers=seeded.headers(seeded.other),
        json={"blocks": [secret], "epsilon": 0.1, "context": "team-b"},
    )
    assert r.status_code == 200, r.text
    again = client.get("/v1/dashboard?stream=flights", headers=h).json()["heatmap"]
    assert again["times"] == first["times"] and again["contexts"] == first["contexts"]
    assert first["contexts"]["team-a"][0][-1] > 0  # ana's own charge is shown


def test_a_sum_or_mean_over_a_non_numeric_column_is_422_and_changes_nothing(
    seeded: Seeded, client: TestClient
) -> None:
    """Refused before anything is reserved (it used to fail after the reservation, as a 500)."""
    h = seeded.headers(seeded.analyst)
    before = ledger_snapshot(seeded.platform)
    for kind in ("sum", "mean"):
        for column, arrow_type in (("carrier", "string"), ("time", "timestamp")):
            r = client.post(
                f"/v1/streams/flights/queries/{kind}",
                headers=h,
                json={**COUNT, "column": column, "lower": 0, "upper": 1},
            )
            assert r.status_code == 422, r.text
            assert "numeric column" in r.json()["detail"] and arrow_type in r.json()["detail"]
    assert ledger_snapshot(seeded.platform) == before

"""The ingest route: 201 for a new ingest, 200 with ``repeat`` for the same ingest again (no
block, no part file, no audit event), 409 for an id reused with other content or for rows
that repeat stored rows under ``on_overlap`` refuse, and the overlap report."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi.testclient import TestClient

from service.support import Seeded, ledger_snapshot

ROW = {"time": "2013-01-09 10:00:00", "dep_delay": 3.0, "carrier": "AA", "origin": "JFK"}
ROW2 = {"time": "2013-01-09 11:00:00", "dep_delay": 4.0, "carrier": "UA", "origin": "EWR"}
URL = "/v1/streams/flights/ingest"


def _state(seeded: Seeded) -> object:
    store = seeded.platform.store
    blocks = [(b.block_id, b.rows, b.parts) for b in store.blocks("flights")]
    return blocks, ledger_snapshot(seeded.platform), seeded.platform.ledger.audit_seq()


def test_a_repeat_answers_200_with_the_first_result(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.owner)
    csv = {**h, "Content-Type": "text/csv"}
    before = _state(seeded)
    r = client.post(URL, headers=csv, content=seeded.csv.read_bytes())  # seeded already
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["repeat"] is True and body["ingest_id"] == "sha256:" + body["content_hash"]
    assert len(body["new_blocks"]) == 4 and body["rows"] > 0
    assert _state(seeded) == before
    first = client.post(URL, headers=h, json={"records": [ROW], "ingest_id": "batch-9"})
    assert first.status_code == 201, first.text
    assert first.json()["new_blocks"] == ["flights/2013-01-09"]
    assert first.json()["ingest_id"] == "batch-9" and first.json()["repeat"] is False
    after = _state(seeded)
    again = client.post(URL, headers=h, json={"records": [ROW]}, params={"ingest_id": "batch-9"})
    assert again.status_code == 200, again.text
    assert {**again.json(), "repeat": False} == first.json()
    assert _state(seeded) == after
    assert seeded.platform.verify().ok


def test_an_id_with_other_content_and_duplicates_are_409(
    seeded: Seeded, client: TestClient
) -> None:
    h = seeded.headers(seeded.owner)
    assert (
        client.post(URL, headers=h, json={"records": [ROW], "ingest_id": "b1"}).status_code == 201
    )
    before = _state(seeded)
    r = client.post(URL, headers=h, json={"records": [ROW2], "ingest_id": "b1"})
    assert r.status_code == 409 and r.json()["error"] == "IngestIdConflictError", r.text
    r = client.post(URL, headers=h, json={"records": [ROW, ROW2]})
    assert r.status_code == 409 and r.json()["error"] == "DuplicateRowsError", r.text
    assert r.json()["detail"].startswith("1 of the uploaded rows repeat rows stream 'flights'")
    assert "2013-01-09" not in r.json()["detail"] and "/tmp" not in r.json()["detail"]
    admin = seeded.headers(seeded.admin)
    r = client.post(URL, headers=admin, json={"records": [ROW, ROW2]})
    assert r.status_code == 409 and "per block key: {'2013-01-09': 1}" in r.json()["detail"]
    assert _state(seeded) == before
    r = client.post(URL, headers=h, json={"records": [ROW, ROW2], "on_overlap": "skip-duplicates"})
    assert r.status_code == 201, r.text
    out = r.json()
    assert (out["rows"], out["appended_blocks"]) == (1, ["flights/2013-01-09"])
    assert out["overlap"] == {
        "policy": "skip-duplicates",
        "rows": 2,
        "keys": {"2013-01-09": 2},
        "checked": True,
        "duplicate_rows": 1,
        "duplicates": None,  # per key: admins only
        "skipped_rows": 1,
    }
    r = client.post(
        URL,
        headers=h,
        json={"records": [ROW], "on_overlap": "append"},
        params={"on_overlap": "refuse"},
    )
    assert r.status_code == 422 and "given twice" in r.json()["detail"]
    r = client.post(URL, headers=h, json={"records": [ROW], "ingest_id": "no spaces"})
    assert r.status_code == 422


def test_a_principal_cannot_squat_an_ingest_request_id(seeded: Seeded, client: TestClient) -> None:
    from blockbudget.service import Permission, Role

    seeded.keys.add_principal("ingest", Role.ANALYST, contexts=("team-a",))
    seeded.keys.grant("ingest", "flights", Permission.READ)
    key = seeded.keys.create_key("ingest")
    block = seeded.platform.store.blocks("flights")[0].block_id
    for rid in ("flights:day-9", "flights/day-9"):
        body = {"blocks": [block], "epsilon": "1e-9", "context": "team-a", "request_id": rid}
        r = client.post("/v1/streams/flights/charges", headers=seeded.headers(key), json=body)
        assert r.status_code == 200, r.text
    h = seeded.headers(seeded.owner)
    r = client.post(URL, headers=h, json={"records": [ROW], "ingest_id": "day-9"})
    assert r.status_code == 201, r.text
    stored = {b.block_id for b in seeded.platform.store.blocks("flights")}
    assert stored == {b.block_id for b in seeded.platform.ledger.blocks(stream="flights")}
    assert seeded.platform.ledger.request("ingest/flights/day-9") is not None


def test_duplicate_checks_are_logged_for_admins_without_values(
    seeded: Seeded, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    h = seeded.headers(seeded.owner)
    assert client.post(URL, headers=h, json={"records": [ROW]}).status_code == 201
    with caplog.at_level(logging.INFO, logger="blockbudget.admin"):
        assert client.post(URL, headers=h, json={"records": [ROW, ROW2]}).status_code == 409
        skip = {"records": [ROW, ROW2], "on_overlap": "skip-duplicates"}
        assert client.post(URL, headers=h, json=skip).status_code == 201
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "blockbudget.admin"]
    assert lines == [
        {
            "event": "admin",
            "actor": "olga",
            "action": "ingest-found-duplicates",
            "target": "flights",
            "on_overlap": policy,
            "duplicate_rows": 1,
            "per_key": {"2013-01-09": 1},
        }
        for policy in ("refuse", "skip-duplicates")
    ]

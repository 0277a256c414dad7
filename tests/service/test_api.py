"""The API's happy paths, exactly: DP queries at a huge ε return the true statistics of the real
rows (the noise scale is 1e-5), every query and draw is charged exactly once, reservations hold
and return budget exactly, replays by request id charge once, and ingest refuses bad data."""

from __future__ import annotations

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from service.support import Seeded, exact_counts, ledger_snapshot

BIG = 100_000.0  # ε of the exactness checks: Laplace scale 1e-5 per unit of sensitivity


@pytest.fixture
def big(seeded: Seeded, client: TestClient) -> str:
    """A stream `big` with ε_g = 1e6 holding the same real flights, readable by the analyst."""
    h = seeded.headers(seeded.owner)
    r = client.post("/v1/streams", headers=h, json={"name": "big", "epsilon": 1_000_000})
    assert r.status_code == 201
    r = client.post(
        "/v1/streams/big/ingest",
        headers={**h, "Content-Type": "text/csv"},
        content=seeded.csv.read_bytes(),
    )
    assert r.status_code == 201
    r = client.put("/v1/principals/ana/streams/big", headers=h, json={"permission": "read"})
    assert r.status_code == 200
    return "big"


def test_queries_are_exact_at_huge_epsilon(seeded: Seeded, client: TestClient, big: str) -> None:
    h = seeded.headers(seeded.analyst)
    truth = pd.read_csv(seeded.csv, parse_dates=["time"])
    n = sum(exact_counts(seeded.csv).values())
    r = client.post(
        f"/v1/streams/{big}/queries/count",
        headers=h,
        json={"epsilon": BIG, "context": "team-a", "last": 4},
    )
    assert r.status_code == 200, r.text
    assert abs(r.json()["value"] - n) < 0.01 and r.json()["cost"]["epsilon"] == "100000"
    carriers = sorted(truth["carrier"].unique())
    r = client.post(
        f"/v1/streams/{big}/queries/histogram",
        headers=h,
        json={
            "epsilon": BIG,
            "context": "team-a",
            "last": 4,
            "column": "carrier",
            "categories": carriers,
        },
    )
    exact = truth["carrier"].value_counts()
    assert all(abs(v - exact[c]) < 0.01 for c, v in r.json()["value"].items())
    r = client.post(
        f"/v1/streams/{big}/queries/mean",
        headers=h,
        json={
            "epsilon": BIG,
            "context": "team-a",
            "last": 4,
            "column": "dep_delay",
            "lower": -60,
            "upper": 300,
        },
    )
    mean = truth["dep_delay"].dropna().clip(-60, 300).mean()
    assert abs(r.json()["value"] - mean) < 0.01
    # Each query drew its ε once on each of the 4 blocks: 3 × 1e5 of 1e6.
    for b in client.get(f"/v1/streams/{big}/blocks", headers=h).json():
        assert b["remaining"]["team-a"] == {"epsilon": "700000", "delta": "0.000001"}
        assert b["remaining_display"]["team-a"] == "(ε=700000, δ=1e-06)"
    assert seeded.platform.verify().ok


def test_reserve_draw_release_and_replays(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.analyst)
    blocks = [b.block_id for b in seeded.platform.store.blocks("flights")]
    r = client.post(
        "/v1/streams/flights/reservations",
        headers=h,
        json={"epsilon": 0.5, "context": "team-a", "blocks": blocks[:2], "request_id": "r1"},
    )
    assert r.status_code == 201
    res = r.json()
    assert res["state"] == "open" and res["holder"] == "ana" and res["blocks"] == blocks[:2]
    left = {
        b["block_id"]: b["remaining"]["team-a"]
        for b in client.get("/v1/streams/flights/blocks", headers=h).json()
    }
    assert left[blocks[0]] == {"epsilon": "0.5", "delta": "0.000001"}
    assert left[blocks[2]] == {"epsilon": "1", "delta": "0.000001"}
    # A replay of the same request id returns the same reservation and reserves nothing more.
    again = client.post(
        "/v1/streams/flights/reservations",
        headers=h,
        json={"epsilon": 0.5, "context": "team-a", "blocks": blocks[:2], "request_id": "r1"},
    )
    assert again.json()["id"] == res["id"]
    d1 = client.post(
        f"/v1/reservations/{res['id']}/charges",
        headers=h,
        json={"epsilon": 0.2, "request_id": "d1"},
    )
    d1b = client.post(
        f"/v1/reservations/{res['id']}/charges",
        headers=h,
        json={"epsilon": 0.2, "request_id": "d1"},
    )
    assert d1.status_code == 200 and d1.json() == d1b.json()  # charged once
    over = client.post(f"/v1/reservations/{res['id']}/charges", headers=h, json={"epsilon": 0.4})
    assert over.status_code == 409 and over.json()["error"] == "ReservationError"
    r = client.post(f"/v1/reservations/{res['id']}/release", headers=h)
    assert r.status_code == 200 and r.json()["state"] == "closed"
    left = {
        b["block_id"]: b["remaining"]["team-a"]
        for b in client.get("/v1/streams/flights/blocks", headers=h).json()
    }
    assert left[blocks[0]] == {"epsilon": "0.8", "delta": "0.000001"}  # 0.2 drawn, 0.3 back
    r = client.post(f"/v1/reservations/{res['id']}/charges", headers=h, json={"epsilon": 0.1})
    assert r.status_code == 409
    # Request ids are per principal: another principal's "d1" is a different request.
    other = client.post(
        "/v1/streams/flights/charges",
        headers=seeded.headers(seeded.admin),
        json={"blocks": blocks[:1], "epsilon": 0.1, "context": "team-a", "request_id": "d1"},
    )
    assert other.status_code == 200 and other.json()["request_id"] == "root:d1"
    assert seeded.platform.verify().ok


def test_ingest_accepts_records_and_refuses_bad_data(seeded: Seeded, client: TestClient) -> None:
    h = seeded.headers(seeded.owner)
    r = client.post(
        "/v1/streams/flights/ingest",
        headers=h,
        json={
            "records": [
                {"time": "2013-01-09 10:00:00", "dep_delay": 3.0, "carrier": "AA", "origin": "JFK"}
            ]
        },
    )
    assert r.status_code == 201 and r.json()["new_blocks"] == ["flights/2013-01-09"]
    before = ledger_snapshot(seeded.platform)
    for kind, body in [
        ("text/csv", b"nope\n1\n"),
        ("application/json", b'{"records": []}'),
        ("application/json", b"{not json"),
        ("text/plain", b"time\n"),
    ]:
        r = client.post(
            "/v1/streams/flights/ingest", headers={**h, "Content-Type": kind}, content=body
        )
        assert r.status_code == 422, (kind, body, r.text)
        assert r.json()["error"] in ("DataError", "InvalidRequestError")
    assert ledger_snapshot(seeded.platform) == before
    assert len(seeded.platform.store.blocks("flights")) == 5

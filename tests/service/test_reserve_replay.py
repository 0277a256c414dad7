"""POST /reservations replaying a request id answers the reservation's current state."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.support import Seeded


def test_a_replayed_reserve_says_replayed_and_shows_the_current_state(
    seeded: Seeded, client: TestClient
) -> None:
    h = seeded.headers(seeded.analyst)
    blocks = [b.block_id for b in seeded.platform.store.blocks("flights")][:1]
    body = {"epsilon": 0.5, "context": "team-a", "blocks": blocks, "request_id": "r1"}
    first = client.post("/v1/streams/flights/reservations", headers=h, json=body)
    assert first.status_code == 201
    assert first.json()["state"] == "open" and first.json()["replayed"] is False
    rid = first.json()["id"]
    assert client.post(f"/v1/reservations/{rid}/release", headers=h).status_code == 200
    again = client.post("/v1/streams/flights/reservations", headers=h, json=body)
    assert again.json()["id"] == rid and again.json()["replayed"] is True
    assert again.json()["state"] == "closed"  # not the stale "open" of the first answer

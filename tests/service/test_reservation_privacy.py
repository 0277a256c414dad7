"""Another principal's reservation answers exactly as an unknown one on every reservation route
(issue 30, item 5): the same 404, the same body word for word but for the id, whether the
reservation is open or closed and whether the caller may read its stream — as a query on a
reservation already does, so that whether it exists does not leak. Nothing is charged or
released; the holder and admins keep their access."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from blockbudget.service.auth import Permission, Role
from service.support import Seeded, ledger_snapshot

UNKNOWN = "no-such-reservation"


def _routes(rid: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("GET", f"/v1/reservations/{rid}", None),
        ("POST", f"/v1/reservations/{rid}/charges", {"epsilon": 0.1, "request_id": "c1"}),
        ("POST", f"/v1/reservations/{rid}/release", None),
    ]


def _reserve(client: TestClient, seeded: Seeded) -> str:
    r = client.post(
        "/v1/streams/flights/reservations",
        headers=seeded.headers(seeded.analyst),
        json={"epsilon": 0.5, "context": "team-a", "last": 1},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed"])
def test_anothers_reservation_is_answered_as_unknown(
    seeded: Seeded, client: TestClient, closed: bool
) -> None:
    # cy may read the stream in the reservation's context; olga owns it; bob may not read it
    seeded.keys.add_principal("cy", Role.ANALYST, contexts=("team-a",))
    seeded.keys.grant("cy", "flights", Permission.READ)
    callers = {"cy": seeded.keys.create_key("cy"), "olga": seeded.owner, "bob": seeded.other}
    rid = _reserve(client, seeded)
    if closed:
        r = client.post(f"/v1/reservations/{rid}/release", headers=seeded.headers(seeded.analyst))
        assert r.status_code == 200
    before = ledger_snapshot(seeded.platform)
    for name, key in callers.items():
        h = seeded.headers(key)
        for (method, path, body), (_, unknown_path, _) in zip(
            _routes(rid), _routes(UNKNOWN), strict=True
        ):
            theirs = client.request(method, path, headers=h, json=body)
            unknown = client.request(method, unknown_path, headers=h, json=body)
            assert theirs.status_code == unknown.status_code == 404, (name, path, theirs.text)
            assert theirs.json() == {
                k: v.replace(UNKNOWN, rid) if isinstance(v, str) else v
                for k, v in unknown.json().items()
            }, (name, path)  # word for word
            assert theirs.json()["error"] == "UnknownReservationError"
            assert "ana" not in theirs.text
    assert ledger_snapshot(seeded.platform) == before  # nothing charged, nothing released
    # the holder and an admin still see it
    for key in (seeded.analyst, seeded.admin):
        r = client.get(f"/v1/reservations/{rid}", headers=seeded.headers(key))
        assert r.status_code == 200 and r.json()["holder"] == "ana"
    state = client.get(f"/v1/reservations/{rid}", headers=seeded.headers(seeded.analyst))
    assert state.json()["state"] == ("closed" if closed else "open")

"""Contexts over HTTP: no implicit ``default`` context (a request without one spends in the
principal's only bound context, else 422), retirement once every real context spent a block,
an audited close by administrators, and malformed queries refused before anything is sealed."""

from __future__ import annotations

from fastapi.testclient import TestClient

from blockbudget.service import Permission, Role
from service.support import Seeded, ledger_snapshot


def _blocks(seeded: Seeded) -> list[str]:
    return [m.block_id for m in seeded.platform.store.blocks("flights")]


def test_a_new_service_has_only_the_contexts_it_was_given(
    seeded: Seeded, client: TestClient
) -> None:
    r = client.get("/v1/contexts", headers=seeded.headers(seeded.admin))
    assert r.status_code == 200
    assert [c["name"] for c in r.json()] == ["team-a", "team-b"]  # no `default`
    assert seeded.platform.coalition_contexts() == ["team-a", "team-b"]


def test_a_block_spent_in_both_contexts_retires_over_http(
    seeded: Seeded, client: TestClient
) -> None:
    h = seeded.headers(seeded.admin)
    first = _blocks(seeded)[0]
    for context in ("team-a", "team-b"):
        r = client.post(
            "/v1/streams/flights/charges",
            headers=h,
            json={"blocks": [first], "epsilon": 1.0, "context": context},
        )
        assert r.status_code == 200, r.text
    r = client.post("/v1/streams/flights/retire", headers=seeded.headers(seeded.owner))
    assert r.status_code == 200, r.text
    assert r.json() == {"retired": [first]}


def test_a_request_without_context_uses_the_only_bound_one(
    seeded: Seeded, client: TestClient
) -> None:
    first = _blocks(seeded)[0]
    r = client.post(
        "/v1/streams/flights/charges",
        headers=seeded.headers(seeded.analyst),  # ana: bound to team-a only
        json={"blocks": [first], "epsilon": 0.1},
    )
    assert r.status_code == 200, r.text
    assert r.json()["context"] == "team-a"
    r = client.post(
        "/v1/streams/flights/reservations",
        headers=seeded.headers(seeded.analyst),
        json={"blocks": [first], "epsilon": 0.1},
    )
    assert r.status_code == 201, r.text
    assert r.json()["context"] == "team-a"


def test_a_request_without_context_is_422_unless_exactly_one_is_bound(
    seeded: Seeded, client: TestClient
) -> None:
    seeded.keys.add_principal("cy", Role.ANALYST, contexts=("team-a", "team-b"))
    seeded.keys.grant("cy", "flights", Permission.READ)
    two = seeded.keys.create_key("cy")
    first = _blocks(seeded)[0]
    before = ledger_snapshot(seeded.platform)
    for key, bound in ((seeded.admin, "0 context(s)"), (two, "2 context(s)")):
        for path, body in (
            ("/v1/streams/flights/charges", {"blocks": [first], "epsilon": 0.1}),
            ("/v1/streams/flights/reservations", {"blocks": [first], "epsilon": 0.1}),
            ("/v1/streams/flights/queries/count", {"last": 1, "epsilon": 0.1}),
        ):
            r = client.post(path, headers=seeded.headers(key), json=body)
            assert r.status_code == 422, (path, r.text)
            assert "names no 'context'" in r.json()["detail"] and bound in r.json()["detail"]
    assert ledger_snapshot(seeded.platform) == before


def test_admins_close_a_context_and_it_never_spends_again(
    seeded: Seeded, client: TestClient
) -> None:
    r = client.post("/v1/contexts/team-b/close", headers=seeded.headers(seeded.analyst))
    assert r.status_code == 403
    r = client.post("/v1/contexts/team-b/close", headers=seeded.headers(seeded.admin))
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "team-b" and r.json()["closed_at"] is not None
    r = client.post(
        "/v1/streams/flights/charges",
        headers=seeded.headers(seeded.admin),
        json={"blocks": [_blocks(seeded)[0]], "epsilon": 0.1, "context": "team-b"},
    )
    assert r.status_code == 422 and "ClosedContextError" in r.text
    # A block spent in team-a alone now retires: the closed team-b no longer keeps it.
    first = _blocks(seeded)[0]
    r = client.post(
        "/v1/streams/flights/charges",
        headers=seeded.headers(seeded.admin),
        json={"blocks": [first], "epsilon": 1.0, "context": "team-a"},
    )
    assert r.status_code == 200, r.text
    r = client.post("/v1/streams/flights/retire", headers=seeded.headers(seeded.admin))
    assert r.json() == {"retired": [first]}
    assert seeded.platform.verify().ok


def test_a_query_over_a_bad_column_seals_and_reserves_nothing(
    seeded: Seeded, client: TestClient
) -> None:
    h = seeded.headers(seeded.analyst)
    before = ledger_snapshot(seeded.platform)
    for kind, column, why in (
        ("sum", "nosuch", "column 'nosuch'"),
        ("mean", "carrier", "numeric column"),
        ("histogram", "nosuch", "column 'nosuch'"),
    ):
        r = client.post(
            f"/v1/streams/flights/queries/{kind}",
            headers=h,
            json={
                "last": 2,
                "epsilon": 0.1,
                "column": column,
                "lower": 0,
                "upper": 1,
                "categories": ["AA"],
            },
        )
        assert r.status_code == 422 and why in r.json()["detail"], r.text
    # bounds whose noise scale overflows a double: the mechanism's own check, run first too
    r = client.post(
        "/v1/streams/flights/queries/sum",
        headers=h,
        json={"last": 2, "epsilon": 1e-30, "column": "dep_delay", "lower": -1e288, "upper": 1e288},
    )
    assert r.status_code == 422 and "does not fit in a double" in r.json()["detail"], r.text
    assert ledger_snapshot(seeded.platform) == before
    assert not any(m.sealed for m in seeded.platform.store.blocks("flights"))

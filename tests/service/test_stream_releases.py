"""Stream releases over HTTP: the ACL and context rules, per-block charges, nothing charged when
refused, and the recommender."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.support import Seeded, ledger_snapshot

BODY = {
    "item_column": "origin",
    "user_column": "carrier",
    "domain": ["EWR", "JFK", "LGA"],
    "min_users": 5,
    "epsilon": 0.5,
    "window": 2,
}


def test_an_analyst_releases_the_stream_and_its_blocks_are_charged(
    client: TestClient, seeded: Seeded
) -> None:
    h = seeded.headers(seeded.analyst)
    r = client.post("/v1/streams/flights/releases/origins", headers=h, json=BODY)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["slots_done"] == 4 and [s["released"] for s in out["slots"]] == [True] * 2 + [
        False,
        True,
    ]
    assert abs(sum(out["answer"].values()) - 1) < 1e-9 and float(out["spent"]) <= 0.5
    assert all(s["secure_noise"] for s in out["slots"])
    states = seeded.platform.ledger.states(stream="flights", context="team-a")
    assert all(st.charged[0] > 0 for st in states)
    # nothing more to release: a second call reads and charges nothing
    before = ledger_snapshot(seeded.platform)
    r = client.post("/v1/streams/flights/releases/origins", headers=h, json=BODY)
    assert r.status_code == 200 and r.json()["slots"] == []
    assert ledger_snapshot(seeded.platform) == before
    g = client.get("/v1/streams/flights/releases/origins", headers=h)
    assert g.status_code == 200 and set(g.json()["answer"]) == {"EWR", "JFK", "LGA"}
    # another principal cannot continue (or read) this one's release
    other = client.get("/v1/streams/flights/releases/origins", headers=seeded.headers(seeded.owner))
    assert other.status_code == 422


def test_refused_releases_change_nothing(client: TestClient, seeded: Seeded) -> None:
    before = ledger_snapshot(seeded.platform)
    r = client.post(
        "/v1/streams/flights/releases/x", headers=seeded.headers(seeded.other), json=BODY
    )
    assert r.status_code == 403  # bob cannot read flights
    r = client.post(
        "/v1/streams/flights/releases/x",
        headers=seeded.headers(seeded.analyst),
        json={**BODY, "context": "team-b"},
    )
    assert r.status_code == 403  # ana is not bound to team-b
    r = client.post(
        "/v1/streams/flights/releases/x",
        headers=seeded.headers(seeded.analyst),
        json={**BODY, "epsilon": 5.0, "max_windows": 2},
    )
    # window 1 (ε·0.61/2 = 1.5) exceeds the blocks' ε = 1: not even a fresh block could pay, so
    # the release is refused before anything runs (read nothing, charged nothing)
    assert r.status_code == 422 and "more than a fresh block" in r.text
    r = client.post(
        "/v1/streams/flights/releases/y",
        headers=seeded.headers(seeded.analyst),
        json={**BODY, "user_column": "no_such_column"},
    )
    assert r.status_code == 422 and "no_such_column" in r.text
    assert ledger_snapshot(seeded.platform) == before


def test_recommend_warns_when_only_the_uniform_pdf_can_come_out(
    client: TestClient, seeded: Seeded
) -> None:
    body = {"domain_size": 105, "min_users": 5, "epsilon": 0.1, "horizon": 365}
    r = client.post("/v1/releases/recommend", headers=seeded.headers(seeded.analyst), json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["warnings"]) == 3 and all(f["only_uniform"] for f in out["forecasts"])


def test_principals_whose_names_collide_after_sanitising_never_share_a_release(
    client: TestClient, seeded: Seeded
) -> None:
    from blockbudget.service import Permission, Role

    # before: 'ana--x' + release 'r' and 'ana' + release 'x--r' were the same saved file
    seeded.keys.add_principal("ana--x", Role.ANALYST, contexts=("team-a",))
    seeded.keys.grant("ana--x", "flights", Permission.READ)
    h_x = seeded.headers(seeded.keys.create_key("ana--x"))
    h_ana = seeded.headers(seeded.analyst)
    r = client.post("/v1/streams/flights/releases/r", headers=h_x, json=BODY)
    assert r.status_code == 200 and r.json()["slots"], r.text
    g = client.get("/v1/streams/flights/releases/x--r", headers=h_ana)
    assert g.status_code == 422  # ana has no release 'x--r'
    before = ledger_snapshot(seeded.platform)
    p = client.post("/v1/streams/flights/releases/x--r", headers=h_ana, json=BODY)
    # ana's own release 'x--r' starts at slot 1 (it does not continue ana--x's)
    assert p.status_code == 200 and p.json()["slots"][0]["t"] == 1
    assert ledger_snapshot(seeded.platform) != before

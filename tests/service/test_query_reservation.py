"""``POST /v1/streams/{s}/query`` with ``reservation_id``: the query spends the caller's
reservation and reserves nothing — usage per block stays where the grant put it, a query
bigger than the grant is refused with nothing charged, and another principal's reservation is
answered as unknown."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from mechanisms.fakes import NoNoise

from blockbudget.budget import Budget
from blockbudget.ledger import ReservationState
from blockbudget.query import Query, to_dict
from blockbudget.service.auth import Permission, Role
from service.support import Seeded, ledger_snapshot

COUNT = to_dict(Query.count(epsilon=0.1))


@pytest.fixture
def zero_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("blockbudget.query.execute.resolve_noise", lambda _: NoNoise())


def _reserve(client: TestClient, key: str, seeded: Seeded, eps: float, **sel: Any) -> str:
    body = {"epsilon": eps, "context": "team-a", **(sel or {"last": 1})}
    r = client.post("/v1/streams/flights/reservations", headers=seeded.headers(key), json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _used(seeded: Seeded, block: str) -> tuple[int, ...]:
    return seeded.platform.ledger.state(block, "team-a").used


def _eps(seeded: Seeded, eps: str) -> tuple[int, ...]:
    return seeded.platform.filter("flights").features(Budget(epsilon=eps))


def _query(client: TestClient, key: str, seeded: Seeded, **body: Any) -> Any:
    return client.post(
        "/v1/streams/flights/query",
        headers=seeded.headers(key),
        json={"query": COUNT, **body},
    )


def test_a_granted_query_spends_its_reservation_not_fresh_budget(
    seeded: Seeded, client: TestClient, zero_noise: None
) -> None:
    """The issue's regression: usage per block 0.3 stays 0.3 (it went to 0.4)."""
    p = seeded.platform
    block = p.blocks("flights")[-1].block_id
    h = seeded.headers(seeded.analyst)
    r = client.post(
        "/v1/streams/flights/charges",
        headers=h,
        json={"blocks": [block], "epsilon": 0.2, "context": "team-a"},
    )
    assert r.status_code == 200, r.text
    rid = _reserve(client, seeded.analyst, seeded, 0.1, blocks=[block])
    assert _used(seeded, block) == _eps(seeded, "0.3")
    r = _query(client, seeded.analyst, seeded, reservation_id=rid)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["blocks"] == [block] and out["cost"] == {"epsilon": "0.1", "delta": "0"}
    truth = p.blocks("flights")[-1].rows
    assert out["groups"][0]["value"] == float(truth)  # exact at zero noise
    assert _used(seeded, block) == _eps(seeded, "0.3")  # not 0.4
    assert len(p.ledger.reservations()) == 1  # exactly one reservation for the grant
    assert p.ledger.reservation(rid).state is ReservationState.CLOSED  # spent in full
    assert p.verify().ok


def test_the_reservation_stays_open_until_spent(
    seeded: Seeded, client: TestClient, zero_noise: None
) -> None:
    rid = _reserve(client, seeded.analyst, seeded, 0.25, last=2)
    for state in (ReservationState.OPEN, ReservationState.OPEN):
        r = _query(client, seeded.analyst, seeded, reservation_id=rid, context="team-a")
        assert r.status_code == 200, r.text
        assert seeded.platform.ledger.reservation(rid).state is state
    # 0.05 left: a 0.1 query is refused before anything is read or charged ...
    before = ledger_snapshot(seeded.platform)
    r = _query(client, seeded.analyst, seeded, reservation_id=rid)
    assert r.status_code == 409 and "nothing was read or charged" in r.json()["detail"], r.text
    assert ledger_snapshot(seeded.platform) == before
    # ... and the holder releases the rest, as before.
    r = client.post(f"/v1/reservations/{rid}/release", headers=seeded.headers(seeded.analyst))
    assert r.status_code == 200, r.text
    blocks = seeded.platform.ledger.reservation(rid).blocks
    assert [_used(seeded, b) for b in blocks] == [_eps(seeded, "0.2")] * 2


def test_a_query_bigger_than_the_grant_charges_and_seals_nothing(
    seeded: Seeded, client: TestClient
) -> None:
    rid = _reserve(client, seeded.analyst, seeded, 0.05)
    before = ledger_snapshot(seeded.platform)
    r = _query(client, seeded.analyst, seeded, reservation_id=rid)
    assert r.status_code == 409 and r.json()["error"] == "ReservationError", r.text
    assert ledger_snapshot(seeded.platform) == before
    assert not any(m.sealed for m in seeded.platform.store.blocks("flights"))
    assert seeded.platform.ledger.reservation(rid).state is ReservationState.OPEN


def test_another_principals_reservation_is_unknown_to_the_caller(
    seeded: Seeded, client: TestClient
) -> None:
    seeded.keys.add_principal("cy", Role.ANALYST, contexts=("team-a",))
    seeded.keys.grant("cy", "flights", Permission.READ)
    cy = seeded.keys.create_key("cy")
    rid = _reserve(client, seeded.analyst, seeded, 0.5)
    before = ledger_snapshot(seeded.platform)
    theirs = _query(client, cy, seeded, reservation_id=rid)
    unknown = _query(client, cy, seeded, reservation_id="no-such-reservation")
    assert theirs.status_code == unknown.status_code == 404, theirs.text
    assert "ana" not in theirs.text
    assert theirs.json() == {
        k: v.replace("no-such-reservation", rid) if isinstance(v, str) else v
        for k, v in unknown.json().items()
    }  # word for word: whether another's reservation exists does not leak
    # an admin is not the holder either; bob may not read the stream at all
    assert _query(client, seeded.admin, seeded, reservation_id=rid).status_code == 404
    assert _query(client, seeded.other, seeded, reservation_id=rid).status_code == 403
    assert ledger_snapshot(seeded.platform) == before
    assert not any(m.sealed for m in seeded.platform.store.blocks("flights"))


def test_malformed_reservation_queries_are_refused(seeded: Seeded, client: TestClient) -> None:
    rid = _reserve(client, seeded.analyst, seeded, 0.5)
    before = ledger_snapshot(seeded.platform)
    a = seeded.analyst
    r = _query(client, a, seeded, reservation_id=rid, last=1)
    assert r.status_code == 422 and "without 'blocks' or 'last'" in r.json()["detail"]
    r = _query(client, a, seeded, reservation_id=rid, context="team-b")
    assert r.status_code == 422 and "not in 'team-b'" in r.json()["detail"]
    r = client.post(
        "/v1/streams/secret/query",
        headers=seeded.headers(a),
        json={"query": COUNT, "reservation_id": rid},
    )
    assert r.status_code == 403  # ana may not read secret
    r = client.post(
        "/v1/streams/flights/query/price",
        headers=seeded.headers(a),
        json={"query": COUNT, "reservation_id": rid},
    )
    assert r.status_code == 422
    bad = {"statistic": "count", "epsilon": 0.1, "where": [{"column": "zz", "op": "is null"}]}
    r = client.post(
        "/v1/streams/flights/query",
        headers=seeded.headers(a),
        json={"query": bad, "reservation_id": rid},
    )
    assert r.status_code == 422
    assert ledger_snapshot(seeded.platform) == before
    assert not any(m.sealed for m in seeded.platform.store.blocks("flights"))


def test_the_cli_spends_a_reservation_locally_and_through_the_server(
    seeded: Seeded, client: TestClient, zero_noise: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from typer.testing import CliRunner

    from blockbudget.cli import app as cli
    from blockbudget.service import create_app
    from service.support import thread_server

    p = seeded.platform
    monkeypatch.setenv("BLOCKBUDGET_DATABASE", p.database_url)
    rid = _reserve(client, seeded.analyst, seeded, 0.2, last=1)
    (block,) = p.ledger.reservation(rid).blocks
    args = ["query", "count", "flights", "--epsilon", "0.1", "--reservation", rid, "--json"]
    runner = CliRunner()
    local = runner.invoke(cli, [*args, "--home", str(p.home), "--context", "team-a"])
    assert local.exit_code == 0, local.output
    with thread_server(create_app(p, keys=seeded.keys)) as url:
        remote = runner.invoke(cli, [*args, "--server", url, "--api-key", seeded.analyst])
        assert remote.exit_code == 0, remote.output
        again = runner.invoke(cli, [*args, "--server", url, "--api-key", seeded.analyst])
        assert again.exit_code != 0  # spent: the reservation is closed
    answers = [json.loads(r.output) for r in (local, remote)]
    assert answers[0]["groups"] == answers[1]["groups"]
    assert answers[0]["blocks"] == answers[1]["blocks"] == [block]
    assert _used(seeded, block) == _eps(seeded, "0.2")
    assert len(p.ledger.reservations()) == 1
    refused = runner.invoke(cli, [*args, "--home", str(p.home), "--block", block])
    assert refused.exit_code != 0 and "neither --block" in refused.output

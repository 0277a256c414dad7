"""The JSON request log: one line per request with exactly time, method, route template, status,
latency, principal and request id — never a query's literal values, a data value, a block key or
an API key."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from blockbudget.query import Query, to_dict
from blockbudget.service import create_app
from blockbudget.service.request_log import configure_request_log
from service.support import Seeded

#: Literals that appear in the query body only.
CARRIER, LOWER, UPPER = "ZQ9", -61.375, 307.625
QUERY = (
    Query.mean("dep_delay", epsilon=0.05, lower=LOWER, upper=UPPER)
    .where("carrier", "in", ["AA", CARRIER])
    .group_by("origin", ["EWR", "JFK"])
)
FIELDS = {"time", "method", "route", "status", "latency_ms", "principal", "request_id"}


@pytest.fixture
def log_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "requests.log"
    monkeypatch.setenv("BLOCKBUDGET_REQUEST_LOG", str(path))  # serve --request-log PATH
    yield path
    configure_request_log(None)


def test_a_line_per_request_without_values_or_keys(seeded: Seeded, log_file: Path) -> None:
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    h = seeded.headers(seeded.analyst)
    block = seeded.platform.store.blocks("flights")[0].block_id
    with TestClient(app) as c:
        r = c.post(
            "/v1/streams/flights/query",
            headers=h,
            json={"query": to_dict(QUERY), "context": "team-a", "last": 2},
        )
        assert r.status_code == 200, r.text
        answer_ids = [r.headers["x-request-id"]]
        r = c.post(
            "/v1/streams/flights/reservations",
            headers={"X-API-Key": seeded.admin},
            json={"blocks": [block], "epsilon": 0.125, "context": "team-a"},
        )
        assert r.status_code == 201, r.text
        answer_ids.append(r.headers["x-request-id"])
        r = c.get(f"/v1/reservations/{r.json()['id']}?secret-param={CARRIER}", headers=h)
        assert r.status_code == 404  # not ana's reservation: answered as an unknown one
        answer_ids.append(r.headers["x-request-id"])
        r = c.get("/v1/whoami", headers={"Authorization": "Bearer bbk_notakey_123"})
        assert r.status_code == 401
        answer_ids.append(r.headers["x-request-id"])
    text = log_file.read_text(encoding="utf-8")
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["request_id"] for line in lines] == answer_ids
    assert all(set(line) == FIELDS for line in lines)
    assert [(x["method"], x["route"], x["status"], x["principal"]) for x in lines] == [
        ("POST", "/v1/streams/{stream}/query", 200, "ana"),
        ("POST", "/v1/streams/{stream}/reservations", 201, "root"),
        ("GET", "/v1/reservations/{rid}", 404, "ana"),
        ("GET", "/v1/whoami", 401, None),
    ]
    assert all(x["latency_ms"] > 0 and x["time"].endswith("Z") for x in lines)
    for secret in (
        CARRIER,
        str(LOWER),
        str(UPPER),
        block,
        "bbk_notakey",
        seeded.analyst,
        seeded.admin,
        *seeded.analyst.split("_"),
        "secret-param",
    ):
        assert secret not in text


def test_off_writes_nothing(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "requests.log"
    monkeypatch.setenv("BLOCKBUDGET_REQUEST_LOG", "off")
    try:
        app = create_app(seeded.platform, keys=seeded.keys)
        with TestClient(app) as c:
            assert c.get("/healthz").status_code == 200
        assert not path.exists()
        configure_request_log(path)
        with TestClient(app) as c:
            assert c.get("/healthz").status_code == 200
        assert json.loads(path.read_text(encoding="utf-8"))["route"] == "/healthz"
    finally:
        configure_request_log(None)

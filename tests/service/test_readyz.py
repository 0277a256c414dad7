"""``GET /readyz``: 200 while the database answers, 503 when it does not — with no key, and no
error text in the answer."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.testclient import TestClient

from blockbudget.service import readiness
from blockbudget.service.readiness import register_readiness_route


def test_ready_while_the_database_answers(client: TestClient) -> None:
    r = client.get("/readyz")  # no key: like /healthz
    assert r.status_code == 200
    assert r.json()["status"] == "ready" and r.json()["database"] == "ok"
    assert client.get("/healthz").status_code == 200


def test_unavailable_when_the_database_is_down() -> None:
    # Nothing listens on port 1: the driver fails with a message naming host, port and user.
    dead = sa.create_engine("postgresql+psycopg://bbuser:s3cr3t-pw@127.0.0.1:1/ledger")
    app = FastAPI()
    register_readiness_route(app, engine=dead)
    r = TestClient(app).get("/readyz")
    assert r.status_code == 503
    assert r.json() == {
        "status": "unavailable",
        "database": "error",
        "version": r.json()["version"],
    }
    for leak in ("s3cr3t", "bbuser", "127.0.0.1", "refused", "psycopg"):
        assert leak not in r.text


def test_unavailable_when_the_database_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(readiness, "PING_TIMEOUT_SECONDS", 0.05)
    monkeypatch.setattr(readiness, "ping_database", lambda engine: release.wait(30))
    app = FastAPI()
    register_readiness_route(app, engine=sa.create_engine("sqlite://"))
    try:
        r = TestClient(app).get("/readyz")
    finally:
        release.set()
    assert r.status_code == 503 and r.json()["database"] == "error"

"""A service on a database restored behind its audit log's high-water mark: budget routes answer
503 naming ``blockbudget db reconcile`` (reads still answer), ``/healthz`` and ``/metrics`` show
it, and ``blockbudget db reconcile`` — locally, or against the server as an admin (an analyst is
refused) — brings it back, with every block the lost events could have touched spent."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from blockbudget.cli import app as cli
from blockbudget.platform import Platform
from blockbudget.service import KeyStore, create_app, open_platform
from blockbudget.tasks.leader import AlwaysLeader
from blockbudget.tasks.queue import TaskQueue
from service.support import Seeded, thread_server

runner = CliRunner()
QUERY = {"query": {"statistic": "count", "epsilon": 0.3}, "context": "team-a", "last": 1}


@pytest.fixture
def restored(seeded: Seeded) -> Iterator[tuple[Platform, KeyStore, Seeded]]:
    """The seeded service backed up, queried (0.3 spent on the newest block), stopped and
    restored to the backup; a new platform (a restarted server) on it."""
    home = seeded.platform.home
    db = home / "platform.db"
    backup = home.parent / "backup.db"
    src, dst = sqlite3.connect(db), sqlite3.connect(backup)
    try:
        src.backup(dst)  # online, like pg_dump
    finally:
        src.close()
        dst.close()
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0, pump_seconds=3600)
    with TestClient(app) as c:
        r = c.post("/v1/streams/flights/query", headers=seeded.headers(seeded.analyst), json=QUERY)
        assert r.status_code == 200, r.text
    seeded.platform.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.write_bytes(backup.read_bytes())
    platform = open_platform(home, None, group_commit=True)
    yield platform, KeyStore(platform.database), seeded
    platform.close()


def _client(platform: Platform, keys: KeyStore) -> TestClient:
    queue = TaskQueue(platform, scheduler="fcfs", leadership=AlwaysLeader())
    return TestClient(
        create_app(platform, keys=keys, auth_cache_seconds=0, pump_seconds=3600, tasks=queue)
    )


def _metric(text: str, name: str) -> float | None:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                return float(s.value)
    return None


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_budget_routes_answer_503_until_reconciled(
    restored: tuple[Platform, KeyStore, Seeded],
) -> None:
    platform, keys, seeded = restored
    ana, admin = seeded.headers(seeded.analyst), seeded.headers(seeded.admin)
    block = platform.store.blocks("flights")[-1].block_id
    with _client(platform, keys) as c:
        r = c.post("/v1/streams/flights/query", headers=ana, json=QUERY)
        assert r.status_code == 503, r.text
        body = r.json()
        assert body["error"] == "LedgerBehindMarkError"
        assert "blockbudget db reconcile" in body["detail"] and "/tmp" not in body["detail"]
        writes: list[tuple[str, dict[str, Any], dict[str, str]]] = [
            ("/v1/streams/flights/reservations", {"last": 1, "epsilon": 0.1, "context": "team-a"},
             ana),
            ("/v1/streams/flights/charges", {"blocks": [block], "epsilon": 0.1,
                                              "context": "team-a"}, admin),
            ("/v1/contexts", {"name": "team-c"}, admin),
        ]  # fmt: skip
        for path, payload, headers in writes:
            r = c.post(path, headers=headers, json=payload)
            assert r.status_code == 503 and "db reconcile" in r.json()["detail"], (path, r.text)
        r = c.post(
            "/v1/streams/flights/ingest",
            headers={**admin, "Content-Type": "text/csv"},
            content=seeded.csv.read_bytes(),
        )
        assert r.status_code == 503, r.text
        # a task waits (nothing is granted or refused while budgets are refused)
        r = c.post(
            "/v1/streams/flights/tasks",
            headers=ana,
            json={"epsilon": 0.1, "context": "team-a", "last": 1},
        )
        assert r.status_code == 201, r.text
        task = r.json()["id"]
        c.app.state.tasks.pump()  # type: ignore[attr-defined]
        assert c.get(f"/v1/tasks/{task}", headers=ana).json()["state"] == "waiting"
        # reads that spend nothing still answer
        assert c.get("/v1/streams/flights/blocks", headers=ana).status_code == 200
        r = c.get(
            "/v1/streams/flights/afford", headers=ana, params={"context": "team-a", "last": 1}
        )
        assert r.status_code == 200, r.text
        # health and metrics say so
        health = c.get("/healthz")
        assert health.status_code == 200 and health.json()["budgets"] == "refusing"
        text = c.get("/metrics", headers=admin).text
        assert _metric(text, "blockbudget_ledger_behind_mark") == 1.0
        mark_seq = _metric(text, "blockbudget_audit_mark_seq")
        seq = _metric(text, "blockbudget_audit_seq")
        assert mark_seq is not None and seq is not None and seq < mark_seq
        status = c.get("/v1/service/mark", headers=admin).json()
        assert status["state"] == "behind" and status["refusing"] is True
        # only admins reconcile
        for key in (seeded.analyst, seeded.owner):
            r = c.post("/v1/service/reconcile", headers=seeded.headers(key), json={})
            assert r.status_code == 403, r.text
            assert c.get("/v1/service/mark", headers=seeded.headers(key)).status_code == 403
        r = c.post("/v1/service/reconcile", headers=admin, json={})
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["reconciled"] is True and report["state"] == "behind"
        assert sorted(report["retired"]) == sorted(b.block_id for b in platform.registered_blocks())
        assert c.post("/v1/service/reconcile", headers=admin).json()["reconciled"] is False
        assert c.get("/healthz").json()["budgets"] == "ok"
        text = c.get("/metrics", headers=admin).text
        assert _metric(text, "blockbudget_ledger_behind_mark") == 0.0
        assert _metric(text, "blockbudget_audit_mark_epoch") == 1.0
        # the blocks the lost query touched are spent: no query can run on them again
        r = c.post("/v1/streams/flights/query", headers=ana, json=QUERY)
        assert r.status_code == 422 and r.json()["error"] == "NothingAffordableError", r.text
        r = c.post("/v1/contexts", headers=admin, json={"name": "team-c"})
        assert r.status_code == 201, r.text  # writes go through again
    assert platform.verify(full=True).ok


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_db_reconcile_on_the_command_line(
    restored: tuple[Platform, KeyStore, Seeded],
) -> None:
    platform, keys, seeded = restored
    home = ["--home", str(platform.home)]
    r = runner.invoke(cli, ["db", "mark", *home, "--json"])
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["state"] == "behind"
    r = runner.invoke(cli, ["db", "mark", *home])
    assert r.exit_code == 1 and "db reconcile" in r.output, r.output
    r = runner.invoke(cli, ["db", "reconcile", *home, "--json"])  # irreversible: --yes needed
    assert r.exit_code == 2 and "--yes" in r.stdout, r.output
    with thread_server(
        create_app(platform, keys=keys, auth_cache_seconds=0, pump_seconds=3600)
    ) as url:
        for key in (seeded.analyst, seeded.owner):  # not administrators
            as_other = ["--server", url, "--api-key", key]
            r = runner.invoke(cli, ["db", "reconcile", "--yes", *as_other])
            assert r.exit_code == 2 and "HTTP 403" in r.output, r.output
            r = runner.invoke(cli, ["db", "mark", *as_other])
            assert r.exit_code == 2 and "HTTP 403" in r.output, r.output
        status = platform.mark_status(refresh=True)
        assert status is not None and status.refusing  # nothing changed
        as_admin = ["--server", url, "--api-key", seeded.admin]
        r = runner.invoke(cli, ["db", "mark", *as_admin, "--json"])
        assert r.exit_code == 1 and json.loads(r.stdout)["refusing"] is True, r.output
        r = runner.invoke(cli, ["db", "reconcile", "--yes", *as_admin])
        assert r.exit_code == 0, r.output
        assert "reconciled: the database was behind" in r.output and "retired" in r.output
        r = runner.invoke(cli, ["db", "reconcile", "--yes", *as_admin, "--json"])
        assert r.exit_code == 0 and json.loads(r.stdout)["reconciled"] is False, r.output
    r = runner.invoke(cli, ["db", "mark", *home, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["state"] == "ok", r.output
    r = runner.invoke(cli, ["db", "reconcile", "--yes", *home])
    assert r.exit_code == 0 and "nothing to reconcile" in r.output, r.output
    r = runner.invoke(cli, ["audit", "verify", "--full", *home])
    assert r.exit_code == 0, r.output

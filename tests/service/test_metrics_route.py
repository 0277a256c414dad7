"""``GET /metrics`` over HTTP: who may scrape, the ledger's numbers as hand-computed, route
templates (never raw paths or ids) in the labels, refusals by reason, queue length and
leadership."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from blockbudget.budget import Budget
from blockbudget.service import create_app
from blockbudget.tasks.leader import AlwaysLeader
from blockbudget.tasks.queue import TaskQueue
from service.support import Seeded

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape_text(c: TestClient, key: str) -> str:
    r = c.get("/metrics", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text: str = r.text
    return text


def samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


@pytest.fixture
def app_client(seeded: Seeded) -> Iterator[TestClient]:
    queue = TaskQueue(
        seeded.platform, scheduler="dpf-n:n=4", leadership=AlwaysLeader(), clock=time.time
    )
    app = create_app(
        seeded.platform,
        keys=seeded.keys,
        auth_cache_seconds=0,
        pump_seconds=3600,
        tasks=queue,
    )
    with TestClient(app) as c:
        yield c


def test_only_admins_and_the_metrics_token_may_scrape(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    with TestClient(app) as c:
        assert c.get("/metrics").status_code == 401
        for key in (seeded.analyst, seeded.owner):
            r = c.get("/metrics", headers=seeded.headers(key))
            assert r.status_code == 403 and r.json()["error"] == "AuthError", r.text
        assert c.get("/metrics", headers=seeded.headers(seeded.admin)).status_code == 200
        assert c.get("/metrics", headers=seeded.headers("tok-14")).status_code == 401
    monkeypatch.setenv("BLOCKBUDGET_METRICS_TOKEN", "tok-14")  # serve --metrics-token
    tokened = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    with TestClient(tokened) as c:
        assert c.get("/metrics", headers={"Authorization": "Bearer tok-14"}).status_code == 200
        assert c.get("/metrics", headers={"Authorization": "Bearer tok-15"}).status_code == 401
        assert c.get("/metrics", headers={"X-API-Key": "tok-14"}).status_code == 401
        assert c.get("/metrics", headers=seeded.headers(seeded.analyst)).status_code == 403
        assert c.get("/metrics", headers=seeded.headers(seeded.admin)).status_code == 200
        assert c.get("/v1/whoami", headers={"Authorization": "Bearer tok-14"}).status_code == 401


def test_budget_numbers_are_the_ledgers(seeded: Seeded, app_client: TestClient) -> None:
    c, h = app_client, seeded.headers(seeded.admin)
    blocks = [b.block_id for b in seeded.platform.store.blocks("flights")]
    r = c.post(
        "/v1/streams/flights/charges",
        headers=h,
        json={"blocks": blocks[:1], "epsilon": 0.95, "context": "team-a"},
    )
    assert r.status_code == 200, r.text
    r = c.post(
        "/v1/streams/flights/reservations",
        headers=h,
        json={"blocks": blocks[1:2], "epsilon": 0.25, "context": "team-b", "ttl_seconds": 600},
    )
    assert r.status_code == 201, r.text
    found = samples(scrape_text(c, seeded.admin))
    fa = {"stream": "flights", "context": "team-a"}
    fb = {"stream": "flights", "context": "team-b"}
    assert value(found, "blockbudget_block_remaining_fraction_min", **fa) == pytest.approx(0.05)
    assert value(found, "blockbudget_block_remaining_fraction_avg", **fa) == pytest.approx(
        (0.05 + 3) / 4
    )
    assert value(found, "blockbudget_block_remaining_epsilon_min", **fa) == pytest.approx(0.05)
    assert value(found, "blockbudget_block_remaining_fraction_min", **fb) == pytest.approx(0.75)
    assert value(found, "blockbudget_low_budget_blocks", **fa) == 1
    assert value(found, "blockbudget_low_budget_blocks", **fb) == 0
    assert value(found, "blockbudget_low_budget_threshold") == pytest.approx(0.1)
    assert value(found, "blockbudget_context_live_blocks", **fa) == 4
    assert value(found, "blockbudget_blocks", stream="flights", status="live") == 4
    assert value(found, "blockbudget_blocks", stream="secret", status="live") == 2
    assert value(found, "blockbudget_reservations_open", context="team-b") == 1
    assert value(found, "blockbudget_ledger_events_total", kind="charged", context="team-a") == 1
    assert value(found, "blockbudget_ledger_events_total", kind="reserved", context="team-b") == 1
    assert value(found, "blockbudget_audit_seq") == seeded.platform.ledger.audit_seq()


def test_labels_are_route_templates_and_refusals_have_reasons(
    seeded: Seeded, app_client: TestClient
) -> None:
    c, h = app_client, seeded.headers(seeded.admin)
    block = seeded.platform.store.blocks("flights")[0].block_id
    res = c.post(
        "/v1/streams/flights/reservations",
        headers=h,
        json={"blocks": [block], "epsilon": 0.75, "context": "team-a"},
    ).json()
    assert c.get(f"/v1/reservations/{res['id']}", headers=h).status_code == 200
    over = c.post(
        "/v1/streams/flights/reservations",
        headers=h,
        json={"blocks": [block], "epsilon": 0.5, "context": "team-a"},
    )
    assert over.status_code == 409 and over.json()["error"] == "BudgetExceededError"
    assert c.get("/no/such-path-x7q").status_code == 404
    assert c.get("/static/dashboard.js").status_code == 200
    assert c.request("BREW-x7q", "/healthz").status_code == 405
    text = scrape_text(c, seeded.admin)
    for raw in (res["id"], "such-path-x7q", block, "dashboard.js", "BREW"):
        assert raw not in text
    found = samples(text)
    get = {"method": "GET", "route": "/v1/reservations/{rid}", "status": "200"}
    assert value(found, "blockbudget_http_requests_total", **get) == 1
    post = {"method": "POST", "route": "/v1/streams/{stream}/reservations"}
    assert value(found, "blockbudget_http_requests_total", **post, status="201") == 1
    assert value(found, "blockbudget_http_requests_total", **post, status="409") == 1
    assert value(found, "blockbudget_http_request_duration_seconds_count", **post) == 2
    assert (
        value(
            found,
            "blockbudget_refusals_total",
            route="/v1/streams/{stream}/reservations",
            reason="BudgetExceededError",
            kind="request",
        )
        == 1
    )
    assert (
        value(
            found, "blockbudget_http_requests_total", method="GET", route="unmatched", status="404"
        )
        == 1
    )
    assert (
        value(found, "blockbudget_http_requests_total", method="GET", route="/static", status="200")
        == 1
    )
    assert (
        value(
            found, "blockbudget_http_requests_total", method="other", route="/healthz", status="405"
        )
        == 1
    )
    assert value(found, "blockbudget_http_requests_in_progress") == 1  # the scrape itself
    assert over.headers["x-request-id"] and len(over.headers["x-request-id"]) == 32


def test_queue_length_and_leadership(seeded: Seeded, app_client: TestClient) -> None:
    c = app_client
    block = seeded.platform.store.blocks("flights")[0].block_id
    r = c.post(
        "/v1/streams/flights/tasks",
        headers=seeded.headers(seeded.analyst),
        json={"epsilon": 0.3, "context": "team-a", "blocks": [block]},
    )
    assert r.status_code in (200, 201), r.text
    c.app.state.tasks.pump()  # type: ignore[attr-defined]
    found = samples(scrape_text(c, seeded.admin))
    assert value(found, "blockbudget_tasks", stream="flights", state="waiting") == 1
    assert value(found, "blockbudget_task_leader") == 1


def test_refused_tasks_and_budget_422s_are_counted_as_refusals(
    seeded: Seeded, app_client: TestClient
) -> None:
    """A task the scheduler refuses is a refusal (kind ``task``), and so is a ``--last``
    selection no block can afford (422 NothingAffordableError, kind ``request``); a malformed
    request is not."""
    c, admin, ana = app_client, seeded.headers(seeded.admin), seeded.headers(seeded.analyst)
    block = seeded.platform.store.blocks("flights")[0].block_id
    r = c.put("/v1/streams/flights/scheduler", headers=admin, json={"spec": "fcfs"})
    assert r.status_code == 200, r.text
    for eps in (0.7, 0.5):  # the second no longer fits the block: fcfs refuses it
        r = c.post(
            "/v1/streams/flights/tasks",
            headers=ana,
            json={"epsilon": eps, "context": "team-a", "selector": {"named": [block]}},
        )
        assert r.status_code == 201, r.text
        c.app.state.tasks.pump()  # type: ignore[attr-defined]
    refused = c.get(f"/v1/tasks/{r.json()['id']}", headers=ana).json()
    assert refused["state"] == "refused" and refused["refusal"]["affordable"] == 0, refused
    blocks = [b.block_id for b in seeded.platform.store.blocks("flights")]
    seeded.platform.ledger.charge(blocks[1:], Budget(epsilon="0.8"), context="team-a")
    query = {"query": {"statistic": "count", "epsilon": 0.5}, "context": "team-a"}
    r = c.post("/v1/streams/flights/query", headers=ana, json={**query, "last": 2})
    assert r.status_code == 422 and r.json()["error"] == "NothingAffordableError", r.text
    r = c.post("/v1/streams/flights/query", headers=ana, json={**query, "last": 0})
    assert r.status_code == 422 and r.json()["error"] != "NothingAffordableError", r.text
    found = samples(scrape_text(c, seeded.admin))
    task = {"route": "/v1/streams/{stream}/tasks", "reason": "refused", "kind": "task"}
    assert value(found, "blockbudget_refusals_total", **task) == 1
    none = {"route": "/v1/streams/{stream}/query", "kind": "request"}
    assert value(found, "blockbudget_refusals_total", **none, reason="NothingAffordableError") == 1
    reasons = {
        dict(labels)["reason"]
        for (name, labels), n in found.items()
        if name == "blockbudget_refusals_total" and n > 0
    }
    assert reasons == {"refused", "NothingAffordableError"}, reasons


class _Follower(AlwaysLeader):
    """Another process holds the leadership."""

    def try_acquire(self) -> bool:
        return False


def test_a_process_that_does_not_lead_says_so(seeded: Seeded) -> None:
    queue = TaskQueue(seeded.platform, scheduler="fcfs", leadership=_Follower())
    app = create_app(seeded.platform, keys=seeded.keys, pump_seconds=3600, tasks=queue)
    with TestClient(app) as c:
        queue.pump()
        assert value(samples(scrape_text(c, seeded.admin)), "blockbudget_task_leader") == 0


def test_the_same_low_and_retiring_counts_as_the_dashboard(
    seeded: Seeded, app_client: TestClient
) -> None:
    from blockbudget.service.dashboard import low_budget_alerts, retiring_counts

    c, h = app_client, seeded.headers(seeded.admin)
    blocks = [b.block_id for b in seeded.platform.store.blocks("flights")]
    for context, chosen, eps in (
        ("team-a", blocks[:3], 0.95),
        ("team-b", blocks[1:2], 0.92),
        ("team-b", blocks[3:], 0.5),
    ):
        r = c.post(
            "/v1/streams/flights/charges",
            headers=h,
            json={"blocks": chosen, "epsilon": eps, "context": context},
        )
        assert r.status_code == 200, r.text
    found = samples(scrape_text(c, seeded.admin))
    gauge = {
        (dict(labels)["stream"], dict(labels)["context"]): n
        for (name, labels), n in found.items()
        if name == "blockbudget_low_budget_blocks" and n > 0
    }
    alerts = low_budget_alerts(seeded.platform, below=0.1)
    assert {(a.stream, a.context): len(a.blocks) for a in alerts} == gauge
    assert gauge == {("flights", "team-a"): 3, ("flights", "team-b"): 1}
    assert retiring_counts(seeded.platform) == {"flights": 1, "secret": 0}
    assert value(found, "blockbudget_blocks", stream="flights", status="retiring") == 1
    assert value(found, "blockbudget_blocks", stream="flights", status="live") == 3

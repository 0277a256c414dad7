"""The task routes over the real ledger: the older body is a budget task whose grant is a
reservation; cancel releases a grant at once (owner or admin; 409 once final); a waiting task
says which blocks lack what; revoking a principal's stream access or key cancels its tasks and
releases their grants, and so does unbinding it from a context (there); the per-stream
scheduler route; the listing's filters."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from blockbudget.budget import UNIT
from blockbudget.service import Permission, create_app
from blockbudget.tasks.leader import AlwaysLeader
from blockbudget.tasks.queue import TaskQueue
from service.support import Seeded, ledger_snapshot


def make_client(seeded: Seeded, scheduler: str) -> TestClient:
    queue = TaskQueue(seeded.platform, scheduler=scheduler, leadership=AlwaysLeader())
    app = create_app(
        seeded.platform, keys=seeded.keys, auth_cache_seconds=0, pump_seconds=3600, tasks=queue
    )
    return TestClient(app)


@pytest.fixture
def fcfs(seeded: Seeded) -> Iterator[TestClient]:
    with make_client(seeded, "fcfs") as c:
        yield c


def submit(c: TestClient, key: str, **body: Any) -> dict[str, Any]:
    r = c.post("/v1/streams/flights/tasks", headers={"X-API-Key": key}, json=body)
    assert r.status_code == 201, r.text
    task: dict[str, Any] = r.json()
    queue: TaskQueue = c.app.state.tasks  # type: ignore[attr-defined]
    queue.pump()
    return task


def get(c: TestClient, key: str, task_id: str) -> dict[str, Any]:
    r = c.get(f"/v1/tasks/{task_id}", headers={"X-API-Key": key})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def used(seeded: Seeded, context: str = "team-a") -> dict[str, Decimal]:
    return {
        s.block: Decimal(s.charged[0] + s.reserved[0]) / UNIT
        for s in seeded.platform.ledger.states("flights", context)
    }


def test_the_older_body_is_a_budget_task_granted_as_a_reservation(
    seeded: Seeded, fcfs: TestClient
) -> None:
    newest = sorted(used(seeded))[-2:]
    first = submit(fcfs, seeded.analyst, epsilon=0.3, context="team-a", last=2, request_id="t1")
    assert first["kind"] == "budget" and first["selector"] == {"newest": 2}
    task = get(fcfs, seeded.analyst, first["id"])
    assert task["state"] == "granted" and sorted(task["blocks"]) == newest, task
    assert task["epsilon"] == "0.3" and task["why"] is None
    res = seeded.platform.ledger.reservation(task["reservation_id"])
    assert res.holder == "ana" and sorted(res.blocks) == newest
    assert res.request_id == f"ana:queue:{task['id']}"
    assert used(seeded) == {b: Decimal("0.3") if b in newest else 0 for b in used(seeded)}
    again = submit(fcfs, seeded.analyst, epsilon=0.3, context="team-a", last=2, request_id="t1")
    assert again["id"] == task["id"] and len(seeded.platform.ledger.reservations()) == 1


def test_cancel_releases_the_grant_at_once_and_is_final(seeded: Seeded, fcfs: TestClient) -> None:
    before = used(seeded)
    task = submit(fcfs, seeded.analyst, epsilon=0.4, context="team-a", last=1)
    task = get(fcfs, seeded.analyst, task["id"])
    assert task["state"] == "granted" and used(seeded) != before
    path = f"/v1/tasks/{task['id']}/cancel"
    # another principal's task is answered as an unknown one (its existence is not revealed)
    theirs = fcfs.post(path, headers=seeded.headers(seeded.other))
    unknown = fcfs.post("/v1/tasks/" + "0" * 32 + "/cancel", headers=seeded.headers(seeded.other))
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json()["detail"].replace(task["id"], "X") == unknown.json()["detail"].replace(
        "0" * 32, "X"
    )
    assert fcfs.get(f"/v1/tasks/{task['id']}", headers=seeded.headers(seeded.other)).json() == (
        theirs.json()
    )
    r = fcfs.post(path, headers=seeded.headers(seeded.analyst))
    assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
    # released at once: no pump, no expiry in between
    res = seeded.platform.ledger.reservation(task["reservation_id"])
    assert res.state.value == "closed" and used(seeded) == before
    r = fcfs.post(path, headers=seeded.headers(seeded.analyst))
    assert r.status_code == 409, r.text
    r = fcfs.post(path, headers=seeded.headers(seeded.admin))
    assert r.status_code == 409, r.text
    assert seeded.platform.verify().ok


def test_a_waiting_task_says_which_blocks_lack_what(seeded: Seeded) -> None:
    first, second = sorted(used(seeded))[:2]
    with make_client(seeded, "dpf-n:n=10") as c:
        # DPF keeps a 0.3 task waiting on a fresh block (one arrival unlocks 0.1): the ledger
        # could afford it, the scheduler has not unlocked enough
        fresh = submit(c, seeded.analyst, epsilon=0.3, context="team-a", blocks=[second])
        why = get(c, seeded.analyst, fresh["id"])["why"]
        assert why["affordable"] == 1 and why["shortfall"] == [] and "dpf-n" in why["reason"]
        # 0.8 charged outside the queue leaves 0.2: the block itself lacks budget
        r = c.post(
            "/v1/streams/flights/charges",
            headers=seeded.headers(seeded.analyst),
            json={"blocks": [first], "epsilon": 0.8, "context": "team-a"},
        )
        assert r.status_code == 200, r.text
        task = submit(c, seeded.analyst, epsilon=0.3, context="team-a", blocks=[first])
        task = get(c, seeded.analyst, task["id"])
        assert task["state"] == "waiting", task
        why = task["why"]
        assert why["affordable"] == 0, why
        assert [row["block"] for row in why["shortfall"]] == [first], why
        assert why["shortfall"][0]["needs"] == {"epsilon": "0.3", "delta": "0"}
        assert why["shortfall"][0]["has"] == {"epsilon": "0.2", "delta": "0.000001"}
        # the listing leaves `why` out; an admin may cancel a waiting task
        listed = c.get("/v1/tasks", headers=seeded.headers(seeded.analyst)).json()["tasks"]
        assert [t["why"] for t in listed] == [None, None]
        r = c.post(f"/v1/tasks/{task['id']}/cancel", headers=seeded.headers(seeded.admin))
        assert r.status_code == 200 and r.json()["state"] == "cancelled"
        assert get(c, seeded.analyst, task["id"])["why"] is None
    assert used(seeded)[first] == Decimal("0.8") and used(seeded)[second] == 0


def test_revoking_stream_access_or_a_key_cancels_the_principals_tasks(seeded: Seeded) -> None:
    block = sorted(used(seeded))[0]
    with make_client(seeded, "dpf-n:n=2") as c:
        ha, hadmin = seeded.headers(seeded.analyst), seeded.headers(seeded.admin)
        granted = submit(c, seeded.analyst, epsilon=0.2, context="team-a", blocks=[block])
        waiting = submit(c, seeded.analyst, epsilon=0.9, context="team-a", blocks=[block])
        granted, waiting = (
            get(c, seeded.analyst, granted["id"]),
            get(c, seeded.analyst, waiting["id"]),
        )
        assert (granted["state"], waiting["state"]) == ("granted", "waiting")
        r = c.delete("/v1/principals/ana/streams/flights", headers=hadmin)
        assert r.status_code == 200, r.text
        for t in (granted, waiting):
            assert get(c, seeded.admin, t["id"])["state"] == "cancelled"
        res = seeded.platform.ledger.reservation(granted["reservation_id"])
        assert res.state.value == "closed" and used(seeded)[block] == 0
        # access back; a new grant; revoking one of the analyst's keys cancels it too
        seeded.keys.grant("ana", "flights", Permission.READ)
        again = submit(c, seeded.analyst, epsilon=0.2, context="team-a", blocks=[block])
        assert get(c, seeded.analyst, again["id"])["state"] == "granted"
        key_id = seeded.analyst.split("_")[1]
        r = c.delete(f"/v1/principals/ana/keys/{key_id}", headers=hadmin)
        assert r.status_code == 200, r.text
        assert c.get("/v1/tasks", headers=ha).status_code == 401
        assert get(c, seeded.admin, again["id"])["state"] == "cancelled"
        assert c.delete(f"/v1/principals/bob/keys/{key_id}", headers=hadmin).status_code == 404
    assert used(seeded)[block] == 0 and seeded.platform.verify().ok


def test_unbinding_a_principal_from_a_context_cancels_its_tasks_there(seeded: Seeded) -> None:
    block = sorted(used(seeded))[0]
    seeded.keys.set_contexts("ana", ("team-a", "team-b"))
    with make_client(seeded, "dpf-n:n=2") as c:
        hadmin = seeded.headers(seeded.admin)
        in_a = submit(c, seeded.analyst, epsilon=0.2, context="team-a", blocks=[block])
        waiting = submit(c, seeded.analyst, epsilon=0.9, context="team-a", blocks=[block])
        in_b = submit(c, seeded.analyst, epsilon=0.2, context="team-b", blocks=[block])
        in_a, in_b = get(c, seeded.analyst, in_a["id"]), get(c, seeded.analyst, in_b["id"])
        assert (in_a["state"], in_b["state"]) == ("granted", "granted")
        assert get(c, seeded.analyst, waiting["id"])["state"] == "waiting"
        r = c.put("/v1/principals/ana/contexts", headers=hadmin, json={"contexts": ["team-b"]})
        assert r.status_code == 200, r.text
        for t in (in_a, waiting):
            assert get(c, seeded.admin, t["id"])["state"] == "cancelled"
        res = seeded.platform.ledger.reservation(in_a["reservation_id"])
        assert res.state.value == "closed" and used(seeded, "team-a")[block] == 0
        # its task in the context it keeps is untouched, and so is another principal's
        assert get(c, seeded.analyst, in_b["id"])["state"] == "granted"
        assert used(seeded, "team-b")[block] == Decimal("0.2")
    assert seeded.platform.verify().ok


def test_the_stream_scheduler_route(seeded: Seeded, fcfs: TestClient) -> None:
    ha, hadmin = seeded.headers(seeded.analyst), seeded.headers(seeded.admin)
    r = fcfs.get("/v1/streams/flights/scheduler", headers=ha)
    assert r.status_code == 200 and r.json()["scheduler"] == "fcfs", r.text
    assert fcfs.get("/v1/streams/secret/scheduler", headers=ha).status_code == 403
    before = ledger_snapshot(seeded.platform)
    body = {"spec": "dpf-n:n=4"}
    assert fcfs.put("/v1/streams/flights/scheduler", headers=ha, json=body).status_code == 403
    r = fcfs.put("/v1/streams/flights/scheduler", headers=hadmin, json={"spec": "no-such"})
    assert r.status_code == 422, r.text
    r = fcfs.put("/v1/streams/nope/scheduler", headers=hadmin, json=body)
    assert r.status_code == 404, r.text
    r = fcfs.put("/v1/streams/flights/scheduler", headers=hadmin, json=body)
    assert r.status_code == 200 and r.json()["scheduler"] == "dpf-n:n=4", r.text
    assert fcfs.get("/v1/streams/flights/scheduler", headers=ha).json()["scheduler"] == "dpf-n:n=4"
    assert fcfs.get("/v1/streams/secret/scheduler", headers=hadmin).json()["scheduler"] == "fcfs"
    assert ledger_snapshot(seeded.platform) == before
    # the new scheduler decides: DPF-N with N = 4 unlocks 0.25 per arrival, so 0.3 waits
    task = submit(fcfs, seeded.analyst, epsilon=0.3, context="team-a", last=1)
    assert get(fcfs, seeded.analyst, task["id"])["state"] == "waiting"


def test_bad_submissions_store_nothing(seeded: Seeded, fcfs: TestClient) -> None:
    ha = {"X-API-Key": seeded.analyst}
    before = ledger_snapshot(seeded.platform)
    bad: list[dict[str, Any]] = [
        {"epsilon": 0.1, "context": "team-a"},  # no blocks at all
        {"epsilon": 0.1, "context": "team-a", "last": 1, "selector": {"newest": 1}},
        {"epsilon": 0.1, "context": "team-a", "selector": {"newest": 1, "any": {"k": 2}}},
        {"kind": "query", "context": "team-a", "selector": {"newest": 1}},  # no query
        {"kind": "query", "query": {"statistic": "nope"}, "selector": {"newest": 1}},
        {
            "kind": "query",
            "query": {"statistic": "count", "epsilon": 0.1},
            "epsilon": 0.1,
            "selector": {"newest": 1},
        },
        {"kind": "budget", "selector": {"newest": 1}},  # no demand
        {"epsilon": 0.1, "selector": {"any": {"k": 1, "min_k": 3}}},
    ]
    for body in bad:
        r = fcfs.post("/v1/streams/flights/tasks", headers=ha, json=body)
        assert r.status_code == 422, (body, r.text)
    # significance for blocks that are not the stream's (another stream's, unknown) is refused
    for foreign in ("secret/2013-01-01", "flights/no-such-block"):
        body = {"epsilon": 0.1, "last": 1, "significance": {foreign: 1.0}}
        r = fcfs.post("/v1/streams/flights/tasks", headers=ha, json=body)
        assert r.status_code == 404, (foreign, r.text)
    r = fcfs.post("/v1/streams/secret/tasks", headers=ha, json={"epsilon": 0.1, "last": 1})
    assert r.status_code == 403
    r = fcfs.post(
        "/v1/streams/flights/tasks",
        headers=ha,
        json={"epsilon": 0.1, "context": "team-b", "last": 1},
    )
    assert r.status_code == 403
    assert fcfs.get("/v1/tasks", headers=seeded.headers(seeded.admin)).json()["tasks"] == []
    assert ledger_snapshot(seeded.platform) == before


def test_listing_filters_and_owners(seeded: Seeded, fcfs: TestClient) -> None:
    query = {"statistic": "count", "epsilon": 0.05}
    q = submit(fcfs, seeded.analyst, kind="query", query=query, selector={"any": {"k": 1}})
    b = submit(fcfs, seeded.analyst, epsilon=0.05, context="team-a", last=1)
    queue: TaskQueue = fcfs.app.state.tasks  # type: ignore[attr-defined]
    done = queue.wait(q["id"], timeout=30)
    assert done.state.value == "done", done.note
    ha = seeded.headers(seeded.analyst)

    def ids(**params: str) -> list[str]:
        return [t["id"] for t in fcfs.get("/v1/tasks", headers=ha, params=params).json()["tasks"]]

    assert ids() == [q["id"], b["id"]]
    assert ids(kind="query") == [q["id"]] and ids(kind="budget") == [b["id"]]
    assert ids(state="done") == [q["id"]] and ids(state="granted") == [b["id"]]
    assert fcfs.get("/v1/tasks", headers=ha, params={"state": "nope"}).status_code == 422
    assert fcfs.get("/v1/tasks", headers=seeded.headers(seeded.other)).json()["tasks"] == []
    shown = get(fcfs, seeded.analyst, q["id"])
    assert shown["result"]["cost"]["epsilon"] == "0.05" and shown["query"]["statistic"] == "count"
    assert shown["result"]["blocks"] == shown["blocks"] and len(shown["blocks"]) == 1


def test_a_pipeline_task_is_listed_as_a_job_and_cancelled(seeded: Seeded, tmp_path: Path) -> None:
    from service.test_pipelines import _full_flights

    ha, hroot = seeded.headers(seeded.analyst), seeded.headers(seeded.admin)
    with make_client(seeded, "dpf-n:n=10") as c:
        r = c.post("/v1/streams", headers=hroot, json={"name": "full", "epsilon": 8.0})
        assert r.status_code == 201, r.text
        r = c.post(
            "/v1/streams/full/ingest",
            headers={**hroot, "Content-Type": "text/csv"},
            content=_full_flights(tmp_path / "a.csv", 1, 1),
        )
        assert r.status_code == 201, r.text
        seeded.keys.grant("ana", "full", Permission.READ)
        body = {
            "kind": "pipeline",
            "pipeline": {"kind": "adassp-regression", "target": 1e-9, "epsilon0": 0.25},
            "context": "team-a",
        }
        r = c.post("/v1/streams/full/tasks", headers=ha, json=body)
        assert r.status_code == 201, r.text
        task = r.json()
        assert task["kind"] == "pipeline" and task["pipeline"]["kind"] == "adassp-regression"
        job = c.get(f"/v1/pipelines/{task['id']}", headers=ha)
        assert job.status_code == 200, job.text
        listed = c.get("/v1/tasks", headers=ha, params={"kind": "pipeline"}).json()["tasks"]
        assert [t["id"] for t in listed] == [task["id"]]
        r = c.post(f"/v1/tasks/{task['id']}/cancel", headers=ha)
        assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
        bad = {**body, "selector": {"newest": 1}}
        r = c.post("/v1/streams/full/tasks", headers=ha, json=bad)
        assert r.status_code == 422, r.text
    assert not any(s.reserved[0] for s in seeded.platform.ledger.states("full", "team-a"))


def test_a_principal_cannot_seed_a_paid_significance_measurement(
    seeded: Seeded, fcfs: TestClient
) -> None:
    """A seed would make the paid DP loss-reduction measurement deterministic (no DP): 422,
    nothing stored or charged."""
    before = used(seeded)
    spec = {"provider": "loss-reduction", "column": "dep_delay", "lower": 0.0, "upper": 60.0,
            "validation": [10.0], "epsilon": 0.1, "seed": 123}  # fmt: skip
    body = {"epsilon": 0.1, "selector": {"newest": 1}, "significance": spec}
    r = fcfs.post("/v1/streams/flights/tasks", headers=seeded.headers(seeded.analyst), json=body)
    assert r.status_code == 422 and "seed" in r.text, r.text
    queue: TaskQueue = fcfs.app.state.tasks  # type: ignore[attr-defined]
    assert queue.tasks() == [] and used(seeded) == before


def test_a_long_shortfall_list_is_cut_after_it_is_sorted_by_opaque_id(
    seeded: Seeded, fcfs: TestClient
) -> None:
    """105 short blocks, 100 listed: the 100 first by opaque id, so the 5 left out say nothing
    of which blocks are newest (cut in key order first, they were the 5 highest ranges)."""
    from userids_support import make_known

    ha, ho = seeded.headers(seeded.analyst), seeded.headers(seeded.owner)
    body = {"name": "u2", "epsilon": 1.0, "by": "user", "column": "uid", "ids_per_block": 1}
    assert fcfs.post("/v1/streams", headers=ho, json=body).status_code == 201
    csv = "uid,v\n" + "".join(f"{u},1\n" for u in range(105))
    r = fcfs.post(
        "/v1/streams/u2/ingest", headers={**ho, "Content-Type": "text/csv"}, content=csv.encode()
    )
    assert r.status_code == 201, r.text
    seeded.keys.grant("ana", "u2", Permission.READ)
    make_known(seeded.platform, "u2")
    shown = sorted(b["block_id"] for b in fcfs.get("/v1/streams/u2/blocks", headers=ha).json())
    assert len(shown) == 105
    body = {"context": "team-a", "epsilon": 0.9, "blocks": shown}
    assert fcfs.post("/v1/streams/u2/charges", headers=ha, json=body).status_code == 200
    body = {"context": "team-a", "epsilon": 0.5, "selector": {"any": {}}}
    r = fcfs.post("/v1/streams/u2/tasks", headers=ha, json=body)
    assert r.status_code == 201, r.text
    why = fcfs.get(f"/v1/tasks/{r.json()['id']}", headers=ha).json()["why"]
    assert [row["block"] for row in why["shortfall"]] == shown[:100]

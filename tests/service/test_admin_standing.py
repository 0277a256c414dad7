"""What a change of a principal's rights does to what it already started: a role change cancels
its tasks, the queue re-checks access before it grants (and the task route before it shows a
result), an analyst owns nothing, and a disabled or deleted principal's reservations are
released; an owner cannot tell a deleted principal from an unknown name."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from blockbudget.budget import UNIT
from blockbudget.service import create_app
from blockbudget.service.auth import Permission, Principal, Role, stream_acl
from blockbudget.tasks.leader import AlwaysLeader
from blockbudget.tasks.queue import TaskQueue
from service.support import Seeded


@pytest.fixture
def fcfs(seeded: Seeded) -> Iterator[TestClient]:
    queue = TaskQueue(seeded.platform, scheduler="dpf-n:n=1", leadership=AlwaysLeader())
    app = create_app(
        seeded.platform, keys=seeded.keys, auth_cache_seconds=0, pump_seconds=3600, tasks=queue
    )
    with TestClient(app) as c:
        yield c


def _queue(c: TestClient) -> TaskQueue:
    queue: TaskQueue = c.app.state.tasks  # type: ignore[attr-defined]
    return queue


def _spent(seeded: Seeded, block: str) -> Decimal:
    s = seeded.platform.ledger.state(block, "team-a")
    spent: Decimal = Decimal(int(s.charged[0]) + int(s.reserved[0])) / UNIT
    return spent


def _waiting_query(seeded: Seeded, c: TestClient, key: str) -> tuple[str, str, str]:
    """A query task of ``key`` in team-a that waits behind the admin's reservation of 0.9 on
    its block: (task id, block, the blocking reservation's id)."""
    block = seeded.platform.store.blocks("flights")[0].block_id
    hr = seeded.headers(seeded.admin)
    r = c.post(
        "/v1/streams/flights/reservations",
        headers=hr,
        json={"context": "team-a", "epsilon": 0.9, "blocks": [block]},
    )
    assert r.status_code == 201, r.text
    body: dict[str, Any] = {"kind": "query", "context": "team-a", "blocks": [block]}
    body["query"] = {"statistic": "count", "epsilon": 0.3}
    r = c.post("/v1/streams/flights/tasks", headers=seeded.headers(key), json=body)
    assert r.status_code == 201, r.text
    _queue(c).pump()
    task = c.get(f"/v1/tasks/{r.json()['id']}", headers=hr).json()
    assert task["state"] == "waiting", task
    return task["id"], block, _blocking(seeded)


def _blocking(seeded: Seeded) -> str:
    (res,) = [r for r in seeded.platform.ledger.reservations() if r.holder == "root"]
    return res.id


def _free_and_pump(seeded: Seeded, c: TestClient, rid: str) -> None:
    r = c.post(f"/v1/reservations/{rid}/release", headers=seeded.headers(seeded.admin))
    assert r.status_code == 200, r.text
    for _ in range(3):
        _queue(c).pump()


def _task(seeded: Seeded, c: TestClient, task_id: str) -> dict[str, Any]:
    out: dict[str, Any] = c.get(f"/v1/tasks/{task_id}", headers=seeded.headers(seeded.admin)).json()
    return out


def test_a_role_change_cancels_the_principals_tasks(seeded: Seeded, fcfs: TestClient) -> None:
    seeded.keys.add_principal("root2", Role.ADMIN)
    k2 = seeded.keys.create_key("root2")
    task_id, block, rid = _waiting_query(seeded, fcfs, k2)
    r = fcfs.put(
        "/v1/principals/root2/role", headers=seeded.headers(seeded.admin), json={"role": "analyst"}
    )
    assert r.status_code == 200, r.text
    assert _task(seeded, fcfs, task_id)["state"] == "cancelled"
    _free_and_pump(seeded, fcfs, rid)  # the budget it waited for is free: still nothing runs
    got = fcfs.get(f"/v1/tasks/{task_id}", headers=seeded.headers(k2)).json()
    assert got["state"] == "cancelled" and got["result"] is None
    assert _spent(seeded, block) == 0 and seeded.platform.verify().ok


def test_the_queue_rechecks_access_before_it_grants(seeded: Seeded, fcfs: TestClient) -> None:
    # another process unbinds the analyst: no hook ran in this one
    task_id, block, rid = _waiting_query(seeded, fcfs, seeded.analyst)
    seeded.keys.set_contexts("ana", ("team-b",))
    _free_and_pump(seeded, fcfs, rid)
    task = _task(seeded, fcfs, task_id)
    assert task["state"] == "cancelled" and task["result"] is None
    assert "no longer bound to context 'team-a'" in task["note"]
    assert "nothing was charged" in task["note"]
    assert _spent(seeded, block) == 0 and seeded.platform.verify().ok


def test_a_result_is_withheld_once_its_principal_lost_the_stream(
    seeded: Seeded, fcfs: TestClient
) -> None:
    ha = seeded.headers(seeded.analyst)
    task_id, _, rid = _waiting_query(seeded, fcfs, seeded.analyst)
    _free_and_pump(seeded, fcfs, rid)
    done = fcfs.get(f"/v1/tasks/{task_id}?wait=10", headers=ha).json()
    assert done["state"] == "done" and done["result"] is not None
    seeded.keys.revoke("ana", "flights")  # directly, as another process would
    for got in (
        fcfs.get(f"/v1/tasks/{task_id}", headers=ha).json(),
        fcfs.get("/v1/tasks", headers=ha).json()["tasks"][0],
    ):
        assert got["result"] is None and got["why"] is None
        assert "result withheld: principal 'ana' may no longer read stream 'flights'" in got["note"]
    assert _task(seeded, fcfs, task_id)["result"] == done["result"]  # an admin still sees it


def test_an_analyst_owns_nothing(seeded: Seeded, client: TestClient) -> None:
    hr, ho = seeded.headers(seeded.admin), seeded.headers(seeded.owner)
    r = client.put("/v1/principals/ana/streams/flights", headers=hr, json={"permission": "own"})
    assert r.status_code == 422 and "is an analyst and cannot own" in r.json()["detail"]
    assert seeded.keys.principal("ana").streams == (("flights", Permission.READ),)
    r = client.put("/v1/principals/olga/role", headers=hr, json={"role": "analyst"})
    assert r.status_code == 200 and r.json()["streams"] == {"flights": "read"}
    blocks = client.get("/v1/streams/flights/blocks", headers=ho).json()
    assert blocks and all(b["rows"] is None for b in blocks)
    for r in (
        client.put("/v1/principals/bob/streams/flights", headers=ho, json={"permission": "read"}),
        client.post(
            "/v1/streams/flights/ingest",
            headers={**ho, "Content-Type": "text/csv"},
            content=seeded.csv.read_bytes(),
        ),
        client.post("/v1/streams/flights/retire", headers=ho),
    ):
        assert r.status_code == 403, r.text
    # an OWN row left by an older release reads as READ for an analyst
    with seeded.platform.ledger.engine.begin() as conn:
        conn.execute(stream_acl.insert().values(principal="ana", stream="secret", permission="own"))
    assert seeded.keys.principal("ana").permission("secret") is Permission.READ
    assert (
        Principal("x", Role.OWNER, (), (("s", Permission.OWN),)).permission("s") is Permission.OWN
    )


def test_owners_cannot_tell_deleted_from_unknown_and_reservations_are_released(
    seeded: Seeded, client: TestClient
) -> None:
    hr, ho, hb = (seeded.headers(k) for k in (seeded.admin, seeded.owner, seeded.other))
    r = client.post(
        "/v1/streams/secret/reservations",
        headers=hb,
        json={"context": "team-b", "epsilon": 0.1, "last": 1},
    )
    assert r.status_code == 201, r.text
    held = r.json()["id"]
    assert client.post("/v1/principals/bob/disable", headers=hr).status_code == 200
    assert seeded.platform.ledger.reservation(held).state.value == "closed"
    assert client.delete("/v1/principals/bob", headers=hr).status_code == 200
    answers = []
    for name in ("bob", "nobody"):
        r = client.put(
            f"/v1/principals/{name}/streams/flights", headers=ho, json={"permission": "read"}
        )
        answers.append((r.status_code, r.json()["detail"].replace(name, "NAME")))
    assert answers[0] == answers[1] and answers[0][0] == 404
    assert seeded.platform.verify().ok

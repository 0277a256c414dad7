"""The task queue behind the service, against the real ledger: a grant is a reservation the
analyst draws from; a demand no block could ever afford is refused with nothing stored; a
waiting task survives a restart of the service; a deadline expires a task and charges nothing
(the dashboard lists it); on an RDP stream exactly as many tasks are granted as the ledger's
own filter admits."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from fastapi.testclient import TestClient

from blockbudget.budget import UNIT
from blockbudget.service import Permission, create_app
from blockbudget.tasks.leader import AlwaysLeader
from blockbudget.tasks.queue import DEFAULT_SCHEDULER, TaskQueue
from service.support import Seeded, ledger_snapshot


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_client(seeded: Seeded, scheduler: str, clock: Clock | None = None) -> TestClient:
    queue = TaskQueue(
        seeded.platform, scheduler=scheduler, leadership=AlwaysLeader(), clock=clock or time.time
    )
    app = create_app(
        seeded.platform, keys=seeded.keys, auth_cache_seconds=0, pump_seconds=3600, tasks=queue
    )
    return TestClient(app)


def submit(c: TestClient, key: str, stream: str = "flights", **body: Any) -> Any:
    r = c.post(f"/v1/streams/{stream}/tasks", headers={"X-API-Key": key}, json=body)
    c.app.state.tasks.pump()  # type: ignore[attr-defined]
    return r


def state(c: TestClient, key: str, task_id: str) -> str:
    out: str = c.get(f"/v1/tasks/{task_id}", headers={"X-API-Key": key}).json()["state"]
    return out


def used_eps(seeded: Seeded, context: str = "team-a") -> dict[str, Decimal]:
    return {
        s.block: Decimal(s.charged[0] + s.reserved[0]) / UNIT
        for s in seeded.platform.ledger.states("flights", context)
    }


def test_the_analyst_draws_from_its_grant(seeded: Seeded) -> None:
    with make_client(seeded, "dpf-n:n=1") as c:
        r = submit(c, seeded.analyst, epsilon=0.3, context="team-a", last=2)
        assert r.status_code == 201, r.text
        task = c.get(f"/v1/tasks/{r.json()['id']}", headers={"X-API-Key": seeded.analyst}).json()
        assert task["state"] == "granted", task
        h = seeded.headers(seeded.analyst)
        path = f"/v1/reservations/{task['reservation_id']}/charges"
        r = c.post(path, headers=h, json={"epsilon": 0.1})
        assert r.status_code == 200, r.text
        r = c.post(path, headers=seeded.headers(seeded.other), json={"epsilon": 0.1})
        assert r.status_code == 404, r.text  # another principal's: as an unknown one
        r = c.post(f"/v1/reservations/{task['reservation_id']}/release", headers=h)
        assert r.status_code == 200, r.text
    blocks = sorted(task["blocks"])
    assert used_eps(seeded) == {b: Decimal("0.1") if b in blocks else 0 for b in used_eps(seeded)}
    assert seeded.platform.verify().ok


def test_a_demand_no_block_could_afford_is_refused_with_nothing_stored(seeded: Seeded) -> None:
    with make_client(seeded, "dpf-n:n=4") as c:
        before = ledger_snapshot(seeded.platform)
        r = submit(c, seeded.analyst, epsilon=1.5, context="team-a", last=1)
        assert r.status_code == 422 and "whole capacity" in r.json()["detail"], r.text
        assert c.get("/v1/tasks", headers={"X-API-Key": seeded.admin}).json()["tasks"] == []
        assert ledger_snapshot(seeded.platform) == before


def test_a_waiting_task_survives_a_restart(seeded: Seeded) -> None:
    block = sorted(used_eps(seeded))[0]
    with make_client(seeded, "dpf-n:n=4") as c:
        first = submit(c, seeded.analyst, epsilon=0.3, context="team-a", blocks=[block]).json()
        assert state(c, seeded.analyst, first["id"]) == "waiting"  # 1/4 unlocked < 0.3
    assert used_eps(seeded)[block] == 0
    with make_client(seeded, "dpf-n:n=4") as c:  # a new process: takes the queue over
        second = submit(c, seeded.analyst, epsilon=0.3, context="team-a", blocks=[block]).json()
        states = sorted(state(c, seeded.analyst, t["id"]) for t in (first, second))
    assert states == ["granted", "waiting"]  # two arrivals unlock 0.5: one fits
    assert used_eps(seeded)[block] == Decimal("0.3")


def test_a_waiting_task_expires_at_its_deadline_and_charges_nothing(seeded: Seeded) -> None:
    clock = Clock()
    block = sorted(used_eps(seeded))[0]
    h = seeded.headers(seeded.analyst)
    with make_client(seeded, "dpf-n:n=10", clock) as c:
        late = submit(
            c, seeded.analyst, epsilon=0.3, context="team-a", blocks=[block], timeout_seconds=5
        ).json()
        assert late["state"] == "waiting" and late["deadline"] == clock.now + 5
        before = ledger_snapshot(seeded.platform)
        clock.now += 4
        c.app.state.tasks.pump()  # type: ignore[attr-defined]
        assert state(c, seeded.analyst, late["id"]) == "waiting"
        clock.now += 2
        c.app.state.tasks.pump()  # type: ignore[attr-defined]
        assert state(c, seeded.analyst, late["id"]) == "expired"
        assert ledger_snapshot(seeded.platform) == before
        r = c.get("/v1/dashboard", headers=h, params={"stream": "flights"})
        rows = r.json()["extras"]["scheduler_queue"]
        assert [(row["task"], row["state"]) for row in rows] == [(late["id"][:12], "expired")]


def test_rdp_stream_grants_exactly_what_the_filter_admits(seeded: Seeded) -> None:
    from blockbudget.accounting import Accounting, make_filter
    from blockbudget.budget import Budget

    with make_client(seeded, "dpf-n:n=1") as c:
        h = seeded.headers(seeded.admin)
        body = {"name": "r", "epsilon": 3, "delta": 1e-6, "accounting": "rdp"}
        assert c.post("/v1/streams", headers=h, json=body).status_code == 201
        r = c.post(
            "/v1/streams/r/ingest",
            headers={**h, "Content-Type": "text/csv"},
            content=seeded.csv.read_bytes(),
        )
        assert r.status_code == 201
        seeded.keys.grant("ana", "r", Permission.READ)
        ids = [
            submit(c, seeded.analyst, "r", epsilon=0.5, context="team-a", last=1).json()["id"]
            for _ in range(8)
        ]
        states = [state(c, seeded.analyst, i) for i in ids]
        filt = make_filter(Accounting.RDP, capacity=Budget(epsilon=3, delta=1e-6))
        one = filt.features(Budget(epsilon=0.5))
        fits = max(k for k in range(9) if filt.fits(tuple(k * u for u in one)))
        assert 0 < fits < 8 and states == ["granted"] * fits + ["waiting"] * (8 - fits), states
        st = seeded.platform.ledger.states("r", "team-a")[-1]
        assert st.used == tuple(fits * u for u in one)  # waiting tasks hold nothing
        r = submit(c, seeded.analyst, "r", epsilon=0.5, delta=1e-7, context="team-a", last=1)
        assert r.status_code == 422 and r.json()["error"] == "InvalidBudgetError", r.text


def test_with_the_default_scheduler_a_lone_task_that_fits_is_granted_within_one_pump(
    seeded: Seeded,
) -> None:
    """Issue 30, item 2, over HTTP: a service started with no scheduler named decides with the
    default; on its fresh stream a lone task for ε 0.2 on the newest 4 blocks (ε_g = 1; DPF-N
    with N = 10 unlocks 0.1 per arrival, the paper's DPF would keep it waiting) is granted
    within one pump, and the analyst holds the reservation."""
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0, pump_seconds=3600)
    with TestClient(app) as c:
        assert c.app.state.tasks.scheduler_for("flights") == DEFAULT_SCHEDULER  # type: ignore[attr-defined]
        assert DEFAULT_SCHEDULER == "dpf-n:n=10,lend=1"
        r = submit(c, seeded.analyst, epsilon=0.2, context="team-a", last=4)
        assert r.status_code == 201, r.text
        task = c.get(f"/v1/tasks/{r.json()['id']}", headers=seeded.headers(seeded.analyst)).json()
        assert task["state"] == "granted", task
        assert len(task["blocks"]) == 4 and task["reservation_id"], task
        assert sorted(used_eps(seeded).values())[-4:] == [Decimal("0.2")] * 4

"""The scheduler queue against the real ledger: grants are ledger reservations held by the
analyst, the ledger is never overspent (also by budget spent outside the queue), refused and
expired tasks charge nothing, access rules hold, and a restart loses no waiting task."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any, cast

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from blockbudget.budget import UNIT
from blockbudget.service import create_app
from service.support import Seeded, ledger_snapshot


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_client(
    seeded: Seeded, scheduler: str, clock: Clock, *, raise_server_exceptions: bool = True
) -> TestClient:
    app = create_app(
        seeded.platform,
        keys=seeded.keys,
        auth_cache_seconds=0,
        scheduler=scheduler,
        pump_seconds=3600,
    )
    app.state.tasks.clock = clock
    return TestClient(app, raise_server_exceptions=raise_server_exceptions)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fcfs(seeded: Seeded, clock: Clock) -> Iterator[TestClient]:
    with make_client(seeded, "fcfs", clock) as c:
        yield c


def pump(c: TestClient) -> None:
    """One round of the app's task pump (its thread runs every ``pump_seconds``)."""
    cast(FastAPI, c.app).state.tasks.pump()


def submit(c: TestClient, key: str, **body: Any) -> Any:
    return c.post("/v1/streams/flights/tasks", headers={"X-API-Key": key}, json=body)


def used_eps(seeded: Seeded, context: str = "team-a") -> dict[str, Decimal]:
    return {
        s.block: Decimal(s.charged[0] + s.reserved[0]) / UNIT
        for s in seeded.platform.ledger.states("flights", context)
    }


def test_grant_is_a_ledger_reservation_the_analyst_draws_from(
    seeded: Seeded, fcfs: TestClient
) -> None:
    blocks = sorted(used_eps(seeded))[-2:]
    r = submit(fcfs, seeded.analyst, epsilon=0.3, context="team-a", last=2, request_id="t1")
    assert r.status_code == 201, r.text
    task = r.json()
    assert task["state"] == "granted" and sorted(task["blocks"]) == blocks
    res = seeded.platform.ledger.reservation(task["reservation_id"])
    assert res.holder == "ana" and res.context == "team-a" and sorted(res.blocks) == blocks
    assert used_eps(seeded) == {b: Decimal("0.3") if b in blocks else 0 for b in used_eps(seeded)}
    # a replayed submission is the same task; nothing more is reserved
    again = submit(fcfs, seeded.analyst, epsilon=0.3, context="team-a", last=2, request_id="t1")
    assert again.json()["id"] == task["id"]
    assert len(seeded.platform.ledger.reservations()) == 1
    # the analyst draws from its grant through the reservation routes
    h = seeded.headers(seeded.analyst)
    r = fcfs.post(f"/v1/reservations/{res.id}/charges", headers=h, json={"epsilon": 0.1})
    assert r.status_code == 200, r.text
    q = fcfs.get("/v1/tasks", headers=h).json()
    assert q["scheduler"] == "fcfs" and [t["id"] for t in q["tasks"]] == [task["id"]]


def test_never_overspends_and_counts_budget_spent_outside(seeded: Seeded, fcfs: TestClient) -> None:
    block = sorted(used_eps(seeded))[0]
    h = seeded.headers(seeded.analyst)
    r = fcfs.post(
        "/v1/streams/flights/charges",
        headers=h,
        json={"blocks": [block], "epsilon": 0.5, "context": "team-a"},
    )
    assert r.status_code == 200, r.text
    states = [
        submit(fcfs, seeded.analyst, epsilon=0.2, context="team-a", blocks=[block]).json()
        for _ in range(4)
    ]
    # FCFS grants what fits now and turns the rest down: 0.5 outside + 2 × 0.2 leaves 0.1
    assert [t["state"] for t in states] == ["granted", "granted", "refused", "refused"]
    assert used_eps(seeded)[block] == Decimal("0.9")  # refused tasks charged nothing
    q = fcfs.get("/v1/tasks", headers=h).json()["tasks"]
    assert sorted(t["state"] for t in q) == ["granted", "granted", "refused", "refused"]


def test_refused_task_charges_nothing(seeded: Seeded, clock: Clock) -> None:
    with make_client(seeded, "dpf-n:n=4", clock) as c:
        before = ledger_snapshot(seeded.platform)
        r = submit(c, seeded.analyst, epsilon=1.5, context="team-a", last=1)
        # a demand above a block's whole capacity could never be granted: refused at
        # submission, nothing stored or charged
        assert r.status_code == 422, r.text
        assert "capacity" in r.json()["detail"]
        assert ledger_snapshot(seeded.platform) == before
        assert c.get("/v1/tasks", headers=seeded.headers(seeded.admin)).json()["tasks"] == []


def test_access_rules_and_nothing_stored_on_refusal(seeded: Seeded, fcfs: TestClient) -> None:
    before = ledger_snapshot(seeded.platform)
    assert submit(fcfs, seeded.other, epsilon=0.1, context="team-b", last=1).status_code == 403
    assert submit(fcfs, seeded.analyst, epsilon=0.1, context="team-b", last=1).status_code == 403
    r = fcfs.post(
        "/v1/streams/secret/tasks",
        headers=seeded.headers(seeded.analyst),
        json={"epsilon": 0.1, "context": "team-a", "last": 1},
    )
    assert r.status_code == 403
    assert submit(fcfs, seeded.analyst, epsilon=-1, context="team-a", last=1).status_code == 422
    assert ledger_snapshot(seeded.platform) == before
    assert fcfs.get("/v1/tasks", headers=seeded.headers(seeded.admin)).json()["tasks"] == []
    mine = submit(fcfs, seeded.analyst, epsilon=0.1, context="team-a", last=1).json()
    r = fcfs.get(f"/v1/tasks/{mine['id']}", headers=seeded.headers(seeded.other))
    assert r.status_code == 403
    assert fcfs.get("/v1/tasks", headers=seeded.headers(seeded.other)).json()["tasks"] == []
    assert len(fcfs.get("/v1/tasks", headers=seeded.headers(seeded.admin)).json()["tasks"]) == 1


def test_dpf_waits_for_unlocked_budget_and_survives_a_restart(seeded: Seeded, clock: Clock) -> None:
    block = sorted(used_eps(seeded))[0]
    with make_client(seeded, "dpf-n:n=4", clock) as c:
        first = submit(c, seeded.analyst, epsilon=0.3, context="team-a", blocks=[block]).json()
        assert first["state"] == "waiting"  # one arrival unlocks 1/4 = 0.25 < 0.3
    assert used_eps(seeded)[block] == 0
    with make_client(seeded, "dpf-n:n=4", clock) as c:  # a new process: resumes the queue
        second = submit(c, seeded.analyst, epsilon=0.3, context="team-a", blocks=[block]).json()
        tasks = {
            t["id"]: t
            for t in c.get("/v1/tasks", headers=seeded.headers(seeded.analyst)).json()["tasks"]
        }
    states = sorted(t["state"] for t in tasks.values())
    assert set(tasks) == {first["id"], second["id"]} and states == ["granted", "waiting"]
    assert used_eps(seeded)[block] == Decimal("0.3")
    granted = next(t for t in tasks.values() if t["state"] == "granted")
    assert seeded.platform.ledger.reservation(granted["reservation_id"]).holder == "ana"


def test_waiting_task_expires_at_its_deadline_and_charges_nothing(
    seeded: Seeded, clock: Clock
) -> None:
    block = sorted(used_eps(seeded))[0]
    h = seeded.headers(seeded.analyst)
    with make_client(seeded, "dpf-n:n=10", clock) as c:
        late = submit(
            c, seeded.analyst, epsilon=0.3, context="team-a", blocks=[block], timeout_seconds=5
        ).json()
        assert late["state"] == "waiting" and late["deadline"] == clock.now + 5
        before = ledger_snapshot(seeded.platform)
        clock.now += 4
        pump(c)  # what the pump thread does every pump_seconds
        assert c.get(f"/v1/tasks/{late['id']}", headers=h).json()["state"] == "waiting"
        clock.now += 2
        pump(c)
        assert c.get(f"/v1/tasks/{late['id']}", headers=h).json()["state"] == "expired"
        assert ledger_snapshot(seeded.platform) == before
        r = c.get("/v1/dashboard", headers=h, params={"stream": "flights"})
        rows = r.json()["extras"]["scheduler_queue"]
        assert [(row["task"], row["state"]) for row in rows] == [(late["id"][:12], "expired")]


def test_rdp_stream_grants_exactly_what_the_filter_admits(seeded: Seeded, fcfs: TestClient) -> None:
    from blockbudget.accounting import Accounting, make_filter
    from blockbudget.budget import Budget
    from blockbudget.service.auth import Permission

    h = seeded.headers(seeded.admin)
    body = {"name": "r", "epsilon": 3, "delta": 1e-6, "accounting": "rdp"}
    assert fcfs.post("/v1/streams", headers=h, json=body).status_code == 201
    r = fcfs.post(
        "/v1/streams/r/ingest",
        headers={**h, "Content-Type": "text/csv"},
        content=seeded.csv.read_bytes(),
    )
    assert r.status_code == 200
    seeded.keys.grant("ana", "r", Permission.READ)
    ha = seeded.headers(seeded.analyst)
    states = [
        fcfs.post(
            "/v1/streams/r/tasks", headers=ha, json={"epsilon": 0.5, "context": "team-a", "last": 1}
        ).json()["state"]
        for _ in range(8)
    ]
    filt = make_filter(Accounting.RDP, capacity=Budget(epsilon=3, delta=1e-6))
    one = filt.features(Budget(epsilon=0.5))
    fits = max(k for k in range(9) if filt.fits(tuple(k * u for u in one)))
    assert 0 < fits < 8 and states == ["granted"] * fits + ["refused"] * (8 - fits)
    st = seeded.platform.ledger.states("r", "team-a")[-1]
    assert st.used == tuple(fits * u for u in one)  # refused tasks charged nothing
    r = fcfs.post(
        "/v1/streams/r/tasks",
        headers=ha,
        json={"epsilon": 0.5, "delta": 1e-7, "context": "team-a", "last": 1},
    )
    assert r.status_code == 422 and r.json()["error"] == "InvalidBudgetError"


def test_a_grant_whose_ledger_write_failed_is_applied_on_the_next_pump(
    seeded: Seeded, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue's count of applied decisions moves only after a decision's ledger write
    committed. Before, it moved first: a transient database error during a grant's reservation
    left the task waiting forever while the scheduler's pool counted its budget as used."""
    from sqlalchemy.exc import OperationalError

    ledger = seeded.platform.ledger
    real_reserve = ledger.reserve
    calls = {"n": 0}

    def flaky_reserve(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("reserve", {}, Exception("connection lost"))
        return real_reserve(*args, **kwargs)

    with make_client(seeded, "fcfs", clock, raise_server_exceptions=False) as c:
        h = {"X-API-Key": seeded.analyst}
        monkeypatch.setattr(ledger, "reserve", flaky_reserve)
        r = submit(c, seeded.analyst, epsilon=0.2, context="team-a", last=1)
        assert r.status_code == 500 and r.json()["code"] == "internal_error", r.text
        c.app.state.tasks.pump()  # type: ignore[attr-defined]
        (task,) = c.get("/v1/tasks", headers=h).json()["tasks"]  # (listing pumps too)
        assert task["state"] == "granted", task
        reservations = [e for e in ledger.events() if e.kind.value == "reserved"]
        assert len(reservations) == 1  # applied once, on the retry
        assert seeded.platform.verify().ok

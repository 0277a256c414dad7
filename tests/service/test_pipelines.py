"""Pipeline submission and status over HTTP: Sage's privacy-adaptive training
(:mod:`blockbudget.training`) runs from the service's queue on real flights, every attempt's
ACCEPT / REJECT / RETRY is reported, a waiting job resumes when new blocks arrive, its charges
are in the ledger, and refusals change nothing."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

import pandas as pd
from fastapi.testclient import TestClient

from blockbudget.apps.flights.pipelines import PIPELINE_COLUMNS
from blockbudget.budget import UNIT_EXPONENT
from blockbudget.data.flights import load_flights
from blockbudget.service import Permission
from service.support import Seeded, ledger_snapshot

TERMINAL = {"accepted", "rejected", "timed_out", "failed"}


def _full_flights(path: Path, first_day: int, days: int) -> bytes:
    frame = load_flights(columns=list(PIPELINE_COLUMNS))
    t = frame["sched_dep_datetime"]
    lo = pd.Timestamp(2013, 2, first_day)
    keep = frame[(t >= lo) & (t < lo + pd.Timedelta(days=days))].copy()
    keep["time"] = keep["sched_dep_datetime"]
    keep.to_csv(path, index=False)
    return path.read_bytes()


def _settle(client: TestClient, headers: dict[str, str], job: str) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while True:
        body: dict[str, object] = client.get(f"/v1/pipelines/{job}", headers=headers).json()
        if body["state"] not in ("queued", "training") or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


def test_pipeline_queue_end_to_end(seeded: Seeded, client: TestClient, tmp_path: Path) -> None:
    ha, hroot = seeded.headers(seeded.analyst), seeded.headers(seeded.admin)
    r = client.post("/v1/streams", headers=hroot, json={"name": "full", "epsilon": 8.0})
    assert r.status_code == 201
    csv = {"Content-Type": "text/csv"}
    r = client.post(
        "/v1/streams/full/ingest",
        headers={**hroot, **csv},
        content=_full_flights(tmp_path / "a.csv", 1, 1),
    )
    assert r.status_code == 201 and len(r.json()["new_blocks"]) == 1
    seeded.keys.grant("ana", "full", Permission.READ)
    job = {"kind": "average-speed", "target": 150.0, "context": "team-a", "epsilon0": 0.25}
    # Refusals first: nothing queued, nothing charged.
    before = ledger_snapshot(seeded.platform)
    r = client.post("/v1/streams/full/pipelines", headers=ha, json={**job, "context": "team-b"})
    assert r.status_code == 403
    r = client.post("/v1/streams/flights/pipelines", headers=ha, json=job)
    assert r.status_code == 422 and "lacks" in r.json()["detail"]  # no flight columns there
    r = client.post("/v1/streams/secret/pipelines", headers=ha, json=job)
    assert r.status_code == 403
    r = client.post("/v1/streams/full/pipelines", headers=ha, json={**job, "kind": "dpsgd"})
    assert r.status_code == 422
    assert ledger_snapshot(seeded.platform) == before
    assert client.get("/v1/pipelines", headers=ha).json() == []
    # A real job.
    r = client.post("/v1/streams/full/pipelines", headers=ha, json=job)
    assert r.status_code == 201 and r.json()["state"] in ("queued", "training", "waiting")
    job_id = r.json()["id"]
    first = _settle(client, ha, job_id)
    attempts = first["attempts"]
    assert isinstance(attempts, list) and attempts, first
    assert [a["iteration"] for a in attempts] == list(range(1, len(attempts) + 1))
    assert all(a["outcome"] in ("ACCEPT", "REJECT", "RETRY") for a in attempts)
    assert all(a["outcome"] == "RETRY" for a in attempts[:-1])  # only the last may decide
    if first["state"] == "accepted":
        assert attempts[-1]["outcome"] == "ACCEPT" and first["model"]
    elif first["state"] == "waiting":
        assert attempts[-1]["outcome"] == "RETRY" and first["model"] is None
    # Everything the job drew is in the ledger, in team-a, within what its attempts reserved
    # (each attempt is one grant of the pipeline strategy; the rest of the pipeline's share of
    # the block stays reserved for it, at most its max_epsilon in all).
    block = seeded.platform.store.blocks("full")[0].block_id
    state = seeded.platform.ledger.state(block, "team-a")
    drawn = Decimal(state.charged[0]).scaleb(-UNIT_EXPONENT)
    held = Decimal(state.reserved[0]).scaleb(-UNIT_EXPONENT)
    assert 0 < drawn <= sum(Decimal(a["epsilon"]) for a in attempts)
    assert drawn + held <= 1  # max_epsilon: the pipeline never holds more of a block
    # Other principals do not see the job; the admin does; the dashboard lists it.
    hb = seeded.headers(seeded.other)
    assert client.get(f"/v1/pipelines/{job_id}", headers=hb).status_code == 403
    assert client.get("/v1/pipelines", headers=hb).json() == []
    assert [j["id"] for j in client.get("/v1/pipelines", headers=hroot).json()] == [job_id]
    dash = client.get("/v1/dashboard?stream=full", headers=ha)
    assert dash.status_code == 200, dash.text
    extras = dash.json()["extras"]
    assert [p["job"] for p in extras["pipelines"]] == [job_id]
    assert extras["pipelines"][0]["outcomes"].split() == [a["outcome"] for a in attempts]
    if first["state"] == "waiting":  # more data arrives: the job resumes by itself
        r = client.post(
            "/v1/streams/full/ingest",
            headers={**hroot, **csv},
            content=_full_flights(tmp_path / "b.csv", 2, 3),
        )
        assert r.status_code == 201
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = _settle(client, ha, job_id)
            if len(now["attempts"]) > len(attempts) or now["state"] in TERMINAL:  # type: ignore[arg-type]
                break
            time.sleep(0.2)
        assert len(now["attempts"]) > len(attempts) or now["state"] in TERMINAL  # type: ignore[arg-type]
        later = now["attempts"]
        assert isinstance(later, list) and later[0] == attempts[0]
    assert seeded.platform.verify().ok


def _day_with(path: Path, cell: str | None) -> bytes:
    """A day of arrived flights; ``cell`` (when given) replaces one flight's distance."""
    frame = load_flights(columns=list(PIPELINE_COLUMNS))
    t = frame["sched_dep_datetime"]
    lo = pd.Timestamp(2013, 2, 1)
    day = frame[(t >= lo) & (t < lo + pd.Timedelta(days=1))].copy()
    day = day[day["air_time"].notna() & day["dep_delay"].notna() & day["arr_delay"].notna()]
    day["time"] = day["sched_dep_datetime"]
    if cell is not None:
        day["distance"] = day["distance"].astype(object)
        day.iloc[7, day.columns.get_loc("distance")] = cell
    day.to_csv(path, index=False)
    return path.read_bytes()


def test_one_rows_bad_cell_does_not_decide_whether_a_job_fails(
    seeded: Seeded, client: TestClient, tmp_path: Path
) -> None:
    """Neighbouring streams (one flight's distance empty, or text) run the same attempts and
    are charged the same as the original: no `failed` state tells the analyst about one row."""
    ha, hroot = seeded.headers(seeded.analyst), seeded.headers(seeded.admin)
    seen = []
    for name, cell in (("orig", None), ("empty", ""), ("text", "far away")):
        r = client.post("/v1/streams", headers=hroot, json={"name": name, "epsilon": 8.0})
        assert r.status_code == 201
        r = client.post(
            f"/v1/streams/{name}/ingest",
            headers={**hroot, "Content-Type": "text/csv"},
            content=_day_with(tmp_path / f"{name}.csv", cell),
        )
        assert r.status_code == 201, r.text
        seeded.keys.grant("ana", name, Permission.READ)
        # a target no model meets: every attempt is a RETRY, so the charges are deterministic
        job = {"kind": "adassp-regression", "target": 1e-9, "context": "team-a"}
        r = client.post(
            f"/v1/streams/{name}/pipelines", headers=ha, json={**job, "max_epsilon": 1.0}
        )
        assert r.status_code == 201, r.text
        body = _settle(client, ha, r.json()["id"])
        block = seeded.platform.store.blocks(name)[0].block_id
        left = seeded.platform.ledger.state(block, "team-a").remaining
        seen.append((body["state"], body["error"], body["attempts"], left))
    assert seen[0][0] == "waiting" and seen[0][1] is None and seen[0][2]
    assert seen[1] == seen[0] and seen[2] == seen[0]

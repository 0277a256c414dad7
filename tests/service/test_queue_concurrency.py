"""Concurrent submissions with one request id (a client retrying, or several replicas of one
job): every answer is the one task, never a 5xx, and exactly one task is stored; the same id
with other arguments is a 409 that stores nothing. Also over a real uvicorn server, so that the
submissions really run at once in its worker threads."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import sqlalchemy as sa

from blockbudget.service import create_app
from blockbudget.tasks.table import tasks_table
from service.support import Seeded, thread_server

THREADS = 8
ROUNDS = 6


def stored_tasks(seeded: Seeded) -> list[tuple[str, str | None]]:
    with seeded.platform.ledger.engine.connect() as conn:
        rows = conn.execute(sa.select(tasks_table.c.id, tasks_table.c.request_id)).all()
    return [(r[0], r[1]) for r in rows]


def post_at_once(url: str, key: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """POST every body to the task route at the same moment, one thread each."""
    barrier = threading.Barrier(len(bodies))
    out: list[httpx.Response | None] = [None] * len(bodies)

    def one(i: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            barrier.wait(30)
            out[i] = http.post(
                "/v1/streams/flights/tasks",
                headers={"Authorization": f"Bearer {key}"},
                json=bodies[i],
            )

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r is not None for r in out)
    return [r for r in out if r is not None]


def test_concurrent_submissions_with_one_request_id_make_one_task(seeded: Seeded) -> None:
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=60, scheduler="fcfs")
    with thread_server(app) as url:
        for n in range(ROUNDS):
            body = {"epsilon": 0.01, "context": "team-a", "last": 1, "request_id": f"t{n}"}
            answers = post_at_once(url, seeded.analyst, [body] * THREADS)
            assert [r.status_code for r in answers] == [201] * THREADS, [
                r.text for r in answers if r.status_code != 201
            ]
            assert len({r.json()["id"] for r in answers}) == 1
            mine = [t for t in stored_tasks(seeded) if t[1] == f"t{n}"]
            assert [t[0] for t in mine] == [answers[0].json()["id"]]
        # The same id with other arguments, at once with its own replays: 409, nothing new.
        before = stored_tasks(seeded)
        body = {"epsilon": 0.01, "context": "team-a", "last": 1, "request_id": "t0"}
        other = {**body, "epsilon": 0.02}
        answers = post_at_once(url, seeded.analyst, [body, other] * (THREADS // 2))
        codes = [r.status_code for r in answers]
        assert codes == [201, 409] * (THREADS // 2), [r.text for r in answers]
        assert {r.json()["error"] for r in answers[1::2]} == {"RequestIdConflictError"}
        assert stored_tasks(seeded) == before
    assert len(stored_tasks(seeded)) == ROUNDS


def test_new_id_races_with_other_arguments_store_one_task_and_refuse_the_rest(
    seeded: Seeded,
) -> None:
    """Submissions with one fresh id but different arguments race: one wins, the others are
    409 (never 500), and only the winner's task is stored."""
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=60, scheduler="fcfs")
    with thread_server(app) as url:
        for n in range(ROUNDS):
            bodies = [
                {
                    "epsilon": 0.01 * (1 + i % 2),
                    "context": "team-a",
                    "last": 1,
                    "request_id": f"r{n}",
                }
                for i in range(THREADS)
            ]
            answers = post_at_once(url, seeded.analyst, bodies)
            codes = sorted(r.status_code for r in answers)
            assert set(codes) <= {201, 409} and 201 in codes, [r.text for r in answers]
            winners = {r.json()["id"] for r in answers if r.status_code == 201}
            assert len(winners) == 1
            mine = [t[0] for t in stored_tasks(seeded) if t[1] == f"r{n}"]
            assert mine == list(winners)
            won = [b for b, r in zip(bodies, answers, strict=True) if r.status_code == 201]
            assert len({b["epsilon"] for b in won}) == 1  # 201 only for the winner's arguments


def test_a_replay_does_not_depend_on_how_last_resolves_now(seeded: Seeded) -> None:
    """The fingerprint is of the arguments as given: ``last: 1`` replayed is the same task,
    whatever block ``last`` would pick now."""
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0, scheduler="fcfs")
    with thread_server(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        h = {"Authorization": f"Bearer {seeded.analyst}"}
        body = {"epsilon": 0.9, "context": "team-a", "last": 1, "request_id": "big"}
        first = http.post("/v1/streams/flights/tasks", headers=h, json=body)
        assert first.status_code == 201, first.text
        again = http.post("/v1/streams/flights/tasks", headers=h, json=body)
        assert again.status_code == 201 and again.json()["id"] == first.json()["id"]
        blocks = http.post(
            "/v1/streams/flights/tasks",
            headers=h,
            json={**body, "last": None, "blocks": first.json()["blocks"]},
        )
        assert blocks.status_code == 409, blocks.text

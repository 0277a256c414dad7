"""Issue 13 end to end over HTTP: three analysts each submit 50 DP-query tasks that name no
blocks (the newest two, any two, one of a time range) to a real uvicorn server; the stream's
scheduler grants them, the server's pump runs each query on its grant, and the ledger shows
exactly one reservation per granted task — the one the query spent — and nothing else by those
analysts; the audit log verifies."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from typing import Any

import httpx

from blockbudget.budget import UNIT
from blockbudget.service import Permission, Role, create_app
from service.support import Seeded, thread_server

ANALYSTS = {"ana": "team-a", "cy": "team-a", "dee": "team-b"}
PER_ANALYST = 50
EPSILON = "0.01"
SELECTORS: list[dict[str, Any]] = [
    {"newest": 2},
    {"any": {"k": 2}},
    {"range": {"k": 1, "start": "2013-01-02T00:00:00Z", "end": "2013-01-04T00:00:00Z"}},
]


def _submit_all(url: str, key: str, name: str, out: dict[str, list[dict[str, Any]]]) -> None:
    with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {key}"}) as h:
        tasks = []
        for i in range(PER_ANALYST):
            body = {
                "kind": "query",
                "query": {"statistic": "count", "epsilon": float(EPSILON)},
                "selector": SELECTORS[i % len(SELECTORS)],
                "request_id": f"{name}-{i}",
            }
            r = h.post("/v1/streams/flights/tasks", json=body)
            assert r.status_code == 201, r.text
            tasks.append(r.json())
        out[name] = tasks


def _settled(url: str, admin: str, timeout: float = 45.0) -> list[dict[str, Any]]:
    """Every task once none waits, is granted-but-unrun or runs (the server pumps itself)."""
    end = time.monotonic() + timeout
    with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {admin}"}) as h:
        while True:
            tasks: list[dict[str, Any]] = h.get("/v1/tasks").json()["tasks"]
            if all(t["state"] not in ("waiting", "granted", "running") for t in tasks):
                return tasks
            assert time.monotonic() < end, sorted({t["state"] for t in tasks})
            time.sleep(0.2)


def test_three_analysts_submit_fifty_query_tasks_naming_no_blocks(seeded: Seeded) -> None:
    keys = {"ana": seeded.analyst}
    for name in ("cy", "dee"):
        seeded.keys.add_principal(name, Role.ANALYST, contexts=(ANALYSTS[name],))
        seeded.keys.grant(name, "flights", Permission.READ)
        keys[name] = seeded.keys.create_key(name)
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=60, pump_seconds=0.2)
    submitted: dict[str, list[dict[str, Any]]] = {}
    with thread_server(app) as url:
        threads = [
            threading.Thread(target=_submit_all, args=(url, keys[n], n, submitted))
            for n in ANALYSTS
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert sorted(submitted) == sorted(ANALYSTS)
        tasks = _settled(url, seeded.admin)
    assert len(tasks) == len(ANALYSTS) * PER_ANALYST
    assert {t["state"] for t in tasks} == {"done"}, [
        t["note"] for t in tasks if t["state"] != "done"
    ]

    ledger = seeded.platform.ledger
    reservations = [r for r in ledger.reservations() if r.holder in ANALYSTS]
    # exactly one reservation per granted task, the one the task names, and no other
    assert sorted(r.id for r in reservations) == sorted(t["reservation_id"] for t in tasks)
    by_id = {r.id: r for r in reservations}
    for t in tasks:
        res = by_id[t["reservation_id"]]
        assert res.request_id == f"{t['principal']}:queue:{t['id']}"
        assert res.holder == t["principal"] and res.context == ANALYSTS[t["principal"]]
        assert res.state.value == "closed"  # spent by the query, the rest released
        result = t["result"]
        # the query spent its grant: the answer's cost and blocks are the grant's
        assert Decimal(result["cost"]["epsilon"]) == Decimal(EPSILON)
        assert sorted(result["blocks"]) == sorted(t["blocks"]) == sorted(res.blocks)
        wanted = t["selector"]
        assert len(t["blocks"]) == (2 if "newest" in wanted or "any" in wanted else 1)
        if "range" in wanted:
            assert t["blocks"][0] in ("flights/2013-01-02", "flights/2013-01-03")
        if "newest" in wanted:
            assert sorted(t["blocks"]) == ["flights/2013-01-03", "flights/2013-01-04"]
    # what each block was charged is exactly what the granted queries spent there
    for context in ("team-a", "team-b"):
        for st in ledger.states("flights", context):
            spent = sum(
                Decimal(EPSILON)
                for t in tasks
                if ANALYSTS[t["principal"]] == context and st.block in t["blocks"]
            )
            assert not any(st.reserved), st.block
            assert Decimal(st.charged[0]) / UNIT == spent, st.block
    assert seeded.platform.verify(full=True).ok

"""Several server processes over one ledger: ≥ 16 clients over HTTP hammer overlapping blocks
through 3 uvicorn processes sharing a PostgreSQL database (and 2 sharing a SQLite file);
afterwards no block is overspent, the ledger holds exactly the acknowledged charges, and the
audit log verifies."""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from pg_support import POSTGRES_URL, postgres_database

from blockbudget.budget import Budget
from service.support import process_servers, seed

CLIENTS = 16
CHARGE = Decimal("0.1")  # 10 fit in ε_g = 1 per block and context
REQUESTS = 12  # per client


def _hammer(tmp_path: Path, database: str | None, servers: int) -> None:
    home = tmp_path / "home"
    seeded = seed(home, database_url=database, group_commit=False)
    blocks = [b.block_id for b in seeded.platform.store.blocks("flights")]
    assert len(blocks) == 4
    seeded.platform.close()
    acked: list[tuple[int, list[str], str]] = []
    refused: list[int] = []
    other: list[str] = []
    lock = threading.Lock()
    with process_servers(home, database, servers) as urls:

        def client(i: int) -> None:
            context = "team-a" if i % 2 == 0 else "team-b"
            key = seeded.analyst if context == "team-a" else seeded.admin
            with httpx.Client(base_url=urls[i % len(urls)], timeout=60) as http:
                for j in range(REQUESTS):
                    # Overlapping windows of 2-3 adjacent blocks.
                    start = (i + j) % 3
                    chosen = blocks[start : start + 2 + (j % 2)]
                    r = http.post(
                        "/v1/streams/flights/charges",
                        json={
                            "blocks": chosen,
                            "epsilon": float(CHARGE),
                            "context": context,
                            "request_id": f"c{i}-{j}",
                        },
                        headers=seeded.headers(key),
                    )
                    with lock:
                        if r.status_code == 200:
                            acked.append((i, chosen, context))
                        elif r.status_code == 409:
                            refused.append(i)
                            assert r.json()["error"] == "BudgetExceededError"
                        else:
                            other.append(f"{r.status_code} {r.text[:200]}")

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        verify = httpx.get(
            f"{urls[1]}/v1/audit/verify", headers=seeded.headers(seeded.admin), timeout=120
        ).json()
    assert not other, other[:5]
    assert len(acked) + len(refused) == CLIENTS * REQUESTS
    assert verify["ok"], verify["problems"][:5]
    # Zero overspend: per block and context, the acknowledged charges fit the budget, and the
    # ledger's state is exactly their sum.
    from blockbudget.service import open_platform

    platform = open_platform(home, database, group_commit=False)
    for context in ("team-a", "team-b"):
        for b in blocks:
            n = sum(1 for _, chosen, c in acked if c == context and b in chosen)
            assert n * CHARGE <= 1, (b, context, n)
            left = platform.ledger.state(b, context).remaining
            assert left == str(Budget(epsilon=1 - n * CHARGE, delta="0.000001")), (b, context)
    # Block 1 is in two thirds of the windows: contention used its budget up exactly.
    for context in ("team-a", "team-b"):
        assert sum(1 for _, chosen, c in acked if c == context and blocks[1] in chosen) == 10
    assert platform.verify().ok
    platform.close()


@pytest.mark.skipif(not POSTGRES_URL, reason="needs the PostgreSQL server that make test starts")
def test_many_clients_many_servers_on_postgres(tmp_path: Path) -> None:
    with postgres_database() as url:
        _hammer(tmp_path, url, servers=3)


def test_many_clients_many_servers_on_sqlite(tmp_path: Path) -> None:
    _hammer(tmp_path, None, servers=2)

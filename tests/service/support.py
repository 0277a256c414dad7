"""Shared helpers of the service tests: a seeded platform with principals of every role, real
flights data, and a real uvicorn server in a thread or in other processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from userids_support import make_known

from blockbudget.platform import Platform
from blockbudget.service import KeyStore, Permission, Role, create_app, open_platform

FLIGHT_COLUMNS = ["sched_dep_datetime", "dep_delay", "carrier", "origin"]
DAYS = 4


def flights_csv(path: Path, *, days: int = DAYS, start_day: int = 1) -> Path:
    """``days`` days of January 2013 NYC flights (real data) as a CSV with a ``time`` column."""
    from blockbudget.data.flights import load_flights

    frame = load_flights(columns=FLIGHT_COLUMNS)
    t = frame["sched_dep_datetime"]
    lo = pd.Timestamp(2013, 1, start_day)
    keep = frame[(t >= lo) & (t < lo + pd.Timedelta(days=days))]
    out = keep.rename(columns={"sched_dep_datetime": "time"})[
        ["time", "dep_delay", "carrier", "origin"]
    ]
    out.to_csv(path, index=False)
    return path


def exact_counts(path: Path) -> dict[str, int]:
    """Rows per day key in a CSV written by :func:`flights_csv` (the truth for exact tests)."""
    frame = pd.read_csv(path, parse_dates=["time"])
    return {str(k): int(v) for k, v in frame.groupby(frame["time"].dt.date).size().items()}


@dataclass
class Seeded:
    """A platform with streams ``flights`` (owned by ``owner``) and ``secret`` (no analyst
    access), contexts ``team-a`` / ``team-b``, and one key per principal."""

    platform: Platform
    keys: KeyStore
    admin: str
    owner: str
    analyst: str  # reads flights, bound to team-a
    other: str  # reads secret only, bound to team-b
    csv: Path

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


def seed(home: Path, *, database_url: str | None = None, group_commit: bool = True) -> Seeded:
    platform = open_platform(home, database_url, group_commit=group_commit)
    keys = KeyStore(platform.ledger.engine)
    for c in ("team-a", "team-b"):
        platform.add_context(c, description=f"{c} (test)")
    keys.add_principal("root", Role.ADMIN)
    keys.add_principal("olga", Role.OWNER)
    keys.add_principal("ana", Role.ANALYST, contexts=("team-a",))
    keys.add_principal("bob", Role.ANALYST, contexts=("team-b",))
    app = create_app(platform, keys=keys)
    seeded = Seeded(
        platform=platform,
        keys=keys,
        admin=keys.create_key("root"),
        owner=keys.create_key("olga"),
        analyst=keys.create_key("ana"),
        other=keys.create_key("bob"),
        csv=flights_csv(home / "flights.csv"),
    )
    with TestClient(app) as client:
        h_owner = seeded.headers(seeded.owner)
        r = client.post("/v1/streams", headers=h_owner, json={"name": "flights", "epsilon": 1.0})
        assert r.status_code == 201, r.text
        r = client.post(
            "/v1/streams/flights/ingest",
            headers={**h_owner, "Content-Type": "text/csv"},
            content=seeded.csv.read_bytes(),
        )
        assert r.status_code == 201, r.text
        h_admin = seeded.headers(seeded.admin)
        r = client.post("/v1/streams", headers=h_admin, json={"name": "secret", "epsilon": 1.0})
        assert r.status_code == 201, r.text
        r = client.post(
            "/v1/streams/secret/ingest",
            headers={**h_admin, "Content-Type": "text/csv"},
            content=flights_csv(home / "secret.csv", days=2, start_day=10).read_bytes(),
        )
        assert r.status_code == 201, r.text
    keys.grant("ana", "flights", Permission.READ)
    keys.grant("bob", "secret", Permission.READ)
    return seeded


def ledger_snapshot(
    platform: Platform,
) -> tuple[int, list[tuple[str, str, tuple[int, ...], tuple[int, ...]]]]:
    """(number of audit events, every block state): equal before and after ⇔ nothing changed."""
    states = [
        (s.block, s.context, tuple(s.charged), tuple(s.reserved)) for s in platform.ledger.states()
    ]
    return len(platform.ledger.events()), states


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def thread_server(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread on a free loopback port; yield its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_ready(url)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no server at {url} after {timeout} s")
        time.sleep(0.05)


@contextmanager
def process_servers(home: Path, database: str | None, n: int) -> Iterator[list[str]]:
    """``n`` separate server processes (``python -m uvicorn`` on the service factory) sharing
    one home and database; yield their URLs."""
    env = {
        **os.environ,
        "BLOCKBUDGET_HOME": str(home),
        "BLOCKBUDGET_GROUP_COMMIT": "1",
    }
    if database:
        env["BLOCKBUDGET_DATABASE"] = database
    procs: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for _ in range(n):
            port = free_port()
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "uvicorn",
                        "--factory",
                        "blockbudget.service.server:app_from_env",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--log-level",
                        "warning",
                    ],
                    env=env,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            wait_ready(url, timeout=60)
        yield urls
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def owned_stream(
    client: TestClient,
    seeded: Seeded,
    name: str,
    *,
    by: str,
    column: str,
    csv: str,
    ids_known: bool = True,
) -> list[dict[str, Any]]:
    """Create stream ``name`` as the owner (``by`` user or attribute on ``column``), ingest
    ``csv``, let the analyst read it, and return the blocks as the owner sees them. On a user
    stream, ``ids_known`` makes every block known (:func:`userids_support.make_known`: a
    maximum-id release with a fixed shift for noise) for tests whose point is not the gate."""
    ho = seeded.headers(seeded.owner)
    body = {"name": name, "epsilon": 1.0, "by": by, "column": column}
    r = client.post("/v1/streams", headers=ho, json=body)
    assert r.status_code == 201, r.text
    r = client.post(
        f"/v1/streams/{name}/ingest",
        headers={**ho, "Content-Type": "text/csv"},
        content=csv.encode(),
    )
    assert r.status_code == 201, r.text
    seeded.keys.grant("ana", name, Permission.READ)
    if by == "user" and ids_known:
        make_known(seeded.platform, name)
    blocks: list[dict[str, Any]] = client.get(f"/v1/streams/{name}/blocks", headers=ho).json()
    return blocks

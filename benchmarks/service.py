"""Durable charges per second through the HTTP service, against raw database transactions
measured in the same run; SQLite and PostgreSQL; 1, 16 and 64 concurrent clients; with and
without group commit. Loopback only, bounded loops.

For each backend:

* **raw** (the baseline, measured again right before and right after every configuration, so
  that both see the same state of a shared machine; the ratio uses the higher of the two) —
  one client doing the smallest durable write transaction the database offers, on the same
  kind of database: ``BEGIN``; ``UPDATE t SET v = v + 1 WHERE id = 1``;
  ``COMMIT`` (SQLite: stdlib ``sqlite3``, WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE``;
  PostgreSQL: psycopg, ``synchronous_commit=on``). The "raw single-transaction durable rate".
* **http** — a ``blockbudget serve`` deployment (uvicorn, ``--workers`` processes, default 1)
  on 127.0.0.1 with a stream of 8 real flight-day blocks; N asyncio clients (a lean keep-alive
  HTTP/1.1 client, :class:`LeanConnection`, one connection each) each send
  ``POST /v1/streams/bench/charges`` in a loop (3 overlapping adjacent blocks per charge, a
  fresh request id each): every 200 is a charge durably committed by the ledger (filter
  checked, audit event appended) before the answer. Reports charges/s and p50/p99 latency.
  After each run the **overspend check**: for every block, the ledger's charged budget equals
  exactly the acknowledged charges, fits the capacity, and ``Ledger.verify`` replays the whole
  audit log without a problem.
* **http_noop** — the same clients sending ``GET /v1/whoami`` (authenticated, no write): the
  ceiling of the HTTP stack (uvicorn, FastAPI, the clients) on this machine, reported as
  ``http_noop_per_s`` beside each charge run; ``ratio_vs_http_noop`` shows how close charges get
  to it, i.e. how much of the cost is the ledger.
* **http batch** — at the largest client count, the same charges sent ``--batch`` (default 32)
  per request to ``POST /v1/streams/bench/charges/batch`` (independent charges, each durable
  and all-or-nothing before the answer): the HTTP cost spread over many charges.
* **ledger** — the same charges through :class:`~blockbudget.ledger.Ledger` in-process from N
  threads (no HTTP), to separate the ledger's scaling from the HTTP stack's cost.

``ratio_vs_raw`` = charges/s ÷ the raw rate of that backend in this run. The issue's target:
with group commit, ≥ 10× the raw rate at 64 clients.

PostgreSQL runs when ``--postgres URL`` or (except with ``--quick``)
``BLOCKBUDGET_TEST_POSTGRES_URL`` names a server (run under ``./scripts/with-postgres.sh`` to get
a throwaway one); otherwise its line says skipped. ``--quick`` (the test) runs SQLite with
group commit only and few requests.

Usage: ``python benchmarks/service.py [--quick] [--requests N] [--workers W] [--clients 1,16,64]
[--no-group-off] [--postgres URL] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform as pyplatform
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from blockbudget.budget import Budget
from blockbudget.ledger import Ledger
from blockbudget.service import KeyStore, Role, open_platform

CHARGE = Decimal("0.001")
CAPACITY = 1_000_000.0
BLOCKS = 8
PER_CHARGE = 3


def emit(**row: Any) -> None:
    row.setdefault("nproc", os.cpu_count())
    row.setdefault("python", pyplatform.python_version())
    print(json.dumps(row), flush=True)


# --- the raw baseline ---------------------------------------------------------------------------


class RawBaseline:
    """The smallest durable write transaction of the backend, measured on demand right before
    each configuration (so that both see the same state of a shared, noisy machine)."""

    def __init__(self, backend: str, target: str) -> None:
        self.backend = backend
        if backend == "sqlite":
            self._sqlite = sqlite3.connect(target, isolation_level=None)
            self._sqlite.execute("PRAGMA journal_mode=WAL")
            self._sqlite.execute("PRAGMA synchronous=FULL")
            self._sqlite.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
            self._sqlite.execute("INSERT INTO t VALUES (1, 0)")
        else:
            import psycopg

            dsn = sa.engine.make_url(target).set(drivername="postgresql")
            self._pg = psycopg.connect(dsn.render_as_string(False))
            self._pg.execute("DROP TABLE IF EXISTS bench_raw")
            self._pg.execute("CREATE TABLE bench_raw (id INTEGER PRIMARY KEY, v INTEGER)")
            self._pg.execute("INSERT INTO bench_raw VALUES (1, 0)")
            self._pg.commit()

    def rate(self, n: int) -> float:
        """Transactions per second over ``n`` transactions by one client."""
        start = time.perf_counter()
        if self.backend == "sqlite":
            conn = self._sqlite
            for _ in range(n):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("UPDATE t SET v = v + 1 WHERE id = 1")
                conn.execute("COMMIT")
        else:
            for _ in range(n):
                self._pg.execute("UPDATE bench_raw SET v = v + 1 WHERE id = 1")
                self._pg.commit()
        return n / (time.perf_counter() - start)

    def close(self) -> None:
        if self.backend == "sqlite":
            self._sqlite.close()
        else:
            self._pg.execute("DROP TABLE bench_raw")
            self._pg.commit()
            self._pg.close()


# --- a deployment to measure --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare(home: Path, database: str | None) -> tuple[str, list[str]]:
    """A platform with stream ``bench`` (8 days of real flights → 8 blocks) and an admin key."""
    import pandas as pd

    from blockbudget.data.flights import load_flights
    from blockbudget.store import Blocking, Unit

    platform = open_platform(home, database, group_commit=False)
    try:
        frame = load_flights(columns=["sched_dep_datetime", "dep_delay"])
        t = frame["sched_dep_datetime"]
        day0 = pd.Timestamp(2013, 1, 1)
        keep = frame[(t >= day0) & (t < day0 + pd.Timedelta(days=BLOCKS))]
        csv = home / "bench.csv"
        keep.rename(columns={"sched_dep_datetime": "time"}).to_csv(csv, index=False)
        from datetime import timedelta

        platform.create_stream(
            "bench",
            policy=Budget(epsilon=CAPACITY, delta=0),
            blocking=Blocking(unit=Unit.TIME, column="time", window=timedelta(days=1)),
        )
        platform.ingest("bench", csv)
        platform.add_context("default")  # a new platform has no context
        blocks = [b.block_id for b in platform.store.blocks("bench")]
        keys = KeyStore(platform.ledger.engine)
        keys.add_principal("bench", Role.ADMIN)
        return keys.create_key("bench"), blocks
    finally:
        platform.close()


class Server:
    """One ``uvicorn`` process serving the deployment (group commit on or off)."""

    def __init__(
        self, home: Path, database: str | None, *, group_commit: bool, workers: int = 1
    ) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "BLOCKBUDGET_HOME": str(home),
            "BLOCKBUDGET_GROUP_COMMIT": "1" if group_commit else "0",
        }
        if database:
            env["BLOCKBUDGET_DATABASE"] = database
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "blockbudget.service.server:app_from_env",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--no-access-log",
                "--workers",
                str(workers),
            ],
            env=env,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def window(i: int, j: int, blocks: list[str]) -> list[str]:
    k = (i + j) % (len(blocks) - PER_CHARGE + 1)
    return blocks[k : k + PER_CHARGE]


class LeanConnection:
    """A minimal keep-alive HTTP/1.1 client on one asyncio connection (the load generator).

    The clients share the machine's cores with the server; httpx spends ~2 ms of CPU per request
    (measured), more than the server itself, so the load generator writes pre-encoded requests
    and reads only the status line, the headers it needs and the body."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, url: str) -> LeanConnection:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, f"{host}:{port}")

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()
        )
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        status_line = await self.reader.readuntil(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        while True:
            line = await self.reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def http_run(
    url: str,
    key: str,
    blocks: list[str],
    clients: int,
    per_client: int,
    *,
    noop: bool = False,
    batch: int = 1,
) -> tuple[float, list[float], dict[str, int], int]:
    """Charges/s, latencies (s), acknowledged charges per block, and non-200 answers.

    With ``noop`` the clients send ``GET /v1/whoami`` instead (authenticated, no database
    write): the ceiling of the HTTP stack itself on this machine. With ``batch`` > 1 each
    request carries that many charges (``…/charges/batch``); latencies are per request."""
    latencies: list[float] = []
    acked: dict[str, int] = dict.fromkeys(blocks, 0)
    failed = 0
    headers = {"Authorization": f"Bearer {key}"}

    async def client(i: int) -> None:
        nonlocal failed
        conn = await LeanConnection.open(url)
        try:
            if batch > 1:
                for j in range(0, per_client, batch):
                    items = [
                        {
                            "blocks": window(i, j + k, blocks),
                            "epsilon": float(CHARGE),
                            "context": "default",
                            "request_id": uuid.uuid4().hex,
                        }
                        for k in range(min(batch, per_client - j))
                    ]
                    t0 = time.perf_counter()
                    status, answer = await conn.request(
                        "POST",
                        "/v1/streams/bench/charges/batch",
                        headers,
                        json.dumps({"charges": items}).encode(),
                    )
                    latencies.append(time.perf_counter() - t0)
                    results = json.loads(answer)["results"] if status == 200 else []
                    for item, res in zip(items, results, strict=True):
                        if res["ok"] and res["charge"]["blocks"] == item["blocks"]:
                            for b in item["blocks"]:
                                acked[b] += 1
                    failed += len(items) - sum(1 for res in results if res["ok"])
                return
            for j in range(per_client):
                chosen = window(i, j, blocks)
                body = {
                    "blocks": chosen,
                    "epsilon": float(CHARGE),
                    "context": "default",
                    "request_id": uuid.uuid4().hex,
                }
                t0 = time.perf_counter()
                if noop:
                    status, _ = await conn.request("GET", "/v1/whoami", headers)
                    latencies.append(time.perf_counter() - t0)
                    failed += status != 200
                    continue
                status, answer = await conn.request(
                    "POST", "/v1/streams/bench/charges", headers, json.dumps(body).encode()
                )
                latencies.append(time.perf_counter() - t0)
                if status == 200 and json.loads(answer)["blocks"] == chosen:
                    for b in chosen:
                        acked[b] += 1
                else:
                    failed += 1
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - start
    return clients * per_client / elapsed, latencies, acked, failed


def ledger_run(
    url: str, blocks: list[str], threads: int, per_thread: int, *, group_commit: bool
) -> tuple[float, dict[str, int]]:
    led = Ledger(url, group_commit=group_commit)
    acked: dict[str, int] = dict.fromkeys(blocks, 0)
    lock = threading.Lock()

    def work(i: int) -> None:
        for j in range(per_thread):
            chosen = window(i, j, blocks)
            led.charge(chosen, Budget(epsilon=CHARGE), request_id=uuid.uuid4().hex)
            with lock:
                for b in chosen:
                    acked[b] += 1

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    rate = threads * per_thread / (time.perf_counter() - start)
    led.dispose()
    return rate, acked


def overspend_check(url: str, blocks: list[str], expected: dict[str, int]) -> dict[str, Any]:
    """Charged budget per block == the acknowledged charges, ≤ capacity; the audit verifies."""
    led = Ledger(url)
    try:
        bad = []
        for b in blocks:
            want = Budget(epsilon=Decimal(str(CAPACITY)) - CHARGE * expected[b], delta=0)
            got = led.state(b).remaining
            if got != str(want):
                bad.append(f"{b}: ledger says {got} left, acknowledged charges leave {want}")
        report = led.verify()
        return {
            "overspend_blocks": len(bad),
            "mismatches": bad[:3],
            "verify_ok": report.ok,
            "events": report.events,
        }
    finally:
        led.dispose()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0


def bench_backend(
    name: str, database: str | None, work: Path, args: argparse.Namespace, clients: list[int]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    raw_n = 50 if args.quick else 500
    baseline = RawBaseline(name, str(work / "raw.db") if name == "sqlite" else database or "")

    def raw_now(when: str = "before") -> float:
        rate = baseline.rate(raw_n)
        emit(bench="raw_txn", backend=name, tx_per_s=round(rate, 1), transactions=raw_n, when=when)
        return rate

    def raw_around(run: Any, *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
        """``run(*args, **kwargs)`` between two raw measurements; on a shared machine the raw
        rate swings several-fold within seconds, so ratios use the higher of the two."""
        before = raw_now("before")
        out = run(*args, **kwargs)
        after = raw_now("after")
        return out, before, after

    modes = [True] if args.quick or args.no_group_off else [True, False]
    for group in modes:
        home = work / f"{name}-{'gc' if group else 'nogc'}"
        home.mkdir()
        db = database
        if name == "postgres":
            db = fresh_postgres(database or "", f"bench_{uuid.uuid4().hex[:10]}")
        key, blocks = prepare(home, db)
        ledger_url = db or f"sqlite:///{(home / 'platform.db').resolve()}"
        expected = dict.fromkeys(blocks, 0)
        server = Server(home, db, group_commit=group, workers=args.workers)
        seen = (0, 0)
        try:
            for n in clients:
                per_client = (
                    max(2, int(args.requests / n)) if args.quick else max(5, int(args.requests / n))
                )
                noop_per_client = max(1, per_client // 2) if args.quick else per_client
                noop_rate, _, _, _ = asyncio.run(
                    http_run(server.url, key, blocks, n, noop_per_client, noop=True)
                )
                (rate, lat, acked, failed), raw_before, raw_after = raw_around(
                    asyncio.run, http_run(server.url, key, blocks, n, per_client)
                )
                raw = max(raw_before, raw_after)
                for b, k in acked.items():
                    expected[b] += k
                check = overspend_check(ledger_url, blocks, expected)
                stats = httpx.get(
                    f"{server.url}/v1/service/stats",
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=30,
                ).json()
                batches = stats["batches"] - seen[0]
                requests = stats["requests"] - seen[1]
                seen = (stats["batches"], stats["requests"])
                row = {
                    "bench": "http_charge",
                    "backend": name,
                    "group_commit": group,
                    "clients": n,
                    "charges": n * per_client,
                    "charges_per_s": round(rate, 1),
                    "p50_ms": round(pct(lat, 0.50), 2),
                    "p99_ms": round(pct(lat, 0.99), 2),
                    "raw_tx_per_s": round(raw, 1),
                    "raw_before": round(raw_before, 1),
                    "raw_after": round(raw_after, 1),
                    "ratio_vs_raw": round(rate / raw, 3),
                    "http_noop_per_s": round(noop_rate, 1),
                    "ratio_vs_http_noop": round(rate / noop_rate, 3),
                    "failed": failed,
                    # per-process counters: only meaningful with one server process
                    "mean_batch": round(requests / batches, 2)
                    if batches and args.workers == 1
                    else None,
                    "workers": args.workers,
                    **check,
                }
                emit(**row)
                rows.append(row)
                if n == max(clients) and args.batch > 1:
                    (rate, lat, acked, failed), raw_before, raw_after = raw_around(
                        asyncio.run,
                        http_run(server.url, key, blocks, n, per_client, batch=args.batch),
                    )
                    raw = max(raw_before, raw_after)
                    for b, k in acked.items():
                        expected[b] += k
                    check = overspend_check(ledger_url, blocks, expected)
                    row = {
                        "bench": "http_charge_batch",
                        "backend": name,
                        "group_commit": group,
                        "clients": n,
                        "batch": args.batch,
                        "charges": n * per_client,
                        "charges_per_s": round(rate, 1),
                        "p50_request_ms": round(pct(lat, 0.50), 2),
                        "p99_request_ms": round(pct(lat, 0.99), 2),
                        "raw_tx_per_s": round(raw, 1),
                        "raw_before": round(raw_before, 1),
                        "raw_after": round(raw_after, 1),
                        "ratio_vs_raw": round(rate / raw, 3),
                        "failed": failed,
                        "workers": args.workers,
                        **check,
                    }
                    emit(**row)
                    rows.append(row)
        finally:
            server.stop()
        if not args.quick:
            for n in (1, 64):
                (rate, acked), raw_before, raw_after = raw_around(
                    ledger_run,
                    ledger_url,
                    blocks,
                    n,
                    max(5, args.requests // n),
                    group_commit=group,
                )
                raw = max(raw_before, raw_after)
                for b, k in acked.items():
                    expected[b] += k
                check = overspend_check(ledger_url, blocks, expected)
                row = {
                    "bench": "ledger_charge",
                    "backend": name,
                    "group_commit": group,
                    "threads": n,
                    "charges_per_s": round(rate, 1),
                    "raw_tx_per_s": round(raw, 1),
                    "raw_before": round(raw_before, 1),
                    "raw_after": round(raw_after, 1),
                    "ratio_vs_raw": round(rate / raw, 3),
                    **check,
                }
                emit(**row)
                rows.append(row)
        if name == "postgres":
            drop_postgres(database or "", db or "")
    baseline.close()
    return rows


def fresh_postgres(server_url: str, name: str) -> str:
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.engine.make_url(server_url).set(database=name).render_as_string(False)


def drop_postgres(server_url: str, db: str) -> None:
    name = sa.engine.make_url(db).database
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small bounded run (the test)")
    parser.add_argument("--requests", type=int, default=None, help="charges per client count")
    parser.add_argument(
        "--postgres",
        default=None,
        help="PostgreSQL server URL (default: $BLOCKBUDGET_TEST_POSTGRES_URL, not in --quick)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="scratch folder")
    parser.add_argument("--workers", type=int, default=1, help="server processes (uvicorn)")
    parser.add_argument(
        "--batch", type=int, default=32, help="charges per request in the batch run (1: none)"
    )
    parser.add_argument(
        "--clients", default="1,16,64", help="comma-separated client counts (default 1,16,64)"
    )
    parser.add_argument(
        "--no-group-off", action="store_true", help="skip the runs without group commit"
    )
    args = parser.parse_args()
    if args.requests is None:
        args.requests = 48 if args.quick else 3000
    if args.postgres is None and not args.quick:
        args.postgres = os.environ.get("BLOCKBUDGET_TEST_POSTGRES_URL")
    clients = [int(c) for c in args.clients.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bb-bench-", dir=args.dir))
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:
        rows += bench_backend("sqlite", None, work, args, clients)
        if args.postgres:
            rows += bench_backend("postgres", args.postgres, work, args, clients)
        else:
            emit(bench="skipped", backend="postgres", reason="no PostgreSQL URL given")
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    at64 = {
        r["backend"]: r["ratio_vs_raw"]
        for r in rows
        if r["bench"] == "http_charge" and r["clients"] == 64 and r["group_commit"]
    }
    gc_gain = {}
    for backend in {r["backend"] for r in rows}:
        on = [
            r
            for r in rows
            if r["bench"] == "http_charge"
            and r["backend"] == backend
            and r["clients"] == 64
            and r["group_commit"]
        ]
        off = [
            r
            for r in rows
            if r["bench"] == "http_charge"
            and r["backend"] == backend
            and r["clients"] == 64
            and not r["group_commit"]
        ]
        if on and off:
            gc_gain[backend] = round(on[0]["charges_per_s"] / off[0]["charges_per_s"], 3)
    emit(
        bench="summary",
        quick=args.quick,
        seconds=round(time.perf_counter() - started, 1),
        ratio_vs_raw_at_64_clients=at64,
        group_commit_gain_at_64_clients=gc_gain,
        target_ratio=10,
        overspend_blocks=sum(r["overspend_blocks"] for r in rows),
        all_verified=all(r["verify_ok"] for r in rows),
        median_http_ratio=statistics.median(
            [r["ratio_vs_raw"] for r in rows if r["bench"] == "http_charge"] or [0]
        ),
    )


if __name__ == "__main__":
    main()

"""``GET /readyz``: whether this server can serve now (its database answers), for a load
balancer or an orchestrator's readiness probe. ``/healthz`` stays the liveness probe: it says
the process is up and never touches the database, so a database outage does not get every
server restarted.

The probe runs ``SELECT 1`` on the ledger's engine in a small thread pool of its own and waits
at most :data:`PING_TIMEOUT_SECONDS`: a database that hangs (a dropped network) is reported
``unavailable`` promptly, and probes that pile up wait for the pool's threads instead of
starting more. The answer names no error: the driver's text goes to the server log only.

Example:
    >>> from fastapi import FastAPI
    >>> from fastapi.testclient import TestClient
    >>> import sqlalchemy as sa
    >>> app = FastAPI()
    >>> register_readiness_route(app, engine=sa.create_engine("sqlite://"))
    >>> r = TestClient(app).get("/readyz")
    >>> r.status_code, r.json()["status"], r.json()["database"]
    (200, 'ready', 'ok')
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from blockbudget import __version__
from blockbudget.service.failures import log

__all__ = ["PING_TIMEOUT_SECONDS", "ping_database", "register_readiness_route"]

#: How long ``/readyz`` waits for the database's answer.
PING_TIMEOUT_SECONDS = 2.0


def ping_database(engine: sa.Engine) -> None:
    """Run ``SELECT 1`` on ``engine`` (on PostgreSQL under a statement timeout of
    :data:`PING_TIMEOUT_SECONDS`); raises whatever the driver raises."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            ms = int(PING_TIMEOUT_SECONDS * 1000)
            conn.execute(sa.text(f"SET LOCAL statement_timeout = {ms}"))
        conn.execute(sa.text("SELECT 1")).scalar_one()
        conn.rollback()


def register_readiness_route(app: FastAPI, *, engine: sa.Engine) -> None:
    """Add ``GET /readyz`` (no key needed, like ``/healthz``): 200 ``{"status": "ready",
    "database": "ok"}`` when ``engine``'s database answers ``SELECT 1`` in time, else 503
    ``{"status": "unavailable", "database": "error"}`` (the cause is logged, never answered)."""
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="blockbudget-readyz")

    @app.get("/readyz", tags=["service"], responses={503: {"description": "not ready"}})
    async def readyz() -> JSONResponse:
        """Readiness: whether the database answers (``/healthz`` is liveness)."""
        database = "ok"
        try:
            future = asyncio.wrap_future(pool.submit(ping_database, engine))
            await asyncio.wait_for(future, timeout=PING_TIMEOUT_SECONDS)
        except Exception:
            log.warning("readiness probe: the database did not answer", exc_info=True)
            database = "error"
        ready = database == "ok"
        body: dict[str, Any] = {
            "status": "ready" if ready else "unavailable",
            "database": database,
            "version": __version__,
        }
        return JSONResponse(body, status_code=200 if ready else 503)

"""The service itself over HTTP: liveness, this process's group-commit counters, and the
dashboard's page (its data is ``GET /v1/dashboard``: :mod:`blockbudget.service.dashboard_routes`;
readiness is ``GET /readyz``: :mod:`blockbudget.service.readiness`).
"""

import os
from typing import Annotated

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse

from blockbudget import __version__
from blockbudget.platform import Platform
from blockbudget.service.access import Authenticator, require_role
from blockbudget.service.auth import Principal
from blockbudget.service.dashboard import page

__all__ = ["register_service_routes"]


def register_service_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator
) -> None:
    """Add ``GET /healthz`` and ``GET /dashboard`` (public) and ``GET /v1/service/stats``
    (admins) to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/dashboard", response_class=HTMLResponse, tags=["dashboard"])
    def dashboard_page() -> str:
        return page()

    @app.get("/v1/service/stats", tags=["service"])
    def service_stats(me: Auth) -> dict[str, float | int | bool]:
        """This server process's group-commit counters (admins): batches committed and the
        requests in them."""
        require_role(me)
        stats = platform.group_commit_stats()
        return {
            "pid": os.getpid(),
            "group_commit": stats is not None,
            "batches": stats.batches if stats is not None else 0,
            "requests": stats.requests if stats is not None else 0,
        }

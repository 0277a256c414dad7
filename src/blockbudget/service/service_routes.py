"""The service itself over HTTP: liveness, this process's group-commit counters, the audit
log's high-water mark and its reconciliation, and the dashboard's page (its data is ``GET
/v1/dashboard``: :mod:`blockbudget.service.dashboard_routes`; readiness is ``GET /readyz``:
:mod:`blockbudget.service.readiness`).
"""

import logging
import os
from typing import Annotated, Any

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse

from blockbudget import __version__
from blockbudget.platform import Platform
from blockbudget.service.access import Authenticator, require_role
from blockbudget.service.admin_views import log_admin
from blockbudget.service.auth import Principal
from blockbudget.service.dashboard import page
from blockbudget.service.schema_fields import Flag, Strict

__all__ = ["budgets_state", "register_service_routes"]

log = logging.getLogger("blockbudget.service")


class ReconcileIn(Strict):
    """``POST /v1/service/reconcile``: ``adopt`` reconciles a database that is not the mark's
    (a fresh or another database on these block files)."""

    adopt: Flag = False


def budgets_state(platform: Platform) -> str:
    """``ok``, ``refusing`` (the database is behind its audit log's high-water mark, or the
    mark cannot be read: every write answers 503 until ``blockbudget db reconcile``), ``off``
    (no mark kept) or ``unknown`` (the check itself failed, e.g. the database is down)."""
    if platform.watermark is None:
        return "off"
    try:
        if platform.budget_refusal() is not None:
            return "refusing"
        return "ok" if platform.watermark.policy.enabled else "off"
    except Exception:  # a health answer never fails on this
        log.warning("could not judge the ledger against its high-water mark", exc_info=True)
        return "unknown"


def register_service_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator
) -> None:
    """Add ``GET /healthz`` and ``GET /dashboard`` (public), ``GET /v1/service/stats``,
    ``GET /v1/service/mark`` and ``POST /v1/service/reconcile`` (admins) to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        """Liveness (always 200 while the process answers); ``budgets`` says whether budgets
        are served (``refusing``: behind the audit log's high-water mark)."""
        return {"status": "ok", "version": __version__, "budgets": budgets_state(platform)}

    @app.get("/v1/service/mark", tags=["service"])
    def mark_status(me: Auth) -> dict[str, Any]:
        """The audit log's high-water mark and how the database stands against it (admins;
        judged now)."""
        require_role(me)
        status = platform.mark_status(refresh=True)
        if status is None:
            return {"state": "off", "refusing": False, "mark": None, "message": None}
        return status.to_json()

    @app.post("/v1/service/reconcile", tags=["service"])
    def reconcile(me: Auth, body: ReconcileIn | None = None) -> dict[str, Any]:
        """Bring a database that is behind its high-water mark back (admins; audited as a
        ``reconciled`` event): every block the lost events could have touched counts as spent
        for good, then the mark is re-based. Idempotent; ``"reconciled": false`` when there
        was nothing to do."""
        require_role(me)
        adopt = body.adopt if body is not None else False
        report = platform.reconcile_rollback(adopt=adopt)
        if report.changed:
            log_admin(
                me.name,
                "reconcile",
                "ledger",
                state=report.state.value,
                retired=len(report.retired),
                tombstones=len(report.tombstones),
                adopt=adopt,
            )
        return report.to_json()

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

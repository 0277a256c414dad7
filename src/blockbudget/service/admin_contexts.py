"""Contexts over HTTP: list (everyone: the contexts it may use), register and close (admins).

Times come as Unix seconds (``created_at``, ``closed_at``) and as ISO 8601 UTC (``created``,
``closed``). Registering and closing are audited by the ledger (``context_added``,
``context_closed`` events) and logged as admin changes.
"""

from typing import Annotated

from fastapi import Depends, FastAPI

from blockbudget.platform import Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, require_role, visible_contexts
from blockbudget.service.admin_schemas import ContextAdminOut
from blockbudget.service.admin_views import context_json, log_admin
from blockbudget.service.auth import Principal
from blockbudget.service.params import ContextPath

__all__ = ["register_context_routes"]


def register_context_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator
) -> None:
    """Add ``GET``/``POST /v1/contexts`` and ``POST /v1/contexts/{name}/close`` to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    @app.get("/v1/contexts", tags=["contexts"])
    def list_contexts(me: Auth) -> list[ContextAdminOut]:
        """The registered contexts the caller may use (admins: all, closed ones included)."""
        seen = set(visible_contexts(me, platform.contexts(include_closed=True)))
        infos = platform.context_infos()
        return [ContextAdminOut(**context_json(i)) for i in infos if i.name in seen]

    @app.post("/v1/contexts", status_code=201, tags=["contexts"])
    def add_context(me: Auth, body: sc.ContextIn) -> ContextAdminOut:
        require_role(me)
        info = platform.add_context(body.name, description=body.description)
        log_admin(me.name, "add_context", body.name)
        return ContextAdminOut(**context_json(info))

    @app.post("/v1/contexts/{name}/close", tags=["contexts"])
    def close_context(me: Auth, name: ContextPath) -> ContextAdminOut:
        """Close a context for good (admins; audited): it never spends again and no longer
        keeps exhausted blocks from retiring."""
        require_role(me)
        info = platform.close_context(name)
        log_admin(me.name, "close_context", name)
        return ContextAdminOut(**context_json(info))

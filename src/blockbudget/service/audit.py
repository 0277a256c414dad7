"""The audit log over HTTP (admins): read its events, and replay it to verify the ledger.

``GET /v1/audit/events`` pages through the hash-chained log (events after ``after_seq``, at most
``limit``); ``GET /v1/audit/verify`` replays it (after the last verified checkpoint, or all of
it with ``full``) and checks every block's budget and filter
(:meth:`Platform.verify <blockbudget.platform.Platform.verify>`).
"""

from typing import Annotated

from fastapi import Depends, FastAPI, Query

from blockbudget.platform import Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, require_role
from blockbudget.service.auth import Principal

__all__ = ["register_audit_routes"]


def register_audit_routes(app: FastAPI, *, platform: Platform, authenticate: Authenticator) -> None:
    """Add ``GET /v1/audit/events`` and ``GET /v1/audit/verify`` to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    @app.get("/v1/audit/events", tags=["audit"])
    def audit_events(
        me: Auth,
        after_seq: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    ) -> list[sc.EventOut]:
        require_role(me)
        return [
            sc.EventOut(
                seq=e.seq,
                ts=e.ts,
                kind=e.kind.value,
                request_id=e.request_id,
                context=e.context,
                payload=e.payload,
                hash=e.hash,
            )
            for e in platform.events(after_seq=after_seq, limit=limit)
        ]

    @app.get("/v1/audit/verify", tags=["audit"])
    def audit_verify(me: Auth, full: bool = False) -> sc.VerifyOut:
        require_role(me)
        r = platform.verify(full=full)
        return sc.VerifyOut(
            ok=r.ok,
            events=r.events,
            blocks=r.blocks,
            contexts=r.contexts,
            problems=list(r.problems),
            notes=list(r.notes),
        )

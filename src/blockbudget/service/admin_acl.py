"""A stream's access list over HTTP (admins only): ``GET /v1/streams/{stream}/acl`` — who may
read or owns the stream. Granting and revoking are per principal
(``PUT``/``DELETE /v1/principals/{name}/streams/{stream}``, :mod:`blockbudget.service.admin`)."""

from typing import Annotated

from fastapi import Depends, FastAPI

from blockbudget.platform import Platform
from blockbudget.service.access import Authenticator, require_role
from blockbudget.service.admin_schemas import StreamAclOut
from blockbudget.service.admin_views import acl_json
from blockbudget.service.auth import KeyStore, Principal
from blockbudget.service.params import StreamPath

__all__ = ["register_acl_routes"]


def register_acl_routes(
    app: FastAPI, *, platform: Platform, keys: KeyStore, authenticate: Authenticator
) -> None:
    """Add ``GET /v1/streams/{stream}/acl`` to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    @app.get("/v1/streams/{stream}/acl", tags=["principals"])
    def stream_acl(me: Auth, stream: StreamPath) -> StreamAclOut:
        require_role(me)
        platform.stream(stream)  # 404 for an unknown stream
        return StreamAclOut(**acl_json(stream, keys.stream_access(stream)))

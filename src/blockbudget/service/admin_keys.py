"""API keys over HTTP (admins only): list a principal's keys and rotate one.

* ``GET /v1/principals/{name}/keys`` — ids, issue and expiry times, revoked, active; never a
  secret (a key is shown once, by the call that issues it).
* ``POST /v1/principals/{name}/keys/{key_id}/rotate`` — ``{"grace_seconds": g}``: a new key is
  issued (shown once) and the old one keeps working for ``g`` seconds, then is refused (0: at
  once). The principal's tasks go on (unlike revoking, which cancels them).

Issuing (``POST …/keys``) and revoking (``DELETE …/keys/{key_id}``) are in
:mod:`blockbudget.service.admin`. Expiry is checked against the database on every key lookup,
with the server's clock: servers sharing a database should keep their clocks in sync.
"""

from typing import Annotated

from fastapi import Depends, FastAPI

from blockbudget.service import auth
from blockbudget.service.access import Authenticator, require_role
from blockbudget.service.admin_schemas import KeyOut, RotatedKeyOut, RotateIn
from blockbudget.service.admin_views import key_json, log_admin
from blockbudget.service.auth import KeyStore, Principal, split_key
from blockbudget.service.params import PrincipalPath

__all__ = ["register_key_routes"]


def register_key_routes(app: FastAPI, *, keys: KeyStore, authenticate: Authenticator) -> None:
    """Add the routes above to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    @app.get("/v1/principals/{name}/keys", tags=["principals"])
    def list_keys(me: Auth, name: PrincipalPath) -> list[KeyOut]:
        require_role(me)
        now = auth.now()
        return [KeyOut(**key_json(k, now=now)) for k in keys.keys(name)]

    @app.post("/v1/principals/{name}/keys/{key_id}/rotate", tags=["principals"])
    def rotate_key(
        me: Auth, name: PrincipalPath, key_id: str, body: RotateIn | None = None
    ) -> RotatedKeyOut:
        require_role(me)
        grace = body.grace_seconds if body is not None else 0.0
        new_key, old = keys.rotate_key(key_id, principal=name, grace_seconds=grace)
        authenticate.invalidate()
        parts = split_key(new_key)
        assert parts is not None  # a key just issued is well-formed
        log_admin(me.name, "rotate_key", name, key_id=key_id, new_key_id=parts[0], grace=grace)
        return RotatedKeyOut(
            principal=name,
            api_key=new_key,
            key_id=parts[0],
            replaced=KeyOut(**key_json(old, now=auth.now())),
        )

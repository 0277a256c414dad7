"""Principal administration over HTTP (admins only): show one, change its role, disable,
enable or delete it.

* ``GET /v1/principals/{name}`` — role, state, bound contexts, stream rights, key ids.
* ``PUT /v1/principals/{name}/role`` — ``{"role": "admin" | "owner" | "analyst"}``; contexts
  and stream rights are kept, but an analyst owns nothing (its OWN rights become READ), and
  every waiting, granted or running task of the principal is cancelled (they were admitted
  under the old role; :mod:`blockbudget.service.standing`).
* ``POST /v1/principals/{name}/disable`` and ``…/enable`` — a disabled principal's keys are
  refused (401) until it is enabled again; its active tasks are cancelled and its open
  reservations released.
* ``DELETE /v1/principals/{name}`` — for good: keys revoked, stream rights and context bindings
  dropped, tasks cancelled, open reservations released; the name stays taken (a tombstone),
  since ledger records carry it.

An admin cannot disable, delete or demote itself (another admin must), so a service is never
left without the admin who acted. Every change drops the authenticator's cache and is logged
(:func:`blockbudget.service.admin_views.log_admin`). Keys are checked against the database on
every lookup, so other server processes refuse the keys within their cache's time to live.
"""

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, FastAPI

from blockbudget.errors import InvalidRequestError
from blockbudget.platform import Platform
from blockbudget.service import auth
from blockbudget.service.access import Authenticator, require_role
from blockbudget.service.admin_schemas import PrincipalRecordOut, RoleIn
from blockbudget.service.admin_views import log_admin, principal_json
from blockbudget.service.auth import KeyStore, Principal, PrincipalState, Role
from blockbudget.service.params import PrincipalPath
from blockbudget.service.standing import release_reservations

__all__ = ["record_out", "register_principal_admin_routes"]


def record_out(keys: KeyStore, name: str) -> PrincipalRecordOut:
    """The admin's view of principal ``name``."""
    return PrincipalRecordOut(**principal_json(keys.record(name), now=auth.now()))


def _not_self(me: Principal, name: str, action: str) -> None:
    if me.name == name:
        raise InvalidRequestError(
            f"principal {name!r} cannot {action} itself; another admin must do it"
        )


def register_principal_admin_routes(
    app: FastAPI,
    *,
    keys: KeyStore,
    authenticate: Authenticator,
    on_revoke: Callable[[str, str | None], object] | None = None,
    platform: Platform | None = None,
) -> None:
    """Add the routes above to ``app``.

    Args:
        on_revoke: called with (principal, None) after a principal was disabled, deleted or
            given another role (cancels its tasks).
        platform: whose ledger holds the reservations released when a principal is disabled
            or deleted (None: none released).
    """
    Auth = Annotated[Principal, Depends(authenticate)]

    def stopped(name: str, *, reservations: bool = True) -> None:
        authenticate.invalidate()
        if on_revoke is not None:
            on_revoke(name, None)
        if reservations and platform is not None:
            release_reservations(platform, name)

    @app.get("/v1/principals/{name}", tags=["principals"])
    def show_principal(me: Auth, name: PrincipalPath) -> PrincipalRecordOut:
        require_role(me)
        return record_out(keys, name)

    @app.put("/v1/principals/{name}/role", tags=["principals"])
    def set_role(me: Auth, name: PrincipalPath, body: RoleIn) -> PrincipalRecordOut:
        require_role(me)
        if body.role is not Role.ADMIN:
            _not_self(me, name, "demote")
        before = keys.principal(name).role
        keys.set_role(name, body.role)
        stopped(name, reservations=False)
        log_admin(me.name, "set_role", name, role=body.role.value, was=before.value)
        return record_out(keys, name)

    @app.post("/v1/principals/{name}/disable", tags=["principals"])
    def disable(me: Auth, name: PrincipalPath) -> PrincipalRecordOut:
        require_role(me)
        _not_self(me, name, "disable")
        keys.set_state(name, PrincipalState.DISABLED)
        stopped(name)
        log_admin(me.name, "disable", name)
        return record_out(keys, name)

    @app.post("/v1/principals/{name}/enable", tags=["principals"])
    def enable(me: Auth, name: PrincipalPath) -> PrincipalRecordOut:
        require_role(me)
        keys.set_state(name, PrincipalState.ACTIVE)
        authenticate.invalidate()
        log_admin(me.name, "enable", name)
        return record_out(keys, name)

    @app.delete("/v1/principals/{name}", tags=["principals"])
    def delete(me: Auth, name: PrincipalPath) -> PrincipalRecordOut:
        require_role(me)
        _not_self(me, name, "delete")
        keys.delete_principal(name)
        stopped(name)
        log_admin(me.name, "delete", name)
        return record_out(keys, name)

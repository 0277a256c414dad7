"""Principal administration routes: principals, API keys, context bindings, stream ACLs.

Admins manage everything, ownership included; a stream's owner manages its *readers* only: it
may grant READ to, or revoke READ from, principals that do not own the stream — never make,
demote or remove an owner (a co-owner an admin appointed stays until an admin changes it).
An admin gets the principal's whole record back; an owner only the principal's right on that
one stream (:class:`~blockbudget.service.schemas.StreamAccessOut`), and revoking answers the same
for an unknown principal as for one without access, and granting to an unknown or a deleted
name is the same 404 (a grant needs a live principal; an owner does not learn which names were
ever taken). An admin cannot grant OWN to an analyst (422: only owners and admins own). Every
change to a principal drops the authenticator's cache, so it takes effect at once in this
process (within the cache's time-to-live in others).

Revoking stops the principal's work too (``on_revoke``): revoking its access to a stream cancels
its tasks on that stream, revoking one of its keys cancels all its tasks — their queued grants
are released and running pipelines stop (:func:`blockbudget.service.queue_routes.revoke_tasks`).
Unbinding a principal from a context (``PUT …/contexts`` without it) cancels its tasks in that
context the same way (``on_unbind``): a task may spend only a context its principal is bound to.
"""

from collections.abc import Callable, Sequence
from typing import Annotated

from fastapi import Depends, FastAPI

from blockbudget.errors import InvalidRequestError, UnknownBlockError
from blockbudget.platform import Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, AuthError, require_role, require_stream
from blockbudget.service.admin_acl import register_acl_routes
from blockbudget.service.admin_keys import register_key_routes
from blockbudget.service.admin_principals import record_out, register_principal_admin_routes
from blockbudget.service.admin_schemas import PrincipalRecordOut
from blockbudget.service.admin_views import enable_admin_log, log_admin
from blockbudget.service.auth import (
    KeyStore,
    Permission,
    Principal,
    PrincipalState,
    Role,
    split_key,
)
from blockbudget.service.params import PrincipalPath, StreamPath


def principal_out(p: Principal) -> sc.PrincipalOut:
    """The public form of a principal (never its keys)."""
    return sc.PrincipalOut(
        name=p.name, role=p.role, contexts=list(p.contexts), streams=dict(p.streams)
    )


def register_principal_routes(
    app: FastAPI,
    *,
    platform: Platform,
    keys: KeyStore,
    authenticate: Authenticator,
    on_revoke: Callable[[str, str | None], object] | None = None,
    on_unbind: Callable[[str, Sequence[str]], object] | None = None,
) -> None:
    """Add the ``/v1/whoami``, ``/v1/principals…`` and ``/v1/streams/{stream}/acl`` routes to
    ``app`` (with those of :mod:`~blockbudget.service.admin_principals`,
    :mod:`~blockbudget.service.admin_keys` and :mod:`~blockbudget.service.admin_acl`).

    Args:
        on_revoke: called with (principal, stream) after its access to a stream was revoked,
            and with (principal, None) after one of its keys was revoked.
        on_unbind: called with (principal, contexts) after a non-admin principal was unbound
            from those contexts.
    """
    keystore = keys
    enable_admin_log()

    def revoked(principal: str, stream: str | None) -> None:
        if on_revoke is not None:
            on_revoke(principal, stream)

    Auth = Annotated[Principal, Depends(authenticate)]

    @app.get("/v1/whoami", tags=["principals"])
    def whoami(me: Auth) -> sc.PrincipalOut:
        return principal_out(me)

    @app.post("/v1/principals", status_code=201, tags=["principals"])
    def add_principal(me: Auth, body: sc.PrincipalIn) -> sc.NewKeyOut:
        require_role(me)
        registered = set(platform.contexts())
        unknown = sorted(set(body.contexts) - registered)
        if unknown:
            raise InvalidRequestError(f"unknown context(s) {unknown}: register them first")
        p = keystore.add_principal(body.name, body.role, contexts=tuple(body.contexts))
        key = keystore.create_key(p.name)
        log_admin(me.name, "add_principal", p.name, role=p.role.value, key_id=_key_id(key))
        return sc.NewKeyOut(principal=principal_out(p), api_key=key)

    @app.get("/v1/principals", tags=["principals"])
    def list_principals(me: Auth) -> list[PrincipalRecordOut]:
        """Every principal (deleted ones included) with its state and key ids (no secret)."""
        require_role(me)
        return [record_out(keystore, p.name) for p in keystore.principals()]

    @app.post("/v1/principals/{name}/keys", status_code=201, tags=["principals"])
    def new_key(me: Auth, name: PrincipalPath) -> sc.NewKeyOut:
        require_role(me)
        key = keystore.create_key(name)
        log_admin(me.name, "create_key", name, key_id=_key_id(key))
        return sc.NewKeyOut(principal=principal_out(keystore.principal(name)), api_key=key)

    @app.delete("/v1/principals/{name}/keys/{key_id}", tags=["principals"])
    def revoke_key(me: Auth, name: PrincipalPath, key_id: str) -> sc.PrincipalOut:
        """Revoke one of the principal's keys (the middle part ``bbk_<key id>_…``); every task of
        the principal is cancelled (its grants released, its pipelines stopped). The last
        usable admin key (of an active admin, valid, without expiry) is never revoked: 409,
        issue another admin key first."""
        require_role(me)
        keystore.revoke_key(key_id, principal=name)
        authenticate.invalidate()
        log_admin(me.name, "revoke_key", name, key_id=key_id)
        revoked(name, None)
        return principal_out(keystore.principal(name))

    @app.put("/v1/principals/{name}/contexts", tags=["principals"])
    def set_contexts(me: Auth, name: PrincipalPath, body: sc.ContextsIn) -> sc.PrincipalOut:
        require_role(me)
        unknown = sorted(set(body.contexts) - set(platform.contexts()))
        if unknown:
            raise InvalidRequestError(f"unknown context(s) {unknown}: register them first")
        before = keystore.principal(name)
        out = keystore.set_contexts(name, tuple(body.contexts))
        authenticate.invalidate()
        log_admin(me.name, "set_contexts", name, contexts=list(out.contexts))
        dropped = sorted(set(before.contexts) - set(out.contexts))
        # an admin spends any context, bound or not: unbinding takes nothing from it
        if dropped and out.role is not Role.ADMIN and on_unbind is not None:
            on_unbind(name, dropped)
        return principal_out(out)

    @app.put("/v1/principals/{name}/streams/{stream}", tags=["principals"])
    def grant_stream(
        me: Auth, name: PrincipalPath, stream: StreamPath, body: sc.AclIn
    ) -> sc.PrincipalOut | sc.StreamAccessOut:
        # Admins grant anything; a stream's owner may grant READ on it to non-owners only.
        owner_only = me.role is not Role.ADMIN
        if owner_only:
            require_stream(me, stream, own=True)
            if body.permission is not Permission.READ:
                raise AuthError(403, "only an admin can make another principal an owner")
        platform.stream(stream)
        if owner_only:
            live_for_owner(keystore, name)
        out = keystore.grant(name, stream, body.permission, keep_owner=owner_only)
        authenticate.invalidate()
        log_admin(me.name, "grant", name, stream=stream, permission=body.permission.value)
        if owner_only:
            return sc.StreamAccessOut(
                principal=name, stream=stream, permission=out.permission(stream)
            )
        return principal_out(out)

    @app.delete("/v1/principals/{name}/streams/{stream}", tags=["principals"])
    def revoke_stream(
        me: Auth, name: PrincipalPath, stream: StreamPath
    ) -> sc.PrincipalOut | sc.StreamAccessOut:
        # Admins revoke anything; a stream's owner may revoke READ only, never an owner's right.
        if me.role is Role.ADMIN:
            out = keystore.revoke(name, stream)
            authenticate.invalidate()
            log_admin(me.name, "revoke", name, stream=stream)
            revoked(name, stream)
            return principal_out(out)
        # An owner learns only the right on its own stream afterwards (none): the same answer
        # for an unknown principal as for one that never had access.
        require_stream(me, stream, own=True)
        keystore.revoke_right(name, stream, keep_owner=True)
        authenticate.invalidate()
        log_admin(me.name, "revoke", name, stream=stream)
        revoked(name, stream)
        return sc.StreamAccessOut(principal=name, stream=stream, permission=None)

    register_principal_admin_routes(
        app, keys=keystore, authenticate=authenticate, on_revoke=on_revoke, platform=platform
    )
    register_key_routes(app, keys=keystore, authenticate=authenticate)
    register_acl_routes(app, platform=platform, keys=keystore, authenticate=authenticate)


def live_for_owner(keys: KeyStore, name: str) -> None:
    """404 unless ``name`` is a live principal, worded the same for an unknown and a deleted
    one: an owner may not learn which names were ever taken."""
    try:
        _, state = keys.standing(name)
    except UnknownBlockError:
        state = PrincipalState.DELETED
    if state is PrincipalState.DELETED:
        raise UnknownBlockError(f"no principal {name!r} to grant to (unknown or deleted)")


def _key_id(key: str) -> str:
    """The id part of a key just issued (what the admin log may name)."""
    parts = split_key(key)
    return parts[0] if parts is not None else "?"

"""Principals, API keys, roles, stream ACLs and context bindings, stored beside the ledger.

Who may do what (checked by :mod:`blockbudget.service.access` on every request):

========== ======================================================================================
role       may
========== ======================================================================================
admin      everything: principals and keys, contexts, streams, ACLs, retire, audit log, verify
owner      (data owner) create streams (owning those it creates), ingest into and see exact row
           counts of the streams it owns, grant and revoke *read* access to them (an owner's
           right is changed or removed by an admin only)
analyst    see the blocks' budgets (never row counts) and run DP queries, reservations and
           charges on the streams it may read, in the contexts it is bound to only (on
           user- and attribute-blocked streams by opaque block ids)
========== ======================================================================================

API keys look like ``bbk_<key id>_<secret>``: 16 hex digits of id, 64 of secret (256 random
bits from :mod:`secrets`). Only SHA-256 of the secret is stored ("hashed at rest"): a secret
with 256 bits of entropy cannot be brute-forced from its hash, so a slow password hash would
add nothing. Lookups go by id and compare hashes in constant time (:func:`hmac.compare_digest`).
A key is shown once, when it is created, and can be revoked, or rotated: a new key is issued
and the old one stays valid for a grace period (``expires_at``), then is refused.

A principal is *active*, *disabled* (its keys are refused until an admin enables it again;
nothing else changes) or *deleted*: its keys are revoked, its stream rights and context
bindings dropped, and its row kept as a tombstone, so that the name — which reservations,
tasks and request ids of the ledger still carry — is never given to another principal. Every
request checks the key, its expiry and its principal's state in the database (through the
service's short per-process cache, :class:`~blockbudget.service.access.Authenticator`), so a
change holds in every server process on the same database.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import time

import sqlalchemy as sa

from blockbudget.dbrevision import ensure_current
from blockbudget.errors import (
    InvalidRequestError,
    LastAdminKeyError,
    UnknownKeyError,
    UnknownPrincipalError,
)
from blockbudget.ledger import validate_context_name
from blockbudget.service.identity import AuthError as AuthError
from blockbudget.service.identity import KeyInfo as KeyInfo
from blockbudget.service.identity import Permission as Permission
from blockbudget.service.identity import Principal as Principal
from blockbudget.service.identity import PrincipalRecord as PrincipalRecord
from blockbudget.service.identity import PrincipalState as PrincipalState
from blockbudget.service.identity import Role as Role
from blockbudget.service.identity import validate_principal_name as validate_principal_name

service_metadata = sa.MetaData()

principals = sa.Table(
    "service_principals",
    service_metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("contexts", sa.Text, nullable=False),  # JSON list of bound contexts
    sa.Column("created_at", sa.Float, nullable=False),
    # active | disabled | deleted (a tombstone: the name is never reused, see PrincipalState)
    sa.Column("state", sa.String(16), nullable=False, server_default="active"),
)
api_keys = sa.Table(
    "service_api_keys",
    service_metadata,
    sa.Column("key_id", sa.String(16), primary_key=True),
    sa.Column("principal", sa.String(64), sa.ForeignKey("service_principals.name"), index=True),
    sa.Column("secret_sha256", sa.String(64), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("revoked", sa.Boolean, nullable=False, default=False),
    # Unix time after which the key is refused (a rotated key's grace period); NULL: never
    sa.Column("expires_at", sa.Float, nullable=True),
)
stream_acl = sa.Table(
    "service_stream_acl",
    service_metadata,
    sa.Column("principal", sa.String(64), sa.ForeignKey("service_principals.name")),
    sa.Column("stream", sa.String(256)),
    sa.Column("permission", sa.String(8), nullable=False),
    sa.PrimaryKeyConstraint("principal", "stream"),
)

KEY_PREFIX = "bbk"
#: The longest grace period of a rotated key: 90 days, in seconds.
MAX_GRACE_SECONDS = 90 * 86_400


def now() -> float:
    """The time keys expire against (Unix seconds; a seam for tests)."""
    return time.time()


def hash_secret(secret: str) -> str:
    """SHA-256 of a key's secret, hex (what is stored)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """``(key id, secret)`` of a well-formed key, else None."""
    parts = key.split("_")
    if len(parts) != 3 or parts[0] != KEY_PREFIX or len(parts[1]) != 16 or len(parts[2]) != 64:
        return None
    return parts[1], parts[2]


class KeyStore:
    """Principals, keys and ACLs in the service's database (tables ``service_*``).

    Args:
        engine: the database the ledger uses (SQLite or PostgreSQL).

    Raises:
        SchemaRevisionError: the database needs ``blockbudget db upgrade``.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        ensure_current(engine)
        service_metadata.create_all(engine, checkfirst=True)

    # --- principals ----------------------------------------------------------------------------

    def add_principal(self, name: str, role: Role, *, contexts: tuple[str, ...] = ()) -> Principal:
        """Create a principal (refused if the name exists).

        Raises:
            InvalidRequestError: a bad name or context, or a name already taken.
        """
        principal = Principal(name=name, role=role, contexts=tuple(contexts))
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    principals.insert().values(
                        name=name,
                        role=role.value,
                        contexts=json.dumps(sorted(set(contexts))),
                        created_at=time.time(),
                    )
                )
        except sa.exc.IntegrityError:
            raise InvalidRequestError(
                f"principal {name!r} already exists (the name of a deleted principal is never "
                "reused)"
            ) from None
        return principal

    def set_contexts(self, name: str, contexts: tuple[str, ...]) -> Principal:
        """Bind a principal to exactly these contexts."""
        for c in contexts:
            validate_context_name(c)
        self._require_live(name)
        with self._engine.begin() as conn:
            done = conn.execute(
                principals.update()
                .where(principals.c.name == name)
                .values(contexts=json.dumps(sorted(set(contexts))))
            )
            if done.rowcount == 0:
                raise UnknownPrincipalError(f"unknown principal {name!r}")
        return self.principal(name)

    def principal(self, name: str) -> Principal:
        """A principal with its ACL.

        Raises:
            UnknownBlockError: no principal has this name.
        """
        with self._engine.connect() as conn:
            row = conn.execute(sa.select(principals).where(principals.c.name == name)).first()
            if row is None:
                raise UnknownPrincipalError(f"unknown principal {name!r}")
            acl = conn.execute(
                sa.select(stream_acl.c.stream, stream_acl.c.permission)
                .where(stream_acl.c.principal == name)
                .order_by(stream_acl.c.stream)
            ).all()
        return Principal(
            name=row.name,
            role=Role(row.role),
            contexts=tuple(json.loads(row.contexts)),
            streams=tuple((s, Permission(p)) for s, p in acl),
        )

    def standing(self, name: str) -> tuple[Principal, PrincipalState]:
        """A principal with its ACL and its state (no keys: cheaper than :meth:`record`).

        Raises:
            UnknownBlockError: no principal has this name.
        """
        p = self.principal(name)
        with self._engine.connect() as conn:
            state = conn.execute(
                sa.select(principals.c.state).where(principals.c.name == name)
            ).scalar_one()
        return p, PrincipalState(state)

    def principals(self) -> list[Principal]:
        with self._engine.connect() as conn:
            names = conn.execute(sa.select(principals.c.name).order_by(principals.c.name)).all()
        return [self.principal(row[0]) for row in names]

    # --- keys ----------------------------------------------------------------------------------

    def create_key(self, principal: str) -> str:
        """Issue a new API key for ``principal``; the key is returned once and never stored.

        Raises:
            UnknownBlockError: no such principal.
        """
        self._require_live(principal)
        key_id = secrets.token_hex(8)
        secret = secrets.token_hex(32)
        with self._engine.begin() as conn:
            conn.execute(
                api_keys.insert().values(
                    key_id=key_id,
                    principal=principal,
                    secret_sha256=hash_secret(secret),
                    created_at=time.time(),
                    revoked=False,
                )
            )
        return f"{KEY_PREFIX}_{key_id}_{secret}"

    def revoke_key(self, key_id: str, *, principal: str | None = None) -> None:
        """Revoke a key by its id (the middle part of the key).

        Args:
            key_id: the key's id.
            principal: when given, the key must be this principal's.

        Raises:
            UnknownBlockError: no such key (of ``principal``).
            LastAdminKeyError: the key is valid, its principal an active admin, and no other
                active admin holds a key that is valid and does not expire: revoking it would
                lock every administrator out (nothing is changed).
        """
        row = api_keys.c.key_id == key_id
        if principal is not None:
            row = row & (api_keys.c.principal == principal)
        with self._engine.begin() as conn:
            # The admins' lasting keys are locked first (PostgreSQL; SQLite's BEGIN IMMEDIATE
            # serializes writers anyway), so two concurrent revocations cannot each leave the
            # other's key as the last one and both succeed.
            lasting = self._lasting_admin_keys(conn)
            target = conn.execute(
                sa.select(api_keys.c.principal, api_keys.c.revoked, api_keys.c.expires_at).where(
                    row
                )
            ).first()
            if target is None:
                whose = "" if principal is None else f" of principal {principal!r}"
                raise UnknownKeyError(f"unknown key id {key_id!r}{whose}")
            usable = not target.revoked and (target.expires_at is None or now() < target.expires_at)
            if usable and target.principal in self._active_admins(conn) and not lasting - {key_id}:
                who = target.principal
                raise LastAdminKeyError(
                    f"key {key_id!r} of principal {who!r} is the last usable admin key: revoking "
                    "it would leave no administrator able to sign in. Issue another admin key "
                    f"first (`blockbudget principal key create {who}`, or POST "
                    f"/v1/principals/{who}/keys), then revoke this one. Nothing was changed."
                )
            conn.execute(api_keys.update().where(row).values(revoked=True))

    @staticmethod
    def _active_admins(conn: sa.Connection) -> set[str]:
        who = principals.c
        return set(
            conn.execute(
                sa.select(who.name).where(
                    (who.role == Role.ADMIN.value) & (who.state == PrincipalState.ACTIVE.value)
                )
            ).scalars()
        )

    @staticmethod
    def _lasting_admin_keys(conn: sa.Connection) -> set[str]:
        """The ids of the keys that keep an administrator able to sign in: keys of active admins
        that are not revoked and never expire (a rotated key's grace runs out), locked for
        update."""
        k, who = api_keys.c, principals.c
        return set(
            conn.execute(
                sa.select(k.key_id)
                .join(principals, who.name == k.principal)
                .where(
                    (who.role == Role.ADMIN.value)
                    & (who.state == PrincipalState.ACTIVE.value)
                    & (k.revoked == sa.false())
                    & k.expires_at.is_(None)
                )
                .with_for_update()
            ).scalars()
        )

    def authenticate(self, key: str) -> Principal | None:
        """The principal a key belongs to, or None for a malformed, unknown or revoked key."""
        parts = split_key(key)
        if parts is None:
            return None
        key_id, secret = parts
        k, who = api_keys.c, principals.c
        with self._engine.connect() as conn:
            row = conn.execute(
                sa.select(k.principal, k.secret_sha256, k.revoked, k.expires_at, who.state)
                .join(principals, who.name == k.principal)
                .where(k.key_id == key_id)
            ).first()
        if row is None or row.revoked or row.state != PrincipalState.ACTIVE.value:
            return None
        if row.expires_at is not None and now() >= row.expires_at:
            return None
        if not hmac.compare_digest(row.secret_sha256, hash_secret(secret)):
            return None
        return self.principal(row.principal)

    def keys(self, principal: str) -> list[KeyInfo]:
        """The principal's keys, oldest first (ids and dates only: secrets are never stored).

        Raises:
            UnknownBlockError: no such principal.
        """
        self.principal(principal)
        with self._engine.connect() as conn:
            return self._keys_of(conn, [principal]).get(principal, [])

    @staticmethod
    def _keys_of(conn: sa.Connection, names: list[str]) -> dict[str, list[KeyInfo]]:
        k = api_keys.c
        rows = conn.execute(
            sa.select(k.key_id, k.principal, k.created_at, k.revoked, k.expires_at)
            .where(k.principal.in_(names))
            .order_by(k.created_at, k.key_id)
        ).all()
        out: dict[str, list[KeyInfo]] = {}
        for r in rows:
            info = KeyInfo(r.key_id, r.principal, r.created_at, bool(r.revoked), r.expires_at)
            out.setdefault(r.principal, []).append(info)
        return out

    def rotate_key(
        self, key_id: str, *, principal: str, grace_seconds: float = 0.0
    ) -> tuple[str, KeyInfo]:
        """Issue a new key for ``principal`` and retire its key ``key_id``: the old key stays
        valid for ``grace_seconds`` (0: refused at once), then is refused. Active tasks are
        left alone (the principal keeps working under the new key).

        Returns:
            The new key (shown once) and the old key's record after the change.

        Raises:
            UnknownBlockError: no such key of ``principal``.
            InvalidRequestError: a negative grace or one over :data:`MAX_GRACE_SECONDS`, or the
                key is revoked or expired already.
        """
        if not grace_seconds >= 0 or math.isinf(grace_seconds):
            raise InvalidRequestError(f"grace_seconds must be finite and >= 0, got {grace_seconds}")
        if grace_seconds > MAX_GRACE_SECONDS:
            raise InvalidRequestError(
                f"the grace period must be at most 90 days ({MAX_GRACE_SECONDS} seconds), "
                f"got {grace_seconds / 86_400:.15g} days ({grace_seconds:.15g} seconds)"
            )
        at = now()
        old = next((k for k in self.keys(principal) if k.key_id == key_id), None)
        if old is None:
            raise UnknownKeyError(f"unknown key id {key_id!r} of principal {principal!r}")
        if not old.valid_at(at):
            raise InvalidRequestError(
                f"key {key_id!r} of principal {principal!r} is revoked or expired already; "
                "issue a new key instead of rotating it"
            )
        new_key = self.create_key(principal)
        ends = at + grace_seconds
        if old.expires_at is not None:
            ends = min(ends, old.expires_at)  # rotating never lengthens a key's life
        change = {"revoked": True} if grace_seconds == 0 else {"expires_at": ends}
        with self._engine.begin() as conn:
            conn.execute(api_keys.update().where(api_keys.c.key_id == key_id).values(**change))
        return new_key, next(k for k in self.keys(principal) if k.key_id == key_id)

    # --- administration ------------------------------------------------------------------------

    def record(self, name: str) -> PrincipalRecord:
        """The principal with its state and keys.

        Raises:
            UnknownBlockError: no such principal.
        """
        p = self.principal(name)
        with self._engine.connect() as conn:
            row = conn.execute(
                sa.select(principals.c.state, principals.c.created_at).where(
                    principals.c.name == name
                )
            ).one()
            keys = self._keys_of(conn, [name]).get(name, [])
        return PrincipalRecord(p, PrincipalState(row.state), row.created_at, tuple(keys))

    def records(self) -> list[PrincipalRecord]:
        """Every principal (deleted ones included), by name."""
        with self._engine.connect() as conn:
            names = conn.execute(sa.select(principals.c.name).order_by(principals.c.name)).all()
        return [self.record(row[0]) for row in names]

    def _require_live(self, name: str) -> None:
        if self.record(name).state is PrincipalState.DELETED:
            raise InvalidRequestError(f"principal {name!r} is deleted; a deleted one never returns")

    def set_role(self, name: str, role: Role) -> Principal:
        """Give a principal another role. Its contexts and stream rights are kept, except that
        an analyst owns nothing: made an analyst, its OWN rights become READ (in the same
        transaction).

        Raises:
            UnknownBlockError: no such principal.
            InvalidRequestError: the principal is deleted.
        """
        self._require_live(name)
        with self._engine.begin() as conn:
            conn.execute(
                principals.update().where(principals.c.name == name).values(role=role.value)
            )
            if role is Role.ANALYST:
                conn.execute(
                    stream_acl.update()
                    .where(
                        (stream_acl.c.principal == name)
                        & (stream_acl.c.permission == Permission.OWN.value)
                    )
                    .values(permission=Permission.READ.value)
                )
        return self.principal(name)

    def set_state(self, name: str, state: PrincipalState) -> PrincipalRecord:
        """Disable or enable a principal (delete with :meth:`delete_principal`).

        Raises:
            UnknownBlockError: no such principal.
            InvalidRequestError: the principal is deleted, or ``state`` is DELETED.
        """
        if state is PrincipalState.DELETED:
            raise InvalidRequestError("delete a principal with delete_principal, not set_state")
        self._require_live(name)
        with self._engine.begin() as conn:
            conn.execute(
                principals.update().where(principals.c.name == name).values(state=state.value)
            )
        return self.record(name)

    def delete_principal(self, name: str) -> PrincipalRecord:
        """Delete a principal for good: revoke its keys, drop its stream rights and context
        bindings, keep its name as a tombstone (never reused). Deleting twice is a no-op.

        Raises:
            UnknownBlockError: no such principal.
        """
        self.record(name)
        with self._engine.begin() as conn:
            conn.execute(api_keys.update().where(api_keys.c.principal == name).values(revoked=True))
            conn.execute(stream_acl.delete().where(stream_acl.c.principal == name))
            conn.execute(
                principals.update()
                .where(principals.c.name == name)
                .values(state=PrincipalState.DELETED.value, contexts="[]")
            )
        return self.record(name)

    def stream_access(self, stream: str) -> list[tuple[str, Permission]]:
        """Who has a right on ``stream``: (principal, permission), by name."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(stream_acl.c.principal, stream_acl.c.permission)
                .where(stream_acl.c.stream == stream)
                .order_by(stream_acl.c.principal)
            ).all()
        return [(r.principal, Permission(r.permission)) for r in rows]

    # --- ACLs ----------------------------------------------------------------------------------

    def grant(
        self, principal: str, stream: str, permission: Permission, *, keep_owner: bool = False
    ) -> Principal:
        """Give ``principal`` ``permission`` on ``stream`` (replacing any earlier one).

        Args:
            principal, stream, permission: whose right, on which stream, and which.
            keep_owner: refuse (403) if ``principal`` owns ``stream`` now — what a stream's
                owner (not an admin) may do: manage readers, never change an owner's right.
                Checked in the transaction that writes, so a concurrent promotion cannot slip
                between the check and the change.

        Raises:
            UnknownBlockError: no such principal.
            AuthError: ``keep_owner`` and ``principal`` owns ``stream``.
            InvalidRequestError: OWN for an analyst (make it an owner first).
        """
        self._require_live(principal)
        with self._engine.begin() as conn:
            if permission is Permission.OWN:
                role = conn.execute(
                    sa.select(principals.c.role).where(principals.c.name == principal)
                ).scalar_one()
                if role == Role.ANALYST.value:
                    raise InvalidRequestError(
                        f"principal {principal!r} is an analyst and cannot own stream "
                        f"{stream!r}: only an owner or an admin may hold OWN (change its role "
                        "first, or grant READ)"
                    )
            self._delete_acl(conn, principal, stream, keep_owner=keep_owner)
            conn.execute(
                stream_acl.insert().values(
                    principal=principal, stream=stream, permission=permission.value
                )
            )
        return self.principal(principal)

    def revoke(self, principal: str, stream: str, *, keep_owner: bool = False) -> Principal:
        """Remove ``principal``'s right on ``stream``.

        Raises:
            AuthError: ``keep_owner`` and ``principal`` owns ``stream`` (as :meth:`grant`).
        """
        self.revoke_right(principal, stream, keep_owner=keep_owner)
        return self.principal(principal)

    def revoke_right(self, principal: str, stream: str, *, keep_owner: bool = False) -> None:
        """Remove ``principal``'s right on ``stream`` if it has one, without looking the
        principal up (nothing happens for an unknown name).

        Raises:
            AuthError: ``keep_owner`` and ``principal`` owns ``stream`` (as :meth:`grant`).
        """
        with self._engine.begin() as conn:
            self._delete_acl(conn, principal, stream, keep_owner=keep_owner)

    @staticmethod
    def _delete_acl(conn: sa.Connection, principal: str, stream: str, *, keep_owner: bool) -> None:
        row = (stream_acl.c.principal == principal) & (stream_acl.c.stream == stream)
        if not keep_owner:
            conn.execute(stream_acl.delete().where(row))
            return
        # Delete only a non-owner right: if an owner right remains (now, or written by a
        # concurrent admin before this delete), refuse and roll back.
        conn.execute(stream_acl.delete().where(row & (stream_acl.c.permission != "own")))
        held = conn.execute(sa.select(stream_acl.c.permission).where(row)).first()
        if held is not None:
            raise AuthError(
                403,
                f"principal {principal!r} owns stream {stream!r}: only an admin can change or "
                "remove an owner's right",
            )

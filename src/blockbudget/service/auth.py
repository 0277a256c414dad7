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
A key is shown once, when it is created, and can be revoked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from enum import Enum

import sqlalchemy as sa

from blockbudget.dbrevision import ensure_current
from blockbudget.errors import BlockBudgetError, InvalidRequestError, UnknownBlockError
from blockbudget.ledger import validate_context_name

service_metadata = sa.MetaData()

principals = sa.Table(
    "service_principals",
    service_metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("contexts", sa.Text, nullable=False),  # JSON list of bound contexts
    sa.Column("created_at", sa.Float, nullable=False),
)
api_keys = sa.Table(
    "service_api_keys",
    service_metadata,
    sa.Column("key_id", sa.String(16), primary_key=True),
    sa.Column("principal", sa.String(64), sa.ForeignKey("service_principals.name"), index=True),
    sa.Column("secret_sha256", sa.String(64), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("revoked", sa.Boolean, nullable=False, default=False),
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
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-@")


class AuthError(BlockBudgetError):
    """Raised by the service when a request is not authenticated (401) or not authorized (403).

    Attributes:
        status: 401 or 403.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Role(Enum):
    """What a principal is (see the module docstring)."""

    ADMIN = "admin"
    OWNER = "owner"
    ANALYST = "analyst"


class Permission(Enum):
    """A principal's right on one stream: READ (analysts: budgets and DP queries) or OWN (data
    owners: ingest, exact row counts, granting READ)."""

    READ = "read"
    OWN = "own"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller.

    Attributes:
        name: unique name (letters, digits and ``_ . : - @``, at most 64).
        role: admin, owner or analyst.
        contexts: the contexts whose budget this principal may spend (admins: any).
        streams: stream → permission (admins and owners of a stream see it regardless).
    """

    name: str
    role: Role
    contexts: tuple[str, ...]
    streams: tuple[tuple[str, Permission], ...] = ()

    def __post_init__(self) -> None:
        validate_principal_name(self.name)
        if not isinstance(self.role, Role):
            raise InvalidRequestError(f"role must be a Role, got {self.role!r}")
        for c in self.contexts:
            validate_context_name(c)

    def permission(self, stream: str) -> Permission | None:
        """This principal's right on ``stream`` from the ACL (None: none)."""
        for s, p in self.streams:
            if s == stream:
                return p
        return None


def validate_principal_name(name: object) -> str:
    """Raise InvalidRequestError unless ``name`` is a valid principal name; return it."""
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= 64
        or not set(name) <= _NAME_CHARS
        or not name[0].isalnum()
    ):
        raise InvalidRequestError(
            "a principal name is 1-64 letters, digits and _ . : - @, starting with a letter or "
            f"digit; got {name!r}"
        )
    return name


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
            raise InvalidRequestError(f"principal {name!r} already exists") from None
        return principal

    def set_contexts(self, name: str, contexts: tuple[str, ...]) -> Principal:
        """Bind a principal to exactly these contexts."""
        for c in contexts:
            validate_context_name(c)
        with self._engine.begin() as conn:
            done = conn.execute(
                principals.update()
                .where(principals.c.name == name)
                .values(contexts=json.dumps(sorted(set(contexts))))
            )
            if done.rowcount == 0:
                raise UnknownBlockError(f"unknown principal {name!r}")
        return self.principal(name)

    def principal(self, name: str) -> Principal:
        """A principal with its ACL.

        Raises:
            UnknownBlockError: no principal has this name.
        """
        with self._engine.connect() as conn:
            row = conn.execute(sa.select(principals).where(principals.c.name == name)).first()
            if row is None:
                raise UnknownBlockError(f"unknown principal {name!r}")
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
        self.principal(principal)
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
        """
        row = api_keys.c.key_id == key_id
        if principal is not None:
            row = row & (api_keys.c.principal == principal)
        with self._engine.begin() as conn:
            done = conn.execute(api_keys.update().where(row).values(revoked=True))
        if done.rowcount == 0:
            whose = "" if principal is None else f" of principal {principal!r}"
            raise UnknownBlockError(f"unknown key id {key_id!r}{whose}")

    def authenticate(self, key: str) -> Principal | None:
        """The principal a key belongs to, or None for a malformed, unknown or revoked key."""
        parts = split_key(key)
        if parts is None:
            return None
        key_id, secret = parts
        with self._engine.connect() as conn:
            row = conn.execute(
                sa.select(api_keys.c.principal, api_keys.c.secret_sha256, api_keys.c.revoked).where(
                    api_keys.c.key_id == key_id
                )
            ).first()
        if row is None or row.revoked:
            return None
        if not hmac.compare_digest(row.secret_sha256, hash_secret(secret)):
            return None
        return self.principal(row.principal)

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
        """
        self.principal(principal)
        with self._engine.begin() as conn:
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

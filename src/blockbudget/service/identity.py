"""Who a caller is, as values: roles, principal states, stream permissions, principals, what
is known of their API keys, and the refusal of an unauthenticated or unauthorized request (see
:mod:`blockbudget.service.auth` for the rules and the store; it re-exports every name here)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from blockbudget.errors import BlockBudgetError, InvalidRequestError
from blockbudget.ledger import validate_context_name

#: What a principal's name looks like: 1–64 letters, digits and ``_ . : - @``, first a letter
#: or digit.
PRINCIPAL_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}")


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


class PrincipalState(Enum):
    """Whether a principal's keys work (see the module docstring)."""

    ACTIVE = "active"
    DISABLED = "disabled"
    DELETED = "deleted"


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
        """This principal's right on ``stream`` from the ACL (None: none). OWN gives owner
        powers only to an owner or an admin: for an analyst it reads as READ (the one place
        every owner power is checked through).

        Example:
            >>> p = Principal("ana", Role.ANALYST, (), (("flights", Permission.OWN),))
            >>> p.permission("flights")
            <Permission.READ: 'read'>
        """
        for s, p in self.streams:
            if s == stream:
                if p is Permission.OWN and self.role is Role.ANALYST:
                    return Permission.READ
                return p
        return None


@dataclass(frozen=True)
class KeyInfo:
    """What is known of an API key besides its secret (never stored).

    Attributes:
        key_id: the middle part of ``bbk_<key id>_<secret>``.
        principal: whose key it is.
        created_at: Unix time of issue.
        revoked: revoked by an admin (or by deleting its principal).
        expires_at: Unix time after which it is refused (a rotated key), or None.
    """

    key_id: str
    principal: str
    created_at: float
    revoked: bool
    expires_at: float | None

    def valid_at(self, now: float) -> bool:
        """Whether the key authenticates at Unix time ``now`` (its principal aside)."""
        return not self.revoked and (self.expires_at is None or now < self.expires_at)


@dataclass(frozen=True)
class PrincipalRecord:
    """A principal as an admin sees it: rights, state and key ids (never secrets).

    Attributes:
        principal: the principal (role, bound contexts, stream rights).
        state: active, disabled or deleted.
        created_at: Unix time of creation.
        keys: its keys, oldest first.
    """

    principal: Principal
    state: PrincipalState
    created_at: float
    keys: tuple[KeyInfo, ...]


def validate_principal_name(name: object) -> str:
    """Raise InvalidRequestError unless ``name`` is a valid principal name; return it."""
    if not isinstance(name, str) or not PRINCIPAL_NAME_PATTERN.fullmatch(name):
        raise InvalidRequestError(
            "a principal name is 1-64 letters, digits and _ . : - @, starting with a letter or "
            f"digit; got {name!r}"
        )
    return name

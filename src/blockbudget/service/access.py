"""Authentication, authorization and the mapping of refusals to HTTP statuses.

Every check here runs *before* the platform is asked to do anything, so a refused request is
answered without touching the ledger (nothing reserved, nothing charged):

* 401 — no key, or a malformed, unknown or revoked key;
* 403 — a valid key whose principal may not do this: wrong role, no ACL entry for the stream,
  or a context the principal is not bound to;
* 404 — an unknown stream, block or reservation (only after the ACL check, so that an analyst
  cannot probe which streams exist);
* 409 — refused by the state of the ledger: budget exceeded, retired block, a reservation that
  is closed, expired or overdrawn, a store conflict, a request id reused with other arguments,
  a stream name already taken, a task already decided, revoking the last usable admin key;
* 422 — a malformed request: bad budget, bad selection, unknown column or context, bad data;
  or stored rows that could not be processed (a stable code, never the exception's text:
  :mod:`blockbudget.service.failures`);
* 500 — a bug or a broken ledger: a stable code; the cause goes to the server log only;
* 503 — budgets unavailable: the database is behind the audit log's high-water mark kept
  beside the block files (restored from an older backup), or the mark cannot be read; the
  message names ``blockbudget db reconcile`` (:mod:`blockbudget.store.rollback`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from fastapi import Request
from fastapi.responses import JSONResponse

from blockbudget.errors import (
    BlockBudgetError,
    BudgetExceededError,
    DataError,
    HighWaterMarkError,
    InvalidBudgetError,
    InvalidRequestError,
    LastAdminKeyError,
    NothingAffordableError,
    RequestIdConflictError,
    ReservationError,
    RetiredBlockError,
    StoreConflictError,
    StreamExistsError,
    TaskStateError,
    UnknownBlockError,
    UnknownContextError,
)
from blockbudget.service.auth import AuthError, KeyStore, Permission, Principal, Role
from blockbudget.service.failures import ConcealedError, log, new_reference

__all__ = [
    "CONFLICT_ERRORS",
    "AuthError",
    "Authenticator",
    "error_response",
    "internal_error_response",
    "require_context",
    "require_role",
    "require_stream",
    "status_of",
    "visible_contexts",
]


#: The refusals answered 409 (with their subclasses): the ledger's state refused the request.
CONFLICT_ERRORS: tuple[type[BlockBudgetError], ...] = (
    BudgetExceededError,
    RetiredBlockError,
    ReservationError,
    StoreConflictError,
    StreamExistsError,
    RequestIdConflictError,
    TaskStateError,
    LastAdminKeyError,
)


def status_of(exc: BlockBudgetError) -> int:
    """The HTTP status of a platform refusal (see the module docstring)."""
    if isinstance(exc, (AuthError, ConcealedError)):
        return exc.status
    if isinstance(exc, HighWaterMarkError):
        return 503  # budgets unavailable until reconciled: the caller did nothing wrong
    if isinstance(exc, UnknownContextError):
        return 422
    if isinstance(exc, UnknownBlockError):
        return 404
    if isinstance(exc, CONFLICT_ERRORS):
        return 409
    if isinstance(exc, (InvalidRequestError, InvalidBudgetError, DataError)):
        return 422
    return 500  # AuditError, InternalError: a broken ledger or a bug, never a client's fault


def error_response(
    exc: BlockBudgetError, *, describe: Callable[[BlockBudgetError], str] = str
) -> JSONResponse:
    """The JSON body of a refusal: ``{"error": class, "detail": message}`` (plus ``code`` for a
    concealed failure). A 500 — a broken ledger or a bug, whose text may come from anywhere — is
    logged and answered by :func:`internal_error_response` instead.

    Args:
        exc: the error.
        describe: its message as the caller may read it (block keys it may not see replaced).
    """
    status = status_of(exc)
    if status >= 500 and not isinstance(exc, (ConcealedError, HighWaterMarkError)):
        return internal_error_response(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    body: dict[str, Any] = {"error": type(exc).__name__, "detail": describe(exc)}
    if isinstance(exc, NothingAffordableError) or (
        isinstance(exc, BudgetExceededError) and exc.exact
    ):  # exact budgets as decimal strings, no block named
        body["refusal"] = exc.refusal_json()
    if isinstance(exc, ConcealedError):
        body["code"] = exc.failure.code
    return JSONResponse(body, status_code=status, headers=headers)


def internal_error_response(exc: BaseException) -> JSONResponse:
    """A 500 that says nothing of ``exc``: a stable code and a reference to the server log."""
    ref = new_reference()
    log.error("internal error (reference %s)", ref, exc_info=exc)
    return JSONResponse(
        {
            "error": "InternalError",
            "code": "internal_error",
            "detail": f"the service hit an internal error; an operator can find the cause in "
            f"the server log under reference {ref}",
        },
        status_code=500,
    )


class Authenticator:
    """Resolves API keys to principals, with a short in-process cache.

    A key is looked up at most once per ``ttl_seconds`` per process, so revoking a key or
    changing an ACL takes effect within that time in every process (at once in the process
    that made the change: :meth:`invalidate`); 0 disables the cache. Only keys the key store
    verified are cached (the cache maps the full key, secret included, to its principal or to
    None for a refused key). Lookups are single-flight: when an entry expires under load, one
    request looks the key up and the others wait for its answer instead of each querying the
    database.
    """

    def __init__(self, keys: KeyStore, *, ttl_seconds: float = 2.0) -> None:
        self._keys = keys
        self._ttl = ttl_seconds
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        #: key → (the cache generation it started in, its answer to come)
        self._inflight: dict[str, tuple[int, asyncio.Future[Principal | None]]] = {}
        self._lock = threading.Lock()
        self._generation = 0

    def invalidate(self) -> None:
        """Forget every cached lookup (after a change to principals, keys or ACLs)."""
        with self._lock:
            self._cache.clear()
            self._generation += 1

    async def __call__(self, request: Request) -> Principal:
        key = request.headers.get("x-api-key")
        auth = request.headers.get("authorization")
        if key is None and auth is not None and auth.lower().startswith("bearer "):
            key = auth[7:].strip()
        if not key:
            raise AuthError(
                401, "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key'"
            )
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < self._ttl:
            principal = hit[1]
        else:
            principal = await self._lookup(key)
        if principal is None:
            raise AuthError(401, "the API key is malformed, unknown or revoked")
        request.state.principal = principal  # refusals are worded for the caller
        return principal

    async def _lookup(self, key: str) -> Principal | None:
        joined = self._inflight.get(key)
        # A lookup begun before the last invalidation may have read the state before the
        # change: it is not joined (nor cached, below), so a change is seen at once.
        pending = joined[1] if joined is not None and joined[0] == self._generation else None
        if pending is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this request itself was cancelled
                return await self._lookup(key)  # the looking-up request went away: retry
        future: asyncio.Future[Principal | None] = asyncio.get_running_loop().create_future()
        started, generation = time.monotonic(), self._generation
        self._inflight[key] = (generation, future)
        try:
            principal = await anyio.to_thread.run_sync(self._keys.authenticate, key)
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                if generation == self._generation:  # no invalidation raced the lookup
                    self._cache[key] = (started, principal)
            future.set_result(principal)
            return principal
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, no "never retrieved" warning
            raise
        except BaseException:
            future.cancel()
            raise
        finally:
            if self._inflight.get(key, (0, None))[1] is future:
                del self._inflight[key]


def require_role(principal: Principal, *roles: Role) -> None:
    """403 unless the principal has one of ``roles`` (admins always pass)."""
    if principal.role is Role.ADMIN or principal.role in roles:
        return
    allowed = ", ".join(r.value for r in (Role.ADMIN, *roles))
    raise AuthError(
        403, f"principal {principal.name!r} has role {principal.role.value}; this needs {allowed}"
    )


def require_stream(principal: Principal, stream: str, *, own: bool = False) -> Permission | None:
    """403 unless the principal may read (or, with ``own``, owns) ``stream``. Returns the ACL
    permission (None for admins without one)."""
    permission = principal.permission(stream)
    if principal.role is Role.ADMIN:
        return permission
    if permission is Permission.OWN or (permission is Permission.READ and not own):
        return permission
    need = "own" if own else "read"
    raise AuthError(403, f"principal {principal.name!r} has no {need} access to stream {stream!r}")


def require_context(principal: Principal, context: str) -> None:
    """403 unless the principal is bound to ``context`` (admins may use any)."""
    if principal.role is Role.ADMIN or context in principal.contexts:
        return
    bound = ", ".join(principal.contexts) or "none"
    raise AuthError(
        403,
        f"principal {principal.name!r} may spend budget only in its bound context(s) ({bound}), "
        f"not in {context!r}",
    )


def resolve_context(principal: Principal, context: str | None) -> str:
    """The context a request spends in: the one it names (403 unless the principal is bound to
    it, see :func:`require_context`) or, when it names none, the principal's only bound context.

    Raises:
        AuthError: 403 for a named context the principal is not bound to.
        InvalidRequestError: no context named and the principal is not bound to exactly one
            (there is no implicit ``default`` context).
    """
    if context is not None:
        require_context(principal, context)
        return context
    if len(principal.contexts) == 1:
        return principal.contexts[0]
    bound = ", ".join(principal.contexts) or "none"
    raise InvalidRequestError(
        f"the request names no 'context' and principal {principal.name!r} is bound to "
        f"{len(principal.contexts)} context(s) ({bound}); a request without a context spends "
        "in the principal's bound context only when it has exactly one — name the context"
    )


def visible_contexts(principal: Principal, registered: list[str]) -> list[str]:
    """The registered contexts a principal may see."""
    if principal.role is Role.ADMIN:
        return registered
    return [c for c in registered if c in principal.contexts]

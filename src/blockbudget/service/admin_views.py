"""The JSON forms of administration: principals, keys, stream ACLs and contexts, and the admin
event log line.

One form for the HTTP routes (:mod:`blockbudget.service.admin_principals` and its siblings)
and for the local CLI (``blockbudget principal …`` with ``--home``), so that ``--json`` prints
the same document whether it ran against a server or a home folder. Times are ISO 8601 UTC;
secrets never appear (a key's secret is shown once, by the call that issues it). No FastAPI or
pydantic here: the local CLI imports this module without the service extra.

Every admin change is logged as one JSON line on the ``blockbudget.admin`` logger (who did
what to whom, never a secret): the ledger's audit chain records budget events only, and its
verification replays every event kind, so administrative events are not added to it.

Example:
    >>> iso(0.0)
    '1970-01-01T00:00:00Z'
    >>> key_json(KeyInfo("00ff", "ana", 0.0, False, 60.0), now=30.0)["active"]
    True
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from blockbudget.ledger import ContextInfo
from blockbudget.service.auth import KeyInfo, Permission, PrincipalRecord

__all__ = [
    "acl_json",
    "admin_log",
    "context_json",
    "enable_admin_log",
    "iso",
    "key_json",
    "log_admin",
    "principal_json",
]

admin_log = logging.getLogger("blockbudget.admin")


def iso(ts: float | None) -> str | None:
    """Unix time as ISO 8601 UTC with a ``Z`` (None stays None)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def key_json(key: KeyInfo, *, now: float) -> dict[str, Any]:
    """A key's id and dates (never its secret); ``active``: it authenticates now (its
    principal's state aside)."""
    return {
        "key_id": key.key_id,
        "created": iso(key.created_at),
        "expires": iso(key.expires_at),
        "revoked": key.revoked,
        "active": key.valid_at(now),
    }


def principal_json(record: PrincipalRecord, *, now: float) -> dict[str, Any]:
    """A principal as an admin sees it: role, state, bound contexts, stream rights, key ids."""
    p = record.principal
    return {
        "name": p.name,
        "role": p.role.value,
        "state": record.state.value,
        "created": iso(record.created_at),
        "contexts": list(p.contexts),
        "streams": {s: perm.value for s, perm in p.streams},
        "keys": [key_json(k, now=now) for k in record.keys],
    }


def acl_json(stream: str, entries: list[tuple[str, Permission]]) -> dict[str, Any]:
    """Who may read or owns ``stream`` (admins read every stream without an entry)."""
    return {"stream": stream, "principals": {name: perm.value for name, perm in entries}}


def context_json(info: ContextInfo) -> dict[str, Any]:
    """A context with its times as Unix seconds (``created_at``, ``closed_at``, as before) and
    as ISO 8601 UTC (``created``, ``closed``)."""
    return {
        "name": info.name,
        "description": info.description,
        "created_at": info.created_at,
        "closed_at": info.closed_at,
        "created": iso(info.created_at),
        "closed": iso(info.closed_at),
    }


def enable_admin_log() -> None:
    """Make admin lines visible: INFO on ``blockbudget.admin``, written to stderr unless some
    handler (e.g. the server's request log) is configured up the logger chain."""
    admin_log.setLevel(logging.INFO)
    if not admin_log.hasHandlers():
        admin_log.addHandler(logging.StreamHandler())


def log_admin(actor: str, action: str, target: str, **details: object) -> None:
    """Log one admin change as a JSON line: ``actor`` did ``action`` to ``target``.

    ``details`` must hold no secret (key ids, roles, streams, contexts, grace periods only).
    """
    line = {"event": "admin", "actor": actor, "action": action, "target": target, **details}
    admin_log.info(json.dumps(line, sort_keys=True, default=str))

"""The platform as a service: an HTTP API with API keys, roles, per-stream ACLs and contexts bound
to principals; a live budget dashboard; a client for the CLI. See ``docs/service.md``.

Import :func:`create_app` / :func:`open_platform` to embed the API; ``blockbudget serve`` runs it.
The names are imported on first use, so that ``blockbudget.service.auth`` (principals and keys)
and ``blockbudget.service.client`` work without FastAPI installed.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blockbudget.service.app import create_app, open_platform
    from blockbudget.service.auth import KeyStore, Permission, Principal, Role

_WHERE = {
    "create_app": "blockbudget.service.app",
    "open_platform": "blockbudget.service.app",
    "KeyStore": "blockbudget.service.auth",
    "Permission": "blockbudget.service.auth",
    "Principal": "blockbudget.service.auth",
    "Role": "blockbudget.service.auth",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = ["KeyStore", "Permission", "Principal", "Role", "create_app", "open_platform"]

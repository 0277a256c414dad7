"""The platform as a service: an HTTP API with API keys, roles, per-stream ACLs and contexts bound
to principals; a live budget dashboard; a client for the CLI. See ``docs/service.md``.

Import :func:`create_app` / :func:`open_platform` to embed the API; ``blockbudget serve`` runs it.
"""

from blockbudget.service.app import create_app, open_platform
from blockbudget.service.auth import KeyStore, Permission, Principal, Role

__all__ = ["KeyStore", "Permission", "Principal", "Role", "create_app", "open_platform"]

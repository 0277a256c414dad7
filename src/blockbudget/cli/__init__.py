"""The ``blockbudget`` command line (Typer + rich).

Every command works on a platform home folder (``--home``, or ``$BLOCKBUDGET_HOME``, default
``./.blockbudget``) — or, given ``--server URL --api-key KEY`` (or ``$BLOCKBUDGET_SERVER`` and
``$BLOCKBUDGET_API_KEY``), against a running ``blockbudget serve`` as that key's principal.
Errors from the platform or the server are printed as one clear line with exit code 2; nothing
is charged (or sealed) by a refused command. A command that spends names its context with
``--context`` (or ``$BLOCKBUDGET_CONTEXT``); there is no implicit one.

Start-up imports only Typer, rich and blockbudget's value modules: the platform, OpenDP and the
HTTP client are imported inside the commands that use them, so ``--help`` is quick and the local
commands need no service extra (``--server`` and ``serve`` say to install it).

Modules by concern: :mod:`.common` (apps, options, helpers), :mod:`.data` (streams, contexts,
ingest, blocks), :mod:`.queries` (DP queries, audit), :mod:`.server` (``serve``, demo),
:mod:`.admin` and :mod:`.admin_backends` (principals, keys, stream access), :mod:`.tasks`
(the scheduler queue, server mode), :mod:`.experiments`, :mod:`.releases` (live stream
releases), :mod:`.afford` and :mod:`.dry_run`, :mod:`.db` (the database's schema revision:
``db upgrade|current|check``). Importing this package registers every command on :data:`app`
(the console entry ``blockbudget.cli:app``).
"""

from blockbudget.cli import admin, afford, data, db, experiments, queries, releases, server, tasks
from blockbudget.cli.common import app
from blockbudget.cli.data import render_blocks
from blockbudget.cli.queries import print_verify

__all__ = [
    "admin",
    "afford",
    "app",
    "data",
    "db",
    "experiments",
    "main",
    "print_verify",
    "queries",
    "releases",
    "render_blocks",
    "server",
    "tasks",
]


def main() -> None:  # pragma: no cover - console-script entry
    app()

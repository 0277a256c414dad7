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
(the console entry is :func:`main`).
"""

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from blockbudget.cli import admin, afford, data, db, experiments, queries, releases, server, tasks
from blockbudget.cli.common import app

__all__ = [
    "admin",
    "afford",
    "app",
    "data",
    "db",
    "experiments",
    "main",
    "queries",
    "releases",
    "server",
    "tasks",
]


def main(argv: list[str] | None = None) -> None:
    """The console entry (``blockbudget``): run :data:`app`. With ``--json`` among the
    arguments, a usage error (an unknown option, a missing argument, a value of the wrong type)
    is printed as the ``{"error": {"type": "UsageError", "message"}}`` document on stdout, with
    exit code 2 like every other refused command; without it, as Typer prints it (stderr).

    Example:
        >>> import contextlib, io, json
        >>> out = io.StringIO()
        >>> with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        ...     main(["stream", "list", "--jsn", "--json"])
        >>> json.loads(out.getvalue())["error"]["type"]
        'UsageError'
    """
    import sys

    from typer.exceptions import TyperException

    from blockbudget.cli.common import emit_json

    args = sys.argv[1:] if argv is None else list(argv)
    with help_width():
        if "--json" not in args:
            app(args=args, prog_name="blockbudget")  # exits, as Typer does
            return
        try:
            code = app(args=args, prog_name="blockbudget", standalone_mode=False)
        except typer.Abort:
            emit_json({"error": {"type": "Aborted", "message": "aborted"}})
            sys.exit(1)
        except TyperException as exc:  # click's UsageError and the other ClickExceptions
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            emit_json({"error": {"type": "UsageError", "message": message}})
            sys.exit(2)
        sys.exit(code if isinstance(code, int) else 0)


#: The width ``--help`` is laid out at without a terminal (piped into a file, a pager, grep).
HELP_WIDTH = 120
#: Typer's variable for the width of its help.
WIDTH_VAR = "TERMINAL_WIDTH"


@contextmanager
def help_width() -> Iterator[None]:
    """Lay Typer's help out :data:`HELP_WIDTH` columns wide while the command runs when stdout is
    not a terminal and neither ``$COLUMNS`` nor ``$TERMINAL_WIDTH`` says a width.

    Without a terminal rich assumes 80 columns, and a command with many options (``serve``)
    then clips its help mid-word (``[env var: BLOCKBUDGET_DATA…``). Typer reads
    ``$TERMINAL_WIDTH`` when it first formats help (its ``rich_utils``, imported only then, so
    that a command that prints no help never pays for it); both the variable and Typer's width
    are put back afterwards. A terminal's own width is left alone.
    """
    import os
    import sys

    tty = getattr(sys.stdout, "isatty", None)
    if (tty is not None and tty()) or os.environ.get("COLUMNS") or os.environ.get(WIDTH_VAR):
        yield
        return
    loaded = sys.modules.get("typer.rich_utils")
    before = getattr(loaded, "MAX_WIDTH", None)
    os.environ[WIDTH_VAR] = str(HELP_WIDTH)
    if loaded is not None:
        setattr(loaded, "MAX_WIDTH", HELP_WIDTH)  # noqa: B010 (a module found at run time)
    try:
        yield
    finally:
        os.environ.pop(WIDTH_VAR, None)
        now = sys.modules.get("typer.rich_utils")
        if now is not None:
            setattr(now, "MAX_WIDTH", before)  # noqa: B010

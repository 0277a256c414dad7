"""``blockbudget db``: the schema revision of the platform's database, and upgrading it.

``db upgrade`` brings a database to this release's schema (run it after installing a new
release, before starting servers; a second run does nothing; a role lacking the privileges
is told so in one line, exit 2, nothing changed); ``db current`` shows where a
database stands; ``db check`` exits 1 when the database needs ``db upgrade`` (or a newer
release), 0 when this release can open it. Each takes ``--json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from blockbudget.cli.common import DEFAULT_HOME, HomeOpt, JsonOpt, app, console, emit_json
from blockbudget.cli.common import handle_errors as _handle_errors
from blockbudget.errors import InvalidRequestError

db_app = typer.Typer(
    help="The database's schema revision: upgrade, current, check.", no_args_is_help=True
)
app.add_typer(db_app, name="db")

DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database",
        envvar="BLOCKBUDGET_DATABASE",
        help="SQLAlchemy URL of the database (default: the SQLite file in --home).",
    ),
]


def database_url(home: Path, database: str | None) -> str:
    """The URL ``--database`` names, else the SQLite file of the platform in ``home``."""
    return database or f"sqlite:///{(home / 'platform.db').resolve()}"


def upgrade_command(home: Path, database: str | None) -> str:
    """The ``db upgrade`` command line for this database (for messages)."""
    return "blockbudget db upgrade " + (
        f"--database {_hidden(database)}" if database else f"--home {home}"
    )


def _hidden(url: str) -> str:
    import sqlalchemy as sa

    return sa.engine.make_url(url).render_as_string(hide_password=True)


@db_app.command("upgrade")
@_handle_errors
def upgrade(
    home: HomeOpt = DEFAULT_HOME, database: DatabaseOpt = None, as_json: JsonOpt = False
) -> None:
    """Bring the database to this release's schema (a no-op when it is there already)."""
    import sqlalchemy as sa

    from blockbudget.migrations import upgrade as run_upgrade

    if database is None:
        home.mkdir(parents=True, exist_ok=True)
    try:
        report = run_upgrade(database_url(home, database))
    except sa.exc.DBAPIError as exc:
        refusal = _privilege_refusal(exc)
        if refusal is None:
            raise
        raise InvalidRequestError(refusal) from None
    if as_json:
        emit_json(report.to_json())
        return
    if report.fresh:
        console.print(
            f"created the schema of {report.database}, which was empty: every table of "
            f"this release, at schema revision {report.after}",
            markup=False,
        )
    elif report.applied:
        before = (
            f"revision {report.before}"
            if report.before
            else "a schema written before revisions were tracked"
        )
        console.print(
            f"upgraded {report.database} from {before} to revision {report.after} "
            f"(ran {', '.join(report.applied)})",
            markup=False,
        )
    else:
        console.print(
            f"{report.database} is at {report.after} already: nothing to do", markup=False
        )


#: SQLSTATE of PostgreSQL's "permission denied" and "must be owner of" refusals.
_INSUFFICIENT_PRIVILEGE = "42501"


def _privilege_refusal(exc: Exception) -> str | None:
    """The one-line message for an upgrade the database role may not make (None for any
    other database error). The upgrade runs in one transaction, so nothing was changed."""
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    said = str(orig).strip().splitlines()[0] if orig is not None and str(orig).strip() else ""
    if code == _INSUFFICIENT_PRIVILEGE:
        return (
            f"the database refused the upgrade: {said} — the role running `db upgrade` must "
            "own blockbudget's tables and may create in their schema (run it as the tables' "
            "owner, or grant CREATE on the schema); nothing was changed"
        )
    if "readonly database" in said:
        return (
            f"the database refused the upgrade: {said} — the database file and its folder "
            "must be writable by the user running `db upgrade`; nothing was changed"
        )
    return None


@db_app.command("current")
@_handle_errors
def current(
    home: HomeOpt = DEFAULT_HOME, database: DatabaseOpt = None, as_json: JsonOpt = False
) -> None:
    """Show the database's schema revision and this release's head."""
    from blockbudget.migrations import status

    found = status(database_url(home, database))
    if as_json:
        emit_json(found.to_json())
        return
    console.print(
        f"{found.database}: revision {found.revision or '(none)'}, head {found.head} — "
        f"{found.state.value}",
        markup=False,
    )


@db_app.command("check")
@_handle_errors
def check(
    home: HomeOpt = DEFAULT_HOME, database: DatabaseOpt = None, as_json: JsonOpt = False
) -> None:
    """Exit 0 when this release can open the database (current or empty), 1 when it needs
    ``blockbudget db upgrade`` (or was written by a newer release)."""
    from blockbudget.migrations import SchemaState, status

    found = status(database_url(home, database))
    if as_json:
        emit_json(found.to_json())
    elif found.usable:
        console.print(f"{found.database}: {found.state.value} (head {found.head})", markup=False)
    else:
        hint = (
            f"run `{upgrade_command(home, database)}`"
            if found.state is SchemaState.BEHIND
            else "a newer release wrote it"
        )
        console.print(
            f"{found.database}: {found.state.value} (revision {found.revision or '(none)'}, "
            f"head {found.head}): {hint}",
            markup=False,
        )
    if not found.usable:
        raise typer.Exit(code=1)

"""``blockbudget db``: the schema revision of the platform's database, upgrading it, and its
audit log's high-water mark.

``db upgrade`` brings a database to this release's schema (run it after installing a new
release, before starting servers; a second run does nothing; a role lacking the privileges
is told so in one line, exit 2, nothing changed); ``db current`` shows where a
database stands; ``db check`` exits 1 when the database needs ``db upgrade`` (or a newer
release), 0 when this release can open it. ``db mark`` shows how the database stands against
the audit log's high-water mark kept beside the block files (exit 1 while budgets are
refused); ``db reconcile`` (an administrator's: locally with the database's rights, or with
``--server`` and an admin key) brings a database restored behind its mark back, counting every
block the lost events could have touched as spent. Each takes ``--json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from blockbudget.cli.common import (
    DEFAULT_HOME,
    HomeOpt,
    JsonOpt,
    KeyOpt,
    ServerOpt,
    YesOpt,
    app,
    confirm_irreversible,
    console,
    emit_json,
    remote,
)
from blockbudget.cli.common import handle_errors as _handle_errors
from blockbudget.errors import InvalidRequestError

db_app = typer.Typer(
    help="The database's schema revision (upgrade, current, check) and its audit log's "
    "high-water mark (mark, reconcile).",
    no_args_is_help=True,
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
DataRootOpt = Annotated[
    str | None,
    typer.Option(
        "--data-root",
        envvar="BLOCKBUDGET_DATA_ROOT",
        help="Where the block files (and the audit log's high-water mark) live: a directory or "
        "a URI such as s3://bucket/prefix (default: blocks/ in --home).",
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


def _platform(home: Path, database: str | None, data_root: str | None) -> Any:
    from blockbudget.platform import Platform

    return Platform(home, database_url=database, data_root=data_root)


def _remote_or_none(server: str | None, api_key: str | None) -> Any:
    return remote(server, api_key)


@db_app.command("mark")
@_handle_errors
def mark(
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    data_root: DataRootOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the audit log's high-water mark kept beside the block files and how the database
    stands against it; exit 1 while budgets are refused (run `blockbudget db reconcile`)."""
    client = _remote_or_none(server, api_key)
    if client is not None:
        doc = dict(client.call("GET", "/v1/service/mark"))
    else:
        platform = _platform(home, database, data_root)
        try:
            status = platform.mark_status(refresh=True)
            doc = (
                {"state": "off", "refusing": False, "mark": None, "message": None}
                if status is None
                else status.to_json()
            )
        finally:
            platform.close()
    if as_json:
        emit_json(doc)
    else:
        found = doc.get("mark")
        where = f" at {doc['where']}" if doc.get("where") else ""
        at = (
            f"mark{where}: epoch {found['epoch']}, seq {found['seq']}"
            if found
            else f"no mark{where} yet"
        )
        seq = doc.get("ledger_seq")
        console.print(
            f"{doc['state']}: {at}; the ledger's log ends at seq {seq}"
            + (f"; policy {doc['policy']}" if doc.get("policy") else ""),
            markup=False,
            soft_wrap=True,
        )
        if doc.get("message"):
            console.print(doc["message"], markup=False, soft_wrap=True)
    if doc.get("refusing"):
        raise typer.Exit(code=1)


@db_app.command("reconcile")
@_handle_errors
def reconcile(
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt",
            help="Reconcile a database that is not the mark's (a fresh or another database on "
            "these block files): make the mark this database's.",
        ),
    ] = False,
    yes: YesOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    database: DatabaseOpt = None,
    data_root: DataRootOpt = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Bring a database restored behind its audit log's high-water mark back (administrators):
    every block the lost events could have touched — every live block, and every block whose
    part files no catalog row names — is retired for good (counted as spent in every context),
    audited as a `reconciled` event, then the mark is re-based on the log's new head. Does
    nothing when the database reaches its mark. Asks first unless --yes."""
    confirm_irreversible(
        "retire every live block for good (all its budget counted as spent) and re-base the "
        "high-water mark?",
        yes=yes,
        as_json=as_json,
    )
    client = _remote_or_none(server, api_key)
    if client is not None:
        doc = dict(client.call("POST", "/v1/service/reconcile", json={"adopt": adopt}))
    else:
        platform = _platform(home, database, data_root)
        try:
            doc = platform.reconcile_rollback(adopt=adopt).to_json()
        finally:
            platform.close()
    if as_json:
        emit_json(doc)
        return
    if not doc["reconciled"]:
        why = "has no mark yet" if doc["state"] == "none" else "reaches its high-water mark"
        console.print(f"nothing to reconcile: the database {why}", markup=False)
        return
    before, after = doc["before"], doc["after"]
    console.print(
        f"reconciled: the database was {doc['state']} (its mark: epoch {before['epoch']}, seq "
        f"{before['seq']}); {len(doc['retired'])} live block(s) retired for good, "
        f"{len(doc['tombstones'])} block(s) of orphan part files registered retired; the mark "
        f"is re-based at epoch {after['epoch']}, seq {after['seq']}"
        + (
            " (the reconciliation was already committed: only the mark moved)"
            if doc["replayed"]
            else ""
        ),
        markup=False,
        soft_wrap=True,
    )

"""Reading a database's schema revision and upgrading it (what ``blockbudget db`` runs).

Alembic is configured here, in code: the scripts are this package's ``env.py`` and
``versions/`` (shipped in the wheel), so no ``alembic.ini`` is needed anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from blockbudget.dbrevision import (
    HEAD_REVISION,
    LEGACY_TABLES,
    SCHEMA_LOCK_KEY,
    read_revision,
)
from blockbudget.errors import SchemaRevisionError

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

_HERE = Path(__file__).resolve().parent


class SchemaState(Enum):
    """Where a database stands against this release's head revision."""

    CURRENT = "current"  # at the head: every open works
    EMPTY = "empty"  # none of the platform's tables: the first open creates them at the head
    BEHIND = "behind"  # an older revision, or tables from before revisions: upgrade first
    UNKNOWN = "unknown"  # a revision this release does not know (written by a newer one)


@dataclass(frozen=True)
class SchemaStatus:
    """A database's schema revision.

    Attributes:
        database: its URL, password hidden.
        revision: the revision in ``alembic_version`` (None: none recorded).
        head: this release's head revision.
        state: what that means (see :class:`SchemaState`).
    """

    database: str
    revision: str | None
    head: str
    state: SchemaState

    @property
    def usable(self) -> bool:
        """Whether this release opens the database without ``blockbudget db upgrade``."""
        return self.state in (SchemaState.CURRENT, SchemaState.EMPTY)

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``blockbudget db current --json`` prints."""
        return {
            "database": self.database,
            "revision": self.revision,
            "head": self.head,
            "state": self.state.value,
            "usable": self.usable,
        }


@dataclass(frozen=True)
class UpgradeReport:
    """What ``blockbudget db upgrade`` did.

    Attributes:
        database: the URL, password hidden.
        before: the revision before (None: none recorded — empty, or from before revisions).
        after: the revision now (the head).
        applied: the revisions run, oldest first (empty: it was at the head already).
        fresh: the database was empty (no revision and none of the platform's tables): every
            table was created.
    """

    database: str
    before: str | None
    after: str
    applied: tuple[str, ...]
    fresh: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON form ``blockbudget db upgrade --json`` prints."""
        return {
            "database": self.database,
            "before": self.before,
            "after": self.after,
            "applied": list(self.applied),
            "changed": bool(self.applied),
            "fresh": self.fresh,
        }


def target_metadata() -> list[sa.MetaData]:
    """The metadata of every table set of the platform's database (the head schema)."""
    from blockbudget.ledger.schema import metadata as ledger
    from blockbudget.service import blocknames  # noqa: F401  (adds service_secrets)
    from blockbudget.service.auth import service_metadata
    from blockbudget.service.dashboard_index import metadata as dashboard
    from blockbudget.store.catalog import metadata as store
    from blockbudget.tasks import rows  # noqa: F401  (adds the task table's time indexes)
    from blockbudget.tasks.table import metadata as tasks
    from blockbudget.userids import releases_table

    assert releases_table.metadata is not None
    return [ledger, store, service_metadata, tasks, releases_table.metadata, dashboard]


def alembic_config() -> Config:
    """Alembic's configuration for this package's scripts (no ini file)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_HERE))
    config.set_main_option("path_separator", "os")
    # r<rev id>_<slug>.py: a module name mypy and Python accept (ids start with digits).
    config.set_main_option("file_template", "r%%(rev)s_%%(slug)s")
    return config


def script_directory() -> ScriptDirectory:
    """The migration scripts shipped with this release."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def _shown(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def _open(target: str | sa.Engine) -> tuple[sa.Engine, bool]:
    """An engine for ``target`` (a URL gets the ledger's durable SQLite settings) and whether
    it is ours to dispose of."""
    if isinstance(target, sa.Engine):
        return target, False
    from blockbudget.ledger.db import open_engine

    return open_engine(target, busy_timeout_seconds=60.0)[0], True


def _missing_sqlite_file(target: str | sa.Engine) -> bool:
    """Whether ``target`` names an SQLite file that does not exist (reading must not create
    it)."""
    url = target.url if isinstance(target, sa.Engine) else sa.engine.make_url(target)
    path = url.database
    return url.get_backend_name() == "sqlite" and bool(path) and not Path(str(path)).exists()


def _state(conn: sa.Connection, revision: str | None) -> SchemaState:
    if revision == HEAD_REVISION:
        return SchemaState.CURRENT
    if revision is None:
        tables = set(sa.inspect(conn).get_table_names())
        return SchemaState.BEHIND if LEGACY_TABLES & tables else SchemaState.EMPTY
    known = {script.revision for script in script_directory().walk_revisions()}
    return SchemaState.BEHIND if revision in known else SchemaState.UNKNOWN


def status(target: str | sa.Engine) -> SchemaStatus:
    """The schema revision of the database at ``target`` (a URL or an engine); reading it
    changes nothing (a missing SQLite file is reported empty, not created)."""
    if _missing_sqlite_file(target):
        url = target.url if isinstance(target, sa.Engine) else sa.engine.make_url(target)
        shown = url.render_as_string(hide_password=True)
        return SchemaStatus(shown, None, HEAD_REVISION, SchemaState.EMPTY)
    engine, owned = _open(target)
    try:
        with engine.connect() as conn:
            revision = read_revision(conn)
            state = _state(conn, revision)
        return SchemaStatus(_shown(engine), revision, HEAD_REVISION, state)
    finally:
        if owned:
            engine.dispose()


def _applied(before: str | None, after: str | None) -> tuple[str, ...]:
    if after is None or before == after:
        return ()
    scripts = script_directory().iterate_revisions(after, before or "base")
    return tuple(reversed([script.revision for script in scripts]))


def upgrade(target: str | sa.Engine) -> UpgradeReport:
    """Bring the database at ``target`` to the head revision, in one transaction that holds
    the writers' lock (concurrent upgrades and opens wait; the second upgrade does nothing).

    A database written before revisions were tracked runs the baseline, which adopts its
    tables; an empty one gets every table.

    Raises:
        SchemaRevisionError: the database is at a revision this release does not know, or the
            baseline cannot adopt it (e.g. a ledger of schema version 1); nothing changed.
    """
    from alembic import command

    engine, owned = _open(target)
    try:
        with engine.connect() as conn, conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(SCHEMA_LOCK_KEY)))
            before = read_revision(conn)
            state = _state(conn, before)
            if state is SchemaState.UNKNOWN:
                raise SchemaRevisionError(
                    f"the database is at revision {before!r}, which this blockbudget does not "
                    f"know (its head is {HEAD_REVISION!r}): a newer release wrote it; use that "
                    "release (nothing was changed)"
                )
            config = alembic_config()
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
            after = read_revision(conn)
        return UpgradeReport(
            _shown(engine),
            before,
            after or HEAD_REVISION,
            _applied(before, after),
            fresh=state is SchemaState.EMPTY,
        )
    finally:
        if owned:
            engine.dispose()


def require_current(target: str | sa.Engine, *, command: str = "blockbudget db upgrade") -> None:
    """The start check of ``blockbudget serve``: pass a current or empty database, refuse any
    other with one message that names ``command``.

    Raises:
        SchemaRevisionError: the database needs an upgrade (or a newer release).
    """
    found = status(target)
    if found.usable:
        return
    if found.state is SchemaState.UNKNOWN:
        raise SchemaRevisionError(
            f"the database {found.database} is at schema revision {found.revision!r}, which "
            f"this blockbudget does not know (its head is {found.head!r}): a newer release "
            "wrote it; serve it with that release"
        )
    at = "no recorded revision" if found.revision is None else f"revision {found.revision!r}"
    raise SchemaRevisionError(
        f"the database {found.database} has an older schema ({at}; this blockbudget needs "
        f"{found.head!r}): run `{command}` first, then start the server again"
    )

"""The schema revision every table set of the platform's database checks when it opens.

The database's tables (the ledger's ``ledger_*``, the store's ``store_*``, the service's
``service_*`` and ``user_id_releases``) evolve with one Alembic history
(:mod:`blockbudget.migrations`); the revision a database is at is the one row of Alembic's
table ``alembic_version``. This module is the only part of it the low layers see: the head
revision id of this release (:data:`HEAD_REVISION`, kept equal to the migration scripts' head
by a test), and :func:`ensure_current`, which each table set calls before it creates its
tables lazily (``create_all``):

* no ``alembic_version`` and none of the platform's tables: a fresh database. It is stamped
  with :data:`HEAD_REVISION` and each table set then creates its tables at their head shape
  when first opened (a quick start: nothing is migrated);
* ``alembic_version`` at :data:`HEAD_REVISION`: current, nothing to do;
* anything else — an older or unknown revision, or the platform's tables without
  ``alembic_version`` (a database written before revisions were tracked) — raises
  :class:`~blockbudget.errors.SchemaRevisionError`, naming ``blockbudget db upgrade``. Nothing
  in the database is changed by the refusal.

Stamping happens before any table is created, so the platform's tables without
``alembic_version`` always mean an older release wrote them.

Example:
    >>> import sqlalchemy as sa
    >>> engine = sa.create_engine("sqlite://")
    >>> ensure_current(engine)
    >>> with engine.connect() as conn:
    ...     read_revision(conn) == HEAD_REVISION
    True
"""

from __future__ import annotations

import weakref

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from blockbudget.errors import SchemaRevisionError

__all__ = [
    "HEAD_REVISION",
    "LEGACY_TABLES",
    "SCHEMA_LOCK_KEY",
    "UPGRADE_HINT",
    "VERSION_TABLE",
    "check_or_stamp",
    "ensure_current",
    "mark_current",
    "read_revision",
]

#: The revision of :mod:`blockbudget.migrations` this release's tables have (its script head).
HEAD_REVISION = "0002_operations"

#: Alembic's version table (its default name and layout).
VERSION_TABLE = "alembic_version"

#: The platform's tables as they were before revisions were tracked (the baseline revision's
#: tables): finding one of them without ``alembic_version`` means an older release wrote it.
LEGACY_TABLES = frozenset(
    {
        "ledger_head",
        "ledger_contexts",
        "ledger_blocks",
        "ledger_budgets",
        "ledger_reservations",
        "ledger_reservation_blocks",
        "ledger_requests",
        "ledger_audit",
        "ledger_sweeps",
        "ledger_checkpoints",
        "store_streams",
        "store_blocks",
        "store_parts",
        "service_principals",
        "service_api_keys",
        "service_stream_acl",
        "service_secrets",
        "service_tasks",
        "service_task_schedulers",
        "user_id_releases",
    }
)

#: Key of the PostgreSQL advisory lock that serializes schema creation, stamping and upgrades.
SCHEMA_LOCK_KEY = 0x6C656467  # "ledg"

_version_metadata = sa.MetaData()
_version = sa.Table(
    VERSION_TABLE,
    _version_metadata,
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"),
)

#: Engines whose database was found at :data:`HEAD_REVISION` (checked once per engine).
_CURRENT: weakref.WeakSet[sa.Engine] = weakref.WeakSet()

UPGRADE_HINT = "run `blockbudget db upgrade` (with the same --home or --database) first"


def read_revision(conn: sa.Connection) -> str | None:
    """The revision recorded in ``alembic_version`` (None: no table or no row)."""
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    return _read_row(conn)


def _read_row(conn: sa.Connection) -> str | None:
    row = conn.execute(sa.select(_version.c.version_num)).first()
    return None if row is None else str(row[0])


def check_or_stamp(conn: sa.Connection) -> None:
    """In the caller's transaction: stamp a fresh database with :data:`HEAD_REVISION`, pass a
    current one, refuse any other.

    Raises:
        SchemaRevisionError: the database is at another revision, or holds the platform's
            tables without a revision (an older release wrote it).
    """
    tables = set(sa.inspect(conn).get_table_names())
    revision = _read_row(conn) if VERSION_TABLE in tables else None
    if revision == HEAD_REVISION:
        return
    if revision is not None:
        raise SchemaRevisionError(
            f"the database schema is at revision {revision!r}; this blockbudget needs "
            f"{HEAD_REVISION!r}: {UPGRADE_HINT} (a revision it does not know was written by a "
            "newer release: use that release)"
        )
    found = sorted(LEGACY_TABLES & tables)
    if found:
        raise SchemaRevisionError(
            "the database was written by a blockbudget release from before schema revisions "
            f"(it has {', '.join(found[:3])}{', ...' if len(found) > 3 else ''} but no "
            f"{VERSION_TABLE}); this blockbudget needs revision {HEAD_REVISION!r}: {UPGRADE_HINT}"
        )
    if VERSION_TABLE not in tables:  # (an empty one is left by a downgrade to nothing)
        _version.create(conn)
    conn.execute(_version.insert().values(version_num=HEAD_REVISION))


def ensure_current(engine: sa.Engine, *, attempts: int = 5) -> None:
    """:func:`check_or_stamp` in a transaction of its own, once per engine (later calls return
    at once). Safe when several processes open one fresh database together: a lost race to
    stamp it (a duplicate table or row) is retried and then finds it stamped.

    Raises:
        SchemaRevisionError: see :func:`check_or_stamp`.
    """
    if engine in _CURRENT:
        return
    for attempt in range(attempts):
        try:
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(SCHEMA_LOCK_KEY)))
                check_or_stamp(conn)
            break
        except DBAPIError:
            if attempt == attempts - 1:
                raise
    _CURRENT.add(engine)


def mark_current(engine: sa.Engine) -> None:
    """Record that ``engine``'s database was checked (or stamped) in a committed transaction."""
    _CURRENT.add(engine)

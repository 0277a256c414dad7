"""Schema migrations of the platform's database: one Alembic history for every table set.

The database holds four table sets, each created lazily by its module when first opened: the
ledger (``ledger_*``, :mod:`blockbudget.ledger.schema`), the block store (``store_*``,
:mod:`blockbudget.store.catalog`), the service (``service_*``, :mod:`blockbudget.service.auth`,
:mod:`blockbudget.service.blocknames`, :mod:`blockbudget.tasks.table`) and the user-id
releases (``user_id_releases``, :mod:`blockbudget.userids`). This package is the one place
that knows them all (:func:`target_metadata`); it sits above every layer. The low layers only
compare the revision id :data:`blockbudget.dbrevision.HEAD_REVISION` (see
:mod:`blockbudget.dbrevision`):

* a fresh database is stamped with the head revision and each table set creates its tables at
  their head shape (``create_all``) — no migration runs, opening stays quick;
* a database at an older revision, or written before revisions were tracked (the platform's
  tables, no ``alembic_version``), is refused by every open — ``Ledger``, ``BlockStore``,
  ``Platform``, ``KeyStore``, the CLI — with a :class:`~blockbudget.errors.SchemaRevisionError`
  that names ``blockbudget db upgrade``; ``blockbudget serve`` checks first
  (:func:`require_current`) and refuses to start. Nothing is migrated behind an operator's back.

``blockbudget db upgrade`` (:func:`upgrade`) runs the revisions in one transaction that holds
the writers' lock (SQLite ``BEGIN IMMEDIATE``, a PostgreSQL advisory lock), so concurrent
upgrades and opens wait for it; a second upgrade finds the head and does nothing. The first
revision (``0001_baseline``) is the whole schema of the release before revisions were tracked;
on a database of that release it adopts the tables as they are (and brings a ledger of schema
version 2 or 3 to 4). The ledger's own numbering (``ledger_head.schema_version``) is frozen at
4: Alembic owns every change after it.

Adding a schema change
----------------------
1. Change the table in its module's SQLAlchemy metadata as usual (a new table, column or
   index). ``tests/migrations/test_head_matches_metadata.py`` now fails: the head no longer
   equals the metadata. A new table set (a new ``MetaData``) is also listed in
   :func:`target_metadata`, and its module calls
   :func:`blockbudget.dbrevision.ensure_current` before its ``create_all``.
2. Write the revision: ``PYTHONPATH=src python -m blockbudget.migrations revision -m "what"
   --rev-id 0002_short_name --autogenerate`` (a short readable id, at most 32 characters;
   ``--autogenerate`` drafts the operations by comparing an empty database upgraded to the
   current head with the metadata). It lands in ``src/blockbudget/migrations/versions/`` as
   ``r0002_short_name_<slug>.py`` with ``down_revision`` set to the previous head; run
   ``ruff format`` on it.
3. Set :data:`blockbudget.dbrevision.HEAD_REVISION` to the new id (a test keeps them equal).
4. Write the operations for both dialects by hand where autogenerate cannot (data moves,
   triggers, server defaults). Rules:

   * table sets are created lazily, so a database at the previous revision may lack a whole
     table set: skip a table that does not exist (``sa.inspect(op.get_bind()).has_table``);
     its module creates it at the new shape when first opened;
   * add columns nullable or with a server default (existing rows need a value); never change
     or delete ``ledger_audit`` rows (the hash chain) and keep its append-only triggers: an
     SQLite batch operation (``op.batch_alter_table``) recreates a table and drops its
     triggers, so recreate them after one on ``ledger_audit``;
   * keep a revision self-contained (its own table definitions or SQL, not the live
     metadata, which later revisions change), and do not bump ``SCHEMA_VERSION``.
5. Test it: the head test must pass on SQLite and PostgreSQL
   (``./scripts/with-postgres.sh pytest tests/migrations``), and the upgrade tests from the
   committed old-schema fixtures still verify the audit chain after upgrading.

Example:
    >>> import sqlalchemy as sa
    >>> engine = sa.create_engine("sqlite://")
    >>> status(engine).state
    <SchemaState.EMPTY: 'empty'>
    >>> upgrade(engine).applied
    ('0001_baseline', '0002_operations')
    >>> status(engine).state
    <SchemaState.CURRENT: 'current'>
"""

from __future__ import annotations

from blockbudget.migrations.runner import (
    SchemaState,
    SchemaStatus,
    UpgradeReport,
    require_current,
    script_directory,
    status,
    target_metadata,
    upgrade,
)

__all__ = [
    "SchemaState",
    "SchemaStatus",
    "UpgradeReport",
    "require_current",
    "script_directory",
    "status",
    "target_metadata",
    "upgrade",
]

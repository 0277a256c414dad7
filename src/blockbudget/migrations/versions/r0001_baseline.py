"""Baseline: the whole schema of the release before revisions were tracked.

Every table set of the platform's database as it was when schema revisions were introduced —
the ledger (``ledger_*``, with the append-only triggers of ``ledger_audit`` on SQLite and
PostgreSQL and its head row at ledger schema version 4), the block store (``store_*``), the
service (``service_*``: principals, keys, ACLs, the block-name secret, tasks and task
schedulers) and the user-id releases (``user_id_releases``).

The tables are frozen here (a copy, not the live metadata): later revisions change them.

On an empty database this creates everything. On a database written before revisions were
tracked it *adopts* what is there, in the one transaction of the upgrade:

* absent tables are created (a table set that was never opened);
* a ledger at schema version 2 or 3 is brought to 4 (version 2 lacks
  ``ledger_contexts.closed_at``; ``ledger_sweeps`` and ``ledger_checkpoints`` are created
  empty); any other version but 4 is refused and nothing changes. The audit log is not touched
  (its events keep their hashes);
* nullable columns added since a table's first release (``service_tasks``' ``fingerprint``,
  ``kind``, ``selector``, ``demand``, ``work``, ``result``) and indexes added since
  (``ix_store_blocks_order``, ``ix_service_tasks_submitted_at``,
  ``ix_service_tasks_decided_at``) are added where missing;
* the audit triggers are (re)created where missing.

Revision ID: 0001_baseline
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from blockbudget.errors import SchemaRevisionError

revision = "0001_baseline"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

#: The ledger schema version of the baseline (frozen from then on).
LEDGER_VERSION = 4
#: Ledger versions the baseline brings to :data:`LEDGER_VERSION`.
LEDGER_UPGRADABLE = (2, 3)

_SQLITE_TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS ledger_audit_no_update BEFORE UPDATE ON ledger_audit "
    "BEGIN SELECT RAISE(ABORT, 'ledger_audit is append-only: UPDATE is forbidden'); END",
    "CREATE TRIGGER IF NOT EXISTS ledger_audit_no_delete BEFORE DELETE ON ledger_audit "
    "BEGIN SELECT RAISE(ABORT, 'ledger_audit is append-only: DELETE is forbidden'); END",
)
_POSTGRES_FUNCTION = (
    "CREATE OR REPLACE FUNCTION ledger_audit_append_only() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN "
    "RAISE EXCEPTION 'ledger_audit is append-only: % is forbidden', TG_OP; "
    "END $$"
)
_POSTGRES_TRIGGERS = {
    "ledger_audit_no_update": "CREATE TRIGGER ledger_audit_no_update BEFORE UPDATE OR DELETE "
    "ON ledger_audit FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only()",
    "ledger_audit_no_truncate": "CREATE TRIGGER ledger_audit_no_truncate BEFORE TRUNCATE ON "
    "ledger_audit FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_append_only()",
}


def baseline_metadata() -> sa.MetaData:
    """The baseline's tables (a frozen copy of every table set's metadata at the baseline)."""
    m = sa.MetaData()
    for add in (
        _ledger_log_tables,
        _ledger_block_tables,
        _ledger_budget_tables,
        _store_tables,
        _service_tables,
        _task_and_release_tables,
    ):
        add(m)
    return m


def _ledger_log_tables(m: sa.MetaData) -> None:
    """Add the ledger's log, requests and derived tables (audit, requests, sweeps, checkpoints)."""
    sa.Table(
        "ledger_audit",
        m,
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(), nullable=True),
        sa.Column("context", sa.String(), nullable=True),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
    )
    sa.Table(
        "ledger_checkpoints",
        m,
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
    )
    sa.Table(
        "ledger_requests",
        m,
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("operation", sa.String(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("result", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("request_id"),
        sqlite_with_rowid=False,
    )
    sa.Table(
        "ledger_sweeps",
        m,
        sa.Column("stream", sa.String(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("stream"),
        sqlite_with_rowid=False,
    )


def _ledger_block_tables(m: sa.MetaData) -> None:
    """Add the ledger's head row table, blocks and contexts."""
    sa.Table(
        "ledger_blocks",
        m,
        sa.Column("block_id", sa.String(), nullable=False),
        sa.Column("stream", sa.String(), nullable=False),
        sa.Column("accounting", sa.String(), nullable=False),
        sa.Column("capacity_epsilon", sa.String(), nullable=False),
        sa.Column("capacity_delta", sa.String(), nullable=False),
        sa.Column("slack_delta", sa.Float(), nullable=True),
        sa.Column("retired", sa.Boolean(), nullable=False),
        sa.Column("retired_reason", sa.String(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("block_id"),
        sqlite_with_rowid=False,
    )
    sa.Index("ix_ledger_blocks_stream", *(m.tables["ledger_blocks"].c[c] for c in ["stream"]))
    sa.Table(
        "ledger_contexts",
        m,
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("closed_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
        sqlite_with_rowid=False,
    )
    sa.Table(
        "ledger_head",
        m,
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def _ledger_budget_tables(m: sa.MetaData) -> None:
    """Add the ledger's budgets and reservations (after its blocks and contexts)."""
    sa.Table(
        "ledger_budgets",
        m,
        sa.Column("block_id", sa.String(), nullable=False),
        sa.Column("context", sa.String(), nullable=False),
        sa.Column("charged", sa.Text(), nullable=False),
        sa.Column("reserved", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["block_id"],
            ["ledger_blocks.block_id"],
        ),
        sa.ForeignKeyConstraint(
            ["context"],
            ["ledger_contexts.name"],
        ),
        sa.PrimaryKeyConstraint("block_id", "context"),
        sqlite_with_rowid=False,
    )
    sa.Table(
        "ledger_reservations",
        m,
        sa.Column("reservation_id", sa.String(), nullable=False),
        sa.Column("context", sa.String(), nullable=False),
        sa.Column("holder", sa.String(), nullable=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("cost", sa.Text(), nullable=False),
        sa.Column("blocks", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("closed_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["context"],
            ["ledger_contexts.name"],
        ),
        sa.PrimaryKeyConstraint("reservation_id"),
        sqlite_with_rowid=False,
    )
    sa.Index(
        "ix_ledger_reservations_state_expires",
        *(m.tables["ledger_reservations"].c[c] for c in ["state", "expires_at"]),
    )
    sa.Table(
        "ledger_reservation_blocks",
        m,
        sa.Column("reservation_id", sa.String(), nullable=False),
        sa.Column("block_id", sa.String(), nullable=False),
        sa.Column("remaining", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["block_id"],
            ["ledger_blocks.block_id"],
        ),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["ledger_reservations.reservation_id"],
        ),
        sa.PrimaryKeyConstraint("reservation_id", "block_id"),
        sqlite_with_rowid=False,
    )


def _store_tables(m: sa.MetaData) -> None:
    """Add the block store's catalog."""
    sa.Table(
        "store_streams",
        m,
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("arrow_schema", sa.LargeBinary(), nullable=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("watermark", sa.BigInteger(), nullable=True),
        sa.Column("closed_until", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    sa.Table(
        "store_blocks",
        m,
        sa.Column("block_id", sa.String(length=320), nullable=False),
        sa.Column("stream", sa.String(length=64), nullable=False),
        sa.Column("block_key", sa.String(length=255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.BigInteger(), nullable=True),
        sa.Column("row_count", sa.BigInteger(), nullable=False),
        sa.Column("byte_count", sa.BigInteger(), nullable=False),
        sa.Column("sealed", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("sealed_at", sa.DateTime(), nullable=True),
        sa.Column("window_start", sa.DateTime(), nullable=True),
        sa.Column("window_end", sa.DateTime(), nullable=True),
        sa.Column("id_start", sa.BigInteger(), nullable=True),
        sa.Column("id_end", sa.BigInteger(), nullable=True),
        sa.Column("attribute", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["stream"],
            ["store_streams.name"],
        ),
        sa.PrimaryKeyConstraint("block_id"),
        sa.UniqueConstraint("stream", "block_key", "seq", name="uq_store_blocks_key_seq"),
    )
    sa.Index(
        "ix_store_blocks_order",
        *(m.tables["store_blocks"].c[c] for c in ["stream", "ordinal", "block_key", "seq"]),
    )
    sa.Index(
        "ix_store_blocks_stream_sealed",
        *(m.tables["store_blocks"].c[c] for c in ["stream", "sealed"]),
    )
    sa.Table(
        "store_parts",
        m,
        sa.Column("part_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("block_id", sa.String(length=320), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("row_count", sa.BigInteger(), nullable=False),
        sa.Column("byte_count", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["block_id"],
            ["store_blocks.block_id"],
        ),
        sa.PrimaryKeyConstraint("part_id"),
        sa.UniqueConstraint("path"),
    )
    sa.Index("ix_store_parts_block", *(m.tables["store_parts"].c[c] for c in ["block_id"]))


def _service_tables(m: sa.MetaData) -> None:
    """Add the service's principals, keys, ACLs and block-name secret."""
    sa.Table(
        "service_principals",
        m,
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("contexts", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    sa.Table(
        "service_secrets",
        m,
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    sa.Table(
        "service_api_keys",
        m,
        sa.Column("key_id", sa.String(length=16), nullable=False),
        sa.Column("principal", sa.String(length=64), nullable=True),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["principal"],
            ["service_principals.name"],
        ),
        sa.PrimaryKeyConstraint("key_id"),
    )
    sa.Index(
        "ix_service_api_keys_principal", *(m.tables["service_api_keys"].c[c] for c in ["principal"])
    )
    sa.Table(
        "service_stream_acl",
        m,
        sa.Column("principal", sa.String(length=64), nullable=False),
        sa.Column("stream", sa.String(length=256), nullable=False),
        sa.Column("permission", sa.String(length=8), nullable=False),
        sa.ForeignKeyConstraint(
            ["principal"],
            ["service_principals.name"],
        ),
        sa.PrimaryKeyConstraint("principal", "stream"),
    )


def _task_and_release_tables(m: sa.MetaData) -> None:
    """Add the task queue's tables and the user-id releases."""
    sa.Table(
        "service_task_schedulers",
        m,
        sa.Column("stream", sa.String(length=256), nullable=False),
        sa.Column("spec", sa.String(length=512), nullable=False),
        sa.PrimaryKeyConstraint("stream"),
    )
    sa.Table(
        "service_tasks",
        m,
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("principal", sa.String(length=64), nullable=False),
        sa.Column("request_id", sa.String(length=200), nullable=True),
        sa.Column("stream", sa.String(length=256), nullable=False),
        sa.Column("context", sa.String(length=64), nullable=False),
        sa.Column("epsilon", sa.String(length=64), nullable=False),
        sa.Column("delta", sa.String(length=64), nullable=False),
        sa.Column("blocks", sa.Text(), nullable=False),
        sa.Column("significance", sa.Text(), nullable=True),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("deadline", sa.Float(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reservation_id", sa.String(length=64), nullable=True),
        sa.Column("decided_at", sa.Float(), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=True),
        sa.Column("selector", sa.Text(), nullable=True),
        sa.Column("demand", sa.Text(), nullable=True),
        sa.Column("work", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("principal", "request_id"),
    )
    sa.Index(
        "ix_service_tasks_decided_at", *(m.tables["service_tasks"].c[c] for c in ["decided_at"])
    )
    sa.Index("ix_service_tasks_principal", *(m.tables["service_tasks"].c[c] for c in ["principal"]))
    sa.Index("ix_service_tasks_state", *(m.tables["service_tasks"].c[c] for c in ["state"]))
    sa.Index(
        "ix_service_tasks_submitted_at", *(m.tables["service_tasks"].c[c] for c in ["submitted_at"])
    )
    sa.Table(
        "user_id_releases",
        m,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("stream", sa.String(length=64), nullable=False),
        sa.Column("floor", sa.BigInteger(), nullable=False),
        sa.Column("released_max", sa.Float(), nullable=False),
        sa.Column("safe_max", sa.BigInteger(), nullable=False),
        sa.Column("epsilon", sa.String(length=64), nullable=False),
        sa.Column("beta", sa.Float(), nullable=False),
        sa.Column("secure_noise", sa.Boolean(), nullable=False),
        sa.Column("reservation_id", sa.String(length=128), nullable=False),
        sa.Column("released_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    sa.Index("ix_user_id_releases_stream", *(m.tables["user_id_releases"].c[c] for c in ["stream"]))


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    have = set(inspector.get_table_names())
    m = baseline_metadata()
    version = _ledger_version(bind, have)  # refuses before anything changes
    for table in m.sorted_tables:
        if table.name in have:
            _adopt(bind, inspector, table)
    m.create_all(bind, tables=[t for t in m.sorted_tables if t.name not in have])
    _audit_triggers(bind)
    head = m.tables["ledger_head"]
    if version is None:
        bind.execute(head.insert().values(id=1, schema_version=LEDGER_VERSION))
    elif version != LEDGER_VERSION:
        bind.execute(head.update().where(head.c.id == 1).values(schema_version=LEDGER_VERSION))


def downgrade() -> None:
    raise SchemaRevisionError(
        "the baseline revision cannot be downgraded: it would drop the ledger and its audit log"
    )


def _ledger_version(bind: sa.Connection, have: set[str]) -> int | None:
    """The legacy ledger's schema version (None: no ledger head row yet).

    Raises:
        SchemaRevisionError: a version the baseline cannot bring to :data:`LEDGER_VERSION`.
    """
    if "ledger_head" not in have:
        return None
    row = bind.execute(sa.text("SELECT schema_version FROM ledger_head WHERE id = 1")).first()
    if row is None:
        return None
    version = int(row[0])
    if version != LEDGER_VERSION and version not in LEDGER_UPGRADABLE:
        raise SchemaRevisionError(
            f"the database holds ledger schema version {version}; `blockbudget db upgrade` "
            f"upgrades versions {', '.join(map(str, LEDGER_UPGRADABLE))} and "
            f"{LEDGER_VERSION} only (nothing was changed)"
        )
    return version


def _adopt(bind: sa.Connection, inspector: sa.Inspector, table: sa.Table) -> None:
    """Give an existing table the baseline's nullable columns and indexes it lacks.

    Raises:
        SchemaRevisionError: it lacks a column that cannot be added empty (NOT NULL).
    """
    columns = {c["name"] for c in inspector.get_columns(table.name)}
    for column in table.columns:
        if column.name in columns:
            continue
        if not column.nullable:
            raise SchemaRevisionError(
                f"table {table.name!r} lacks the NOT NULL column {column.name!r}: it was not "
                "written by a blockbudget release this upgrade knows (nothing was changed)"
            )
        op.add_column(table.name, sa.Column(column.name, column.type, nullable=True))
    indexes = {i["name"] for i in inspector.get_indexes(table.name)}
    for index in table.indexes:
        if index.name not in indexes:
            index.create(bind)


def _audit_triggers(bind: sa.Connection) -> None:
    """Create the append-only triggers of ``ledger_audit`` where missing."""
    if bind.dialect.name == "sqlite":
        for sql in _SQLITE_TRIGGERS:
            bind.exec_driver_sql(sql)
        return
    have = {
        r[0]
        for r in bind.execute(
            sa.text(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'ledger_audit'::regclass "
                "AND NOT tgisinternal"
            )
        )
    }
    bind.execute(sa.text(_POSTGRES_FUNCTION))
    for name, sql in _POSTGRES_TRIGGERS.items():
        if name not in have:
            bind.execute(sa.text(sql))

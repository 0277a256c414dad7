"""The ledger's tables: one SQLAlchemy ``MetaData``, the same on SQLite and PostgreSQL.

Tables (all prefixed ``ledger_`` so that other modules may share the database):

* ``ledger_head`` — one row (id 1). On PostgreSQL every write transaction locks it first
  (``SELECT … FOR UPDATE``): the audit log is one hash chain, so appends are serial anyway, and
  this lock makes every write transaction serial too. On SQLite ``BEGIN IMMEDIATE`` takes the
  database write lock, which does the same.
* ``ledger_blocks`` — one row per block: stream, accounting rule, capacity, retired flag.
* ``ledger_budgets`` — one row per (block, context), created lazily: ``charged`` and
  ``reserved`` feature vectors as JSON text of decimal integer strings.
* ``ledger_reservations`` and ``ledger_reservation_blocks`` — reservations and, per reserved
  block, the features that are still drawable.
* ``ledger_requests`` — idempotency: request id, operation, argument fingerprint, result.
* ``ledger_audit`` — the append-only, hash-chained event log. Triggers refuse UPDATE and DELETE
  (and TRUNCATE on PostgreSQL); the DDL is emitted per dialect.
"""

from __future__ import annotations

from sqlalchemy import (
    DDL,
    BigInteger,
    Boolean,
    Column,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    event,
    func,
    insert,
    select,
)

#: Bumped when the table layout changes.
SCHEMA_VERSION = 1

metadata = MetaData()

head = Table(
    "ledger_head",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("schema_version", Integer, nullable=False),
)

blocks = Table(
    "ledger_blocks",
    metadata,
    Column("block_id", String, primary_key=True),
    Column("stream", String, nullable=False, index=True),
    Column("accounting", String, nullable=False),
    Column("capacity_epsilon", String, nullable=False),
    Column("capacity_delta", String, nullable=False),
    Column("slack_delta", Float, nullable=True),
    Column("retired", Boolean, nullable=False, default=False),
    Column("retired_reason", String, nullable=True),
    Column("created_at", Float, nullable=False),
    sqlite_with_rowid=False,
)

budgets = Table(
    "ledger_budgets",
    metadata,
    Column("block_id", String, ForeignKey("ledger_blocks.block_id"), primary_key=True),
    Column("context", String, primary_key=True),
    Column("charged", Text, nullable=False),
    Column("reserved", Text, nullable=False),
    sqlite_with_rowid=False,
)

reservations = Table(
    "ledger_reservations",
    metadata,
    Column("reservation_id", String, primary_key=True),
    Column("context", String, nullable=False),
    Column("holder", String, nullable=True),
    Column("request_id", String, nullable=False),
    Column("cost", Text, nullable=False),
    Column("blocks", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("state", String, nullable=False),
    Column("closed_at", Float, nullable=True),
    Index("ix_ledger_reservations_state_expires", "state", "expires_at"),
    sqlite_with_rowid=False,
)

reservation_blocks = Table(
    "ledger_reservation_blocks",
    metadata,
    Column(
        "reservation_id",
        String,
        ForeignKey("ledger_reservations.reservation_id"),
        primary_key=True,
    ),
    Column("block_id", String, ForeignKey("ledger_blocks.block_id"), primary_key=True),
    Column("remaining", Text, nullable=False),
    sqlite_with_rowid=False,
)

requests = Table(
    "ledger_requests",
    metadata,
    Column("request_id", String, primary_key=True),
    Column("operation", String, nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("result", Text, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("created_at", Float, nullable=False),
    sqlite_with_rowid=False,
)

audit = Table(
    "ledger_audit",
    metadata,
    # seq is assigned by the ledger (tip + 1), never by the database.
    Column(
        "seq",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=False,
    ),
    Column("ts", Float, nullable=False),
    Column("kind", String, nullable=False),
    Column("version", Integer, nullable=False),
    Column("request_id", String, nullable=True),
    Column("context", String, nullable=True),
    Column("payload", Text, nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
)

# --- append-only triggers, one dialect at a time ---------------------------------------------

_SQLITE_TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS ledger_audit_no_update BEFORE UPDATE ON ledger_audit "
    "BEGIN SELECT RAISE(ABORT, 'ledger_audit is append-only: UPDATE is forbidden'); END",
    "CREATE TRIGGER IF NOT EXISTS ledger_audit_no_delete BEFORE DELETE ON ledger_audit "
    "BEGIN SELECT RAISE(ABORT, 'ledger_audit is append-only: DELETE is forbidden'); END",
)

_POSTGRES_TRIGGERS = (
    "CREATE OR REPLACE FUNCTION ledger_audit_append_only() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN "
    # DDL text is %-formatted by SQLAlchemy: %% is plpgsql's %.
    "RAISE EXCEPTION 'ledger_audit is append-only: %% is forbidden', TG_OP; "
    "END $$",
    "CREATE TRIGGER ledger_audit_no_update BEFORE UPDATE OR DELETE ON ledger_audit "
    "FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only()",
    "CREATE TRIGGER ledger_audit_no_truncate BEFORE TRUNCATE ON ledger_audit "
    "FOR EACH STATEMENT EXECUTE FUNCTION ledger_audit_append_only()",
)

for _sql in _SQLITE_TRIGGERS:
    event.listen(
        audit,
        "after_create",
        DDL(_sql).execute_if(dialect="sqlite"),  # type: ignore[no-untyped-call]
    )
for _sql in _POSTGRES_TRIGGERS:
    event.listen(
        audit,
        "after_create",
        DDL(_sql).execute_if(dialect="postgresql"),  # type: ignore[no-untyped-call]
    )

#: Names of the triggers that guard the audit table (for tests and operators).
AUDIT_TRIGGERS = ("ledger_audit_no_update", "ledger_audit_no_delete", "ledger_audit_no_truncate")

#: Arbitrary key of the PostgreSQL advisory lock that serializes schema creation.
_SCHEMA_LOCK_KEY = 0x6C656467  # "ledg"


def create_schema(engine: Engine) -> int:
    """Create the tables, triggers and the head row if missing (safe to call concurrently);
    return the schema version recorded in the database.

    On SQLite the whole check-and-create runs inside ``BEGIN IMMEDIATE`` (installed by
    :mod:`blockbudget.ledger.db`), so concurrent processes create the schema once. On
    PostgreSQL a transaction-scoped advisory lock does the same; DDL there is transactional.
    """
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(_SCHEMA_LOCK_KEY)))
        metadata.create_all(conn, checkfirst=True)
        row = conn.execute(select(head.c.schema_version).where(head.c.id == 1)).first()
        if row is None:
            conn.execute(insert(head).values(id=1, schema_version=SCHEMA_VERSION))
            return SCHEMA_VERSION
        return int(row[0])

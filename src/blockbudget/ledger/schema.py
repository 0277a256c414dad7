"""The ledger's tables: one SQLAlchemy ``MetaData``, the same on SQLite and PostgreSQL.

Tables (all prefixed ``ledger_`` so that other modules may share the database):

* ``ledger_head`` — one row (id 1; its ``schema_version`` is frozen at 4, see
  :data:`SCHEMA_VERSION`). On PostgreSQL every write transaction locks it first
  (``SELECT … FOR UPDATE``): the audit log is one hash chain, so appends are serial anyway, and
  this lock makes every write transaction serial too. On SQLite ``BEGIN IMMEDIATE`` takes the
  database write lock, which does the same.
* ``ledger_contexts`` — one row per registered context: name, description, creation time and
  closing time (NULL while open). Contexts are added by an administrator
  (``Ledger.add_context``), may be closed by one (``Ledger.close_context``: never charged again)
  and are never removed. A new ledger has no context at all (up to version 2 the ``default``
  context was registered when the schema was created; such ledgers keep it).
* ``ledger_blocks`` — one row per block: stream, accounting rule, capacity, retired flag.
* ``ledger_budgets`` — one row per (block, context), created lazily: ``charged`` and
  ``reserved`` feature vectors as JSON text of decimal integer strings. Its ``context`` is a
  foreign key to ``ledger_contexts``: the database itself refuses a budget for an
  unregistered context, and refuses to delete a context that holds one.
* ``ledger_reservations`` and ``ledger_reservation_blocks`` — reservations (their ``context``
  a foreign key to ``ledger_contexts`` too) and, per reserved block, the features that are
  still drawable.
* ``ledger_requests`` — idempotency: request id, operation, argument fingerprint, result.
* ``ledger_audit`` — the append-only, hash-chained event log. Triggers refuse UPDATE and DELETE
  (and TRUNCATE on PostgreSQL); the DDL is emitted per dialect.
* ``ledger_sweeps`` — per stream, the audit seq up to which ``retire_exhausted`` has examined
  every block (and the fingerprint of its contexts and minimum cost): the next sweep examines
  only the blocks that events after it touched. Derived data: it decides which blocks are
  examined for early retirement, never what a block may spend.
* ``ledger_checkpoints`` — the last verified state of the whole ledger (audit seq and hash, a
  SHA-256 digest and the state itself, compressed): ``verify`` replays only the events after
  it unless asked for a full replay.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    DDL,
    BigInteger,
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    event,
    func,
    insert,
    inspect,
    select,
)

from blockbudget.dbrevision import SCHEMA_LOCK_KEY, check_or_stamp, mark_current

#: The ledger's own layout numbering, frozen at 4 since the database's schema evolves by
#: Alembic revisions (:mod:`blockbudget.dbrevision`, :mod:`blockbudget.migrations`): the head
#: row keeps saying 4 and no later change bumps it. 2: registered contexts
#: (``ledger_contexts``). 3: ``ledger_contexts.closed_at`` (closed contexts). 4:
#: ``ledger_sweeps`` and ``ledger_checkpoints``.
SCHEMA_VERSION = 4

#: Older versions that ``blockbudget db upgrade`` brings to :data:`SCHEMA_VERSION` (the
#: baseline revision does it); opening one without upgrading is refused.
MIGRATABLE_VERSIONS = (2, 3)

metadata = MetaData()

head = Table(
    "ledger_head",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("schema_version", Integer, nullable=False),
)

contexts = Table(
    "ledger_contexts",
    metadata,
    Column("name", String, primary_key=True),
    Column("description", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("closed_at", Float, nullable=True),
    sqlite_with_rowid=False,
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
    Column("context", String, ForeignKey("ledger_contexts.name"), primary_key=True),
    Column("charged", Text, nullable=False),
    Column("reserved", Text, nullable=False),
    sqlite_with_rowid=False,
)

reservations = Table(
    "ledger_reservations",
    metadata,
    Column("reservation_id", String, primary_key=True),
    Column("context", String, ForeignKey("ledger_contexts.name"), nullable=False),
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

sweeps = Table(
    "ledger_sweeps",
    metadata,
    Column("stream", String, primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("seq", BigInteger, nullable=False),
    sqlite_with_rowid=False,
)

checkpoints = Table(
    "ledger_checkpoints",
    metadata,
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("hash", String(64), nullable=False),
    Column("digest", String(64), nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("created_at", Float, nullable=False),
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


def create_schema(engine: Engine, *, on_create: Callable[[Connection], None] | None = None) -> int:
    """Create the tables, triggers and the head row if missing (safe to call concurrently);
    return the ledger schema version recorded in the database.

    The whole check-and-create is one transaction that holds the writers' lock: on SQLite
    ``BEGIN IMMEDIATE`` (installed by :mod:`blockbudget.ledger.db`), on PostgreSQL a
    transaction-scoped advisory lock (DDL there is transactional). So when several processes
    open a fresh database at once, exactly one creates it — and runs ``on_create`` — and the
    others find it created. The same transaction checks the database's schema revision
    (:func:`blockbudget.dbrevision.check_or_stamp`): a fresh database is stamped with the head
    revision, a current one passes, any other is refused before anything is created.

    Args:
        engine: the ledger's engine.
        on_create: called in the creating transaction once the tables and the head row exist
            (nothing by default: a new ledger has no contexts).

    Returns:
        The ledger schema version of the database: :data:`SCHEMA_VERSION` when it is current
        or was just created; an older one (:data:`MIGRATABLE_VERSIONS`, upgraded by
        ``blockbudget db upgrade``) or an unknown one is returned as it is, untouched.

    Raises:
        SchemaRevisionError: the database's revision is not this release's head (see
            :mod:`blockbudget.dbrevision`).
    """
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(SCHEMA_LOCK_KEY)))
        version = _open_or_create(conn, on_create)
    if version == SCHEMA_VERSION:
        mark_current(engine)  # the revision was checked (or stamped) in a committed transaction
    return version


def _open_or_create(conn: Connection, on_create: Callable[[Connection], None] | None) -> int:
    """:func:`create_schema`'s work, in its locked transaction."""
    if inspect(conn).has_table(head.name):
        row = conn.execute(select(head.c.schema_version).where(head.c.id == 1)).first()
        if row is not None:
            version = int(row[0])
            if version == SCHEMA_VERSION:
                check_or_stamp(conn)
            return version
    check_or_stamp(conn)
    metadata.create_all(conn, checkfirst=True)
    conn.execute(insert(head).values(id=1, schema_version=SCHEMA_VERSION))
    if on_create is not None:
        on_create(conn)
    return SCHEMA_VERSION

"""Operations: key rotation and principal state, idempotent ingest, the dashboard's index.

* ``service_principals.state`` (``active``, ``disabled`` or ``deleted``; existing principals
  are active) and ``service_api_keys.expires_at`` (Unix time after which a rotated-out key is
  refused; NULL for every existing key) — administration over HTTP and the CLI;
* ``store_ingests``: one row per committed ingest of a stream, keyed by its ingest id (the
  content hash of its rows by default), so the same ingest again changes nothing. Ingests made
  before this revision have no row: re-ingesting an old file meets the duplicate-row check;
* ``dashboard_stream_events`` and ``dashboard_index_mark``: a derived per-stream index of the
  audit log, built incrementally by the dashboard from the mark (0 here: the first dashboard
  request after the upgrade indexes the existing log once, ~54 µs per event).

Columns are added only to tables that exist (table sets are created lazily at their head
shape); the new tables are created where missing. The audit log is not touched.

Revision ID: 0002_operations
Revises: 0001_baseline
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from blockbudget.errors import SchemaRevisionError

revision = "0002_operations"
down_revision: str | None = "0001_baseline"
branch_labels: str | None = None
depends_on: str | None = None


def _tables() -> sa.MetaData:
    """The tables this revision adds, frozen as they were at this revision."""
    m = sa.MetaData()
    sa.Table("store_streams", m, sa.Column("name", sa.String(64), primary_key=True))
    sa.Table(
        "store_ingests",
        m,
        sa.Column("stream", sa.String(64), sa.ForeignKey("store_streams.name"), primary_key=True),
        sa.Column("ingest_id", sa.String(128), primary_key=True),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("row_count", sa.BigInteger, nullable=False),
        sa.Column("report", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("repeats", sa.BigInteger, nullable=False),
        sa.Column("last_repeat_at", sa.DateTime, nullable=True),
    )
    sa.Table(
        "dashboard_stream_events",
        m,
        sa.Column("stream", sa.String, primary_key=True),
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer, "sqlite"),
            primary_key=True,
            autoincrement=False,
        ),
        sqlite_with_rowid=False,
    )
    sa.Table(
        "dashboard_index_mark",
        m,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
    )
    return m


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    have = set(inspector.get_table_names())

    def columns(table: str) -> set[str]:
        return {c["name"] for c in inspector.get_columns(table)}

    if "service_principals" in have and "state" not in columns("service_principals"):
        op.add_column(
            "service_principals",
            sa.Column("state", sa.String(16), nullable=False, server_default="active"),
        )
    if "service_api_keys" in have and "expires_at" not in columns("service_api_keys"):
        op.add_column("service_api_keys", sa.Column("expires_at", sa.Float, nullable=True))
    m = _tables()
    new = ["dashboard_stream_events", "dashboard_index_mark"]
    if "store_streams" in have:  # the store's table set exists: its ingests table joins it
        new.append("store_ingests")
    m.create_all(bind, tables=[m.tables[t] for t in new if t not in have])


def downgrade() -> None:
    raise SchemaRevisionError(
        "downgrades are not supported: restore the backup taken before `blockbudget db upgrade`"
    )

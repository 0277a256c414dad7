"""Alembic's environment for blockbudget: runs on the connection (and in the transaction)
that :func:`blockbudget.migrations.upgrade` opened and locked; nothing is read from an
``alembic.ini``."""

from __future__ import annotations

from alembic import context

from blockbudget.migrations import target_metadata


def _run() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "blockbudget's migrations run through `blockbudget db upgrade` (or "
            "blockbudget.migrations.upgrade), which hands Alembic its connection"
        )
    context.configure(
        connection=connection,
        target_metadata=target_metadata(),
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


_run()

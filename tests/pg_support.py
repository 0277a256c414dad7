"""PostgreSQL for the platform-level tests: a fresh database per test on the server named by
``BLOCKBUDGET_TEST_POSTGRES_URL`` (``make test`` starts one); without it, only SQLite runs."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

POSTGRES_URL = os.environ.get("BLOCKBUDGET_TEST_POSTGRES_URL")
BACKENDS = ["sqlite", "postgres"] if POSTGRES_URL else ["sqlite"]


@contextmanager
def postgres_database() -> Iterator[str]:
    """Create an empty database, yield its URL, drop it afterwards."""
    assert POSTGRES_URL is not None
    name = f"bb_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield (
            sa.engine.make_url(POSTGRES_URL)
            .set(database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

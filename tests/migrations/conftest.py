"""Databases for the migration tests: an empty one per backend (SQLite file; PostgreSQL when
``BLOCKBUDGET_TEST_POSTGRES_URL`` is set)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_support import BACKENDS, postgres_database


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'platform.db'}"
    else:
        with postgres_database() as url:
            yield url

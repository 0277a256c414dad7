"""Fixtures: a seeded service on SQLite and — when ``make test`` provides a server — on
PostgreSQL (a fresh database per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pg_support import BACKENDS, postgres_database

from blockbudget.service import create_app
from service.support import Seeded, seed


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
    else:
        with postgres_database() as url:
            yield url


@pytest.fixture
def seeded(tmp_path: Path, database_url: str | None) -> Iterator[Seeded]:
    s = seed(tmp_path / "home", database_url=database_url)
    yield s
    s.platform.close()


@pytest.fixture
def client(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)) as c:
        yield c

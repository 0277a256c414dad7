"""Fixtures for the block store tests: a store on a temporary SQLite file (and PostgreSQL when
BLOCKBUDGET_TEST_POSTGRES_URL is set) and directory, and a few days of flights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pg_support import POSTGRES_URL, postgres_database

from blockbudget.data import flights_by_day
from blockbudget.store import BlockStore


@pytest.fixture(scope="session", autouse=True)
def _cache_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLOCKBUDGET_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="session")
def three_days() -> pd.DataFrame:
    """The flights of 2013-01-01 .. 2013-01-03 (842 + 943 + 914 rows)."""
    days = []
    for _, frame in flights_by_day():
        days.append(frame)
        if len(days) == 3:
            break
    return pd.concat(days, ignore_index=True)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "blocks"


@pytest.fixture(params=["sqlite", "postgresql"] if POSTGRES_URL else ["sqlite"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The catalog database: a fresh SQLite file, and a fresh PostgreSQL database when the
    server is configured — one per test, so tests on parallel workers never share tables (a
    shared database whose tables each test dropped lost them under another worker's test)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'platform.db'}"
        return
    with postgres_database() as url:
        yield url


@pytest.fixture
def store(db_url: str, root: Path) -> Iterator[BlockStore]:
    with BlockStore(db_url, root) as s:
        yield s

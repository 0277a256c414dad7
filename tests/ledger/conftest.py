"""Fixtures for the ledger tests: a fake clock, and ledgers on SQLite files and — when
``BLOCKBUDGET_TEST_POSTGRES_URL`` is set (e.g. ``postgresql+psycopg://postgres@127.0.0.1:5432/db``)
— on PostgreSQL, each test in a schema of its own that is dropped afterwards.

The ``ledger`` fixture registers the contexts the tests use (:data:`TEST_CONTEXTS`: ``default``,
``ml`` and ``ops``); a new ledger has none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ledger_support import (
    BACKENDS,
    POSTGRES_URL,
    TEST_CONTEXTS,
    Backend,
    FakeClock,
    postgres_schema,
)

from blockbudget.ledger import Ledger


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh, empty database on each backend."""
    if request.param == "sqlite":
        b = Backend("sqlite", f"sqlite:///{tmp_path / 'ledger.db'}", {}, [])
        yield b
    else:
        assert POSTGRES_URL is not None
        with postgres_schema() as args:
            b = Backend("postgres", POSTGRES_URL, args, [])
            try:
                yield b
            finally:
                for eng in b.engines:
                    eng.dispose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger(backend: Backend, clock: FakeClock) -> Iterator[Ledger]:
    led = backend.open(clock=clock)
    for name in TEST_CONTEXTS:
        led.add_context(name, description=f"the {name} team (test)")
    yield led
    led.dispose()

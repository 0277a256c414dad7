"""Helpers shared by the ledger tests (imported by name; this folder is on sys.path)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, func, select, text

from blockbudget.ledger import Ledger
from blockbudget.ledger.schema import requests

POSTGRES_URL = os.environ.get("BLOCKBUDGET_TEST_POSTGRES_URL")

needs_postgres = pytest.mark.skipif(
    not POSTGRES_URL, reason="set BLOCKBUDGET_TEST_POSTGRES_URL to run against PostgreSQL"
)

BACKENDS = ["sqlite", pytest.param("postgres", marks=needs_postgres)]

#: The contexts the ``ledger`` fixture registers (besides ``default``).
#: The contexts the ``ledger`` fixture registers (a new ledger has none): ``default`` (the one
#: the Ledger methods name when given none), ``ml`` and ``ops``.
TEST_CONTEXTS = ("default", "ml", "ops")


class FakeClock:
    """A settable clock for TTL tests (Unix seconds)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Backend:
    """Where a test's ledger lives; ``open`` may be called again to reopen the same data."""

    name: str
    url: str
    connect_args: dict[str, Any]
    engines: list[Engine]

    def engine(self) -> Engine:
        eng = create_engine(self.url, connect_args=dict(self.connect_args))
        self.engines.append(eng)
        return eng

    def open(self, **kwargs: Any) -> Ledger:
        if self.name == "sqlite":
            return Ledger(self.url, **kwargs)
        return Ledger(self.engine(), **kwargs)


@contextmanager
def postgres_schema() -> Iterator[dict[str, Any]]:
    """A fresh PostgreSQL schema; yields the connect_args that put it first on search_path."""
    assert POSTGRES_URL is not None
    schema = f"bbtest_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield {"options": f"-csearch_path={schema}"}
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def request_count(ledger: Ledger) -> int:
    """Rows in the request table."""
    with ledger.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(requests)).scalar_one())


def snapshot(ledger: Ledger) -> tuple[Any, ...]:
    """Everything observable: contexts, blocks, every state, reservations, events, request
    rows."""
    return (
        tuple(ledger.context_infos()),
        tuple(ledger.blocks()),
        tuple(ledger.states()),
        tuple(ledger.reservations()),
        len(ledger.events()),
        request_count(ledger),
    )


def assert_unchanged(ledger: Ledger, before: tuple[Any, ...]) -> None:
    assert snapshot(ledger) == before

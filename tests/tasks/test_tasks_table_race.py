"""Several processes start on a fresh database at once: creating the task tables (and adding
their columns) must succeed in every one of them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import sqlalchemy as sa
from pg_support import POSTGRES_URL, postgres_database

from blockbudget.tasks.table import ensure_table, tasks_table

STARTERS = 6
ROUNDS = 4


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """``ROUNDS`` empty databases."""
    with ExitStack() as stack:
        if request.param == "postgres":
            if POSTGRES_URL is None:
                pytest.skip("no PostgreSQL: BLOCKBUDGET_TEST_POSTGRES_URL is not set")
            yield [stack.enter_context(postgres_database()) for _ in range(ROUNDS)]
        else:
            yield [f"sqlite:///{tmp_path / f'ledger{i}.db'}" for i in range(ROUNDS)]


def _start_together(url: str, prepare: str | None = None) -> list[BaseException]:
    """``STARTERS`` threads, each with its own engine, run ``ensure_table`` at one moment."""
    engines = [sa.create_engine(url) for _ in range(STARTERS)]
    if prepare is not None:
        with engines[0].begin() as conn:
            conn.execute(sa.text(prepare))
    barrier = threading.Barrier(STARTERS)
    errors: list[BaseException] = []

    def start(engine: sa.Engine) -> None:
        barrier.wait()
        try:
            ensure_table(engine)
        except BaseException as error:  # collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=start, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    columns = {c["name"] for c in sa.inspect(engines[0]).get_columns(tasks_table.name)}
    for e in engines:
        e.dispose()
    assert {c.name for c in tasks_table.columns} <= columns
    return errors


def test_tables_created_by_several_starters_at_once(fresh_urls: list[str]) -> None:
    for url in fresh_urls:
        assert _start_together(url) == []


def test_columns_added_by_several_starters_at_once(fresh_urls: list[str]) -> None:
    old = (
        f"CREATE TABLE {tasks_table.name} (id VARCHAR(40) PRIMARY KEY, principal VARCHAR(64),"
        " request_id VARCHAR(200), stream VARCHAR(256), context VARCHAR(64),"
        " epsilon VARCHAR(64), delta VARCHAR(64), blocks TEXT, significance TEXT,"
        " submitted_at FLOAT, deadline FLOAT, state VARCHAR(16), reservation_id VARCHAR(64),"
        " decided_at FLOAT, note TEXT)"
    )
    for url in fresh_urls:
        assert _start_together(url, prepare=old) == []


def test_servers_storing_their_default_scheduler_at_once_all_succeed(
    fresh_urls: list[str],
) -> None:
    """Servers starting together each store their default scheduler (``*default``): an
    insert that loses the race is retried as an update, never an error."""
    from blockbudget.tasks.rows import TaskRows

    for url in fresh_urls:
        engines = [sa.create_engine(url) for _ in range(STARTERS)]
        ensure_table(engines[0])
        barrier = threading.Barrier(STARTERS)
        errors: list[BaseException] = []

        def store(
            engine: sa.Engine,
            spec: str,
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            barrier.wait()
            try:
                TaskRows(engine).set_default(spec)
            except BaseException as error:  # collected and asserted below
                errors.append(error)

        specs = [f"dpf-n:n={10 + k}" for k in range(STARTERS)]
        threads = [
            threading.Thread(target=store, args=(e, spec))
            for e, spec in zip(engines, specs, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert TaskRows(engines[0]).stored_default() in specs
        for e in engines:
            e.dispose()

"""Several processes start on a fresh database at once: creating the task tables must succeed
in every one of them (and several upgrades of an old one at once too)."""

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


def test_an_old_table_is_refused_by_every_starter_then_upgraded_at_once(
    fresh_urls: list[str],
) -> None:
    """A table from before the added columns: every starter is refused (naming ``blockbudget
    db upgrade``) and nothing changes; several upgrades at once then succeed, exactly one of
    them doing the work, and the starters all start."""
    from blockbudget.errors import SchemaRevisionError
    from blockbudget.migrations import upgrade

    old = (
        f"CREATE TABLE {tasks_table.name} (id VARCHAR(40) PRIMARY KEY, principal VARCHAR(64),"
        " request_id VARCHAR(200), stream VARCHAR(256), context VARCHAR(64),"
        " epsilon VARCHAR(64), delta VARCHAR(64), blocks TEXT, significance TEXT,"
        " submitted_at FLOAT, deadline FLOAT, state VARCHAR(16), reservation_id VARCHAR(64),"
        " decided_at FLOAT, note TEXT)"
    )
    for url in fresh_urls:
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text(old))
        with pytest.raises(SchemaRevisionError, match="`blockbudget db upgrade`"):
            ensure_table(engine)
        assert "kind" not in {c["name"] for c in sa.inspect(engine).get_columns("service_tasks")}
        engine.dispose()
        barrier = threading.Barrier(STARTERS)
        applied: list[tuple[str, ...]] = []

        def run(
            barrier: threading.Barrier = barrier,
            url: str = url,
            applied: list[tuple[str, ...]] = applied,
        ) -> None:
            barrier.wait()
            applied.append(upgrade(url).applied)

        threads = [threading.Thread(target=run) for _ in range(STARTERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(applied) == [()] * (STARTERS - 1) + [("0001_baseline", "0002_operations")]
        assert _start_together(url) == []


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

"""Two servers starting together on an empty deployment: one creates ``admin``, none fails."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pg_support import POSTGRES_URL, postgres_database

from blockbudget.service import server
from blockbudget.service.auth import KeyStore


def test_the_server_that_loses_the_race_for_admin_starts_anyway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    first = server.bootstrap_admin(home, None)
    assert first is not None and first.startswith("bbk_")
    # The second server looked before the first one's insert committed: it saw no principal.
    real = KeyStore.principals
    calls: list[int] = []

    def racing(self: KeyStore) -> Any:
        calls.append(1)
        return [] if len(calls) == 1 else real(self)

    monkeypatch.setattr(KeyStore, "principals", racing)
    assert server.bootstrap_admin(home, None) is None
    monkeypatch.setattr(KeyStore, "principals", real)
    platform = server.open_platform(home, None, group_commit=False)
    try:
        keys = KeyStore(platform.ledger.engine)
        assert [p.name for p in keys.principals()] == ["admin"]
        assert len(keys.keys("admin")) == 1  # one key: the loser created none
    finally:
        platform.close()


def test_servers_starting_at_once_create_one_admin_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    results: list[object] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            results.append(server.bootstrap_admin(home, None))
        except BaseException as exc:  # pragma: no cover - the failure this test looks for
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(r is not None for r in results) == 1


def _start_together(home: Path, database: str | None, servers: int) -> list[object]:
    """Run ``serve``'s start path (schema check, then the admin) in ``servers`` threads."""
    from blockbudget.cli.server import check_schema

    results: list[object] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(servers)

    def start() -> None:
        try:
            gate.wait()
            check_schema(home, database)
            results.append(server.bootstrap_admin(home, database))
        except BaseException as exc:  # pragma: no cover - the failure this test looks for
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(servers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return results


def test_servers_starting_on_an_empty_sqlite_file_create_the_schema_once(tmp_path: Path) -> None:
    from blockbudget.migrations import SchemaState, status

    home = tmp_path / "fresh"  # not even the folder exists
    results = _start_together(home, None, 4)
    assert sum(r is not None for r in results) == 1
    assert status(f"sqlite:///{home / 'platform.db'}").state is SchemaState.CURRENT


@pytest.mark.skipif(POSTGRES_URL is None, reason="needs BLOCKBUDGET_TEST_POSTGRES_URL")
def test_servers_starting_on_an_empty_postgres_database_do_not_race(tmp_path: Path) -> None:
    # Without the schema made first, each server's table sets raced to CREATE TABLE and one
    # died with UniqueViolation on pg_type_typname_nsp_index.
    from blockbudget.migrations import SchemaState, status

    with postgres_database() as url:
        results = _start_together(tmp_path / "home", url, 4)
        assert sum(r is not None for r in results) == 1
        assert status(url).state is SchemaState.CURRENT
        platform = server.open_platform(tmp_path / "home", url, group_commit=False)
        try:
            keys = KeyStore(platform.ledger.engine)
            assert [p.name for p in keys.principals()] == ["admin"]
            assert len(keys.keys("admin")) == 1
        finally:
            platform.close()

"""The metrics folder of ``serve``: a temporary one is removed when the server stops (even
when it fails), one the user named by ``PROMETHEUS_MULTIPROC_DIR`` is kept."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from blockbudget.service import server
from blockbudget.service.metrics import MULTIPROC_ENV


def _serve(tmp_path: Path) -> None:
    server.serve(
        home=tmp_path / "home",
        database=None,
        host="127.0.0.1",
        port=1,
        workers=1,
        group_commit=False,
    )


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Replace uvicorn by a run that records the metrics folder (and writes into it)."""
    folders: list[Path] = []

    def run(*args: Any, **kwargs: Any) -> None:
        folder = Path(os.environ[MULTIPROC_ENV])
        (folder / "counter_12345.db").write_bytes(b"")
        folders.append(folder)

    monkeypatch.setattr(uvicorn, "run", run)
    for name in ("BLOCKBUDGET_HOME", "BLOCKBUDGET_GROUP_COMMIT", MULTIPROC_ENV):
        monkeypatch.setenv(name, "")  # restored as it was after the test, what serve() sets
        monkeypatch.delenv(name)
    monkeypatch.setenv("BLOCKBUDGET_SCHEDULER", "fcfs")  # serve() sets these: undone after
    monkeypatch.setenv("BLOCKBUDGET_PIPELINE_SCHEDULER", "fcfs")
    return folders


def test_the_temporary_folder_is_removed_when_the_server_stops(
    tmp_path: Path, seen: list[Path]
) -> None:
    _serve(tmp_path)
    assert len(seen) == 1 and seen[0].name.startswith("blockbudget-metrics-")
    assert not seen[0].exists()
    assert MULTIPROC_ENV not in os.environ


def test_the_temporary_folder_is_removed_when_the_server_fails(
    tmp_path: Path, seen: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*args: Any, **kwargs: Any) -> None:
        seen.append(Path(os.environ[MULTIPROC_ENV]))
        raise OSError("address in use")

    monkeypatch.setattr(uvicorn, "run", crash)
    with pytest.raises(OSError):
        _serve(tmp_path)
    assert not seen[0].exists()


def test_a_folder_the_user_named_is_kept(
    tmp_path: Path, seen: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "prometheus"
    monkeypatch.setenv(MULTIPROC_ENV, str(mine))
    _serve(tmp_path)
    assert seen == [mine]
    assert mine.is_dir() and (mine / "counter_12345.db").exists()
    assert os.environ[MULTIPROC_ENV] == str(mine)

"""The DuckDB engine's own spill folder is removed on close, and also when an engine that was
never closed is collected (a platform dropped without close() must not leave folders behind)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pyarrow as pa
from engine_support import write_source

from blockbudget.engine import AggKind, Aggregate, Plan, get_engine


def _used_engine(tmp_path: Path) -> tuple[object, str]:
    src = write_source(str(tmp_path / "data"), [[pa.table({"n": pa.array([1, 2, 3])})]])
    engine = get_engine("duckdb")
    (value,) = engine.aggregate(Plan(src, (Aggregate("n", AggKind.COUNT),))).of("n")
    assert value == 3
    folder = engine._own_temp  # type: ignore[attr-defined]
    assert folder is not None and os.path.isdir(folder)
    return engine, folder


def test_close_removes_the_spill_folder(tmp_path: Path) -> None:
    engine, folder = _used_engine(tmp_path)
    engine.close()  # type: ignore[attr-defined]
    assert not os.path.exists(folder)
    engine.close()  # type: ignore[attr-defined]  # twice is fine


def test_an_unclosed_engine_removes_its_folder_when_collected(tmp_path: Path) -> None:
    engine, folder = _used_engine(tmp_path)
    del engine
    gc.collect()
    assert not os.path.exists(folder)

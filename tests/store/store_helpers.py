"""Helpers shared by the block store tests (imported by name: pytest puts this folder on
sys.path, and spawned worker processes inherit it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa

from blockbudget import Accounting, Budget
from blockbudget.store import Blocking, BlockStore, LatePolicy, StreamSpec, catalog

POLICY = Budget(epsilon=1, delta=1e-6)


def time_spec(
    name: str = "flights", late: LatePolicy = LatePolicy.NEW_BLOCK, **kw: Any
) -> StreamSpec:
    return StreamSpec(name, POLICY, Accounting.BASIC, Blocking.by_time("time_hour"), late, **kw)


def snapshot(store: BlockStore, root: Path) -> tuple[list[str], dict[str, list[str]]]:
    """Every path under the root and every catalog row, for before/after comparisons."""
    paths = sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []
    with store.engine.connect() as conn:
        rows = {
            t.name: sorted(repr(tuple(r)) for r in conn.execute(sa.select(t)))
            for t in catalog.metadata.sorted_tables
        }
    return paths, rows


def part_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))


def sort_frame(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)

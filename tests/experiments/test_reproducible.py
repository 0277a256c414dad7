"""A seeded experiment is reproducible: the same seed gives the same table, another seed another
one (one cheap experiment from each family; all of them use the same ``ctx.seed`` plumbing)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from experiment_support import RUNS, QuickRun, run_quick

CHEAP = (
    "budgeting-offline-online",
    "dpi-horizon",
    "sage-block-composition",
    "series-kmeans-protect",
    "dpi-dynamic",
)


def _normalised(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Rows with NaN made comparable (NaN ≠ NaN)."""
    return [
        {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in dict(r).items()}
        for r in rows
    ]


@pytest.mark.parametrize("name", CHEAP)
def test_same_seed_same_table_other_seed_other_table(
    name: str, tmp_path: Path, quick_run: Callable[[str], QuickRun]
) -> None:
    first = _normalised(quick_run(name).result.rows)
    again = run_quick(name, tmp_path / "again", runs=RUNS.get(name))
    assert _normalised(again.result.rows) == first
    assert [p.name for p in again.result.files] == [p.name for p in quick_run(name).result.files]
    other = run_quick(name, tmp_path / "other", seed=1, runs=RUNS.get(name))
    assert _normalised(other.result.rows) != first

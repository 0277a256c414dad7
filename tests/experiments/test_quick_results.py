"""Every experiment's quick run, read as a result: the rows it reports are the rows its CSV files
hold, every file it names was written under its folder, and a result drawn with seeded noise says
it is not secure."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from experiment_support import QuickRun

from blockbudget.experiments import all_experiments

#: experiments that release nothing computed from data: an accountant's arithmetic over a budget
#: sequence drawn from public randomness (DPI's allocation does not depend on the data)
NO_DATA = {"dpi-budget", "dpi-privacy-loss"}
SEEDED = re.compile(r"seeded|SeededNoise", re.IGNORECASE)
NOT_SECURE = re.compile(r"not secure|secure(_noise)?=False")


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _as_written(row: Any) -> dict[str, str]:
    """A row as ``csv.DictWriter`` writes it (None as the empty string, the rest via str)."""
    return {str(k): "" if v is None else str(v) for k, v in dict(row).items()}


@pytest.mark.parametrize("name", sorted(all_experiments()))
def test_reported_rows_are_written_and_every_file_is_under_the_folder(
    name: str, quick_run: Callable[[str], QuickRun]
) -> None:
    run = quick_run(name)
    result = run.result
    assert result.rows, f"{name} reported no rows"
    keys = list(result.rows[0])
    assert all(list(r) == keys for r in result.rows), f"{name}: rows with different columns"
    assert set(result.files) <= set(run.ctx.files)
    assert len(set(result.files)) == len(result.files)
    figures = {filename for filename, _ in run.figures}
    csvs: list[Path] = []
    for path in result.files:
        assert path.parent == run.ctx.out_dir, path
        if path.suffix == ".png":
            assert path.name in figures  # saved through ctx.save_figure
        else:
            assert path.is_file() and path.stat().st_size > 0, path
        if path.suffix == ".csv":
            csvs.append(path)
    assert csvs, f"{name} wrote no table"
    # the headline rows are rows of one written table, in order (some report only its last rows)
    written = [_csv_rows(p) for p in csvs]
    reported = [_as_written(r) for r in result.rows]
    assert any(_in_order(reported, table) for table in written), f"{name}: rows not in a CSV"


def _in_order(rows: list[dict[str, str]], table: list[dict[str, str]]) -> bool:
    it = iter(table)
    return all(any(row == other for other in it) for row in rows)


@pytest.mark.parametrize("name", sorted(all_experiments()))
def test_a_seeded_result_says_it_is_not_secure(
    name: str, quick_run: Callable[[str], QuickRun]
) -> None:
    result = quick_run(name).result
    notes = " ".join(str(n) for n in result.notes)
    flagged = [r for r in result.rows if "secure" in r]
    if name in NO_DATA:
        assert not flagged and not NOT_SECURE.search(notes)
        return
    assert all(r["secure"] is False for r in flagged), name
    assert flagged or (SEEDED.search(notes) and NOT_SECURE.search(notes)), (
        f"{name}: neither a secure=False column nor a note that the noise is seeded: {notes!r}"
    )


@pytest.mark.parametrize("name", sorted(all_experiments()))
def test_numbers_are_finite_or_marked(name: str, quick_run: Callable[[str], QuickRun]) -> None:
    """A reported float is finite, or NaN/inf where the experiment means "none" (a rate with no
    accepted model, a median with no accepting run, a mean release time with no release)."""
    allowed = {
        "violation_rate",
        "median_rows_to_accept",
        "median_resolution",
        "mean_release_time_blocks",
    }
    for row in quick_run(name).result.rows:
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                assert key in allowed, (name, key, value)

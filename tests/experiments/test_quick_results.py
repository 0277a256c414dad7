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
#: scheduler simulations: deterministic schedulers on public (synthetic) demands, no noise drawn
NO_DATA |= {"dpack-contention", "privatekube-micro"}
SEEDED = re.compile(r"seeded|SeededNoise", re.IGNORECASE)
NOT_SECURE = re.compile(r"not secure|secure(_noise)?=False")


SERIES_COLUMNS = ("N", "strategy", "U_s", "epsilon", "rounds")
PAIRED = ("minus_avg_mean", "minus_avg_se")
#: each quick table's columns and its number of rows (the product of the quick form's grid)
TABLES: dict[str, tuple[tuple[str, ...], int]] = {
    "budgeting-blocks-used": (
        ("queries", "method", *(f"after_query_{j}" for j in range(1, 6))),
        2 * 3,  # query costs × (ours, sage, streaming)
    ),
    "budgeting-competitive-ratio": (
        ("U_over_L", "mode", "bound_1_plus_ln", "worst_random", "worst_adversarial",
         "within_bound"),
        2 * 2,  # spreads × (ideal, private)
    ),
    "budgeting-offline-online": (
        ("queries", "method", "balanced_accuracy_pct", "significance_per_query", "seeds"),
        2 * 2,
    ),
    "budgeting-queries-served": (("queries", "method", "blocks_4", "blocks_8"), 2 * 3),
    "budgeting-same-data": (
        ("queries", "method", "digits_accuracy_pct", "flights_mse_min2", "flights_medae_min",
         "seeds"),
        2 * 2,
    ),
    "dpack-contention": (
        ("online_blocks", "tasks", "tasks_per_block", "scheduler", "allocated_authors_end",
         "allocated_drain", "over_dpf_t_authors_end", "over_dpf_t_drain"),
        2 * 4,  # online block counts × (dpf-t, dpack, fcfs-t, dpf-n)
    ),
    "dpi-apps": (
        ("epsilon", "hbos_precision", "hbos_recall", "svd_precision", "svd_recall",
         "kmeans_ari", "synthetic_svd_precision", "synthetic_kmeans_ari", "secure"),
        2,
    ),
    "dpi-budget": (("epsilon", "scheme", "t", "remaining", "spent"), 2 * 4),  # last t only
    "dpi-dynamic": (
        ("epsilon", "slots", "spent", "kl", "mse", "kl_uniform", "kl_laplace", "median_abs_err",
         "secure"),
        2,
    ),
    "dpi-epsilon": (
        ("stream", "horizon", "allocation", "epsilon", "slots", "min_users", "spent", "kl",
         "mse", "kl_uniform", "mse_uniform", "kl_laplace", "mse_laplace", "stat_mse", "secure"),
        3 * 2 * 2 * 2,  # streams × horizons × allocations × ε
    ),
    "dpi-horizon": (
        ("stream", "slots", "min_users", "epsilon", "parameters", "zeta", "rate", "spent",
         "median_epsilon_t", "max_epsilon_t", "median_resolution", "kl", "kl_uniform", "mse",
         "mse_uniform", "kl_ratio", "secure"),
        2 * 2,
    ),
    "dpi-long": (
        ("items", "slots", "epsilon", "spent", "remaining", "kl_first_1000", "kl_last_1000",
         "kl_uniform", "mse_last_1000", "secure"),
        1,
    ),
    "dpi-params": (
        ("stream", "param", "value", "horizon", "spent", "kl", "mse", "kl_uniform", "secure"),
        2 * 3 * 2 * 2,  # streams × parameters × values × horizons
    ),
    "dpi-privacy-loss": (
        ("t", "event_sensitivity_user_level", "event_basic_epsilon", "event_rdp_epsilon_at_1e-5",
         "dpi_sensitivity", "dpi_epsilon_spent", "dpi_epsilon_cap"),
        3,
    ),
    "sage-block-composition": (
        ("window_days", "composition", "rows", "heldout_mse", "smallest_acceptable_mse"),
        2 + 3 + 3,  # windows of 4, 8, 16 days: block, 1-day blocks, and 7-day ones from 8 days
    ),
    "sage-sample-complexity": (
        ("task", "sla", "target", "runs", "accepted_runs", "median_rows_to_accept", "naive",
         "best_nonprivate"),
        2 * 3 * 3,  # tasks × SLAs × targets
    ),
    "sage-validation": (
        ("task", "eta", "sla", "pipelines", "accepted", "rejected", "violated",
         "violation_rate", "paper_violation_rate"),
        2 * 2 * 4,
    ),
    "sage-workload": (
        ("scale", "weeks_per_block", "rows_per_block", "strategy", "arrival_rate_per_block",
         "trial", "pipelines", "released", "release_fraction", "mean_release_time_blocks",
         "mean_time_censored_blocks", "budget_used"),
        2 * 4,  # loads × strategies
    ),
    "privatekube-micro": (
        ("setting", "accounting", "blocks", "pipelines", "scheduler", "N", "allocated"),
        # FCFS per setting, DPF-N/T and RR-N/T × 3 N × 2 settings, DPF-N × 2 N × 2
        4 + 4 * 3 * 2 + 2 * 2,
    ),
    "series-birch": ((*SERIES_COLUMNS, "nivc_mean", "nivc_std", *PAIRED), 2 * 5),
    "series-kmeans-geo": ((*SERIES_COLUMNS, "f1_mean", "f1_std", *PAIRED), 3 * 8),
    "series-kmeans-protect": ((*SERIES_COLUMNS, "f1_mean", "f1_std", *PAIRED), 3 * 6),
    "series-kmeans-taylor": ((*SERIES_COLUMNS, "f1_mean", "f1_std", *PAIRED), 3 * 5),
    "series-noise": (
        ("N", "U_s", "strategy", "rounds", "mse_measured", "mse_std_error", "mse_expected",
         "mse_paper", "epsilon_min", "epsilon_max", "sum_of_terms"),
        5,
    ),
    "streams-compare": (
        ("stream", "epsilon", "method", "slots", "kl", "kl_se", "mse", "mse_se", "warned",
         "recommended", "seeds", "secure", "mse_vs_dpi"),
        3 * 6,  # streams × methods
    ),
}  # fmt: skip


def test_every_experiment_has_its_table_listed() -> None:
    assert set(TABLES) == set(all_experiments())


@pytest.mark.parametrize("name", sorted(TABLES))
def test_quick_table_columns_and_size(name: str, quick_run: Callable[[str], QuickRun]) -> None:
    columns, size = TABLES[name]
    rows = quick_run(name).result.rows
    assert tuple(rows[0]) == columns and len(rows) == size


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

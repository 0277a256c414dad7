"""Sage's experiments' parts at small sizes: the adaptive schedule, the confidence schedule, the
per-block validation bound against the paper's formula, the summaries against hand tables, the
workload's profiles and arrivals, and the profile cache."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from blockbudget.experiments.sage_block_composition import partitioned_bound
from blockbudget.experiments.sage_block_composition import summarize as summarize_composition
from blockbudget.experiments.sage_common import (
    Split,
    TaskKind,
    eta_at,
    first_outcome,
    schedule,
    seeds,
    violates,
)
from blockbudget.experiments.sage_sample_complexity import targets
from blockbudget.experiments.sage_standin import cache_path, load_tables, store_tables
from blockbudget.experiments.sage_validation import PAPER, _trials
from blockbudget.experiments.sage_validation import summarize as summarize_validation
from blockbudget.experiments.sage_workload import (
    CAPACITY,
    Plan,
    Scale,
    TableProfile,
    _closed,
    plan,
    profile_rows,
    workload,
)
from blockbudget.outcome import Outcome
from blockbudget.training.validation import SlaMode, ValidationResult


def test_schedule_doubles_epsilon_then_the_data() -> None:
    assert schedule(epsilon0=0.25, max_epsilon=1.0, n0=1000, n_max=8000) == [
        (0.25, 1000),
        (0.5, 1000),
        (1.0, 1000),
        (1.0, 2000),
        (1.0, 4000),
        (1.0, 8000),
    ]
    # n_max not a power-of-two multiple of n0: the last window is the largest that fits
    assert schedule(epsilon0=1.0, max_epsilon=1.0, n0=1000, n_max=5000)[-1] == (1.0, 4000)


def test_confidence_schedule_sums_to_eta() -> None:
    assert [eta_at(0.06, i) for i in (1, 2, 3)] == pytest.approx([0.03, 0.01, 0.005])
    # Σ_{i≤m} η/(i(i+1)) = η(1 − 1/(m+1)) < η: a union bound over any number of iterations
    assert math.fsum(eta_at(0.05, i) for i in range(1, 100)) == pytest.approx(0.05 * 99 / 100)


def test_seeds_are_distinct_and_repeatable() -> None:
    got = list(seeds(7, 50))
    assert len(set(got)) == 50 and got == list(seeds(7, 50)) and got != list(seeds(8, 50))
    assert all(0 <= s < 2**31 - 1 for s in got)


def _result(outcome: Outcome) -> ValidationResult:
    return ValidationResult(
        outcome, 0.1, None, 0.1, 0.05, Decimal(1), SlaMode.SAGE, None, secure_noise=False
    )


def test_first_outcome_skips_retries() -> None:
    retry, accept = _result(Outcome.RETRY), _result(Outcome.ACCEPT)
    assert first_outcome([retry, retry, accept, retry]) == (Outcome.ACCEPT, 2)
    assert first_outcome([retry, retry]) == (Outcome.RETRY, 2)
    assert first_outcome([]) == (Outcome.RETRY, 0)


def _split(kind: TaskKind) -> Split:
    x = np.zeros((2, 1))
    return Split(kind, x, x[:, 0], x, x[:, 0], 0.5, 0.1, np.zeros(2, dtype=np.int64))


def test_a_target_is_missed_in_the_metrics_direction() -> None:
    taxi, criteo = _split(TaskKind.TAXI), _split(TaskKind.CRITEO)
    assert violates(taxi, 0.02, 0.01) and not violates(taxi, 0.01, 0.01)  # MSE: lower is better
    assert violates(criteo, 0.7, 0.8) and not violates(criteo, 0.8, 0.8)  # accuracy: higher


def test_partitioned_bound_against_the_formula() -> None:
    blocks = [np.array([0.1, 0.3, 0.2] * 100), np.array([0.0, 0.4] * 150)]
    epsilon, eta = 0.5, 0.05
    got = partitioned_bound(blocks, epsilon=epsilon, eta=eta, rng=np.random.default_rng(4))
    # by hand, replaying the draws: every block's count noise, then every block's sum noise
    rng = np.random.default_rng(4)
    scale = 2.0 / epsilon
    n = sum(len(b) + rng.laplace(0, scale) for b in blocks)
    s = sum(float(b.sum()) + rng.laplace(0, scale) for b in blocks)
    p = eta / 3
    correction = scale * math.log(1 / (2 * p / 2))  # P(Lap > t) = p/k for each of k = 2 blocks
    n_lo, s_hi = n - 2 * correction, s + 2 * correction
    mean, log_term = s_hi / n_lo, math.log(1 / p)
    want = mean + math.sqrt(2 * mean * log_term / n_lo) + 4 * log_term / n_lo
    assert got == pytest.approx(want, rel=1e-12)
    # at ε → ∞ the corrections vanish: Bernstein on the exact mean
    exact = partitioned_bound(blocks, epsilon=1e15, eta=eta, rng=np.random.default_rng(0))
    true_mean, rows = (60.0 + 60.0) / 600, 600
    assert exact == pytest.approx(
        true_mean + math.sqrt(2 * true_mean * log_term / rows) + 4 * log_term / rows, rel=1e-9
    )
    # too few rows for the corrections: nothing can be said
    tiny = [np.array([0.5])] * 3
    assert partitioned_bound(tiny, epsilon=0.1, eta=eta, rng=np.random.default_rng(0)) == math.inf


def test_more_blocks_only_loosen_the_bound_at_infinite_epsilon() -> None:
    losses = np.linspace(0.0, 0.2, 1200)
    bounds = [
        partitioned_bound(
            np.array_split(losses, k), epsilon=1e6, eta=0.05, rng=np.random.default_rng(1)
        )
        for k in (1, 2, 4, 8)
    ]
    assert bounds == sorted(bounds) and bounds[0] < bounds[-1]


def test_composition_summary_by_hand() -> None:
    rows = [
        {"window_days": 4, "composition": "block (Sage)", "rows": 10, "heldout_mse": 1.0,
         "smallest_acceptable_mse": 0.1},
        {"window_days": 4, "composition": "block (Sage)", "rows": 13, "heldout_mse": 2.0,
         "smallest_acceptable_mse": 0.5},
        {"window_days": 4, "composition": "block (Sage)", "rows": 12, "heldout_mse": 6.0,
         "smallest_acceptable_mse": math.inf},
        {"window_days": 8, "composition": "query, 1-day blocks", "rows": 7, "heldout_mse": 4.0,
         "smallest_acceptable_mse": 0.3},
    ]  # fmt: skip
    assert summarize_composition(rows) == [
        {"window_days": 4, "composition": "block (Sage)", "rows": 11, "heldout_mse": 3.0,
         "smallest_acceptable_mse": 0.5},  # rows: ⌊mean⌋; bound: median of 0.1, 0.5 and ∞
        {"window_days": 8, "composition": "query, 1-day blocks", "rows": 7, "heldout_mse": 4.0,
         "smallest_acceptable_mse": 0.3},
    ]  # fmt: skip


def test_validation_summary_by_hand() -> None:
    def rec(sla: str, outcome: str, violated: bool, eta: float = 0.05) -> dict[str, object]:
        return {"task": "taxi", "eta": eta, "sla": sla, "outcome": outcome, "violated": violated}

    records = [
        rec("No SLA", "accept", True),
        rec("No SLA", "accept", False),
        rec("No SLA", "accept", True),
        rec("No SLA", "reject", False),
        rec("Sage SLA", "timeout", False),
        rec("Sage SLA", "reject", False),
    ]
    rows = summarize_validation(records)
    assert [(r["task"], r["eta"], r["sla"]) for r in rows] == [
        ("taxi", 0.05, "No SLA"),
        ("taxi", 0.05, "Sage SLA"),
    ]  # only cells with pipelines, in Tab. 2's order
    no_sla, sage = rows
    assert (no_sla["pipelines"], no_sla["accepted"], no_sla["rejected"]) == (4, 3, 1)
    assert no_sla["violated"] == 2 and no_sla["violation_rate"] == 2 / 3
    assert no_sla["paper_violation_rate"] == PAPER[("taxi", 0.05)]["No SLA"] == 0.379
    assert sage["accepted"] == 0 and math.isnan(sage["violation_rate"])


def test_quick_trials_are_smaller_than_the_full_ones() -> None:
    for kind in TaskKind:
        quick, full = _trials(kind, True), _trials(kind, False)
        assert quick[0] < full[0] and quick[3] <= full[3] and quick[2] <= full[2]
        assert 0 < quick[1] <= 1 and 0 < full[1] <= 1


def test_sample_complexity_targets_span_best_to_naive() -> None:
    taxi = targets(TaskKind.TAXI, 0.01, 0.1, 3)
    assert taxi == pytest.approx(
        [0.02, math.sqrt(0.02 * 0.08), 0.08]
    )  # geometric, 2·best…0.8·naive
    criteo = targets(TaskKind.CRITEO, 0.9, 0.7, 3)
    assert criteo == pytest.approx([0.71, (0.71 + 0.895) / 2, 0.895])


def test_table_profile_lookups_by_hand() -> None:
    p = TableProfile(
        (0.25, 1.0),
        (1, 2, 4),
        _closed(np.array([[False, True, False], [False, False, False]])),
        _closed(np.array([[False, False, False], [False, False, True]])),
    )
    # closure: accepted at (ε, window) ⇒ at every larger ε and window
    assert p.combined == ((False, True, True), (False, True, True))
    assert p.partitioned == ((False, False, False), (False, False, True))

    def at(fraction: float, blocks: int, partitioned: bool = False) -> Outcome:
        return p.outcome(epsilon_fraction=fraction, blocks=blocks, partitioned=partitioned)

    assert at(0.25, 2) is Outcome.ACCEPT and at(0.25, 3) is Outcome.ACCEPT  # 3 blocks ⊇ 2
    assert at(0.2, 4) is Outcome.RETRY  # below the grid's smallest ε
    assert at(0.5, 1) is Outcome.RETRY and at(1.0, 0) is Outcome.RETRY
    assert at(1.0, 4, True) is Outcome.ACCEPT and at(0.9, 4, True) is Outcome.RETRY
    assert p.blocks_needed() == 2 and p.blocks_needed(partitioned=True) == 4
    assert p.blocks_needed(epsilon_index=0, partitioned=True) is None


def test_workload_arrivals_by_their_rules() -> None:
    easy = TableProfile((1.0,), (1, 2), ((True, True),), ((True, True),))
    hard = TableProfile((1.0,), (1, 2), ((False, True),), ((False, True),))
    never = TableProfile((1.0,), (1, 2), ((False, False),), ((False, False),))
    profiles = {"easy": easy, "hard": hard, "never": never}
    blocks, tasks, chosen = workload(2.0, 40, profiles, seed=3)
    assert [b.block_id for b in blocks] == [f"d{i:04d}" for i in range(40)]
    assert all(b.capacity == CAPACITY and b.arrival == i for i, b in enumerate(blocks))
    assert tasks and all(t.arrival < 30 for t in tasks)  # the first 3/4 of the horizon
    assert [t.arrival for t in tasks] == sorted(t.arrival for t in tasks)
    assert set(chosen) == {t.task_id for t in tasks}
    assert never not in chosen.values()  # a pipeline no window accepts never arrives
    picks = [p is easy for p in chosen.values()]
    assert sum(picks) > len(picks) / 2  # weight ∝ 1/blocks needed: easy 2/3, hard 1/3
    again = workload(2.0, 40, profiles, seed=3)
    assert [t.arrival for t in again[1]] == [t.arrival for t in tasks]
    assert workload(2.0, 40, {"never": never}, seed=3)[1:] == ([], {})


def test_quick_plan_and_profile_rows() -> None:
    quick = plan(Scale.PAPER_STANDIN, quick=True)
    assert isinstance(quick, Plan) and quick.rows_per_block == 6300 * 8
    assert max(quick.epsilons) == 1.0 and list(quick.grid) == sorted(quick.grid)
    full = plan(Scale.ORIGINAL, quick=False)
    assert full.rows_per_block == 6300 and quick.horizon < full.horizon
    profile = TableProfile((1.0,), (1, 2, 4), ((False, True, True),), ((False, False, False),))
    rows = profile_rows(quick, {"lr": profile})
    assert rows == [
        {
            "scale": "paper-standin",
            "pipeline": "lr",
            "blocks_needed_at_eps1": 2,
            "blocks_needed_at_eps1_partitioned": None,
            "weeks_needed_at_eps1": 16,
            "largest_window_weeks": 32,
        }
    ]


def test_profile_cache_path_store_and_load(tmp_path: Path) -> None:
    spec = {"seed": 0, "grid": [1, 2]}
    path = cache_path(tmp_path, "original", spec)
    assert path == cache_path(tmp_path, "original", {"grid": [1, 2], "seed": 0})  # key order
    assert path != cache_path(tmp_path, "original", {"seed": 1, "grid": [1, 2]})
    assert path.parent == tmp_path / "profile-cache" and path.name.startswith("original-")
    assert load_tables(path) is None  # absent
    store_tables(path, {"lr": {"epsilons": [1.0]}})
    assert load_tables(path) == {"lr": {"epsilons": [1.0]}}
    assert list(path.parent.iterdir()) == [path]  # no temporary file left
    path.write_text('{"lr": ')  # a torn file is re-measured, not read
    assert load_tables(path) is None

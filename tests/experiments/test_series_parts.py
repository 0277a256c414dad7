"""The series experiments' parts at small sizes: every figure's budget sequence within ε, DP
k-means equal to Lloyd's algorithm at infinite ε, the paired differences, and the noise
expectation against its formula."""

from __future__ import annotations

import csv
import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from blockbudget.budget import Budget, RdpCurve
from blockbudget.errors import InvalidRequestError
from blockbudget.experiments.common import ExperimentContext
from blockbudget.experiments.series_data import MeteredSource, mean_and_std, unbalance_like
from blockbudget.experiments.series_kmeans import (
    BIRCH_STRATEGIES,
    GEO_STRATEGIES,
    LLOYD,
    PROTECTION_STRATEGIES,
    TABLE3_US,
    TABLE4_US,
    TAYLOR_STRATEGIES,
    _run_grid,
    build_sequence,
)
from blockbudget.experiments.series_noise import (
    NOISE_BOUNDS,
    STRATEGIES,
    expected_mse,
    table2_sequence,
)

ALL = sorted(
    {*GEO_STRATEGIES, *TAYLOR_STRATEGIES, *PROTECTION_STRATEGIES, *BIRCH_STRATEGIES} - {LLOYD}
)


@pytest.mark.parametrize("name", ALL)
def test_every_figures_sequence_has_n_terms_within_epsilon(name: str) -> None:
    bounds = TABLE4_US if "Ty" in name else TABLE3_US
    for n in (3, 8):
        seq = build_sequence(name, n, epsilon="0.3", noise_bounds=bounds, seed=11)
        assert len(seq.terms) == n and all(t > 0 for t in seq.terms)
        assert seq.total <= Decimal("0.3") and seq.total > Decimal("0.3") * (1 - Decimal("1e-15"))
        assert build_sequence(name, n, epsilon="0.3", noise_bounds=bounds, seed=11) == seq


def test_shuffled_is_a_permutation_and_ac_uses_its_tables_bound() -> None:
    plain = build_sequence("Flip-Geo", 8, epsilon="0.3", noise_bounds=TABLE3_US, seed=0)
    shuffled = build_sequence("Shuffled-Flip-Geo", 8, epsilon="0.3", noise_bounds=TABLE3_US, seed=0)
    assert sorted(shuffled.terms) == sorted(plain.terms) and shuffled.terms != plain.terms
    geo = build_sequence("Geo", 8, epsilon="0.3", noise_bounds=TABLE3_US, seed=0)
    ac = build_sequence("AC-Geo", 8, epsilon="0.3", noise_bounds=TABLE3_US, seed=0)
    assert ac.terms != geo.terms  # U_s = TABLE3_US[8] changes the sequence
    assert ac == build_sequence("AC-Geo", 8, epsilon="0.3", noise_bounds={8: 50}, seed=5)
    with pytest.raises(KeyError):  # no U_s for this N: refused, not guessed
        build_sequence("AC-Geo", 8, epsilon="0.3", noise_bounds={}, seed=0)


def test_dp_kmeans_at_infinite_epsilon_is_lloyds_algorithm(tmp_path: Path) -> None:
    points, labels = unbalance_like()
    ctx = ExperimentContext(name="t", out_dir=tmp_path)
    strategies = ("AVG", "Geo", "AC-Geo", LLOYD)
    rows = _run_grid(
        ctx,
        points=points,
        k=8,
        strategies=strategies,
        ns=(3, 6),
        rounds=2,
        epsilon="1e9",
        noise_bounds=TABLE3_US,
        score="f1",
        true_labels=labels,
        description="grid",
    )
    assert [(r["N"], r["strategy"]) for r in rows] == [(n, s) for n in (3, 6) for s in strategies]
    for n in (3, 6):
        mine = {r["strategy"]: r for r in rows if r["N"] == n}
        for r in mine.values():  # noise of scale ~1e-8: the same clusters as without DP
            assert r["f1_mean"] == mine[LLOYD]["f1_mean"] and r["minus_avg_mean"] == 0.0
            assert r["minus_avg_se"] == 0.0 and r["rounds"] == 2
        assert mine["AC-Geo"]["U_s"] == TABLE3_US[n] and mine["AVG"]["U_s"] == ""
    with (tmp_path / "grid-rounds.csv").open() as handle:
        raw = list(csv.DictReader(handle))
    assert len(raw) == 2 * 4 * 2  # N × strategies × rounds
    by_key: dict[tuple[int, str], list[float]] = {}
    for r in raw:
        by_key.setdefault((int(r["N"]), r["strategy"]), []).append(float(r["f1"]))
    for r in rows:
        assert r["f1_mean"] == pytest.approx(np.mean(by_key[(r["N"], r["strategy"])]))


def test_mean_and_sample_std_by_hand() -> None:
    assert mean_and_std([1.0, 2.0, 3.0, 4.0]) == (2.5, pytest.approx(math.sqrt(5 / 3)))
    assert mean_and_std([7.0]) == (7.0, 0.0)


def test_metered_source_refuses_what_it_cannot_sum() -> None:
    source = MeteredSource(Budget(epsilon=1))
    with pytest.raises(InvalidRequestError, match="BASIC source takes Budget costs"):
        source.draw(RdpCurve.gaussian(sigma=1.0), label="x")
    assert source.draws == 0 and source.spent == Budget.zero()


def test_table2_sequences_and_their_expected_noise() -> None:
    for name in STRATEGIES:
        seq = table2_sequence(name, 20)
        assert len(seq.terms) == 20 and seq.total <= 1
        # E[Σ N_i²] for Laplace(Δ/ε_i): Σ 2Δ²/ε_i², here with Δ = 2
        want = math.fsum(2 * 4 / float(t) ** 2 for t in seq.terms)
        assert expected_mse(seq, sensitivity=2.0) == pytest.approx(want, rel=1e-12)
    # AVG: 20 terms of 1/20 → 20 · 2 / (1/20)² = 16,000 (Tab. 2: 1.53e4 measured)
    assert expected_mse(table2_sequence("AVG", 20)) == pytest.approx(16_000)
    ac = table2_sequence("AC-Geo", 50)
    assert ac == table2_sequence("AC-Geo", 50) and NOISE_BOUNDS[50] == 95
    assert ac.terms != table2_sequence("Geo", 50).terms

"""The series experiments' quick forms, and the metrics they use."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from blockbudget.budget import Budget
from blockbudget.errors import ReservationError
from blockbudget.experiments import get_experiment
from blockbudget.experiments.common import ExperimentContext
from blockbudget.experiments.series_data import (
    MeteredSource,
    birch3_like,
    nivc,
    unbalance_like,
    weighted_f1,
)
from blockbudget.experiments.series_kmeans import LLOYD, TABLE3_US, TABLE4_US, TABLE5_US
from blockbudget.experiments.series_noise import PAPER_TABLE2, expected_mse, table2_sequence
from blockbudget.series import parse_strategy, us_interval


def _run(name: str, tmp_path: Path) -> list[dict[str, object]]:
    experiment = get_experiment(name)
    result = experiment.run(ExperimentContext(name=name, out_dir=tmp_path / name, quick=True))
    pngs = [f for f in result.files if f.suffix == ".png"]
    csvs = [f for f in result.files if f.suffix == ".csv" and not f.name.endswith("-rounds.csv")]
    assert pngs and csvs and all(f.stat().st_size > 0 for f in result.files)
    with csvs[0].open() as handle:
        assert len(list(csv.DictReader(handle))) == len(result.rows)
    return [dict(r) for r in result.rows]


def test_table2_quick(tmp_path: Path) -> None:
    rows = _run("series-noise", tmp_path)
    by = {str(r["strategy"]): r for r in rows}
    assert set(by) == set(PAPER_TABLE2) and all(r["N"] == 20 for r in rows)
    for name, row in by.items():
        seq = table2_sequence(name, 20)
        want = math.fsum(2 * (1 + 1e-6) ** 2 / float(t) ** 2 for t in seq.terms)
        assert float(str(row["mse_expected"])) == pytest.approx(want, rel=1e-9)
        # the sequences reproduce the paper's magnitudes: expectation within 10% of Tab. 2
        assert float(str(row["mse_expected"])) == pytest.approx(PAPER_TABLE2[name][20], rel=0.1)
        ratio = float(str(row["mse_measured"])) / float(str(row["mse_expected"]))
        assert 0.4 < ratio < 2.5
    expected = {n: float(str(r["mse_expected"])) for n, r in by.items()}
    assert expected["AVG"] < expected["AC-Geo"] < expected["AC-bl-Ty"] < expected["Geo"]
    assert expected["Geo"] < expected["bl-Ty"]


def test_expected_mse_is_the_laplace_variance_sum() -> None:
    seq = parse_strategy("AVG").build(4, epsilon=1)
    assert expected_mse(seq) == pytest.approx(4 * 2 / 0.25**2)


@pytest.mark.parametrize(
    "name", ["series-kmeans-geo", "series-kmeans-taylor", "series-kmeans-protect"]
)
def test_kmeans_quick(name: str, tmp_path: Path) -> None:
    rows = _run(name, tmp_path)
    for r in rows:  # paired differences with AVG are the differences of the means
        avg = next(a for a in rows if a["N"] == r["N"] and a["strategy"] == "AVG")
        diff = float(str(r["f1_mean"])) - float(str(avg["f1_mean"]))
        assert float(str(r["minus_avg_mean"])) == pytest.approx(diff, abs=1e-12)
    assert {r["N"] for r in rows} == {3, 6, 10}
    assert all(0.0 <= float(str(r["f1_mean"])) <= 1.0 for r in rows)
    avg6 = next(r for r in rows if r["N"] == 6 and r["strategy"] == "AVG")
    assert float(str(avg6["f1_mean"])) > 0.8  # DP k-means does find the clusters at N = 6
    lloyd = [r for r in rows if r["strategy"] == LLOYD]
    assert len(lloyd) == 3 and all(0.5 < float(str(r["f1_mean"])) <= 1.0 for r in lloyd)
    for r in rows:
        if str(r["strategy"]).startswith("AC-"):
            table = TABLE4_US if "Ty" in str(r["strategy"]) else TABLE3_US
            assert r["U_s"] == table[int(str(r["N"]))]


def test_birch_quick(tmp_path: Path) -> None:
    rows = _run("series-birch", tmp_path)
    assert {r["N"] for r in rows} == {5, 15}
    assert all(0.0 < float(str(r["nivc_mean"])) < 1.0 for r in rows)


def test_table_noise_bounds_lie_in_the_lemma3_intervals() -> None:
    for n, u_s in TABLE3_US.items():
        interval = us_interval(parse_strategy("Geo").build(n, epsilon="0.3"))
        assert interval.lower < u_s < interval.upper
    for n, u_s in TABLE4_US.items():
        interval = us_interval(parse_strategy("bl-Ty").build(n, epsilon="0.3"))
        assert interval.lower < u_s < interval.upper
    for n, u_s in TABLE5_US.items():
        interval = us_interval(parse_strategy("Geo").build(n, epsilon="0.5"))
        assert interval.lower < u_s < interval.upper


def test_weighted_f1_and_nivc() -> None:
    points, labels = unbalance_like()
    assert points.shape == (6500, 2)
    assert sorted(np.bincount(labels).tolist()) == [100] * 5 + [2000] * 3
    assert weighted_f1(labels, labels, 8) == pytest.approx(1.0)
    permuted = (labels + 3) % 8
    assert weighted_f1(labels, permuted, 8) == pytest.approx(1.0)
    merged = np.where(labels == 1, 0, labels)  # two big clusters merged into one found cluster
    # cluster 0 and 1: F1 of the merged cluster is 2·2000/(2000+4000) = 2/3, the other is 0
    want = (2000 * (2 / 3) + 2000 * 0 + 2500 * 1) / 6500
    assert weighted_f1(labels, merged, 8) == pytest.approx(want)
    cents = np.array([[0.0, 0.0], [1.0, 1.0]])
    pts = np.array([[0.0, 1.0], [1.0, 1.0], [0.2, 0.0]])
    assert nivc(pts, cents) == pytest.approx((1.0 + 0.0 + 0.04) / 3)
    assert birch3_like(n=5000).shape == (5000, 2)


def test_metered_source_caps() -> None:
    source = MeteredSource(Budget(epsilon="0.3"))
    source.draw(Budget(epsilon="0.2"), label="a")
    with pytest.raises(ReservationError, match="passes the cap"):
        source.draw(Budget(epsilon="0.2"), label="b")
    assert source.spent == Budget(epsilon="0.2") and source.draws == 1

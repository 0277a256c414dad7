"""The ``--quick`` forms of the dpi-… experiments and of benchmarks/dpi.py, with their numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from blockbudget.experiments import get_experiment
from blockbudget.experiments.common import ExperimentContext

ROOT = Path(__file__).resolve().parents[2]


def _run(name: str, tmp_path: Path) -> list[dict[str, Any]]:
    exp = get_experiment(name)
    result = exp.run(ExperimentContext(name=name, out_dir=tmp_path / name, quick=True))
    files = {p.suffix for p in result.files}
    assert {".csv", ".png"} <= files
    assert all(p.exists() and p.stat().st_size > 0 for p in result.files)
    return [dict(r) for r in result.rows]


def test_budget_experiment_never_overspends(tmp_path: Path) -> None:
    rows = _run("dpi-budget", tmp_path)
    assert len(rows) == 8
    for r in rows:
        assert 0.0 <= r["remaining"] <= r["epsilon"]
    paper = [r for r in rows if r["scheme"] == "Alg. 3, Λ = 1e8"]
    assert all(r["spent"] < 1e-3 for r in paper)
    # the horizon-aware parameters spend most of ε (within it) by 4 horizons of 500 slots
    aware = [r for r in rows if r["scheme"].startswith("Alg. 3, DPIConfig.for_horizon")]
    assert len(aware) == 2 and all(0.7 * r["epsilon"] < r["spent"] for r in aware)


def test_privacy_loss_experiment_grows_for_event_level_only(tmp_path: Path) -> None:
    rows = _run("dpi-privacy-loss", tmp_path)
    basic = [r["event_basic_epsilon"] for r in rows]
    assert basic == [0.5 * r["t"] for r in rows]
    rdp = [r["event_rdp_epsilon_at_1e-5"] for r in rows]
    assert rdp == sorted(rdp) and rdp[-1] > 10
    assert all(r["dpi_epsilon_spent"] <= 0.5 for r in rows)


def test_utility_experiments_report_dpi_uniform_and_laplace(tmp_path: Path) -> None:
    rows = _run("dpi-epsilon", tmp_path)
    assert {r["stream"] for r in rows} == {"flights", "covid", "zipf-1e5-users"}
    for r in rows:
        assert r["spent"] <= r["epsilon"]
        assert r["kl"] >= 0 and r["kl_uniform"] > 0 and r["kl_laplace"] > 0
        # never worse than the uniform PDF by more than a little on the small real streams
        assert r["kl"] <= 1.1 * r["kl_uniform"]
    zipf = [r for r in rows if r["stream"] == "zipf-1e5-users" and r["epsilon"] == 5.0]
    assert all(r["kl"] < 0.5 * r["kl_uniform"] for r in zipf)  # a strong signal is tracked
    params = _run("dpi-params", tmp_path)
    assert {r["param"] for r in params} == {"lam", "mu", "zeta"}
    assert {r["stream"] for r in params} == {"covid", "zipf-1e5-users"}


def test_synthetic_experiments(tmp_path: Path) -> None:
    rows = _run("dpi-dynamic", tmp_path)
    for r in rows:
        assert r["spent"] <= r["epsilon"]
        assert r["median_abs_err"] < 10  # counts per item ~ N(100, <= 10²)
    long = _run("dpi-long", tmp_path)[0]
    assert long["slots"] == 2000 and long["spent"] <= 2.0
    assert long["remaining"] > 1.9  # Λ = 1e8: the budget is barely touched


def test_apps_experiment(tmp_path: Path) -> None:
    rows = _run("dpi-apps", tmp_path)
    for r in rows:
        for key in ("hbos_precision", "hbos_recall", "svd_precision", "svd_recall"):
            assert 0.0 <= r[key] <= 1.0
    # with 10^5 users per slot the two planted clusters are found from the released PDFs
    assert rows[-1]["synthetic_kmeans_ari"] == 1.0
    assert rows[-1]["synthetic_svd_precision"] > 0.5


@pytest.mark.timeout(120)
def test_benchmark_quick_prints_json_lines() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dpi.py"), "--quick"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    lines = [json.loads(x) for x in out.strip().splitlines()]
    slots = [x for x in lines if x["kind"] == "dpi_slot"]
    assert [x["domain"] for x in slots] == [100, 1000]
    assert all(x["dpi_slot_ms"] > 0 and x["baseline_ms"] > 0 for x in slots)
    assert lines[-1]["kind"] == "summary"


def test_horizon_experiment_spends_more_of_epsilon(tmp_path: Path) -> None:
    rows = _run("dpi-horizon", tmp_path)
    by = {(r["stream"], r["parameters"]): r for r in rows}
    for name in ("flights", "covid"):
        paper, aware = by[(name, "paper ζ=0.2, Λ=2T/ε")], by[(name, "for_horizon(T)")]
        assert paper["spent"] <= 10.0 and aware["spent"] <= 10.0
        assert aware["spent"] > 1.5 * paper["spent"]  # the horizon gets most of ε
        assert aware["median_epsilon_t"] > paper["median_epsilon_t"]
        assert aware["median_resolution"] == pytest.approx(
            2 * (2 / aware["min_users"]) / (aware["median_epsilon_t"] / 2)
        )
        assert aware["kl_ratio"] <= 1.05  # never much worse than uniform


def test_streams_compare_ranks_windowed_above_dpi_and_warns_where_it_loses(
    tmp_path: Path,
) -> None:
    rows = _run("streams-compare", tmp_path)
    by = {(r["stream"], r["method"]): r for r in rows}
    assert {r["stream"] for r in rows} == {"flights", "covid", "skewed"}
    for stream in ("flights", "covid", "skewed"):
        assert by[(stream, "windowed-laplace")]["mse"] < by[(stream, "dpi")]["mse"]
    # the skewed stream's heavy item is found: far below the uniform PDF's KL
    assert by[("skewed", "windowed-laplace")]["kl"] < 0.1 * by[("skewed", "uniform")]["kl"]
    # a method that does worse than the uniform PDF was warned about by the recommender
    for r in rows:
        if r["method"] != "uniform" and r["mse"] > by[(r["stream"], "uniform")]["mse"]:
            assert r["warned"], r
    assert all(r["seeds"] == 2 and r["kl_se"] >= 0 and not r["secure"] for r in rows)

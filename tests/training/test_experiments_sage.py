"""The --quick forms of Sage's four experiments: files written and numbers that make sense."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from blockbudget.experiments import get_experiment
from blockbudget.experiments.common import ExperimentContext


def run_quick(name: str, tmp_path: Path) -> list[dict[str, object]]:
    ctx = ExperimentContext(name=name, out_dir=tmp_path / name, quick=True)
    result = get_experiment(name).run(ctx)
    pngs = [f for f in result.files if f.suffix == ".png"]
    csvs = [f for f in result.files if f.suffix == ".csv"]
    assert pngs and all(f.stat().st_size > 1000 for f in pngs)
    assert csvs
    with csvs[-1].open() as handle:
        assert len(list(csv.DictReader(handle))) == len(result.rows)
    return [dict(r) for r in result.rows]


@pytest.mark.slow
def test_sage_validation_quick(tmp_path: Path) -> None:
    rows = run_quick("sage-validation", tmp_path)
    assert {r["sla"] for r in rows} == {"No SLA", "NP SLA", "UC DP SLA", "Sage SLA"}
    assert {(r["task"], r["eta"]) for r in rows} == {
        (t, e) for t in ("taxi", "criteo") for e in (0.01, 0.05)
    }
    for r in rows:
        assert 0 <= r["violated"] <= r["accepted"] <= r["pipelines"]  # type: ignore[operator]
        rate = float(r["violation_rate"])  # type: ignore[arg-type]
        assert math.isnan(rate) or 0.0 <= rate <= 1.0
    # No SLA accepts the most: it has no statistical margin at all
    for task in ("taxi", "criteo"):
        mine = {r["sla"]: r for r in rows if r["task"] == task and r["eta"] == 0.05}
        assert mine["No SLA"]["accepted"] >= mine["Sage SLA"]["accepted"]  # type: ignore[operator]
        # Tab. 2's finding in small: the held-out check does catch No SLA's wrong ACCEPTs, while
        # the SLAed validators ACCEPT models that all meet their targets
        assert mine["No SLA"]["violated"] >= 1  # type: ignore[operator]
        assert mine["Sage SLA"]["accepted"] >= 1  # type: ignore[operator]
        assert mine["Sage SLA"]["violated"] == mine["NP SLA"]["violated"] == 0


@pytest.mark.slow
def test_sage_sample_complexity_quick(tmp_path: Path) -> None:
    rows = run_quick("sage-sample-complexity", tmp_path)
    for task in ("taxi", "criteo"):
        mine = [r for r in rows if r["task"] == task]
        for target in {r["target"] for r in mine}:
            by = {
                r["sla"]: float(r["median_rows_to_accept"]) for r in mine if r["target"] == target
            }  # type: ignore[arg-type]
            # when Sage SLA accepts, No SLA (no margin) and NP SLA (no DP noise to correct
            # for) accepted with no more data (seed 004 Fig. 6's ordering)
            if not math.isnan(by["Sage SLA"]):
                assert by["No SLA"] <= by["NP SLA"] <= by["Sage SLA"]
        # not vacuous: the quick form's windows are large enough for Sage to accept something
        assert any(r["sla"] == "Sage SLA" and r["accepted_runs"] for r in mine)


@pytest.mark.slow
def test_sage_block_composition_quick(tmp_path: Path) -> None:
    rows = run_quick("sage-block-composition", tmp_path)
    for window in {r["window_days"] for r in rows}:
        mine = {r["composition"]: r for r in rows if r["window_days"] == window}
        sage = mine["block (Sage)"]
        for comp, row in mine.items():
            if comp != "block (Sage)":
                # one noisy query per block can only loosen the validation bound
                assert float(row["smallest_acceptable_mse"]) > float(
                    sage["smallest_acceptable_mse"]
                )  # type: ignore[arg-type]


@pytest.mark.slow
def test_sage_workload_quick(tmp_path: Path) -> None:
    rows = run_quick("sage-workload", tmp_path)
    strategies = {r["strategy"] for r in rows}
    assert strategies == {
        "sage-block-conserve",
        "sage-block-aggressive",
        "sage-query-composition",
        "sage-streaming-composition",
    }
    for rate in {r["arrival_rate_per_block"] for r in rows}:
        mine = [r for r in rows if r["arrival_rate_per_block"] == rate]
        assert len({r["pipelines"] for r in mine}) == 1  # same workload for every strategy
        for r in mine:
            assert 0.0 <= float(r["release_fraction"]) <= 1.0  # type: ignore[arg-type]
            assert 0.0 <= float(r["budget_used"]) <= 1.0  # type: ignore[arg-type]
        by = {r["strategy"]: r for r in mine}
        conserve, aggressive = by["sage-block-conserve"], by["sage-block-aggressive"]
        # the conserving search spends less of the blocks' budget (seed 004 §5.4's mechanism),
        # and one query per block never releases more than block composition
        assert float(conserve["budget_used"]) < float(aggressive["budget_used"])  # type: ignore[arg-type]
        assert by["sage-query-composition"]["released"] <= conserve["released"]  # type: ignore[operator]

"""`sage-workload --scale`: the resampled stand-in of Sage's scale, labelled, cached, beside the
original."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from blockbudget.cli.experiments import run_experiment
from blockbudget.errors import InvalidRequestError
from blockbudget.experiments import get_experiment
from blockbudget.experiments import sage_workload as sw
from blockbudget.experiments.common import ExperimentContext
from blockbudget.experiments.sage_common import Split, TaskKind
from blockbudget.experiments.sage_standin import (
    STANDIN_WEEKS_PER_BLOCK,
    Scale,
    resampled_split,
)


def _run(tmp_path: Path, scale: str | None) -> list[dict[str, object]]:
    ctx = ExperimentContext(name="sage-workload", out_dir=tmp_path, quick=True, scale=scale)
    return [dict(r) for r in get_experiment("sage-workload").run(ctx).rows]


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_standin_rows_files_and_figure_say_they_are_the_resampled_standin(
    tmp_path: Path,
) -> None:
    rows = _run(tmp_path, "paper-standin")
    assert rows and {r["scale"] for r in rows} == {"paper-standin"}
    assert {r["weeks_per_block"] for r in rows} == {STANDIN_WEEKS_PER_BLOCK}
    assert {r["rows_per_block"] for r in rows} == {6300 * STANDIN_WEEKS_PER_BLOCK}
    written = _csv(tmp_path / "sage_workload_paper-standin.csv")
    assert len(written) == len(rows) and {r["scale"] for r in written} == {"paper-standin"}
    profiles = _csv(tmp_path / "sage_workload_profiles_paper-standin.csv")
    assert {r["largest_window_weeks"] for r in profiles} == {str(4 * STANDIN_WEEKS_PER_BLOCK)}
    assert (tmp_path / "sage_workload_paper-standin.png").stat().st_size > 1000
    assert not (tmp_path / "sage_workload.csv").exists()  # the original is not run


def test_both_keeps_the_original_beside_the_standin(tmp_path: Path) -> None:
    rows = _run(tmp_path, "both")
    assert {r["scale"] for r in rows} == {"original", "paper-standin"}
    assert len(_csv(tmp_path / "sage_workload_both.csv")) == len(rows)
    original = {
        (r["arrival_rate_per_block"], r["strategy"]): r for r in rows if r["scale"] == "original"
    }
    standin = {
        (r["arrival_rate_per_block"], r["strategy"]): r for r in rows if r["scale"] != "original"
    }
    assert original.keys() == standin.keys()
    for key, row in standin.items():
        # the same arrival process (seeded by the load), only the profiles differ
        assert row["pipelines"] == original[key]["pipelines"]
    # the default run is the original alone, unchanged
    assert {r["scale"] for r in _run(tmp_path / "default", None)} == {"original"}
    # more rows per block: no pipeline needs more blocks in the stand-in than in the original
    orig = {r["pipeline"]: r for r in _csv(tmp_path / "sage_workload_profiles.csv")}
    for r in _csv(tmp_path / "sage_workload_profiles_paper-standin.csv"):
        if orig[r["pipeline"]]["blocks_needed_at_eps1"]:
            assert r["blocks_needed_at_eps1"]
            assert int(r["blocks_needed_at_eps1"]) <= int(
                orig[r["pipeline"]]["blocks_needed_at_eps1"]
            )


def test_measured_profiles_are_cached_and_a_rerun_only_simulates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _run(tmp_path, "paper-standin")
    cached = list((tmp_path / "profile-cache").glob("paper-standin-*.json"))
    assert len(cached) == 1

    def measured(*args: object, **kwargs: object) -> None:
        raise AssertionError("profiles were measured again")

    monkeypatch.setattr(sw, "measure_profiles", measured)
    monkeypatch.setattr(sw, "measure_statistics_profiles", measured)
    again = _run(tmp_path, "paper-standin")
    assert _json_equal(first, again)
    with pytest.raises(AssertionError, match="measured again"):  # another seed is not reused
        ctx = ExperimentContext(
            name="sage-workload", out_dir=tmp_path, quick=True, seed=1, scale="paper-standin"
        )
        get_experiment("sage-workload").run(ctx)


def _json_equal(a: list[dict[str, object]], b: list[dict[str, object]]) -> bool:
    def norm(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        return [{k: ("nan" if v != v else v) for k, v in r.items()} for r in rows]

    return norm(a) == norm(b)


def test_table_profile_round_trips_through_json() -> None:
    p = sw.TableProfile(
        (0.5, 1.0), (1, 2), ((False, True), (True, True)), ((False, False), (False, True))
    )
    assert sw.TableProfile.from_json(p.to_json()) == p
    assert p.blocks_needed() == 1 and p.blocks_needed(epsilon_index=0) == 2
    assert p.blocks_needed(partitioned=True) == 2


def _toy_split(n: int) -> Split:
    x = np.column_stack([np.arange(n, dtype=np.float64), np.arange(n, dtype=np.float64) * 10])
    day = np.arange(n, dtype=np.int64) % 365
    return Split(TaskKind.TAXI, x, x[:, 0] / n, x[:3], x[:3, 0], 0.1, 0.01, day)


def test_resampling_draws_stream_rows_with_replacement_under_a_public_seed() -> None:
    base = _toy_split(50)
    big = resampled_split(base, 400, seed=3)
    assert big.stream_x.shape == (400, 2) and big.stream_y.shape == (400,)
    idx = big.stream_x[:, 0].astype(int)
    # every drawn row is a whole row of the stream (features, label and day kept together)
    assert np.array_equal(big.stream_x, base.stream_x[idx])
    assert np.array_equal(big.stream_y, base.stream_y[idx])
    assert np.array_equal(big.stream_day, base.stream_day[idx])
    assert len(np.unique(idx)) < 400  # with replacement: 400 draws of 50 rows repeat
    assert np.array_equal(big.holdout_x, base.holdout_x)  # held-out set untouched
    assert np.array_equal(resampled_split(base, 400, seed=3).stream_x, big.stream_x)
    assert not np.array_equal(resampled_split(base, 400, seed=4).stream_x, big.stream_x)


def test_weekly_ablation_is_labelled_and_uses_one_week_blocks(tmp_path: Path) -> None:
    rows = _run(tmp_path, "paper-standin-weekly")
    assert {r["scale"] for r in rows} == {"paper-standin-weekly"}
    assert {r["weeks_per_block"] for r in rows} == {1} and {r["rows_per_block"] for r in rows} == {
        6300
    }
    assert (tmp_path / "sage_workload_paper-standin-weekly.csv").exists()


def test_scale_choices() -> None:
    assert Scale.BOTH.scales() == (Scale.ORIGINAL, Scale.PAPER_STANDIN)
    assert Scale.PAPER_STANDIN.scales() == (Scale.PAPER_STANDIN,)
    assert get_experiment("sage-workload").scales[0] == "original"  # the default first


def test_cli_refuses_a_scale_the_experiment_does_not_offer(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match=r"sage-validation offers \(none\).*'x'"):
        run_experiment("sage-validation", quick=True, out=tmp_path, seed=0, scale="x")
    with pytest.raises(InvalidRequestError, match=r"paper-standin.*'paper'"):
        run_experiment("sage-workload", quick=True, out=tmp_path, seed=0, scale="paper")
    assert not tmp_path.joinpath("sage_workload.csv").exists()  # refused before running

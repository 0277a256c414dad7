"""What every experiment shares: the context's writers, the plotting helpers' numbers, and the
``blockbudget experiment run`` command end to end on one quick experiment."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from blockbudget.cli import app
from blockbudget.errors import InvalidRequestError
from blockbudget.experiments.common import ExperimentContext, new_figure
from blockbudget.experiments.plotting import (
    Caption,
    axis_label,
    bar_runs,
    caption_of,
    count_ticks,
    finish,
    plot_groups,
    plot_median_runs,
    plot_runs,
    wilson_interval,
)


def test_write_csv_takes_the_union_of_columns_in_first_seen_order(tmp_path: Path) -> None:
    ctx = ExperimentContext(name="x", out_dir=tmp_path / "deep" / "er")
    path = ctx.write_csv("t.csv", [{"a": 1, "b": None}, {"b": 2.5, "c": True}])
    assert path == tmp_path / "deep" / "er" / "t.csv"
    with path.open(newline="") as handle:
        assert list(csv.reader(handle)) == [["a", "b", "c"], ["1", "", ""], ["", "2.5", "True"]]
    ctx.write_csv("t.csv", [{"a": 3}])  # rewritten, recorded once
    assert ctx.files == [path] and path.read_text().splitlines() == ["a", "3"]


def test_save_figure_writes_a_png_and_closes_the_figure(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    ctx = ExperimentContext(name="x", out_dir=tmp_path)
    figure, axes = new_figure(width=2, height=2)
    axes.plot([0, 1], [0, 1])
    path = ctx.save_figure("f.png", figure)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and ctx.files == [path]
    assert figure.number not in plt.get_fignums()


def test_repetitions_and_progress() -> None:
    ctx = ExperimentContext(name="x", out_dir=Path("."), quick=True)
    assert ctx.repetitions(5) == 1 and ctx.repetitions(5, quick=2) == 2
    assert ExperimentContext(name="x", out_dir=Path(".")).repetitions(5) == 5
    with pytest.raises(InvalidRequestError, match="runs must be at least 1, not 0"):
        ExperimentContext(name="x", out_dir=Path("."), runs=0).repetitions(5)
    assert list(ctx.progress(iter([1, 2, 3]))) == [1, 2, 3]  # silent without a console
    out = io.StringIO()
    shown = ExperimentContext(name="x", out_dir=Path("."), console=Console(file=out, width=100))
    assert list(shown.progress([4, 5], description="counting")) == [4, 5]
    assert "counting" in out.getvalue() and "2/2" in out.getvalue()


def test_axis_labels_need_a_unit() -> None:
    assert axis_label("rows", "count") == "rows [count]"
    with pytest.raises(InvalidRequestError, match="needs a unit"):
        axis_label("rows", "")


def test_plot_runs_draws_the_mean_with_std_bars() -> None:
    from matplotlib.container import ErrorbarContainer

    _, axes = new_figure()
    plot_runs(axes, [1, 2], [[1.0, 4.0], [3.0, 8.0]])
    (line,) = axes.lines[:1]
    assert list(line.get_ydata()) == [2.0, 6.0]  # per-x means of the two runs
    bars = next(c for c in axes.containers if isinstance(c, ErrorbarContainer))
    segments = bars.lines[2][0].get_segments()
    assert [float(s[1][1] - s[0][1]) / 2 for s in segments] == pytest.approx([2**0.5, 2 * 2**0.5])
    with pytest.raises(InvalidRequestError, match="every run needs 2 values"):
        plot_runs(axes, [1, 2], [[1.0]])
    with pytest.raises(InvalidRequestError, match="one non-empty group"):
        plot_groups(axes, [1, 2], [[1.0], []])


def test_one_run_draws_a_plain_line_and_a_band_shades() -> None:
    from matplotlib.collections import PolyCollection

    _, axes = new_figure()
    plot_groups(axes, [1, 2], [[1.0], [2.0]])
    assert not axes.containers and len(axes.lines) == 1
    plot_groups(axes, [1, 2], [[1.0, 3.0], [2.0, 2.0]], band=True)
    assert any(isinstance(c, PolyCollection) for c in axes.collections)
    bar_runs(axes, ["a", "b"], [[1.0], [2.0]])
    assert axes.containers[-1].errorbar is None  # single runs: no bars
    bar_runs(axes, ["a", "b"], [[1.0, 3.0], [2.0, 2.0]])
    assert axes.containers[-1].errorbar is not None


def test_median_runs_bars_span_the_finite_runs() -> None:
    from matplotlib.container import ErrorbarContainer

    _, axes = new_figure()
    inf = float("inf")
    # x=1: runs 1, 3, 8 → median 3, bar 1…8; x=2: runs 4, inf, inf → median inf: not drawn
    plot_median_runs(axes, [1, 2], [[1.0, 4.0], [3.0, inf], [8.0, inf]])
    bars = next(c for c in axes.containers if isinstance(c, ErrorbarContainer))
    (segment,) = [s for s in bars.lines[2][0].get_segments() if len(s) and s[0][0] == 1]
    assert (float(segment[0][1]), float(segment[1][1])) == (1.0, 8.0)
    with pytest.raises(InvalidRequestError, match="every run needs 2 values"):
        plot_median_runs(axes, [1, 2], [[1.0]])


def test_count_ticks_keep_decades_and_uncrowded_ends() -> None:
    _, axes = new_figure()
    axes.plot([1, 5000], [0, 1])
    axes.set_xscale("log")
    count_ticks(axes, "x", [2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000])
    # 10 values > 8: the powers of ten, and each end at least 2.5× from every one of them
    assert list(axes.xaxis.get_major_locator().locs) == [2, 10, 100, 1000, 5000]
    count_ticks(axes, "x", [5, 8, 10, 20, 50, 100, 200, 500, 1000, 2000])
    assert list(axes.xaxis.get_major_locator().locs) == [10, 100, 1000]  # crowded ends dropped
    formatter = axes.xaxis.get_major_formatter()
    assert [formatter(v, 0) for v in (1000, 5000, 0.5)] == ["1,000", "5,000", "0.5"]


def test_wilson_interval_by_hand() -> None:
    # p = ½, z = 1.96: centre ½, half-width z·√(1/40 + z²/400)/(1 + z²/10) = 0.263407
    low, high = wilson_interval(5, 10)
    assert low + high == pytest.approx(1.0) and high == pytest.approx(0.763407, abs=1e-6)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0) and wilson_interval(0, 10)[0] == 0.0
    with pytest.raises(InvalidRequestError, match="at least one trial, not 0"):
        wilson_interval(0, 0)


def test_finish_puts_one_legend_outside_and_the_caption_below() -> None:
    figure, axes = new_figure()
    axes.plot([1, 2], [1, 2], label="a")
    axes.legend()
    finish(figure, Caption(epsilon="ε = 1", runs=1), title="t")
    assert axes.get_legend() is None and len(figure.legends) == 1
    assert caption_of(figure) == "ε = 1. 1 run per point (no error bars)."
    assert figure.get_suptitle() == "t"


def test_cli_runs_a_quick_experiment_and_reports_it_as_json(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["experiment", "run", "dpi-privacy-loss", "--quick", "--out", str(out), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["name"] == "dpi-privacy-loss" and doc["reproduces"].startswith("seed 002")
    assert [r["t"] for r in doc["rows"]] == [5, 50, 500]
    files = [Path(f) for f in doc["files"]]
    assert {f.name for f in files} == {"dpi_privacy_loss.csv", "dpi_privacy_loss.png"}
    assert all(f.parent == out and f.stat().st_size > 0 for f in files)
    plain = CliRunner().invoke(app, [*args[:-1], "--seed", "3"])
    assert plain.exit_code == 0, plain.output
    printed = plain.output.replace("\n", "")  # rich wraps long paths
    assert f"wrote {out / 'dpi_privacy_loss.csv'}" in printed and "seed 002" in printed

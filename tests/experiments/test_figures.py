"""Every experiment's figure, checked on the matplotlib objects before they are saved: axes
labelled with units, a caption stating ε and the runs, error bars wherever runs repeat, plain
ticks on count axes, and a legend outside the data."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from experiment_support import QuickRun

from blockbudget.errors import InvalidRequestError
from blockbudget.experiments import all_experiments
from blockbudget.experiments.plotting import Caption, Spread, caption_of

#: units of an x axis that counts something: its ticks must be plain integers
COUNT_UNITS = {"blocks", "days", "slots", "queries", "iterations", "rows", "weeks", "count"}
LABEL = re.compile(r"^.+ \[(?P<unit>[^\]]+)\]$")


def _has_error_bars(axes: Any) -> bool:
    from matplotlib.collections import PolyCollection
    from matplotlib.container import BarContainer, ErrorbarContainer

    for container in axes.containers:
        if isinstance(container, ErrorbarContainer):
            return True
        if isinstance(container, BarContainer) and container.errorbar is not None:
            return True
    return any(isinstance(c, PolyCollection) for c in axes.collections)


def _tick_texts(axis: Any) -> list[str]:
    """The labels of the major ticks inside the axis' view."""
    low, high = sorted(axis.get_view_interval())
    return [
        tick.label1.get_text()
        for tick in axis.get_major_ticks()
        if low <= tick.get_loc() <= high and tick.label1.get_visible() and tick.label1.get_text()
    ]


def _check_figure(filename: str, figure: Any, *, runs: int | None) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)  # a fresh canvas: pyplot may have closed the figure's
    canvas.draw()
    renderer = canvas.get_renderer()
    caption = caption_of(figure)
    assert "ε" in caption, f"{filename}: no ε in the caption {caption!r}"
    counted = re.search(r"(\d+) runs? per point", caption)
    assert counted, f"{filename}: the caption does not say how many runs: {caption!r}"
    n = int(counted.group(1))
    if runs is not None:
        assert n == runs, f"{filename}: {n} runs in the caption, {runs} asked"
    panels = [a for a in figure.axes if a.get_visible()]
    assert panels
    for axes in panels:
        for which, label in (("x", axes.get_xlabel()), ("y", axes.get_ylabel())):
            match = LABEL.match(label)
            assert match, f"{filename}: {which} label {label!r} has no [unit]"
            texts = _tick_texts(axes.xaxis if which == "x" else axes.yaxis)
            assert not any("times" in t or "×" in t for t in texts), (filename, which, texts)
            if which == "x" and match.group("unit") in COUNT_UNITS:
                assert all(re.fullmatch(r"[\d,]+", t) for t in texts), (filename, texts)
    if n > 1 and "error bars" in caption:
        assert any(_has_error_bars(a) for a in panels), f"{filename}: repeated, no error bars"
    for legend in [*figure.legends, *(a.get_legend() for a in panels)]:
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        for axes in panels:
            assert not box.overlaps(axes.get_window_extent(renderer)), (
                f"{filename}: the legend covers a panel"
            )


@pytest.mark.parametrize("name", sorted(all_experiments()))
def test_every_figure_is_labelled_captioned_and_uncovered(
    name: str, quick_run: Callable[[str], QuickRun]
) -> None:
    run = quick_run(name)
    assert run.figures, f"{name} saved no figure"
    import matplotlib.pyplot as plt

    for filename, figure in run.figures:
        _check_figure(filename, figure, runs=run.ctx.runs)
        plt.close(figure)


def test_caption_wording_and_refusals() -> None:
    assert Caption(epsilon="ε = 1", runs=3, spread=None, note="worst run").text() == (
        "ε = 1. 3 runs per point. Worst run."
    )
    with pytest.raises(InvalidRequestError, match="must state ε"):
        Caption(epsilon="epsilon 1", runs=1)
    with pytest.raises(InvalidRequestError, match="at least 1, not 0"):
        Caption(epsilon="ε = 1", runs=0)


def test_spreads_against_a_hand_computation() -> None:
    values = [2.0, 4.0, 6.0]  # mean 4, sample std 2
    assert Spread.STD.half_width(values) == pytest.approx(2.0)
    # t_{0.975, 2} = 4.302653; 4.302653 * 2 / sqrt(3)
    assert Spread.CI95.half_width(values) == pytest.approx(4.968275, rel=1e-6)
    assert Spread.STD.half_width([5.0]) == 0.0


def test_a_figure_with_a_legend_inside_or_no_units_fails_the_check(tmp_path: Path) -> None:
    from blockbudget.experiments.common import new_figure
    from blockbudget.experiments.plotting import count_ticks, finish, label_axes

    figure, axes = new_figure()
    axes.plot([1, 2, 3], [1, 2, 3], label="a")
    axes.set_xlabel("window")
    axes.set_ylabel("MSE")
    finish(figure, Caption(epsilon="ε = 1", runs=1))
    with pytest.raises(AssertionError, match="no \\[unit\\]"):
        _check_figure("bad.png", figure, runs=None)
    label_axes(axes, x=("window", "days"), y=("MSE", "min²"))
    with pytest.raises(AssertionError, match=r"'1\.00'"):  # a window axis ticked 1.00, 1.25…
        _check_figure("bad.png", figure, runs=None)
    count_ticks(axes, "x", [1, 2, 3])
    _check_figure("good.png", figure, runs=None)
    axes.legend(loc="center")  # back inside the data
    with pytest.raises(AssertionError, match="covers a panel"):
        _check_figure("bad.png", figure, runs=None)


def test_repeated_runs_without_error_bars_fail_the_check() -> None:
    from blockbudget.experiments.common import new_figure
    from blockbudget.experiments.plotting import count_ticks, finish, label_axes, plot_runs

    figure, axes = new_figure()
    axes.plot([1, 2], [1.0, 2.0])
    label_axes(axes, x=("query", "queries"), y=("blocks used", "blocks"))
    count_ticks(axes, "x", [1, 2])
    finish(figure, Caption(epsilon="ε = 1", runs=2))
    with pytest.raises(AssertionError, match="repeated, no error bars"):
        _check_figure("bad.png", figure, runs=2)
    plot_runs(axes, [1, 2], [[1.0, 2.0], [3.0, 4.0]])
    _check_figure("good.png", figure, runs=2)

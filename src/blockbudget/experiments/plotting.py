"""One style for every experiment figure: units on the axes, ε and the runs in a caption, error
bars over repeated runs, plain ticks on count axes, and a legend that never covers the data.

Every experiment draws with matplotlib on the figure :func:`~blockbudget.experiments.common.
new_figure` gives it and, before :meth:`~blockbudget.experiments.common.ExperimentContext.
save_figure`, calls :func:`finish`: it lays the panels out, puts one legend for all of them
*outside* the axes (to the right of the figure) and writes the caption under the figure. The
caption (:class:`Caption`) always says which ε the figure is at (or that ε is on an axis), how
many runs each point summarises and what the error bars are.

Units go in square brackets after the quantity (:func:`axis_label`). ε and its shares are in
nats: ε bounds the natural logarithm of a likelihood ratio.

Error bars: a point over ``n > 1`` runs is drawn at the mean with either ±1 standard deviation
(:attr:`Spread.STD`, the sample standard deviation, ``ddof=1``) or a 95% confidence interval of
the mean (:attr:`Spread.CI95`: Student's t, ``t_{0.975, n-1} · s / √n``); the caption names the
one used. A single run is drawn without bars and the caption says "1 run".

Example:
    >>> from blockbudget.experiments.plotting import Caption, Spread, axis_label
    >>> axis_label("remaining ε", "nats")
    'remaining ε [nats]'
    >>> Caption(epsilon="ε = 1 per block", runs=5, spread=Spread.STD).text()
    'ε = 1 per block. 5 runs per point; error bars: ±1 standard deviation over the runs.'
    >>> Caption(epsilon="ε on the x-axis", runs=1).text()
    'ε on the x-axis. 1 run per point (no error bars).'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: The ``gid`` of the caption text (tests find it with ``figure.texts``).
CAPTION_GID = "caption"


class Spread(Enum):
    """What an error bar over repeated runs shows."""

    STD = "±1 standard deviation over the runs"
    CI95 = "95% confidence interval of the mean (Student's t)"

    def half_width(self, values: Sequence[float]) -> float:
        """Half the bar's length for ``values`` (0 for fewer than two values).

        Example:
            >>> round(Spread.STD.half_width([1.0, 3.0]), 4)
            1.4142
            >>> round(Spread.CI95.half_width([1.0, 3.0]), 3)  # t_{0.975,1} = 12.706
            12.706
        """
        n = len(values)
        if n < 2:
            return 0.0
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        if self is Spread.STD:
            return std
        from scipy.stats import t

        return float(t.ppf(0.975, n - 1)) * std / math.sqrt(n)

    def from_summary(self, std: float, n: int) -> float:
        """The half-width from a sample standard deviation ``std`` over ``n`` runs.

        Example:
            >>> round(Spread.CI95.from_summary(2.0, 3), 4)  # t_{0.975,2} · 2 / √3
            4.9683
        """
        if n < 2:
            return 0.0
        if self is Spread.STD:
            return std
        from scipy.stats import t

        return float(t.ppf(0.975, n - 1)) * std / math.sqrt(n)


@dataclass(frozen=True)
class Caption:
    """The sentence under a figure.

    Attributes:
        epsilon: which ε the figure is at, e.g. ``"ε = 1 per block"`` or ``"ε on the x-axis"``
            (must mention ε).
        runs: how many independent runs (seeds) each point summarises.
        spread: what the error bars show when ``runs > 1`` (``None``: the point is not a mean,
            e.g. the worst run, and ``note`` says so).
        note: anything else the reader needs (noise, data, what a point is).
    """

    epsilon: str
    runs: int
    spread: Spread | None = Spread.STD
    note: str = ""

    def __post_init__(self) -> None:
        if "ε" not in self.epsilon:
            raise InvalidRequestError(f"a caption must state ε; got {self.epsilon!r}")
        if self.runs < 1:
            raise InvalidRequestError(f"runs must be at least 1, not {self.runs}")

    def text(self) -> str:
        """The caption as one paragraph."""
        if self.runs == 1:
            runs = "1 run per point (no error bars)."
        elif self.spread is None:
            runs = f"{self.runs} runs per point."
        else:
            runs = f"{self.runs} runs per point; error bars: {self.spread.value}."
        parts = [self.epsilon.rstrip(".") + ".", runs]
        if self.note:
            parts.append(self.note[0].upper() + self.note[1:].rstrip(".") + ".")
        return " ".join(parts)


def axis_label(quantity: str, unit: str) -> str:
    """``"quantity [unit]"``, the form of every axis label (unit e.g. ``"blocks"``, ``"nats"``,
    ``"%"``, ``"ratio"``)."""
    if not unit:
        raise InvalidRequestError(f"axis {quantity!r} needs a unit")
    return f"{quantity} [{unit}]"


def label_axes(axes: Axes, *, x: tuple[str, str], y: tuple[str, str]) -> None:
    """Label both axes, each as ``(quantity, unit)``."""
    axes.set_xlabel(axis_label(*x))
    axes.set_ylabel(axis_label(*y))


def plot_runs(
    axes: Axes,
    x: Sequence[float],
    runs: Sequence[Sequence[float]],
    *,
    spread: Spread = Spread.STD,
    band: bool = False,
    **style: Any,
) -> None:
    """One line over ``x`` from ``runs`` (one sequence of y values per run): the mean, with
    error bars (or a shaded ``band``) when there are several runs."""
    if not runs or any(len(r) != len(x) for r in runs):
        raise InvalidRequestError(f"every run needs {len(x)} values, one per x")
    columns = [list(col) for col in zip(*runs, strict=True)]
    plot_groups(axes, x, columns, spread=spread, band=band, **style)


def plot_groups(
    axes: Axes,
    x: Sequence[float],
    groups: Sequence[Sequence[float]],
    *,
    spread: Spread = Spread.STD,
    band: bool = False,
    **style: Any,
) -> None:
    """One line over ``x`` where ``groups[i]`` holds the runs' values at ``x[i]`` (a run may be
    missing at some x): the mean, with error bars or a ``band`` where a group repeats."""
    if len(groups) != len(x) or any(len(g) == 0 for g in groups):
        raise InvalidRequestError(f"need one non-empty group of values per x ({len(x)})")
    means = [sum(g) / len(g) for g in groups]
    if max(len(g) for g in groups) == 1:
        axes.plot(x, means, **style)
        return
    halves = [spread.half_width(g) for g in groups]
    if band:
        (line,) = axes.plot(x, means, **style)
        low = [m - h for m, h in zip(means, halves, strict=True)]
        high = [m + h for m, h in zip(means, halves, strict=True)]
        axes.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        return
    axes.errorbar(x, means, yerr=halves, capsize=3, **style)


def plot_median_runs(
    axes: Axes, x: Sequence[float], runs: Sequence[Sequence[float]], **style: Any
) -> None:
    """The median of the runs at each x, with error bars from the lowest to the highest finite
    run (for statistics reported as medians, where a run may never succeed: ``inf``)."""
    import numpy as np

    values = np.array(runs, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != len(x):
        raise InvalidRequestError(f"every run needs {len(x)} values, one per x")
    medians = np.median(values, axis=0)
    if len(runs) == 1:
        axes.plot(x, medians, **style)
        return
    finite = np.where(np.isfinite(values), values, np.nan)
    low = np.nanmin(np.where(np.isnan(finite), np.inf, finite), axis=0)
    high = np.nanmax(np.where(np.isnan(finite), -np.inf, finite), axis=0)
    shown = np.isfinite(medians)
    below = np.where(shown, medians - np.minimum(low, medians), 0.0)
    above = np.where(shown & np.isfinite(high), np.maximum(high, medians) - medians, 0.0)
    axes.errorbar(x, medians, yerr=[below, above], capsize=3, **style)


def wilson_interval(successes: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion (E. B. Wilson, "Probable inference, the law
    of succession, and statistical inference", JASA 22 (1927), eq. for the score interval).

    Example:
        >>> [round(v, 4) for v in wilson_interval(0, 10)]
        [0.0, 0.2775]
    """
    if trials <= 0:
        raise InvalidRequestError(f"a proportion needs at least one trial, not {trials}")
    z = 1.959963984540054
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = (
        z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    )
    return max(0.0, centre - half), min(1.0, centre + half)


def bar_runs(
    axes: Axes,
    labels: Sequence[str],
    runs: Sequence[Sequence[float]],
    *,
    spread: Spread = Spread.STD,
) -> None:
    """One bar per label at the mean of its runs (``runs[i]`` are bar i's values), with error
    bars when a bar has several runs."""
    means = [sum(r) / len(r) for r in runs]
    if max(len(r) for r in runs) > 1:
        halves = [spread.half_width(r) for r in runs]
        axes.bar(list(labels), means, yerr=halves, capsize=4)
    else:
        axes.bar(list(labels), means)


def count_ticks(axes: Axes, axis: str, values: Sequence[float], *, most: int = 8) -> None:
    """Plain ticks at ``values`` (a count or window axis: no ``4×10⁰`` on a log scale).

    With more than ``most`` values (a log-scaled axis), the powers of ten among them are kept,
    and the ends where they are not crowded against one. Minor ticks are dropped.
    """
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    chosen = sorted(set(values))
    target = axes.xaxis if axis == "x" else axes.yaxis
    if len(chosen) > most:
        decades = [v for v in chosen if v > 0 and math.log10(v).is_integer()]
        ends = [
            v
            for v in (chosen[0], chosen[-1])
            if v > 0 and all(max(v, d) / min(v, d) >= 2.5 for d in decades)
        ]
        chosen = sorted({*decades, *ends})
    target.set_major_locator(FixedLocator(chosen))
    target.set_minor_locator(NullLocator())
    target.set_major_formatter(FuncFormatter(lambda v, _pos: _plain(v)))


def integer_axis(axes: Axes, axis: str) -> None:
    """Integer ticks written out in full (``200,000``, not ``2e5``) on a linear count axis."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    target = axes.xaxis if axis == "x" else axes.yaxis
    target.set_major_locator(MaxNLocator(nbins=6, integer=True))
    target.set_major_formatter(FuncFormatter(lambda v, _pos: _plain(v)))


def log_axis(axes: Axes, axis: str) -> None:
    """A log scale ticked at 1, 2 and 5 times the powers of ten (only the powers of ten over
    more than three decades), written plainly (``0.02``, ``500``): readable over less than a
    decade, and no ``4×10⁰`` minor labels. Call it after plotting (it reads the limits)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    if axis == "x":
        axes.set_xscale("log")
    else:
        axes.set_yscale("log")
    target = axes.xaxis if axis == "x" else axes.yaxis
    low, high = sorted(axes.get_xlim() if axis == "x" else axes.get_ylim())
    wide = low > 0 and math.log10(high / low) > 3  # many decades: powers of ten only
    target.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0)))
    target.set_minor_locator(NullLocator())
    target.set_major_formatter(FuncFormatter(lambda v, _pos: _plain(v)))


def _plain(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:g}"


def finish(figure: Figure, caption: Caption, *, title: str | None = None) -> None:
    """Lay ``figure`` out, place one legend for all panels outside them (right of the figure)
    and write ``caption`` under it (with ``title`` above when given)."""
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    handles, labels = [], []
    for axes in figure.axes:
        for handle, label in zip(*axes.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
        legend = axes.get_legend()
        if legend is not None:
            legend.remove()
    if handles:
        figure.legend(
            handles,
            labels,
            loc="upper left",
            bbox_to_anchor=(1.0, 0.98),
            fontsize=7,
            frameon=False,
        )
    text = figure.text(0.5, -0.01, caption.text(), ha="center", va="top", fontsize=7, wrap=True)
    text.set_gid(CAPTION_GID)


def caption_of(figure: Figure) -> str:
    """The caption :func:`finish` wrote on ``figure`` ("" when none)."""
    return " ".join(t.get_text() for t in figure.texts if t.get_gid() == CAPTION_GID)

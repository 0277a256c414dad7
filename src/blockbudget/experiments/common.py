"""What every experiment shares: its output folder, CSV and PNG writers, a progress bar.

An experiment is a function ``run(ctx) -> ExperimentResult``. It writes its tables with
:meth:`ExperimentContext.write_csv` and its figures with :meth:`ExperimentContext.save_figure`
under ``ctx.out_dir`` (``results/<name>/`` by default), iterates long loops through
:meth:`ExperimentContext.progress`, and returns the rows it wants printed. ``ctx.quick`` asks for
a run small enough for the test suite; ``ctx.seed`` makes it repeatable. Experiments use seeded
noise (``SeededNoise``) so that their figures can be reproduced; the results say so.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

T = TypeVar("T")

Row = Mapping[str, Any]


@dataclass(frozen=True)
class ExperimentResult:
    """What an experiment hands back to the command line.

    Attributes:
        rows: the headline table, printed after the run (also written as CSV by the experiment).
        files: every file the experiment wrote.
        notes: short lines printed under the table (e.g. "noise: seeded, not secure").
    """

    rows: Sequence[Row]
    files: Sequence[Path] = ()
    notes: Sequence[str] = ()


@dataclass
class ExperimentContext:
    """Where an experiment writes, how big it runs, and how it reports progress.

    Attributes:
        name: the experiment's name (used for the default folder).
        out_dir: folder for CSV/JSON/PNG outputs; created on demand.
        quick: run the small form (seconds) that the test suite uses.
        seed: base seed for every random choice in the run.
        console: where progress and tables go; ``None`` keeps the run silent.
        scale: the data scale an experiment that declares ``scales`` runs at (``None``: its
            default); e.g. ``"paper-standin"`` for ``sage-workload``.
        runs: how many independent runs (seeds) an experiment that repeats makes per point
            (``None``: its own default, usually 1 when ``quick``); see :meth:`repetitions`.
    """

    name: str
    out_dir: Path
    quick: bool = False
    seed: int = 0
    console: Console | None = None
    scale: str | None = None
    runs: int | None = None
    files: list[Path] = field(default_factory=list)

    def repetitions(self, full: int, *, quick: int = 1) -> int:
        """How many runs per point: ``runs`` when set, else ``quick`` or ``full``.

        Example:
            >>> from pathlib import Path
            >>> ExperimentContext(name="x", out_dir=Path("."), quick=True).repetitions(5)
            1
            >>> ExperimentContext(name="x", out_dir=Path("."), runs=3).repetitions(5)
            3
        """
        if self.runs is not None:
            if self.runs < 1:
                from blockbudget.errors import InvalidRequestError

                raise InvalidRequestError(f"runs must be at least 1, not {self.runs}")
            return self.runs
        return quick if self.quick else full

    def path(self, filename: str) -> Path:
        """A path under ``out_dir`` (the folder is created), recorded as an output."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        target = self.out_dir / filename
        if target not in self.files:
            self.files.append(target)
        return target

    def write_csv(self, filename: str, rows: Sequence[Row]) -> Path:
        """Write ``rows`` (dicts with the same keys) as a CSV file and return its path."""
        target = self.path(filename)
        columns: list[str] = []
        for row in rows:
            for key in row:
                if key not in columns:
                    columns.append(key)
        with target.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow(dict(row))
        return target

    def save_figure(self, filename: str, figure: Figure) -> Path:
        """Save a matplotlib figure as PNG (150 dpi) and close it."""
        import matplotlib.pyplot as plt

        target = self.path(filename)
        figure.savefig(target, dpi=150, bbox_inches="tight")
        plt.close(figure)
        return target

    def progress(
        self, items: Iterable[T], *, total: int | None = None, description: str = ""
    ) -> Iterator[T]:
        """Iterate over ``items`` with a progress bar on the console (silent without one)."""
        if self.console is None:
            yield from items
            return
        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=self.console, transient=False) as bar:
            task = bar.add_task(description or self.name, total=total)
            for item in items:
                yield item
                bar.advance(task)


def new_figure(*, width: float = 6.0, height: float = 4.0) -> tuple[Figure, Any]:
    """A fresh matplotlib figure and axes on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(width, height))
    return figure, axes


@dataclass(frozen=True)
class Experiment:
    """One reproducible experiment.

    Attributes:
        name: the command-line name, e.g. ``"sage-validation"``.
        summary: one line for ``blockbudget experiment list``.
        source: which seed table or figure it reproduces, e.g. ``"seed 004 Tab. 2"``.
        run: the function that runs it.
        scales: the values of ``--scale`` it accepts, the default first (empty: none).
    """

    name: str
    summary: str
    source: str
    run: Callable[[ExperimentContext], ExperimentResult]
    scales: tuple[str, ...] = ()

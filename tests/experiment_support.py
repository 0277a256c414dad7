"""Running an experiment's ``--quick`` form with its figures captured, not rendered (the
figures are checked on the matplotlib objects; rendering PNGs is the slow part)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from blockbudget.experiments import get_experiment
from blockbudget.experiments.common import ExperimentContext, ExperimentResult

#: quick runs repeated twice, so that their error bars are drawn and checked (cheap ones only;
#: experiments whose quick form already repeats keep their own count)
RUNS = {
    "budgeting-offline-online": 2,
    "budgeting-same-data": 2,
    "budgeting-blocks-used": 2,
    "budgeting-queries-served": 2,
    "sage-block-composition": 2,
}


@dataclass(frozen=True)
class QuickRun:
    """What one quick run left: its result, its context, and the figures it saved."""

    result: ExperimentResult
    ctx: ExperimentContext
    figures: list[tuple[str, Any]]


def run_quick(name: str, out_dir: Path, *, seed: int = 0, runs: int | None = None) -> QuickRun:
    """Run ``name``'s quick form into ``out_dir`` with figures captured, not rendered."""
    captured: list[tuple[str, Any]] = []

    def capture(self: ExperimentContext, filename: str, figure: Any) -> Path:
        import matplotlib.pyplot as plt

        plt.close(figure)  # out of pyplot's registry; the object stays readable
        captured.append((filename, figure))
        return self.path(filename)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ExperimentContext, "save_figure", capture)
        ctx = ExperimentContext(name=name, out_dir=out_dir, quick=True, seed=seed, runs=runs)
        result = get_experiment(name).run(ctx)
    return QuickRun(result, ctx, captured)

"""Seed 004 Fig. 6: how much data (train + test) each SLA needs to ACCEPT, per quality target.

Seed ``004_2b5d216070ae2ded.txt`` §5.2, Fig. 6 (seed ``001_7d2967ad64403faa.txt`` Fig. 4): at a
fixed ε = 1 the window doubles (privacy-adaptive training's data steps, §3.3) until the SLA
ACCEPTs; the rows read at that point are the sample complexity. No SLA needs the least data (and
is unreliable, Tab. 2), NP SLA adds a statistical guarantee, Sage SLA adds DP and its correction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
)
from blockbudget.experiments.sage_common import (
    MODE_LABELS,
    TaskKind,
    eta_at,
    schedule,
    seeds,
    task_split,
    train_iteration,
    validate,
)
from blockbudget.outcome import Outcome
from blockbudget.training.validation import SlaMode

ETA = 0.05
SLAS = (SlaMode.NO_SLA, SlaMode.NON_PRIVATE, SlaMode.SAGE)


def targets(kind: TaskKind, best: float, naive: float, count: int) -> list[float]:
    """Targets from near the best achievable model to near the naive one."""
    if kind is TaskKind.TAXI:
        return [float(v) for v in np.geomspace(best * 2.0, naive * 0.8, count)]
    return [float(v) for v in np.linspace(naive + 0.01, best - 0.005, count)]


def run(ctx: ExperimentContext) -> ExperimentResult:
    rows: list[dict[str, Any]] = []
    for kind in (TaskKind.TAXI, TaskKind.CRITEO):
        split = task_split(kind, shuffled=True)
        n0 = 1000 if kind is TaskKind.TAXI else 2000
        n_max = (128_000 if kind is TaskKind.TAXI else 64_000) if ctx.quick else 256_000
        configs = schedule(epsilon0=1.0, max_epsilon=1.0, n0=n0, n_max=n_max)
        goals = targets(kind, split.best, split.naive, 3 if ctx.quick else 8)
        runs = list(seeds(ctx.seed + 10 + (kind is TaskKind.CRITEO), ctx.repetitions(4)))
        needed: dict[tuple[SlaMode, float], list[float]] = {(m, g): [] for m in SLAS for g in goals}
        for seed in ctx.progress(runs, description=f"Fig. 6 {kind.value}"):
            rng = np.random.default_rng(seed)
            start = int(rng.integers(0, len(split.stream_y) - n_max))
            open_keys = set(needed)
            for i, (eps, n) in enumerate(configs, start=1):
                if not open_keys:
                    break
                it = train_iteration(split, start=start, n=n, epsilon=eps, seed=seed + i)
                for mode, goal in sorted(open_keys, key=lambda k: (k[0].value, k[1])):
                    level = ETA if mode is SlaMode.NO_SLA else eta_at(ETA, i)
                    result = validate(
                        split, it, target=goal, mode=mode, eta=level, seed=seed * 7 + i
                    )
                    if result.outcome is Outcome.ACCEPT:
                        needed[(mode, goal)].append(float(n))
                        open_keys.discard((mode, goal))
            for key in open_keys:
                needed[key].append(float("inf"))
        for (mode, goal), values in sorted(
            needed.items(), key=lambda kv: (kv[0][0].value, kv[0][1])
        ):
            finite = [v for v in values if np.isfinite(v)]
            rows.append(
                {
                    "task": kind.value,
                    "sla": MODE_LABELS[mode],
                    "target": goal,
                    "runs": len(values),
                    "accepted_runs": len(finite),
                    "median_rows_to_accept": float(np.median(values)) if finite else float("nan"),
                    "rows_per_run": values,
                    "naive": split.naive,
                    "best_nonprivate": split.best,
                }
            )
    plot(ctx, rows)
    for row in rows:
        del row["rows_per_run"]
    ctx.write_csv("sage_sample_complexity.csv", rows)
    return ExperimentResult(
        rows=rows,
        files=list(ctx.files),
        notes=["ε = 1 per iteration (½ train, ½ validation), η = 0.05; noise seeded, not secure"],
    )


def plot(ctx: ExperimentContext, rows: list[dict[str, Any]]) -> None:
    """Fig. 6: the median rows to ACCEPT against the target, lowest to highest run as bars."""
    import matplotlib.pyplot as plt

    from blockbudget.experiments.plotting import (
        Caption,
        finish,
        label_axes,
        log_axis,
        plot_median_runs,
    )

    figure, axes_pair = plt.subplots(1, 2, figsize=(10, 4))
    metrics = (("MSE target", "(air time / scale)²"), ("accuracy target", "fraction correct"))
    for axes, kind, metric in zip(axes_pair, ("taxi", "criteo"), metrics, strict=True):
        for mode in SLAS:
            label = MODE_LABELS[mode]
            mine = [r for r in rows if r["task"] == kind and r["sla"] == label]
            runs = [list(run) for run in zip(*(r["rows_per_run"] for r in mine), strict=True)]
            plot_median_runs(axes, [r["target"] for r in mine], runs, marker="o", label=label)
        log_axis(axes, "y")
        label_axes(axes, x=metric, y=("rows to ACCEPT, train + test", "rows"))
        axes.set_title(f"Fig. 6 analog: {kind}", fontsize=9)
    runs_made = rows[0]["runs"]
    caption = Caption(
        epsilon=f"ε = 1 per iteration (½ to train, ½ to validate), η = {ETA:g}",
        runs=runs_made,
        spread=None,
        note="points: the median over the runs"
        + ("; error bars: lowest to highest run that accepted" if runs_made > 1 else "")
        + "; a target never accepted is left out; noise seeded",
    )
    finish(figure, caption, title="Rows needed to ACCEPT (seed 004 Fig. 6)")
    ctx.save_figure("sage_sample_complexity.png", figure)


EXPERIMENTS = [
    Experiment(
        name="sage-sample-complexity",
        summary="Rows needed to ACCEPT vs target",
        source="seed 004 Fig. 6",
        run=run,
    )
]

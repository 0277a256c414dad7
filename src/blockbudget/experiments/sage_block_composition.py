"""Seed 004 Fig. 7: training and validating on combined blocks vs one query per block.

Seed ``004_2b5d216070ae2ded.txt`` §5.3, Fig. 7 (seed ``001_7d2967ad64403faa.txt`` §4.3, Fig. 5):
with block composition a pipeline trains one AdaSSP model on all the blocks of its window (one
noise draw) and validates once; without it (query composition over a partition) it must run one
DP query per block — here one AdaSSP model per block, averaged, and one noisy (count, loss sum)
per block whose corrections add up (PrivateKube's ``noise_draws``). Blocks are days of flights
(~900 rows) or weeks (~6,300 rows), as Sage compares blocks of 100K and 500K rides. Measured:
held-out MSE and the smallest MSE target the Sage loss validator can ACCEPT (its bound), at
ε = 1 (½ training, ½ validation), η = 0.05.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blockbudget.apps.flights.features import REGRESSION_NORM
from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
)
from blockbudget.experiments.sage_common import DELTA, TaskKind, task_split
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.training.adassp import AdaSSPRegressor
from blockbudget.training.bounds import bernstein_upper, laplace_one_sided
from blockbudget.training.pipeline import split_rows
from blockbudget.training.sources import MeteredSource
from blockbudget.training.validation import SlaMode
from blockbudget.training.validators import LossEvidence, LossValidator

EPSILON = 1.0
ETA = 0.05
X_BOUND = REGRESSION_NORM * math.sqrt(2.0)


def partitioned_bound(
    losses_per_block: list[np.ndarray], *, epsilon: float, eta: float, rng: np.random.Generator
) -> float:
    """The Sage loss ACCEPT bound when each block is validated by its own DP query: per block
    ñ_b = n_b + Lap(2/ε), S̃_b = S_b + Lap(2/ε) (losses in [0, 1]); the sums are aggregated and
    each block's correction is added (a union bound over the blocks' noise, as PrivateKube's
    ``noise_draws`` does), then Bernstein at η/3."""
    k = len(losses_per_block)
    scale = 2.0 / epsilon
    n_dp = sum(len(b) + rng.laplace(0, scale) for b in losses_per_block)
    s_dp = sum(float(np.sum(b)) + rng.laplace(0, scale) for b in losses_per_block)
    third = eta / 3.0
    correction = laplace_one_sided(scale, third / k)
    n_lo = n_dp - k * correction
    s_hi = s_dp + k * correction
    return bernstein_upper(s_hi / n_lo, n_lo, bound=1.0, p=third) if n_lo > 0 else math.inf


def run(ctx: ExperimentContext) -> ExperimentResult:
    split = task_split(TaskKind.TAXI)
    x, y, days = split.stream_x, split.stream_y, split.stream_day
    windows = [4, 8, 16] if ctx.quick else [7, 14, 28, 56, 112, 224]
    block_sizes = [1, 7]  # days per block
    runs = ctx.repetitions(3)
    rows: list[dict[str, Any]] = []
    jobs = [(w, r) for w in windows for r in range(runs)]
    for window, rep in ctx.progress(jobs, description="Fig. 7 windows"):
        seed = ctx.seed * 1000 + window * 10 + rep
        rng = np.random.default_rng(seed)
        first = int(rng.integers(0, 365 - window))
        in_window = (days >= first) & (days < first + window)
        wx, wy, wd = x[in_window], y[in_window], days[in_window]
        train, test = split_rows(len(wy), test_fraction=0.1, seed=seed)
        # block composition: one model, one validation over the whole window
        model = AdaSSPRegressor(x_bound=X_BOUND).fit(
            MeteredSource(),
            wx[train],
            wy[train],
            epsilon=EPSILON / 2,
            delta=DELTA,
            noise=SeededNoise(seed),
        )
        losses = (np.clip(model.predict(wx[test]), 0, 1) - wy[test]) ** 2
        combined = LossValidator(target=1.0, mode=SlaMode.SAGE).validate(
            MeteredSource(),
            LossEvidence(losses),
            epsilon=EPSILON / 2,
            eta=ETA,
            noise=SeededNoise(seed + 1),
        )
        rows.append(
            {
                "window_days": window,
                "rep": rep,
                "composition": "block (Sage)",
                "block_days": window,
                "rows": len(wy),
                "heldout_mse": heldout_mse(model, split),
                "smallest_acceptable_mse": combined.accept_bound,
            }
        )
        for size in block_sizes:
            if size >= window:
                continue
            block_of = (wd - first) // size
            models, block_losses = [], []
            for b in np.unique(block_of):
                rows_b = np.nonzero(block_of == b)[0]
                tr_b = np.intersect1d(rows_b, train)
                te_b = np.intersect1d(rows_b, test)
                m = AdaSSPRegressor(x_bound=X_BOUND).fit(
                    MeteredSource(),
                    wx[tr_b],
                    wy[tr_b],
                    epsilon=EPSILON / 2,
                    delta=DELTA,
                    noise=SeededNoise(seed + 7 * int(b) + 3),
                )
                models.append(m)
                block_losses.append(te_b)
            coef = np.mean([m.coef_ for m in models], axis=0)
            intercept = float(np.mean([m.intercept_ for m in models]))
            averaged = AdaSSPRegressor(x_bound=X_BOUND)
            averaged.coef_, averaged.intercept_ = coef, intercept
            per_block = [
                (np.clip(averaged.predict(wx[te]), 0, 1) - wy[te]) ** 2 for te in block_losses
            ]
            rows.append(
                {
                    "window_days": window,
                    "rep": rep,
                    "composition": f"query, {size}-day blocks",
                    "block_days": size,
                    "rows": len(wy),
                    "heldout_mse": heldout_mse(averaged, split),
                    "smallest_acceptable_mse": partitioned_bound(
                        per_block, epsilon=EPSILON / 2, eta=ETA, rng=rng
                    ),
                }
            )
    summary = summarize(rows)
    ctx.write_csv("sage_block_composition_runs.csv", rows)
    ctx.write_csv("sage_block_composition.csv", summary)
    plot(ctx, rows, split.naive, runs=runs)
    return ExperimentResult(
        rows=summary,
        files=list(ctx.files),
        notes=[
            f"naive MSE {split.naive:.5f}, least squares {split.best:.5f}",
            "noise: seeded (SeededNoise), not secure — experiments only",
        ],
    )


def heldout_mse(model: AdaSSPRegressor, split: Any) -> float:
    pred = np.clip(model.predict(split.holdout_x), 0.0, 1.0)
    return float(np.mean((pred - split.holdout_y) ** 2))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = sorted({(r["window_days"], r["composition"]) for r in rows})
    for window, comp in keys:
        mine = [r for r in rows if r["window_days"] == window and r["composition"] == comp]
        out.append(
            {
                "window_days": window,
                "composition": comp,
                "rows": int(np.mean([r["rows"] for r in mine])),
                "heldout_mse": float(np.mean([r["heldout_mse"] for r in mine])),
                "smallest_acceptable_mse": float(
                    np.median([r["smallest_acceptable_mse"] for r in mine])
                ),
            }
        )
    return out


def plot(ctx: ExperimentContext, rows: list[dict[str, Any]], naive: float, *, runs: int) -> None:
    """Fig. 7 from the per-run ``rows``: mean ± 1 std over the runs at each window."""
    import matplotlib.pyplot as plt

    from blockbudget.experiments.plotting import (
        Caption,
        count_ticks,
        finish,
        label_axes,
        log_axis,
        plot_runs,
    )

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    windows = sorted({r["window_days"] for r in rows})
    for comp in sorted({r["composition"] for r in rows}):
        mine = [r for r in rows if r["composition"] == comp]
        xs = sorted({r["window_days"] for r in mine})
        by_rep = [
            sorted((r for r in mine if r["rep"] == rep), key=lambda r: r["window_days"])
            for rep in range(runs)
        ]
        mse = [[r["heldout_mse"] for r in rep] for rep in by_rep]
        bound = [[min(r["smallest_acceptable_mse"], 1.0) for r in rep] for rep in by_rep]
        plot_runs(left, xs, mse, marker="o", label=comp)
        plot_runs(right, xs, bound, marker="o", label=comp)
    panels = ((left, "held-out MSE (Fig. 7a)"), (right, "smallest ACCEPTable MSE (Fig. 7b)"))
    for axes, title in panels:
        axes.axhline(naive, color="grey", linestyle=":", label="naive model")
        axes.set_xscale("log")
        count_ticks(axes, "x", windows)
        log_axis(axes, "y")
        label_axes(
            axes, x=("window of flights", "days"), y=(title.split(" (")[0], "(air time / scale)²")
        )
        axes.set_title(title, fontsize=9)
    caption = Caption(
        epsilon=f"ε = {EPSILON:g} per model (ε/2 to train with AdaSSP, ε/2 to validate), "
        f"δ = {DELTA:g}, η = {ETA:g}",
        runs=runs,
        note="runs differ in the window's start and the noise seed; a bound above 1 "
        "(or none: too few rows) is drawn at 1; the label is air time over a fixed scale, "
        "clipped to 0–1",
    )
    finish(figure, caption, title="Block vs query composition on taxi-like flights (Sage Fig. 7)")
    ctx.save_figure("sage_block_composition.png", figure)


EXPERIMENTS = [
    Experiment(
        name="sage-block-composition",
        summary="Combined vs per-block LR training",
        source="seed 004 Fig. 7",
        run=run,
    )
]

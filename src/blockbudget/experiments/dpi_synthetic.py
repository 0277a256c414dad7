"""DPI on synthetic streams: the highly dynamic Gaussian stream and 200,000 slots.

Seed ``002_e6d4c77f2abb3a16.txt`` §6.4 (Fig. 7: MSE/KL vs t; Fig. 8: spread of the released
densities; Fig. 9: median of the released and true values vs t), §7 and Fig. 11 (200,000 slots,
domain 10,000), App. E.2. Per slot every item's count is drawn from N(mean, σ²) with σ² chosen at
random from {1, 4, …, 100}; one user per record, so the public floor n_min is set to half the
expected records per slot. Counts are released as PDF × the public total (§7). Seeded randomness
(``secure=False``); every row also carries the uniform PDF's error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
    new_figure,
)
from blockbudget.experiments.plotting import Caption, finish, integer_axis, label_axes
from blockbudget.streaming.applications import counts_from_pdf
from blockbudget.streaming.evaluation import Setup, run_dpi
from blockbudget.streaming.release import DPIConfig, Horizon
from blockbudget.streaming.streams import gaussian_counts


def _moving(values: list[float], window: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.size < window:
        return v
    kernel = np.ones(window) / window
    return np.convolve(v, kernel, mode="valid")


def _median_extra(data: list[np.ndarray]) -> Any:
    """Per-slot medians of the true counts and of the counts released as PDF × public total."""

    def extra(t: int, target: np.ndarray, release: np.ndarray) -> dict[str, float]:
        total = float(data[t - 1].sum())
        est = counts_from_pdf(release, total=total)
        lq, med, uq = np.quantile(est, [0.25, 0.5, 0.75])
        return {
            "true_median": float(np.median(data[t - 1])),
            "released_median": float(med),
            "released_lq": float(lq),
            "released_uq": float(uq),
        }

    return extra


def run_dynamic(ctx: ExperimentContext) -> ExperimentResult:
    """§6.4, Fig. 7–9: 100 items, counts ~ N(100, σ_t²)."""
    items, mean = 100, 100.0
    slots = 100 if ctx.quick else 3000
    epsilons = (1.0, 10.0) if ctx.quick else (0.5, 1.0, 2.0, 10.0)
    summary: list[dict[str, Any]] = []
    traces: dict[float, list[dict[str, Any]]] = {}
    for eps in ctx.progress(epsilons, description="dpi-dynamic"):
        rng = np.random.default_rng(ctx.seed)
        data = [c for c, _ in gaussian_counts(items=items, slots=slots, mean=mean, rng=rng)]

        extra = _median_extra(data)

        rows = run_dpi(
            data,
            k=items,
            config=DPIConfig.for_horizon(epsilon=eps, slots=slots, horizon=Horizon.INSTANTANEOUS),
            setup=Setup(min_users=int(items * mean / 2)),
            seed=ctx.seed,
            counts=True,
            extra=extra,
        )
        traces[eps] = rows
        for r in rows:
            r["epsilon"] = eps
        summary.append(
            {
                "epsilon": eps,
                "slots": slots,
                "spent": rows[-1]["spent"],
                "kl": float(np.mean([r["kl"] for r in rows])),
                "mse": float(np.mean([r["mse"] for r in rows])),
                "kl_uniform": float(np.mean([r["kl_uniform"] for r in rows])),
                "kl_laplace": float(np.mean([r["kl_laplace"] for r in rows])),
                "median_abs_err": float(
                    np.mean([abs(r["released_median"] - r["true_median"]) for r in rows])
                ),
                "secure": False,
            }
        )
    ctx.write_csv("dpi_dynamic_slots.csv", [r for rows in traces.values() for r in rows])
    ctx.write_csv("dpi_dynamic.csv", summary)
    fig, _ = new_figure(width=12, height=4)
    fig.clf()
    window = 10 if ctx.quick else 50
    ax1 = fig.add_subplot(1, 3, 1)
    ax2 = fig.add_subplot(1, 3, 2)
    ax3 = fig.add_subplot(1, 3, 3)

    def moving(rows: list[dict[str, Any]], key: str) -> tuple[list[int], Any]:
        values = _moving([r[key] for r in rows], window)
        return list(range(1, len(values) + 1)), values

    for eps, rows in traces.items():
        ax1.plot(*moving(rows, "kl"), label=f"DPI, ε = {eps:g}")
        ax2.plot(*moving(rows, "mse"), label=f"DPI, ε = {eps:g}")
        ax3.plot(*moving(rows, "released_median"), label=f"DPI, ε = {eps:g}")
    first = next(iter(traces.values()))
    ax1.plot(*moving(first, "kl_uniform"), color="grey", label="uniform PDF")
    ax3.plot(*moving(first, "true_median"), color="black", label="true median")
    x_label = (f"time slot, first of a {window}-slot window", "slots")
    label_axes(ax1, x=x_label, y=("KL divergence, moving average", "nats"))
    label_axes(ax2, x=x_label, y=("MSE of the PDF, moving average", "probability²"))
    label_axes(ax3, x=x_label, y=("median count per item, moving average", "records"))
    for ax in (ax1, ax2, ax3):
        integer_axis(ax, "x")
    caption = Caption(
        epsilon="ε ∈ {" + ", ".join(f"{e:g}" for e in epsilons) + "} (total, user-level; one "
        "line each)",
        runs=1,
        note=f"{items} items, counts ~ N({mean:g}, σ_t²); seeded (secure=False)",
    )
    finish(fig, caption, title="DPI on a dynamic synthetic stream (seed 002 Fig. 7–9)")
    ctx.save_figure("dpi_dynamic.png", fig)
    return ExperimentResult(rows=summary, files=list(ctx.files), notes=["seeded (secure=False)"])


def run_long(ctx: ExperimentContext) -> ExperimentResult:
    """Fig. 11: 200,000 slots on a synthetic stream with domain 10,000."""
    items = 1_000 if ctx.quick else 10_000
    slots = 2_000 if ctx.quick else 200_000
    mean = 100.0
    eps = 2.0
    rng = np.random.default_rng(ctx.seed)
    marks_every = max(1, slots // 2000)
    rows = run_dpi(
        (c for c, _ in gaussian_counts(items=items, slots=slots, mean=mean, rng=rng)),
        k=items,
        config=DPIConfig(epsilon=eps, rate=1e8, horizon=Horizon.INSTANTANEOUS),
        setup=Setup(min_users=int(items * mean / 2)),
        seed=ctx.seed,
        counts=True,
        laplace=False,
        progress=lambda it: ctx.progress(it, total=slots, description="dpi-long"),
    )
    kept = [r for r in rows if r["t"] % marks_every == 0 or r["t"] == slots]
    ctx.write_csv("dpi_long.csv", kept)
    fig, _ = new_figure(width=10, height=4)
    fig.clf()
    window = 50
    units = {"kl": ("KL divergence", "nats"), "mse": ("MSE of the PDF", "probability²")}
    for idx, metric in enumerate(("kl", "mse")):
        ax = fig.add_subplot(1, 2, idx + 1)
        dpi = _moving([r[metric] for r in rows], window * marks_every)[::marks_every]
        uniform = _moving([r[f"{metric}_uniform"] for r in rows], window * marks_every)
        xs = [1 + i * marks_every for i in range(len(dpi))]
        ax.plot(xs, dpi, label="DPI")
        ax.plot(xs, uniform[::marks_every], color="grey", label="uniform PDF")
        quantity, unit = units[metric]
        label_axes(
            ax,
            x=(f"time slot, first of a {window * marks_every}-slot window", "slots"),
            y=(f"{quantity}, moving average", unit),
        )
        integer_axis(ax, "x")
    caption = Caption(
        epsilon=f"ε = {eps:g} (total, user-level)",
        runs=1,
        note=f"{items:,} items over {slots:,} slots; seeded (secure=False)",
    )
    finish(fig, caption, title="DPI on a long synthetic stream (seed 002 Fig. 11)")
    ctx.save_figure("dpi_long.png", fig)
    summary = [
        {
            "items": items,
            "slots": slots,
            "epsilon": eps,
            "spent": rows[-1]["spent"],
            "remaining": rows[-1]["remaining"],
            "kl_first_1000": float(np.mean([r["kl"] for r in rows[:1000]])),
            "kl_last_1000": float(np.mean([r["kl"] for r in rows[-1000:]])),
            "kl_uniform": float(np.mean([r["kl_uniform"] for r in rows])),
            "mse_last_1000": float(np.mean([r["mse"] for r in rows[-1000:]])),
            "secure": False,
        }
    ]
    ctx.write_csv("dpi_long_summary.csv", summary)
    return ExperimentResult(rows=summary, files=list(ctx.files), notes=["seeded (secure=False)"])


EXPERIMENTS = [
    Experiment(
        name="dpi-dynamic",
        summary="DPI on the 100-item Gaussian stream with changing variance (KL, MSE, medians)",
        source="seed 002 §6.4, Fig. 7-9",
        run=run_dynamic,
    ),
    Experiment(
        name="dpi-long",
        summary="DPI over 200,000 slots on a synthetic stream with domain 10,000",
        source="seed 002 Fig. 11",
        run=run_long,
    ),
]

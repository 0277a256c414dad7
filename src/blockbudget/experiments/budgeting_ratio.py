"""Empirical competitive ratio of seed 000's Alg. 2 against its bound 1 + ln(U/L).

Seed ``000_de3e86489c8646aa.txt`` §VI-B, Thm. 4: under Assumption 1 (small queries) and
Assumption 2 (L ≤ p_ij/ε_j ≤ U), OPT/ALG ≤ 1 + ln(U/L). One block of ε_g = 1 receives small
queries (ε_j ≈ 4/n each, ~4 blocks' worth in all) whose significance-to-cost ratios lie in
[L, U]; OPT is the offline optimum of Eq. (5) (HiGHS), ALG is
:class:`~blockbudget.scheduling.threshold.OnlineThreshold`. Sequences:

* random — ratios log-uniform on [L, U] in random order;
* adversarial — the classic worst case of online knapsack: ratios rising from L to a level v
  with plenty of volume at every level, so an algorithm that spends early is stuck with low
  values; the worst v on a grid is reported.

Two comparison modes: *ideal* (the comparison's sensitivity is 1e-9, so the AboveThreshold
noise vanishes and ε0 = 1e-5: the theorem's setting) and *private* (sensitivity 1, ε0 = 0.01:
Lap(400) noise on each comparison, which makes the filter nearly random).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
    new_figure,
)
from blockbudget.experiments.plotting import Caption, count_ticks, finish, label_axes
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.scheduling.base import BlockSpec, TaskSpec
from blockbudget.scheduling.offline import solve_milp
from blockbudget.scheduling.simulator import simulate
from blockbudget.scheduling.threshold import OnlineThreshold, competitive_ratio

MODES = {"ideal": (1e-9, 1e-5), "private": (1.0, 0.01)}


def _tasks(ratios: np.ndarray, eps: np.ndarray) -> list[TaskSpec]:
    return [
        TaskSpec(
            f"q{j}",
            1.0 + j * 1e-3,
            Budget(epsilon=float(e)),
            max_blocks=1,
            significance={"b0": float(r * e)},
        )
        for j, (r, e) in enumerate(zip(ratios, eps, strict=True))
    ]


def _ratio(
    ratios: np.ndarray, eps: np.ndarray, upper: float, lower: float, mode: str, seed: int
) -> float:
    sens, eps0 = MODES[mode]
    tasks = _tasks(ratios, eps)
    sched = OnlineThreshold(
        seed=seed,
        noise=SeededNoise(seed),
        upper=upper,
        lower=lower,
        comparison_epsilon=eps0,
        sensitivity=sens,
    )
    alg = simulate(
        sched, [BlockSpec("b0", 0.0, Budget(epsilon=1.0))], tasks, accounting=Accounting.BASIC
    ).significance
    p = (ratios * eps)[None, :]
    opt = solve_milp(p, eps[None, :], np.array([1.0]), np.ones(len(eps), dtype=np.int64)).value
    return opt / alg if alg > 0 else math.inf


def run_ratio(ctx: ExperimentContext) -> ExperimentResult:
    spreads = [10.0, 100.0] if ctx.quick else [2.0, 10.0, 100.0, 1000.0]
    seeds = [ctx.seed + k for k in range(ctx.repetitions(5))]
    n = 150 if ctx.quick else 600
    n_levels = 3 if ctx.quick else 6
    rows: list[dict[str, Any]] = []
    work = [(s, m) for s in spreads for m in MODES]
    for spread, mode in ctx.progress(work, description="competitive ratio"):
        lower, upper = 1.0, spread
        worst_random, worst_adv = 0.0, 0.0
        for seed in seeds:
            rng = np.random.default_rng(seed)
            eps = rng.uniform(0.5, 1.5, n) * 4.0 / n  # ~4 blocks' worth of demand
            ratios = np.exp(rng.uniform(0, math.log(spread), n))
            worst_random = max(worst_random, _ratio(ratios, eps, upper, lower, mode, seed))
            for level in np.exp(np.linspace(0, math.log(spread), n_levels))[1:]:
                rising = np.sort(np.exp(rng.uniform(0, math.log(level), n)))
                worst_adv = max(worst_adv, _ratio(rising, eps, upper, lower, mode, seed))
        bound = competitive_ratio(upper=upper, lower=lower)
        rows.append(
            {
                "U_over_L": spread,
                "mode": mode,
                "bound_1_plus_ln": round(bound, 4),
                "worst_random": round(worst_random, 4),
                "worst_adversarial": round(worst_adv, 4),
                "within_bound": bool(max(worst_random, worst_adv) <= bound * 1.05),
            }
        )
    ctx.write_csv("competitive_ratio.csv", rows)
    fig, ax = new_figure()
    for mode in MODES:
        sub = [r for r in rows if r["mode"] == mode]
        ax.plot(
            [r["U_over_L"] for r in sub],
            [r["worst_adversarial"] for r in sub],
            marker="o",
            label=f"adversarial ({mode})",
        )
        ax.plot(
            [r["U_over_L"] for r in sub],
            [r["worst_random"] for r in sub],
            marker="x",
            label=f"random ({mode})",
        )
    ax.plot(
        spreads,
        [competitive_ratio(upper=s, lower=1.0) for s in spreads],
        "k--",
        label="1 + ln(U/L)",
    )
    ax.set_xscale("log")
    count_ticks(ax, "x", spreads)
    label_axes(ax, x=("U/L, spread of significance per ε", "ratio"), y=("OPT / ALG", "ratio"))
    caption = Caption(
        epsilon=f"ε_g = 1 on one block; each query asks ε_j ≈ 4/n (n = {n} queries)",
        runs=len(seeds),
        spread=None,
        note="each point is the worst OPT/ALG over the runs (and, for adversarial, over the "
        "levels v), so no error bars; noise seeded",
    )
    finish(fig, caption, title="Empirical competitive ratio of Alg. 2 (seed 000 Thm. 4)")
    ctx.save_figure("competitive_ratio.png", fig)
    notes = (
        "noise: seeded numpy (secure_noise=False)",
        "ideal: sensitivity 1e-9, ε0=1e-5; private: sensitivity 1, ε0=0.01",
    )
    return ExperimentResult(rows=rows, files=list(ctx.files), notes=notes)


EXPERIMENTS = [
    Experiment(
        name="budgeting-competitive-ratio",
        summary="OPT/ALG of seed 000 Alg. 2 on random and adversarial sequences vs 1 + ln(U/L)",
        source="seed 000 Thm. 4",
        run=run_ratio,
    )
]

"""Seed 004 Fig. 8: average model release time vs pipeline arrival rate, four strategies.

Seed ``004_2b5d216070ae2ded.txt`` §5.4, Fig. 8 (seed ``001_7d2967ad64403faa.txt`` §4.4, Fig. 6):
a stream of blocks and pipelines arriving over discrete time steps; the stream enforces
(ε_g, δ_g) = (1, 1e-6) per block; pipelines are served by Block/Conserve (Sage), Block/Aggressive,
Query composition and Streaming composition (:mod:`blockbudget.scheduling.sage`), run by the
scheduling package's simulator.

Pipelines. As in Sage's simulator, a pipeline's quality is looked up in a measured profile
rather than retrained inside the simulation: for each average-speed statistic (hour of day, day of
week, week of month; error targets in mph) the sum-statistic validator's decision, and for each
flights LR pipeline (AdaSSP, MSE target τ)
the Sage loss validator's decision is measured once on real data over a grid of (ε, rows) — on
combined blocks for the block strategies, one model and one validation query per block for
query composition — and closed monotonically (more ε or more data never hurts). A pipeline's
sample complexity decides how likely it is to arrive (∝ 1/rows needed at ε = 1, Sage's
"power law" favouring small pipelines). One block = one week of flights (≈ 6,300 rows, Sage: one
hour of taxi rides ≈ 16K); inter-arrival times are exponential (Gamma with shape 1). Profiles are
measured on up to 32 weeks of real rows; the simulated stream goes on for two years at the same
rate (the profile, not the rows, is what the simulation reads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.experiments.common import Experiment, ExperimentContext, ExperimentResult
from blockbudget.experiments.sage_block_composition import partitioned_bound
from blockbudget.experiments.sage_common import DELTA, TaskKind, task_split, train_iteration
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.scheduling.base import BlockSpec, TaskSpec
from blockbudget.scheduling.sage import (
    BlockAggressive,
    BlockConserve,
    QueryComposition,
    SageStrategy,
    StreamingComposition,
)
from blockbudget.scheduling.simulator import simulate
from blockbudget.training.adassp import AdaSSPRegressor
from blockbudget.training.pipeline import split_rows
from blockbudget.training.sources import MeteredSource
from blockbudget.training.tasks import (
    REGRESSION_NORM,
    SPEED_RANGE,
    Granularity,
    speed_keys,
    year_frame,
)
from blockbudget.training.validation import Outcome, SlaMode
from blockbudget.training.validators import (
    LossEvidence,
    LossValidator,
    SumStatisticEvidence,
    SumStatisticValidator,
)

#: One block = one week of flights (≈ 6,300 rows; Sage's blocks are an hour of taxi rides, 16K).
ROWS_PER_BLOCK = 6300
CAPACITY = Budget(epsilon=1.0, delta=1e-6)
ETA = 0.05
LEVELS = 6  # ε0 = 1/64
STRATEGIES: tuple[type[SageStrategy], ...] = (
    BlockConserve,
    BlockAggressive,
    QueryComposition,
    StreamingComposition,
)


@dataclass(frozen=True)
class TableProfile:
    """A pipeline's measured ACCEPT table over (ε fraction, blocks), monotonically closed.

    Attributes:
        epsilons: the ε grid (ascending).
        blocks: the window grid in blocks (ascending).
        combined: accept[i][j] at epsilons[i], blocks[j] with block composition.
        partitioned: the same with one query per block.
    """

    epsilons: tuple[float, ...]
    blocks: tuple[int, ...]
    combined: tuple[tuple[bool, ...], ...]
    partitioned: tuple[tuple[bool, ...], ...]

    def outcome(self, *, epsilon_fraction: float, blocks: int, partitioned: bool) -> Outcome:
        i = int(np.searchsorted(self.epsilons, epsilon_fraction * (1 + 1e-5), side="right")) - 1
        j = int(np.searchsorted(self.blocks, blocks, side="right")) - 1
        if i < 0 or j < 0:
            return Outcome.RETRY
        table = self.partitioned if partitioned else self.combined
        return Outcome.ACCEPT if table[i][j] else Outcome.RETRY

    def blocks_needed(self, *, epsilon_index: int = -1) -> int | None:
        row = self.combined[epsilon_index]
        return next((b for b, ok in zip(self.blocks, row, strict=True) if ok), None)


def _closed(grid: np.ndarray) -> tuple[tuple[bool, ...], ...]:
    """Monotone closure: accepted at (i, j) ⇒ accepted at every (i' ≥ i, j' ≥ j)."""
    out = np.maximum.accumulate(np.maximum.accumulate(grid, axis=0), axis=1)
    return tuple(tuple(bool(v) for v in row) for row in out)


def measure_profiles(
    ctx: ExperimentContext, targets: list[float], epsilons: list[float], blocks: list[int]
) -> dict[str, TableProfile]:
    """Measure the Sage loss validator's decisions for each LR target on real flights."""
    split = task_split(TaskKind.TAXI, shuffled=True)
    x_bound = REGRESSION_NORM * math.sqrt(2.0)
    comb = np.zeros((len(targets), len(epsilons), len(blocks)), dtype=bool)
    part = np.zeros_like(comb)
    cells = [(i, j) for i in range(len(epsilons)) for j in range(len(blocks))]
    for i, j in ctx.progress(cells, description="Fig. 8 profiles (ε × rows)"):
        eps, k = epsilons[i], blocks[j]
        n = k * ROWS_PER_BLOCK
        seed = ctx.seed * 7919 + i * 101 + j
        start = int(np.random.default_rng(seed).integers(0, len(split.stream_y) - n))
        it = train_iteration(split, start=start, n=n, epsilon=eps, seed=seed, with_reject=False)
        # partitioned: one model per block, averaged; one validation query per block
        x = split.stream_x[start : start + n]
        y = split.stream_y[start : start + n]
        train, test = split_rows(n, test_fraction=0.1, seed=seed)
        block_of = np.arange(n) // ROWS_PER_BLOCK
        coefs, intercepts, tests = [], [], []
        for b in range(k):
            tr = train[block_of[train] == b]
            m = AdaSSPRegressor(x_bound=x_bound).fit(
                MeteredSource(),
                x[tr],
                y[tr],
                epsilon=eps / 2,
                delta=DELTA,
                noise=SeededNoise(seed * 13 + b),
            )
            coefs.append(m.coef_)
            intercepts.append(m.intercept_)
            tests.append(test[block_of[test] == b])
        avg = AdaSSPRegressor(x_bound=x_bound)
        avg.coef_, avg.intercept_ = np.mean(coefs, axis=0), float(np.mean(intercepts))
        per_block = [(np.clip(avg.predict(x[t]), 0, 1) - y[t]) ** 2 for t in tests]
        rng = np.random.default_rng(seed + 5)
        part_bound = partitioned_bound(per_block, epsilon=eps / 2, eta=ETA, rng=rng)
        for g, target in enumerate(targets):
            v = LossValidator(target=target, mode=SlaMode.SAGE)
            assert isinstance(it.evidence, LossEvidence)
            result = v.validate(
                MeteredSource(), it.evidence, epsilon=eps / 2, eta=ETA, noise=SeededNoise(seed)
            )
            comb[g, i, j] = result.outcome is Outcome.ACCEPT
            part[g, i, j] = part_bound <= target
    return {
        f"lr τ={t:g}": TableProfile(
            tuple(epsilons), tuple(blocks), _closed(comb[g]), _closed(part[g])
        )
        for g, t in enumerate(targets)
    }


def measure_statistics_profiles(
    ctx: ExperimentContext,
    configs: list[tuple[Granularity, float]],
    epsilons: list[float],
    blocks: list[int],
) -> dict[str, TableProfile]:
    """The sum-statistic validator's decisions for average-speed pipelines (seed 004 Tab. 1's
    statistics) over (ε, blocks): half of ε releases ``dp_group_by_mean`` (scales 2/ε_r on the
    counts, 2R/ε_r on the sums, ε_r = ε/2 split in two), half validates. Partitioned: one
    release and one validation per block, ACCEPT only when every block's bound (at η/K)
    is within τ — an average of per-block means is then within τ too."""
    frame = year_frame()
    order = np.random.default_rng(ctx.seed + 17).permutation(len(frame))
    values_frame = frame.iloc[order].reset_index(drop=True)
    out: dict[str, TableProfile] = {}
    for granularity, target in ctx.progress(configs, description="Fig. 8 statistics profiles"):
        keys = speed_keys(values_frame, granularity)
        comb = np.zeros((len(epsilons), len(blocks)), dtype=bool)
        part = np.zeros_like(comb)
        validator = SumStatisticValidator(target=target)
        for i, eps in enumerate(epsilons):
            scale_c, scale_s = 4.0 / eps, 4.0 * SPEED_RANGE / eps
            for j, k in enumerate(blocks):
                n = k * ROWS_PER_BLOCK
                seed = ctx.seed * 31 + i * 1000 + j
                counts = np.bincount(keys[:n], minlength=granularity.nkeys)
                ev = SumStatisticEvidence(counts, SPEED_RANGE, scale_s, scale_c)
                res = validator.validate(
                    MeteredSource(), ev, epsilon=eps / 2, eta=ETA, noise=SeededNoise(seed)
                )
                comb[i, j] = res.outcome is Outcome.ACCEPT
                ok = True
                for b in range(k):
                    block_keys = keys[b * ROWS_PER_BLOCK : (b + 1) * ROWS_PER_BLOCK]
                    cb = np.bincount(block_keys, minlength=granularity.nkeys)
                    evb = SumStatisticEvidence(cb, SPEED_RANGE, scale_s, scale_c)
                    rb = validator.validate(
                        MeteredSource(),
                        evb,
                        epsilon=eps / 2,
                        eta=ETA / k,
                        noise=SeededNoise(seed * 7 + b),
                    )
                    if rb.outcome is not Outcome.ACCEPT:
                        ok = False
                        break
                part[i, j] = ok
        name = f"speed-{granularity.value} τ={target:g} mph"
        out[name] = TableProfile(tuple(epsilons), tuple(blocks), _closed(comb), _closed(part))
    return out


def workload(
    rate: float,
    horizon: int,
    profiles: dict[str, TableProfile],
    seed: int,
) -> tuple[list[BlockSpec], list[TaskSpec], dict[str, TableProfile]]:
    """Blocks 0..horizon−1 and pipelines arriving at ``rate`` per block over the first 3/4."""
    rng = np.random.default_rng(seed)
    blocks = [BlockSpec(f"d{i:04d}", float(i), CAPACITY) for i in range(horizon)]
    usable = {t: p for t, p in profiles.items() if p.blocks_needed() is not None}
    if not usable:
        return blocks, [], {}
    weights = np.array([1.0 / float(p.blocks_needed() or 1) for p in usable.values()])
    weights /= weights.sum()
    names = list(usable)
    tasks, chosen = [], {}
    t = float(rng.exponential(1.0 / rate))
    k = 0
    while t < horizon * 0.75:
        target = names[int(rng.choice(len(names), p=weights))]
        tid = f"p{k:04d}"
        tasks.append(TaskSpec(tid, t, CAPACITY))
        chosen[tid] = usable[target]
        k += 1
        t += float(rng.exponential(1.0 / rate))
    return blocks, tasks, chosen


def run(ctx: ExperimentContext) -> ExperimentResult:
    stats = [
        (Granularity.DAY_OF_WEEK, 40.0),
        (Granularity.DAY_OF_WEEK, 80.0),
        (Granularity.WEEK_OF_MONTH, 40.0),
        (Granularity.WEEK_OF_MONTH, 80.0),
        (Granularity.HOUR_OF_DAY, 80.0),
        (Granularity.HOUR_OF_DAY, 160.0),
    ]
    if ctx.quick:
        targets, epsilons, grid = [0.03], [0.25, 1.0], [1, 2, 4]
        stats = stats[1:2]
        rates, horizon = [0.5, 1.0], 16
    else:
        targets = [0.004, 0.006, 0.01, 0.016]
        epsilons = [1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0]
        grid = [1, 2, 4, 8, 16, 32]
        rates, horizon = [0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0], 104
    profiles = measure_profiles(ctx, targets, epsilons, grid)
    profiles.update(measure_statistics_profiles(ctx, stats, epsilons, grid))
    profile_rows = [
        {
            "pipeline": name,
            "blocks_needed_at_eps1": p.blocks_needed(),
            "blocks_needed_at_eps1_partitioned": next(
                (b for b, ok in zip(p.blocks, p.partitioned[-1], strict=True) if ok), None
            ),
        }
        for name, p in profiles.items()
    ]
    rows: list[dict[str, Any]] = []
    jobs = [(rate, cls) for rate in rates for cls in STRATEGIES]
    for rate, cls in ctx.progress(jobs, description="Fig. 8 simulations"):
        blocks, tasks, chosen = workload(rate, horizon, profiles, ctx.seed + int(rate * 1000))
        if not tasks:
            continue
        result = simulate(
            cls(profiles=chosen, levels=LEVELS, min_window=1),
            blocks,
            tasks,
            accounting=Accounting.BASIC,
            horizon=float(horizon - 1),
        )
        pool = result.pool
        censored = [
            pool.granted_at.get(tid, float(horizon - 1)) - task.arrival
            for tid, task in pool.tasks.items()
        ]
        rows.append(
            {
                "strategy": cls.name,
                "arrival_rate_per_block": rate,
                "pipelines": result.submitted,
                "released": result.allocated,
                "release_fraction": result.allocated / result.submitted,
                "mean_release_time_blocks": result.mean_delay,
                "mean_time_censored_blocks": float(np.mean(censored)),
                "budget_used": result.budget_used,
            }
        )
    ctx.write_csv("sage_workload_profiles.csv", profile_rows)
    ctx.write_csv("sage_workload.csv", rows)
    plot(ctx, rows)
    return ExperimentResult(
        rows=rows,
        files=list(ctx.files),
        notes=[
            "1 block = 1 week of flights (~6,300 rows); (ε_g, δ_g) = (1, 1e-6); "
            "release time counts only released pipelines, 'censored' counts the others until "
            "the end of the run",
        ],
    )


def plot(ctx: ExperimentContext, rows: list[dict[str, Any]]) -> None:
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for cls in STRATEGIES:
        mine = [r for r in rows if r["strategy"] == cls.name]
        xs = [r["arrival_rate_per_block"] for r in mine]
        left.plot(xs, [r["mean_time_censored_blocks"] for r in mine], "o-", label=cls.name)
        right.plot(xs, [r["release_fraction"] for r in mine], "o-", label=cls.name)
    left.set_ylabel("mean release time (weeks; unreleased counted to the end)")
    right.set_ylabel("fraction of pipelines released")
    for axes in (left, right):
        axes.set_xlabel("pipeline arrivals per week")
        axes.legend(fontsize=7)
    left.set_title("Fig. 8 analog: release time vs load")
    ctx.save_figure("sage_workload.png", figure)


EXPERIMENTS = [
    Experiment(
        name="sage-workload",
        summary="Release time vs pipeline arrival rate",
        source="seed 004 Fig. 8",
        run=run,
    )
]

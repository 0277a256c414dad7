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

Scales (``--scale``): ``original`` is the above; ``paper-standin`` is a **resampled stand-in**
of Sage's scale (:mod:`blockbudget.experiments.sage_standin`): the stream's rows drawn with
replacement (seeded, public), one block = 8 weeks (≈ 50,400 rows), profiles measured with the
same pipelines and validators on 1–32 blocks (8–256 weeks); ``both`` runs the two. Every CSV row
says its scale. Measured profiles are cached under the output folder (``profile-cache/``), so a
second run only re-simulates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockbudget.accounting import Accounting
from blockbudget.apps.flights.features import (
    REGRESSION_NORM,
    SPEED_RANGE,
    Granularity,
    speed_keys,
    year_frame,
)
from blockbudget.budget import Budget
from blockbudget.experiments.common import Experiment, ExperimentContext, ExperimentResult
from blockbudget.experiments.sage_block_composition import partitioned_bound
from blockbudget.experiments.sage_common import (
    DELTA,
    Split,
    TaskKind,
    task_split,
    train_iteration,
)
from blockbudget.experiments.sage_standin import (
    STANDIN_WEEKS_PER_BLOCK,
    Scale,
    cache_path,
    load_tables,
    resampled_keys,
    resampled_split,
    store_tables,
)
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.outcome import Outcome
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
from blockbudget.training.validation import SlaMode
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

    def blocks_needed(self, *, epsilon_index: int = -1, partitioned: bool = False) -> int | None:
        """The smallest window (blocks) ACCEPTed at ``epsilons[epsilon_index]`` (None: none)."""
        row = (self.partitioned if partitioned else self.combined)[epsilon_index]
        return next((b for b, ok in zip(self.blocks, row, strict=True) if ok), None)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form (the profile cache)."""
        return {
            "epsilons": list(self.epsilons),
            "blocks": list(self.blocks),
            "combined": [list(r) for r in self.combined],
            "partitioned": [list(r) for r in self.partitioned],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableProfile:
        """The inverse of :meth:`to_json`."""
        return cls(
            tuple(float(e) for e in data["epsilons"]),
            tuple(int(b) for b in data["blocks"]),
            tuple(tuple(bool(v) for v in r) for r in data["combined"]),
            tuple(tuple(bool(v) for v in r) for r in data["partitioned"]),
        )


def _closed(grid: np.ndarray) -> tuple[tuple[bool, ...], ...]:
    """Monotone closure: accepted at (i, j) ⇒ accepted at every (i' ≥ i, j' ≥ j)."""
    out = np.maximum.accumulate(np.maximum.accumulate(grid, axis=0), axis=1)
    return tuple(tuple(bool(v) for v in row) for row in out)


def measure_profiles(
    ctx: ExperimentContext,
    targets: list[float],
    epsilons: list[float],
    blocks: list[int],
    *,
    split: Split | None = None,
    rows_per_block: int = ROWS_PER_BLOCK,
) -> dict[str, TableProfile]:
    """Measure the Sage loss validator's decisions for each LR target on real flights
    (``split``: the shuffled taxi stream unless given, e.g. a resampled stand-in)."""
    split = split if split is not None else task_split(TaskKind.TAXI, shuffled=True)
    x_bound = REGRESSION_NORM * math.sqrt(2.0)
    comb = np.zeros((len(targets), len(epsilons), len(blocks)), dtype=bool)
    part = np.zeros_like(comb)
    cells = [(i, j) for i in range(len(epsilons)) for j in range(len(blocks))]
    for i, j in ctx.progress(cells, description="Fig. 8 profiles (ε × rows)"):
        eps, k = epsilons[i], blocks[j]
        n = k * rows_per_block
        seed = ctx.seed * 7919 + i * 101 + j
        start = int(np.random.default_rng(seed).integers(0, len(split.stream_y) - n))
        it = train_iteration(split, start=start, n=n, epsilon=eps, seed=seed, with_reject=False)
        # partitioned: one model per block, averaged; one validation query per block
        x = split.stream_x[start : start + n]
        y = split.stream_y[start : start + n]
        train, test = split_rows(n, test_fraction=0.1, seed=seed)
        block_of = np.arange(n) // rows_per_block
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
    *,
    keys_of: Callable[[Granularity], np.ndarray] | None = None,
    rows_per_block: int = ROWS_PER_BLOCK,
) -> dict[str, TableProfile]:
    """The sum-statistic validator's decisions for average-speed pipelines (seed 004 Tab. 1's
    statistics) over (ε, blocks): half of ε releases ``dp_group_by_mean`` (scales 2/ε_r on the
    counts, 2R/ε_r on the sums, ε_r = ε/2 split in two), half validates. Partitioned: one
    release and one validation per block, ACCEPT only when every block's bound (at η/K)
    is within τ — an average of per-block means is then within τ too. ``keys_of`` gives a
    granularity's public keys in stream order (default: the 2013 flights, shuffled)."""
    if keys_of is None:
        frame = year_frame()
        order = np.random.default_rng(ctx.seed + 17).permutation(len(frame))
        values_frame = frame.iloc[order].reset_index(drop=True)

        def keys_of(granularity: Granularity) -> np.ndarray:
            return speed_keys(values_frame, granularity)

    out: dict[str, TableProfile] = {}
    for granularity, target in ctx.progress(configs, description="Fig. 8 statistics profiles"):
        keys = keys_of(granularity)
        comb = np.zeros((len(epsilons), len(blocks)), dtype=bool)
        part = np.zeros_like(comb)
        validator = SumStatisticValidator(target=target)
        for i, eps in enumerate(epsilons):
            scale_c, scale_s = 4.0 / eps, 4.0 * SPEED_RANGE / eps
            for j, k in enumerate(blocks):
                n = k * rows_per_block
                seed = ctx.seed * 31 + i * 1000 + j
                counts = np.bincount(keys[:n], minlength=granularity.nkeys)
                ev = SumStatisticEvidence(counts, SPEED_RANGE, scale_s, scale_c)
                res = validator.validate(
                    MeteredSource(), ev, epsilon=eps / 2, eta=ETA, noise=SeededNoise(seed)
                )
                comb[i, j] = res.outcome is Outcome.ACCEPT
                ok = True
                for b in range(k):
                    block_keys = keys[b * rows_per_block : (b + 1) * rows_per_block]
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


#: Workloads drawn per load in the full form (the profiles are measured once).
TRIALS = 5
#: Loads of the stand-in (arrivals per 8-week block; 0.7 is the paper's highest supported load).
STANDIN_RATES = (0.25, 0.5, 0.7, 1.0, 2.0, 4.0)
STATISTICS: tuple[tuple[Granularity, float], ...] = (
    (Granularity.DAY_OF_WEEK, 40.0),
    (Granularity.DAY_OF_WEEK, 80.0),
    (Granularity.WEEK_OF_MONTH, 40.0),
    (Granularity.WEEK_OF_MONTH, 80.0),
    (Granularity.HOUR_OF_DAY, 80.0),
    (Granularity.HOUR_OF_DAY, 160.0),
)


@dataclass(frozen=True)
class Plan:
    """The sizes of one run of the experiment at one scale.

    Attributes:
        scale: the data scale.
        weeks_per_block: weeks of flights in one block.
        targets: the LR pipelines' MSE targets.
        epsilons: the profiles' ε grid (fractions of a block's ε_g = 1).
        grid: the profiles' window grid, in blocks.
        stats: the average-speed pipelines (granularity, target in mph).
        rates: pipeline arrivals per block.
        horizon: blocks simulated (pipelines arrive over the first 3/4).
        trials: workloads drawn per load (trial 0 is the historical seed).
    """

    scale: Scale
    weeks_per_block: int
    targets: tuple[float, ...]
    epsilons: tuple[float, ...]
    grid: tuple[int, ...]
    stats: tuple[tuple[Granularity, float], ...]
    rates: tuple[float, ...]
    horizon: int
    trials: int = 1

    @property
    def rows_per_block(self) -> int:
        return ROWS_PER_BLOCK * self.weeks_per_block


def plan(scale: Scale, *, quick: bool) -> Plan:
    """The sizes for ``scale`` (full, or the seconds-long ``quick`` form the tests run)."""
    weeks = STANDIN_WEEKS_PER_BLOCK if scale is Scale.PAPER_STANDIN else 1
    if quick:
        return Plan(scale, weeks, (0.03,), (0.25, 1.0), (1, 2, 4), STATISTICS[1:2], (0.5, 1.0), 16)
    epsilons = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
    targets = (0.004, 0.006, 0.01, 0.016)
    grid: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # the stand-in: 8–256 weeks
    rates: tuple[float, ...]
    if scale is Scale.ORIGINAL:
        rates = (0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0)
        return Plan(scale, weeks, targets, epsilons, grid, STATISTICS, rates, 104, TRIALS)
    if scale is Scale.STANDIN_WEEKLY:
        # the stand-in's 8–256 weeks in 1-week blocks; 832 blocks simulate slowly (≈ 3 min for the
        # four strategies at 0.25/week on 2 shared cores), so one workload at three loads
        grid = (1, 2, 4, 8, 16, 32, 64, 128, 256)
        rates = tuple(r / STANDIN_WEEKS_PER_BLOCK for r in (0.5, 1.0, 2.0))
        return Plan(scale, weeks, targets, epsilons, grid, STATISTICS, rates, 832, 1)
    return Plan(scale, weeks, targets, epsilons, grid, STATISTICS, STANDIN_RATES, 104, TRIALS)


def profiles_for(ctx: ExperimentContext, p: Plan) -> dict[str, TableProfile]:
    """The measured profiles of a plan, read from the cache under ``ctx.out_dir`` when an
    identical measurement (same plan, seed and code version) was stored there."""
    spec = {
        "scale": p.scale.value,
        "seed": ctx.seed,
        "rows_per_block": p.rows_per_block,
        "targets": p.targets,
        "epsilons": p.epsilons,
        "grid": p.grid,
        "stats": [(g.value, t) for g, t in p.stats],
        "eta": ETA,
    }
    path = cache_path(ctx.out_dir, p.scale.value, spec)
    cached = load_tables(path)
    if cached is not None:
        return {name: TableProfile.from_json(t) for name, t in cached.items()}
    kwargs: dict[str, Any] = {"rows_per_block": p.rows_per_block}
    stat_kwargs: dict[str, Any] = {"rows_per_block": p.rows_per_block}
    if p.scale is not Scale.ORIGINAL:
        rows = max(p.grid) * p.rows_per_block
        base = task_split(TaskKind.TAXI, shuffled=True)
        kwargs["split"] = resampled_split(base, rows + p.rows_per_block, seed=ctx.seed)
        stat_kwargs["keys_of"] = lambda g: resampled_keys(g, rows, seed=ctx.seed)
    eps, grid = list(p.epsilons), list(p.grid)
    profiles = measure_profiles(ctx, list(p.targets), eps, grid, **kwargs)
    profiles.update(measure_statistics_profiles(ctx, list(p.stats), eps, grid, **stat_kwargs))
    store_tables(path, {name: t.to_json() for name, t in profiles.items()})
    return profiles


def simulate_plan(
    ctx: ExperimentContext, p: Plan, profiles: dict[str, TableProfile]
) -> list[dict[str, Any]]:
    """Run the four strategies at each load of a plan; one row per (load, strategy)."""
    rows: list[dict[str, Any]] = []
    jobs = [(rate, t, cls) for rate in p.rates for t in range(p.trials) for cls in STRATEGIES]
    for rate, trial, cls in ctx.progress(jobs, description=f"Fig. 8 simulations ({p.scale.value})"):
        seed = ctx.seed + int(rate * 1000) + 7919 * trial
        blocks, tasks, chosen = workload(rate, p.horizon, profiles, seed)
        if not tasks:
            continue
        result = simulate(
            cls(profiles=chosen, levels=LEVELS, min_window=1),
            blocks,
            tasks,
            accounting=Accounting.BASIC,
            horizon=float(p.horizon - 1),
        )
        pool = result.pool
        censored = [
            pool.granted_at.get(tid, float(p.horizon - 1)) - task.arrival
            for tid, task in pool.tasks.items()
        ]
        rows.append(
            {
                "scale": p.scale.value,
                "weeks_per_block": p.weeks_per_block,
                "rows_per_block": p.rows_per_block,
                "strategy": cls.name,
                "arrival_rate_per_block": rate,
                "trial": trial,
                "pipelines": result.submitted,
                "released": result.allocated,
                "release_fraction": result.allocated / result.submitted,
                "mean_release_time_blocks": result.mean_delay,
                "mean_time_censored_blocks": float(np.mean(censored)),
                "budget_used": result.budget_used,
            }
        )
    return rows


def profile_rows(p: Plan, profiles: dict[str, TableProfile]) -> list[dict[str, Any]]:
    """What each pipeline needs at ε = 1, in blocks and in weeks (empty: not within the grid)."""
    out = []
    for name, prof in profiles.items():
        comb, part = prof.blocks_needed(), prof.blocks_needed(partitioned=True)
        out.append(
            {
                "scale": p.scale.value,
                "pipeline": name,
                "blocks_needed_at_eps1": comb,
                "blocks_needed_at_eps1_partitioned": part,
                "weeks_needed_at_eps1": None if comb is None else comb * p.weeks_per_block,
                "largest_window_weeks": max(prof.blocks) * p.weeks_per_block,
            }
        )
    return out


def _suffix(scale: Scale) -> str:
    return "" if scale is Scale.ORIGINAL else f"_{scale.value}"


def run(ctx: ExperimentContext) -> ExperimentResult:
    choice = Scale(ctx.scale) if ctx.scale is not None else Scale.ORIGINAL
    rows: list[dict[str, Any]] = []
    for scale in choice.scales():
        p = plan(scale, quick=ctx.quick)
        profiles = profiles_for(ctx, p)
        mine = simulate_plan(ctx, p, profiles)
        ctx.write_csv(f"sage_workload_profiles{_suffix(scale)}.csv", profile_rows(p, profiles))
        ctx.write_csv(f"sage_workload{_suffix(scale)}.csv", mine)
        plot(ctx, mine, f"sage_workload{_suffix(scale)}.png")
        rows.extend(mine)
    if choice is Scale.BOTH:
        ctx.write_csv("sage_workload_both.csv", rows)
    notes = [
        "original: 1 block = 1 week of flights (~6,300 rows); (ε_g, δ_g) = (1, 1e-6); "
        "release time counts only released pipelines, 'censored' counts the others until "
        "the end of the run",
        "noise: seeded (SeededNoise) in the measured profiles, not secure — experiments only",
    ]
    if choice is not Scale.ORIGINAL:
        notes.append(
            "paper-standin: a RESAMPLED stand-in of Sage's scale (flights rows drawn with "
            f"replacement, 1 block = {STANDIN_WEEKS_PER_BLOCK} weeks ≈ "
            f"{ROWS_PER_BLOCK * STANDIN_WEEKS_PER_BLOCK:,} rows); fair for this simulator "
            "(profiles of i.i.d. rows), not for held-out quality (Tab. 2, Fig. 6)"
        )
    return ExperimentResult(rows=rows, files=list(ctx.files), notes=notes)


def plot(ctx: ExperimentContext, rows: list[dict[str, Any]], filename: str) -> None:
    """Fig. 8: mean release time and fraction released against the load, ±1 std over trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from blockbudget.experiments.plotting import Caption, finish, label_axes, plot_groups

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for cls in STRATEGIES:
        mine = [r for r in rows if r["strategy"] == cls.name]
        xs = sorted({r["arrival_rate_per_block"] for r in mine})
        at = [[r for r in mine if r["arrival_rate_per_block"] == x] for x in xs]
        waits = [[float(r["mean_time_censored_blocks"]) for r in g] for g in at]
        released = [[float(r["release_fraction"]) for r in g] for g in at]
        plot_groups(left, xs, waits, marker="o", label=cls.name)
        plot_groups(right, xs, released, marker="o", label=cls.name)
    label = rows[0]["scale"] if rows else ""
    weeks = rows[0]["weeks_per_block"] if rows else 1
    x_axis = ("load", "pipeline arrivals per block")
    label_axes(left, x=x_axis, y=("mean release time", "blocks"))
    label_axes(right, x=x_axis, y=("pipelines released", "fraction"))
    title = "Fig. 8 analog: release time vs load"
    if label != Scale.ORIGINAL.value:
        title += " — RESAMPLED stand-in of Sage's scale"
    trials = 1 + max((int(r["trial"]) for r in rows), default=0)
    caption = Caption(
        epsilon="(ε_g, δ_g) = (1, 1e-6) per block; a pipeline asks at most ε = 1",
        runs=trials,
        note=f"1 block = {weeks} week(s) of flights; a pipeline never released counts until "
        "the end of the run; runs are simulated workloads with different arrival seeds",
    )
    finish(figure, caption, title=title)
    ctx.save_figure(filename, figure)


EXPERIMENTS = [
    Experiment(
        name="sage-workload",
        summary="Release time vs pipeline arrival rate (--scale paper-standin: resampled)",
        source="seed 004 Fig. 8",
        run=run,
        scales=tuple(s.value for s in Scale),
    )
]

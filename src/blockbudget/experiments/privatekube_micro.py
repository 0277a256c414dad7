"""PrivateKube's microbenchmark (Luo et al., OSDI'21 §6.2; github columbia/PrivateKube,
``evaluation/microbenchmark``): pipelines allocated against DPF's N.

The authors' settings, in their units (a block's capacity ε_G = 1, δ_G = 1e-6; mice demand
ε = 0.01, elephants 0.1; 75% mice; a mouse names the newest block, an elephant the newest 10 —
:func:`~blockbudget.scheduling.workloads.privatekube_micro`):

* **single block** (``microbench_single_block.py``): one block present from the start, 236
  pipelines (100 × 2.25 × 1.05) arriving one per unit, the run stops after the last arrival;
  DPF-N with N ∈ {1, 10, 50, …, 325} and DPF-T with lifetime N arrivals (unlocking ε_G/N per
  arrival), FCFS; basic (ε, δ) accounting (Laplace demands of pure ε).
* **many blocks** (``microbench_multi_block.py``): a block every 10 s for 300 s (30 blocks),
  a pipeline every 0.078 s (128 per block), timeout 1,500 arrivals (11.7 blocks), the run
  stops at 300 s; N up to 1,500; basic accounting.
* **RDP against basic** (the same script's RDP runs): Gaussian demands calibrated to
  (ε, δ = 1e-9) by σ = √(2 ln(1.25/δ))/ε, as the authors' ``gaussian_dp2sigma``; under RDP a
  block holds ~14,500 mice instead of 100, so the authors offer 2,345 pipelines per block
  (an arrival every 0.00426 s) and sweep N up to 2.1 × 14,514. We run DPF-N on that load
  over fewer blocks (``heavy_blocks``), under RDP and under basic accounting, and report the
  best allocation over N of each.

Times are in block intervals (a block per unit), so a lifetime of N arrivals is N / (pipelines
per block). DPF-T unlocks at a tick of one arrival interval on one block, and of 8 arrival
intervals on many blocks (the authors unlock ε_G/N every arrival interval; 8 keeps the run
short and moves unlocking by at most 8/N of a block). PrivateKube's round robin, RR-N and RR-T
(:mod:`~blockbudget.scheduling.rr`: DPF's unlocking, the unlocked budget split max-min fairly
among all waiting pipelines), is swept beside DPF on the basic-accounting settings with Laplace
demands (the authors have no RR over RDP); our ``round-robin`` (no unlocking) equals FCFS on
NAMED tasks (docs/scheduling.md), so it is not swept here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from blockbudget.accounting import Accounting
from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
    new_figure,
)
from blockbudget.experiments.plotting import Caption, finish, label_axes, log_axis
from blockbudget.scheduling.base import Scheduler
from blockbudget.scheduling.baselines import Fcfs
from blockbudget.scheduling.dpf import DpfN, DpfT
from blockbudget.scheduling.rr import RrN, RrT
from blockbudget.scheduling.simulator import simulate
from blockbudget.scheduling.workloads import Workload, privatekube_micro

EPSILON_G, DELTA_G = 1.0, 1e-6
GAUSSIAN_DELTA = 1e-9  # the authors' DELTA for RDP demands
TIMEOUT_ARRIVALS = 1500  # 3 × (4 + 1) × 100 arrival intervals


@dataclass(frozen=True)
class Setting:
    """One of the microbenchmark's setups.

    Attributes:
        name: the setting's label in the table.
        n_blocks: blocks (one per time unit).
        per_block: pipelines per block interval.
        accounting: the rule.
        gaussian: Gaussian demands (δ = 1e-9) instead of Laplace.
        ns: the values of N swept.
        dpf_t: whether DPF-T is swept too.
        rr: whether RR-N (and RR-T with ``dpf_t``) are swept too.
        tick_arrivals: DPF-T's tick in arrival intervals.
        timeout: whether pipelines time out after 1,500 arrivals.
    """

    name: str
    n_blocks: int
    per_block: int
    accounting: Accounting
    gaussian: bool
    ns: tuple[int, ...]
    dpf_t: bool = True
    rr: bool = True
    tick_arrivals: int = 1
    timeout: bool = True

    def workload(self, seed: int) -> Workload:
        """The setting's seeded pipelines."""
        return privatekube_micro(
            n_blocks=self.n_blocks,
            tasks_per_block=self.per_block,
            epsilon_g=EPSILON_G,
            delta_g=DELTA_G,
            seed=seed,
            accounting=self.accounting,
            timeout=TIMEOUT_ARRIVALS / self.per_block if self.timeout else None,
            gaussian_delta=GAUSSIAN_DELTA if self.gaussian else None,
        )


def settings(quick: bool) -> list[Setting]:
    """The swept setups (small ones with ``quick``)."""
    basic, rdp = Accounting.BASIC, Accounting.RDP
    if quick:
        return [
            Setting("single block", 1, 236, basic, False, (10, 100, 200), timeout=False),
            Setting("many blocks", 3, 64, basic, False, (10, 100, 375), tick_arrivals=8),
            Setting("heavy, basic", 1, 400, basic, True, (50, 100), dpf_t=False, rr=False),
            Setting("heavy, RDP", 1, 400, rdp, True, (1000, 7257), dpf_t=False, rr=False),
        ]
    single = (1, 10, 50, 75, 100, 125, 175, 200, 225, 275, 325)
    many = (1, 10, 50, 100, 175, 275, 375, 750, 1500)
    return [
        Setting("single block", 1, 236, basic, False, single, timeout=False),
        Setting("many blocks", 30, 128, basic, False, many, tick_arrivals=8),
        Setting("heavy, basic", 6, 2345, basic, True, (50, 100, 210), dpf_t=False, rr=False),
        Setting(
            "heavy, RDP", 6, 2345, rdp, True, (1451, 7257, 14514, 30479), dpf_t=False, rr=False
        ),
    ]


def _runs(setting: Setting) -> list[tuple[str, int | None, Callable[[], Scheduler]]]:
    """(scheduler, N, factory) for one setting: FCFS once, DPF-N and DPF-T (and RR-N and
    RR-T) per N."""
    arrival = 1.0 / setting.per_block
    tick = arrival * setting.tick_arrivals
    out: list[tuple[str, int | None, Callable[[], Scheduler]]] = [("fcfs", None, Fcfs)]
    for n in setting.ns:
        out.append(("dpf-n", n, partial(DpfN, n=n)))
        if setting.dpf_t:
            out.append(("dpf-t", n, partial(DpfT, n=n, lifetime=n * arrival, tick=tick)))
        if setting.rr:
            out.append(("rr-n", n, partial(RrN, n=n)))
            if setting.dpf_t:
                out.append(("rr-t", n, partial(RrT, n=n, lifetime=n * arrival, tick=tick)))
    return out


def run_setting(setting: Setting, seed: int) -> list[dict[str, Any]]:
    """One row per (scheduler, N): pipelines allocated by the end of the authors' run (the
    last arrival: nothing drains after it)."""
    w = setting.workload(seed)
    horizon = float(setting.n_blocks)  # the authors' sim.duration, in block intervals
    rows = []
    for name, n, make in _runs(setting):
        result = simulate(make(), w.blocks, w.tasks, accounting=w.accounting, horizon=horizon)
        at_end = sum(1 for t in result.pool.granted_at.values() if t <= horizon)
        rows.append(
            {
                "setting": setting.name,
                "accounting": setting.accounting.value,
                "blocks": setting.n_blocks,
                "pipelines": len(w.tasks),
                "scheduler": name,
                "N": n,
                "allocated": at_end,
            }
        )
    return rows


def _figure(ctx: ExperimentContext, rows: list[dict[str, Any]]) -> None:
    names = list(dict.fromkeys(r["setting"] for r in rows))
    fig, _ = new_figure(width=4.0 * len(names), height=4.0)
    fig.clf()
    for k, setting in enumerate(names):
        axes = fig.add_subplot(1, len(names), k + 1)
        sub = [r for r in rows if r["setting"] == setting]
        ns = sorted({int(r["N"]) for r in sub if r["N"] is not None})
        for name, marker in (("dpf-n", "o"), ("dpf-t", "x"), ("rr-n", "s"), ("rr-t", "+")):
            pts = sorted((int(r["N"]), int(r["allocated"])) for r in sub if r["scheduler"] == name)
            if pts:
                axes.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=name)
        fcfs = next(r["allocated"] for r in sub if r["scheduler"] == "fcfs")
        axes.plot([ns[0], ns[-1]], [fcfs, fcfs], "k--", label="fcfs")
        if ns[0] > 0:
            log_axis(axes, "x")
        label_axes(axes, x=("N, fair shares per block", "shares"), y=("allocated", "pipelines"))
        axes.set_title(f"{setting} ({sub[0]['pipelines']} pipelines)", fontsize=8)
    caption = Caption(
        epsilon="blocks of ε_G = 1, δ_G = 1e-6; mice ε = 0.01, elephants ε = 0.1",
        runs=1,
        note="PrivateKube's microbenchmark; counted at the end of the authors' run; "
        "DPF-T's lifetime is N arrival intervals; heavy: Gaussian demands (δ = 1e-9), "
        "2,345 pipelines per block; deterministic, no noise drawn",
    )
    finish(fig, caption, title="Pipelines allocated against N (PrivateKube OSDI'21 §6.2)")
    ctx.save_figure("privatekube_micro.png", fig)


def run_micro(ctx: ExperimentContext) -> ExperimentResult:
    rows: list[dict[str, Any]] = []
    todo = settings(ctx.quick)
    for setting in ctx.progress(todo, description="privatekube-micro"):
        rows.extend(run_setting(setting, ctx.seed))
    ctx.write_csv("privatekube_micro.csv", rows)
    _figure(ctx, rows)
    notes = (
        "deterministic: no noise is drawn (DPF, RR and FCFS decide on public demands)",
        "allocated = pipelines granted by the end of the authors' run (the last arrival)",
    )
    return ExperimentResult(rows=rows, files=list(ctx.files), notes=notes)


EXPERIMENTS = [
    Experiment(
        name="privatekube-micro",
        summary="PrivateKube's microbenchmark: FCFS, DPF-N/T and RR-N/T against N on one block "
        "and many, and RDP against basic accounting",
        source="PrivateKube OSDI'21 §6.2",
        run=run_micro,
    )
]

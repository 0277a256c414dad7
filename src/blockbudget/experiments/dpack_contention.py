"""DPack's online evaluation as the paper runs it (Tholoniat et al., EuroSys'25 §6, Alibaba-DP).

The authors' online Alibaba runs (github columbia/dpack, ``experiments/plot_alibaba.py``) feed
*one* task list to 100 initial blocks plus 30, 60, 90, 120 or 180 online blocks (one per time
unit); the tasks' submission times are rescaled onto the online blocks, so fewer blocks means
more tasks per block — more contention. DPack, DPF and FCFS all run as batch schedulers over
T-unlocked budget (data lifetime 30 blocks, a batch every 10 units, DPack's efficiencies
recomputed every 50 grants). This experiment does the same on our Alibaba-DP stand-in
(:func:`~blockbudget.scheduling.alibaba.alibaba_dp`: synthetic job records through the
published generator's maps, RDP accounting, (ε_g, δ_g) = (10, 1e-7)), with

* ``dpack`` against ``dpf-t`` (the paper's online baseline) and ``fcfs-t`` (the paper's FCFS:
  queued under the same unlocking and batches), and ``dpf-n`` (N = 100) for reference;
* two ends of run: the **authors' end** — their simulator stops producing tasks one block
  interval after the last block and terminates then, so we count the tasks granted by the
  first batch at or after the last arrival (time = the number of online blocks, a multiple of
  the batch period here) — and the **full drain**, which keeps batching until every block is
  fully unlocked (last arrival + lifetime). Both come from one run: the events up to the
  authors' end are the same in both, so the authors' count is the grants made by then.

Everything is deterministic (no noise is drawn; the stand-in records are seeded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
    new_figure,
)
from blockbudget.experiments.plotting import Caption, count_ticks, finish, label_axes
from blockbudget.scheduling.alibaba import Arrivals, alibaba_dp
from blockbudget.scheduling.base import Scheduler
from blockbudget.scheduling.dpack import DPack
from blockbudget.scheduling.dpf import DpfN, DpfT
from blockbudget.scheduling.fcfs_queued import FcfsT
from blockbudget.scheduling.simulator import simulate
from blockbudget.scheduling.unlocking import UnlockMode

#: the authors' online settings (experiments/plot_alibaba.py)
LIFETIME = 30.0
BATCH = 10.0
RECOMPUTE = 50
BASELINE = "dpf-t"


def schedulers() -> dict[str, Callable[[], Scheduler]]:
    """The compared schedulers with the authors' online settings, baseline first."""
    return {
        "dpf-t": lambda: DpfT(n=100, lifetime=LIFETIME, tick=BATCH),
        "dpack": lambda: DPack(
            unlock=UnlockMode.T, lifetime=LIFETIME, tick=BATCH, recompute_every=RECOMPUTE
        ),
        "fcfs-t": lambda: FcfsT(lifetime=LIFETIME, tick=BATCH),
        "dpf-n": lambda: DpfN(n=100),
    }


def _ratio(value: int, base: int) -> float | None:
    """value / base, rounded; None (an empty CSV cell) when the baseline allocated nothing."""
    return round(value / base, 4) if base else None


def sweep(
    *, n_tasks: int, initial: int, online_counts: list[int], seed: int
) -> list[dict[str, Any]]:
    """One row per (online blocks, scheduler): tasks allocated at the authors' end and after a
    full drain, and each as a ratio to DPF-T's (None where DPF-T allocated nothing)."""
    rows: list[dict[str, Any]] = []
    for online in online_counts:
        w = alibaba_dp(
            n_blocks=initial + online,
            initial_blocks=initial,
            tasks_per_block=n_tasks / online,
            arrivals=Arrivals.ONLINE,
            seed=seed,
        )
        end = float(online)  # the first batch at or after the last arrival (time < online)
        counts: dict[str, tuple[int, int]] = {}
        for name, make in schedulers().items():
            result = simulate(make(), w.blocks, w.tasks, accounting=w.accounting)
            at_end = sum(1 for t in result.pool.granted_at.values() if t <= end)
            counts[name] = (at_end, result.allocated)
        base_end, base_drain = counts[BASELINE]
        for name, (at_end, drained) in counts.items():
            rows.append(
                {
                    "online_blocks": online,
                    "tasks": len(w.tasks),
                    "tasks_per_block": round(len(w.tasks) / online, 1),
                    "scheduler": name,
                    "allocated_authors_end": at_end,
                    "allocated_drain": drained,
                    "over_dpf_t_authors_end": _ratio(at_end, base_end),
                    "over_dpf_t_drain": _ratio(drained, base_drain),
                }
            )
    return rows


def _figure(ctx: ExperimentContext, rows: list[dict[str, Any]], n_tasks: int, initial: int) -> None:
    fig, _ = new_figure(width=10.0, height=4.0)
    fig.clf()
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    x_values = sorted({float(r["tasks_per_block"]) for r in rows})
    online = [int(r["online_blocks"]) for r in rows]
    for name in schedulers():
        sub = [r for r in rows if r["scheduler"] == name]
        sub.sort(key=lambda r: float(r["tasks_per_block"]))
        xs = [r["tasks_per_block"] for r in sub]
        (line,) = left.plot(xs, [r["allocated_authors_end"] for r in sub], marker="o", label=name)
        left.plot(
            xs,
            [r["allocated_drain"] for r in sub],
            marker="x",
            linestyle="--",
            color=line.get_color(),
            label=f"{name}, full drain",
        )
        if name != BASELINE:
            nan = float("nan")
            ends = [
                nan if r["over_dpf_t_authors_end"] is None else r["over_dpf_t_authors_end"]
                for r in sub
            ]
            drains = [nan if r["over_dpf_t_drain"] is None else r["over_dpf_t_drain"] for r in sub]
            right.plot(xs, ends, marker="o", color=line.get_color())
            right.plot(
                xs,
                drains,
                marker="x",
                linestyle="--",
                color=line.get_color(),
            )
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.set_title("ratio to DPF-T (solid: authors' end, dashed: drain)", fontsize=8)
    for axes in (left, right):
        axes.set_xscale("log")
        count_ticks(axes, "x", x_values)
    label_axes(left, x=("tasks per online block", "tasks"), y=("tasks allocated", "tasks"))
    label_axes(right, x=("tasks per online block", "tasks"), y=("allocated / DPF-T's", "ratio"))
    caption = Caption(
        epsilon="RDP blocks of (ε_g, δ_g) = (10, 1e-7)",
        runs=1,
        note=f"one list of {n_tasks} Alibaba-DP stand-in tasks spread over {initial} initial "
        f"and {min(online)}–{max(online)} online blocks; solid: the authors' end of run "
        "(first batch after the last arrival), dashed: full drain; T-unlocking over 30 "
        "blocks, a batch every 10; deterministic, no noise drawn",
    )
    finish(fig, caption, title="DPack against DPF-T and FCFS under contention (EuroSys'25 §6)")
    ctx.save_figure("dpack_contention.png", fig)


def run_contention(ctx: ExperimentContext) -> ExperimentResult:
    if ctx.quick:
        n_tasks, initial, online_counts = 400, 10, [10, 20]
    else:
        # the authors' grid, and 15 online blocks (400 tasks a block) beyond it
        n_tasks, initial, online_counts = 6000, 100, [15, 30, 60, 90, 120, 180]
    rows = sweep(n_tasks=n_tasks, initial=initial, online_counts=online_counts, seed=ctx.seed)
    ctx.write_csv("dpack_contention.csv", rows)
    _figure(ctx, rows, n_tasks, initial)
    notes = (
        "deterministic: no noise is drawn (DPF, DPack and FCFS decide on public demands)",
        "authors' end = tasks granted by the first batch after the last arrival; "
        "drain = after the blocks are fully unlocked",
    )
    return ExperimentResult(rows=rows, files=list(ctx.files), notes=notes)


EXPERIMENTS = [
    Experiment(
        name="dpack-contention",
        summary="DPack vs DPF-T, queued FCFS and DPF-N as tasks per online block grow "
        "(the authors' end of run and a full drain)",
        source="DPack EuroSys'25 §6 (Alibaba-DP online)",
        run=run_contention,
    )
]

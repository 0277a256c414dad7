"""``blockbudget experiment list|run``: the registered experiments."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from blockbudget.cli.common import (
    JsonOpt,
    app,
    console,
    emit_json,
    handle_errors,
)

# --- experiments ---------------------------------------------------------------------------------

experiment_app = typer.Typer(
    help="Reproduce the seeds' tables and figures (CSV + PNG under results/).",
    no_args_is_help=True,
)
app.add_typer(experiment_app, name="experiment")


@experiment_app.command("list")
def experiment_list(as_json: JsonOpt = False) -> None:
    """List the experiments with the table or figure each one reproduces."""
    from blockbudget.experiments import all_experiments

    found = sorted(all_experiments().items())
    if as_json:
        emit_json(
            {
                "experiments": [
                    {"name": n, "reproduces": e.source, "summary": e.summary, "scales": e.scales}
                    for n, e in found
                ]
            }
        )
        return
    table = Table(Column("name", no_wrap=True), "reproduces", "what")  # names are typed
    for name, experiment in found:
        table.add_row(escape(name), escape(experiment.source), escape(experiment.summary))
    console.print(table)


@experiment_app.command("run")
@handle_errors
def experiment_run(
    name: Annotated[str, typer.Argument(help="Experiment name (see `experiment list`).")],
    quick: Annotated[bool, typer.Option(help="The small form that the tests run.")] = False,
    out: Annotated[Path | None, typer.Option(help="Output folder (default results/NAME).")] = None,
    seed: Annotated[int, typer.Option(help="Base seed for the run.")] = 0,
    scale: Annotated[
        str | None,
        typer.Option(
            help="Data scale, for experiments that offer one (sage-workload: original, "
            "paper-standin = resampled rows at Sage's scale, both)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run one experiment, write its CSV/PNG files and print its table."""
    run_experiment(name, quick=quick, out=out, seed=seed, scale=scale, as_json=as_json)


def run_experiment(
    name: str,
    *,
    quick: bool,
    out: Path | None,
    seed: int,
    scale: str | None = None,
    as_json: bool = False,
) -> None:
    """Run experiment ``name`` and print its headline table and files (with ``as_json``, one
    JSON document: its rows, notes and files; its progress lines are not printed)."""
    from blockbudget.errors import InvalidRequestError
    from blockbudget.experiments import ExperimentContext, get_experiment

    experiment = get_experiment(name)
    if scale is not None and scale not in experiment.scales:
        offered = ", ".join(experiment.scales) or "none"
        raise InvalidRequestError(
            f"--scale must be one of the scales {name} offers ({offered}), got {scale!r}"
        )
    ctx = ExperimentContext(
        name=name,
        out_dir=out if out is not None else Path("results") / name,
        quick=quick,
        seed=seed,
        console=Console(quiet=True) if as_json else console,
        scale=scale,
    )
    result = experiment.run(ctx)
    files = [*ctx.files, *[f for f in result.files if f not in ctx.files]]
    if as_json:
        emit_json(
            {
                "name": name,
                "reproduces": experiment.source,
                "rows": result.rows,
                "notes": [str(n) for n in result.notes],
                "files": [str(f) for f in files],
            }
        )
        return
    if result.rows:
        table = Table(*[str(key) for key in result.rows[0]], title=f"{name} ({experiment.source})")
        for row in result.rows:
            table.add_row(*[_cell(value) for value in row.values()])
        console.print(table)
    for note in result.notes:
        console.print(note)
    for path in files:
        console.print(f"wrote {escape(str(path))}")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)

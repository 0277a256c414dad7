"""Live stream releases: ``blockbudget release run|show|recommend`` — locally or on a server.

``run`` releases every complete window of a time-blocked stream not yet released (each slot read
through its own grant on exactly its blocks and charged the window's budget; see
:mod:`blockbudget.streaming.platform_release`), ``show`` prints a release's latest answer, and
``recommend`` forecasts each mode's resolution from public parameters and warns when a
configuration can only release the uniform PDF.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from blockbudget.cli.common import (
    DEFAULT_HOME,
    ContextOpt,
    HomeOpt,
    JsonOpt,
    KeyOpt,
    ServerOpt,
    app,
    console,
    emit_json,
    handle_errors,
    local_context,
    open_platform,
    remote,
)

release_app = typer.Typer(
    help="Live user-level histogram releases of time-blocked streams (windowed or per slot).",
    no_args_is_help=True,
)
app.add_typer(release_app, name="release")

_DomainOpt = Annotated[
    str, typer.Option(help="Comma-separated declared categories (the public domain).")
]


def _print_answer(answer: dict[str, float], top: int) -> None:
    table = Table("category", "share")
    for cat, share in sorted(answer.items(), key=lambda kv: -kv[1])[:top]:
        table.add_row(escape(str(cat)), f"{share:.4f}")
    console.print(table)


@release_app.command("run")
@handle_errors
def release_run(
    stream: str,
    item_column: Annotated[str, typer.Option(help="The categorical column released.")],
    user_column: Annotated[str, typer.Option(help="The column naming the protected user.")],
    domain: _DomainOpt,
    min_users: Annotated[int, typer.Option(help="Public floor n_min of users per slot.")],
    epsilon: Annotated[float, typer.Option(help="Total user-level ε, for all slots ever.")],
    name: Annotated[str, typer.Option(help="The release's name (its state is kept).")] = "default",
    context: ContextOpt = None,
    mode: Annotated[str, typer.Option(help="windowed or per-slot.")] = "windowed",
    noise: Annotated[str, typer.Option(help="laplace or gaussian (needs --delta).")] = "laplace",
    delta: Annotated[float, typer.Option(help="δ of a Gaussian release.")] = 0.0,
    window: Annotated[int, typer.Option(help="Slots per release window.")] = 30,
    horizon: Annotated[str, typer.Option(help="accumulative or instantaneous.")] = "accumulative",
    max_windows: Annotated[int | None, typer.Option(help="Release at most N windows.")] = None,
    top: Annotated[int, typer.Option(help="Categories to print.")] = 10,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Release every complete window of STREAM not yet released."""
    if not as_json:  # a script reads the document only; `release recommend --json` warns
        _warn_before_run(
            domain=domain,
            min_users=min_users,
            epsilon=epsilon,
            window=window,
            delta=delta,
            mode=mode,
            horizon=horizon,
        )
    body: dict[str, Any] = {
        "item_column": item_column,
        "user_column": user_column,
        "domain": [d.strip() for d in domain.split(",") if d.strip()],
        "min_users": min_users,
        "epsilon": epsilon,
        "delta": delta,
        "mode": mode,
        "noise": noise,
        "window": window,
        "horizon": horizon,
        "max_windows": max_windows,
    }
    client = remote(server, api_key)
    if client is not None:
        if context:
            body["context"] = context
        out = client.call("POST", f"/v1/streams/{stream}/releases/{name}", json=body)
        slots, answer = out["slots"], out["answer"]
        spent_value, unit = str(out["spent"]), str(out["unit"])
    else:
        from blockbudget.streaming.platform_release import open_release

        platform = open_platform(home)
        try:
            ctx = local_context(platform, context)
            options = {k: v for k, v in body.items() if k != "max_windows"}
            release = open_release(platform, stream, name=name, context=ctx, **options)
            done = release.run(max_windows=max_windows)
            slots = release.log[-len(done) :] if done else []
            answer, spent_value, unit = release.answer, str(release.spent), release.config.unit
        finally:
            platform.close()
    released = sum(1 for s in slots if s["released"])
    if as_json:
        emit_json(
            {
                "stream": stream,
                "name": name,
                "slots": slots,
                "released_windows": released,
                "spent": _exact(spent_value),
                "unit": str(unit),
                "epsilon": _exact(repr(epsilon)),
                "answer": answer,
            }
        )
        return
    console.print(
        f"[bold]{escape(stream)}[/] release {escape(repr(name))}: {len(slots)} slot(s) answered, "
        f"{released} window(s) released; spent {spent_value} {escape(str(unit))} of {epsilon}"
    )
    _print_answer(answer, top)


def _exact(text: str) -> str:
    """A budget's text as its exact canonical decimal string."""
    from decimal import Decimal

    from blockbudget.budget import canonical_decimal

    return canonical_decimal(Decimal(text))


def _warn_before_run(
    *,
    domain: str,
    min_users: int,
    epsilon: float,
    window: int,
    delta: float,
    mode: str,
    horizon: str,
) -> None:
    """Print the recommender's warnings for the mode and answer a run is about to publish."""
    from blockbudget.errors import InvalidRequestError
    from blockbudget.streaming.config import Horizon
    from blockbudget.streaming.recommend import recommend

    try:
        r = recommend(
            domain_size=max(1, len([d for d in domain.split(",") if d.strip()])),
            min_users=min_users,
            epsilon=epsilon,
            horizon=365,
            window=window,
            delta=delta,
            answer=Horizon(horizon),
        )
    except (InvalidRequestError, ValueError):
        return  # the run itself refuses bad parameters, with its own message
    for w in r.warnings:
        if w.startswith(f"{mode}:"):
            console.print(f"[yellow]warning:[/] {escape(w)}")


@release_app.command("show")
@handle_errors
def release_show(
    stream: str,
    name: Annotated[str, typer.Option(help="The release's name.")] = "default",
    top: Annotated[int, typer.Option(help="Categories to print.")] = 10,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Print a release's latest public answer (reads no data, spends nothing)."""
    client = remote(server, api_key)
    if client is not None:
        out = client.call("GET", f"/v1/streams/{stream}/releases/{name}")
        answer, log = out["answer"], out["log"]
    else:
        import json

        path = Path(home) / "releases" / stream / f"{name}.json"
        if not path.exists():
            from blockbudget.errors import InvalidRequestError

            raise InvalidRequestError(f"no release {name!r} of stream {stream!r} in {home}")
        data = json.loads(path.read_text())
        answer = dict(zip(data["fingerprint"]["source"]["domain"], data["answer"], strict=True))
        log = data["log"]
    last = log[-1]["key"] if log else "none"
    if as_json:
        emit_json({"stream": stream, "name": name, "answer": answer, "log": log})
        return
    console.print(
        f"[bold]{escape(stream)}[/] release {escape(repr(name))}: {len(log)} slot(s), "
        f"latest {escape(str(last))}"
    )
    _print_answer(answer, top)


@release_app.command("recommend")
@handle_errors
def release_recommend(
    domain_size: Annotated[int, typer.Option(help="k, the number of categories.")],
    min_users: Annotated[int, typer.Option(help="Public floor n_min of users per slot.")],
    epsilon: Annotated[float, typer.Option(help="Total user-level ε.")],
    horizon: Annotated[int | None, typer.Option(help="Expected slots (none: no end).")] = None,
    window: Annotated[int, typer.Option(help="Windowed mode's window length.")] = 30,
    delta: Annotated[float, typer.Option(help="> 0 to forecast Gaussian noise.")] = 0.0,
    answer: Annotated[
        str, typer.Option(help="The published answer: accumulative or instantaneous.")
    ] = "accumulative",
    as_json: JsonOpt = False,
) -> None:
    """Forecast each mode's resolution from public parameters (reads nothing)."""
    from blockbudget.errors import InvalidRequestError
    from blockbudget.streaming.config import Horizon
    from blockbudget.streaming.recommend import recommend

    try:
        kind = Horizon(answer)
    except ValueError:
        raise InvalidRequestError(
            f"answer must be accumulative or instantaneous, got {answer!r}"
        ) from None
    r = recommend(
        answer=kind,
        domain_size=domain_size,
        min_users=min_users,
        epsilon=epsilon,
        horizon=horizon,
        window=window,
        delta=delta,
    )
    if as_json:
        emit_json(
            {
                "forecasts": [
                    {
                        "mode": f.mode,
                        "accumulative_noise": f.accumulative_noise,
                        "instantaneous_noise": f.instantaneous_noise,
                        "resolution": f.resolution,
                        "note": f.note,
                    }
                    for f in r.forecasts
                ],
                "best": r.best,
                "horizon": r.horizon,
                "warnings": list(r.warnings),
            }
        )
        return
    table = Table("mode", "noise/bin (accumulative)", "noise/bin (latest)", "resolution", "note")
    for f in r.forecasts:
        table.add_row(
            f.mode,
            f"{f.accumulative_noise:.3g}",
            f"{f.instantaneous_noise:.3g}",
            f"{f.resolution:.3g}",
            escape(f.note),
        )
    console.print(table)
    console.print(f"recommended: [bold]{r.best}[/] (forecast over {r.horizon} slots)")
    for w in r.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")

"""Streams, contexts, ingest and the blocks table — on a local home or against a server."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.cli.common import (
    DEFAULT_HOME,
    HomeOpt,
    KeyOpt,
    ServerOpt,
    app,
    bar,
    console,
    context_app,
    handle_errors,
    open_platform,
    parse_window,
    remote,
    stream_app,
)
from blockbudget.lowbudget import RETIRING_BELOW
from blockbudget.store import Blocking, LatePolicy, Unit

if TYPE_CHECKING:
    from blockbudget.platform import Platform

# --- streams -------------------------------------------------------------------------------------


@stream_app.command("create")
@handle_errors
def stream_create(
    name: str,
    epsilon: Annotated[float, typer.Option(help="Global ε_g per block.")],
    delta: Annotated[float, typer.Option(help="Global δ_g per block.")] = 1e-6,
    accounting: Annotated[Accounting, typer.Option(help="Composition rule.")] = Accounting.BASIC,
    by: Annotated[Unit, typer.Option(help="Unit of protection.")] = Unit.TIME,
    column: Annotated[str, typer.Option(help="Column that decides the block.")] = "time",
    window: Annotated[str, typer.Option(help="Time window per block (by time).")] = "1d",
    ids_per_block: Annotated[int, typer.Option(help="User ids per block (by user).")] = 1000,
    rows_per_user: Annotated[
        int, typer.Option(help="Contribution bound k: rows per user in a grant (by user).")
    ] = 1,
    late_policy: Annotated[
        LatePolicy | None,
        typer.Option(help="Late records (default: new_block; drop for user streams)."),
    ] = None,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Register a stream with its global policy and unit of protection."""
    client = remote(server, api_key)
    if client is not None:
        if by is Unit.TIME:
            parse_window(window)
        out = client.create_stream(
            {
                "name": name,
                "epsilon": epsilon,
                "delta": delta,
                "accounting": accounting.value,
                "by": by.value,
                "column": column,
                "window_seconds": int(parse_window(window).total_seconds()),
                "ids_per_block": ids_per_block,
                "rows_per_user": rows_per_user,
                "late_policy": late_policy.value if late_policy is not None else None,
            }
        )
        policy = out["policy"]
        console.print(
            f"created stream [bold]{out['name']}[/] with policy "
            f"(ε={policy['epsilon']}, δ={policy['delta']}) on {server}"
        )
        return
    if by is Unit.TIME:
        blocking = Blocking(unit=by, column=column, window=parse_window(window))
    elif by is Unit.USER:
        blocking = Blocking(
            unit=by, column=column, ids_per_block=ids_per_block, rows_per_user=rows_per_user
        )
    else:
        blocking = Blocking(unit=by, column=column)
    platform = open_platform(home)
    spec = platform.create_stream(
        name,
        policy=Budget(epsilon=epsilon, delta=delta),
        blocking=blocking,
        accounting=accounting,
        late_policy=late_policy
        if late_policy is not None
        else (LatePolicy.DROP if by is Unit.USER else LatePolicy.NEW_BLOCK),
    )
    console.print(f"created stream [bold]{spec.name}[/] with policy {spec.policy}")


@stream_app.command("list")
@handle_errors
def stream_list(
    home: HomeOpt = DEFAULT_HOME, server: ServerOpt = None, api_key: KeyOpt = None
) -> None:
    """List the streams."""
    table = Table("stream", "policy", "accounting", "blocking", "blocks")
    client = remote(server, api_key)
    if client is not None:
        for st in client.streams():
            pol = st["policy"]
            table.add_row(
                st["name"],
                f"(ε={pol['epsilon']}, δ={pol['delta']})",
                st["accounting"],
                f"{st['unit']}({st['column']})",
                str(st["blocks"]),
            )
        console.print(table)
        return
    platform = open_platform(home)
    for spec in platform.streams():
        table.add_row(
            spec.name,
            str(spec.policy),
            spec.accounting.value,
            f"{spec.blocking.unit.value}({spec.blocking.column})",
            str(len(platform.store.blocks(spec.name))),
        )
    console.print(table)


@stream_app.command("max-id")
@handle_errors
def stream_max_id(
    stream: Annotated[str, typer.Argument(help="A user-blocked stream.")],
    epsilon: Annotated[
        float, typer.Option(help="ε of the Laplace count (charged to blocks read).")
    ],
    context: Annotated[str, typer.Option(help="Budget context the charge lands in.")],
    beta: Annotated[
        float, typer.Option(help="Offer a block only once it is full with probability ≥ 1 − β.")
    ] = 0.05,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Release a DP maximum user id (admins; Sage §4.4): a Laplace count of the ids in use,
    charged to the blocks it reads; afterwards only blocks at or below its safe maximum can be
    selected."""
    client = remote(server, api_key)
    if client is not None:
        body = {"context": context, "epsilon": epsilon, "beta": beta}
        out = client.call("POST", f"/v1/streams/{stream}/max-id", json=body)
    else:
        from dataclasses import asdict

        from blockbudget.userids import release_max_id

        release = release_max_id(
            open_platform(home), stream, context=context, epsilon=epsilon, beta=beta
        )
        out = {k: str(v) if k == "epsilon" else v for k, v in asdict(release).items()}
    console.print(
        f"stream [bold]{stream}[/]: released maximum id {out['released_max']:.1f}; blocks up "
        f"to id {out['safe_max']} can be selected (secure noise: {out['secure_noise']})"
    )


# --- contexts ------------------------------------------------------------------------------------


@context_app.command("add")
@handle_errors
def context_add(
    name: str,
    description: Annotated[str, typer.Option(help="Who the context is for.")] = "",
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Register a context (administrators only: each context gets a full budget per block)."""
    client = remote(server, api_key)
    if client is not None:
        client.add_context(name, description)
    else:
        open_platform(home).add_context(name, description=description)
    console.print(f"context [bold]{name}[/] registered")


@context_app.command("close")
@handle_errors
def context_close(
    name: str,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Close a context for good (administrators only; audited): it never spends again, no
    longer keeps exhausted blocks from retiring, and counts in the coalition bound only if it
    ever charged. E.g. the `default` context that older ledgers registered by themselves."""
    client = remote(server, api_key)
    if client is not None:
        client.close_context(name)
    else:
        open_platform(home).close_context(name)
    console.print(f"context [bold]{name}[/] closed")


@context_app.command("list")
@handle_errors
def context_list(
    home: HomeOpt = DEFAULT_HOME, server: ServerOpt = None, api_key: KeyOpt = None
) -> None:
    """List the registered contexts (on a server: those the key's principal may use)."""
    table = Table("context", "description", "registered", "closed")
    client = remote(server, api_key)
    if client is not None:
        for c in client.contexts():
            closed = c.get("closed_at")
            table.add_row(
                c["name"],
                c["description"],
                str(c["created_at"]),
                "" if closed is None else str(closed),
            )
        console.print(table)
        return
    platform = open_platform(home)
    for info in platform.ledger.context_infos():
        closed = "" if info.closed_at is None else str(info.closed_at)
        table.add_row(info.name, info.description, str(info.created_at), closed)
    console.print(table)


# --- ingest and blocks ---------------------------------------------------------------------------


@app.command()
@handle_errors
def ingest(
    stream: str,
    path: Path,
    format: Annotated[str | None, typer.Option(help="csv or parquet (default: suffix).")] = None,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Ingest a CSV or Parquet file into a stream's blocks (all rows or none)."""
    client = remote(server, api_key)
    if client is not None:
        upload = path
        kind = format or path.suffix.lstrip(".").lower()
        if kind == "parquet":  # the server takes CSV or JSON records
            import tempfile

            import pandas as pd

            upload = Path(tempfile.mkdtemp()) / "upload.csv"
            pd.read_parquet(path).to_csv(upload, index=False)
        out = client.ingest_csv(stream, upload)
        rows, new, appended, late = (
            out["rows"],
            len(out["new_blocks"]),
            len(out["appended_blocks"]),
            out["late_rows"],
        )
    else:
        report = open_platform(home).ingest(stream, path, format=format)
        rows, new, appended, late = (
            report.rows,
            len(report.new_blocks),
            len(report.appended_blocks),
            report.late_rows,
        )
    console.print(
        f"ingested {rows} rows: {new} new block(s), {appended} appended, {late} late row(s)"
    )


@app.command()
@handle_errors
def blocks(
    stream: str,
    context: Annotated[
        list[str] | None, typer.Option(help="Context(s) to show (default: every open one).")
    ] = None,
    last: Annotated[int, typer.Option(help="Show only the newest N blocks (0: all).")] = 0,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Show each block's remaining budget, per context, as a bar."""
    client = remote(server, api_key)
    if client is not None:
        render_remote_blocks(client.blocks(stream, context), stream, last=last)
        return
    platform = open_platform(home)
    render_blocks(platform, stream, contexts=context, last=last)


def render_blocks(
    platform: Platform, stream: str, *, contexts: list[str] | None = None, last: int = 0
) -> None:
    """Print the blocks table (shared with the demo)."""
    views = platform.blocks(stream, contexts=contexts)
    if last > 0:
        views = views[-last:]
    ctxs = list(contexts) if contexts else platform.ledger.contexts()
    table = Table(title=f"blocks of {stream} — remaining budget per context")
    table.add_column("block")
    table.add_column("rows", justify="right")
    table.add_column("state")
    for c in ctxs:
        table.add_column(c)
    for v in views:
        state = "[red]retired[/]" if v.retired else ("sealed" if v.sealed else "open")
        state += ", [yellow]retiring[/]" if v.retiring else ""
        cells = [bar(v.remaining_fraction.get(c, 1.0)) for c in ctxs]
        table.add_row(v.block_id, f"{v.rows:,}", state, *cells)
    console.print(table)
    console.print(retiring_line(sum(v.retiring for v in views)))
    coalition = platform.coalition_contexts()
    if len(coalition) > 1:
        console.print(
            f"[dim]{len(coalition)} contexts count ({', '.join(coalition)}): a coalition of all "
            f"of them could learn up to {len(coalition)} × ε_g = "
            f"{platform.coalition_epsilon(stream):g} about any one block. Row counts are exact: "
            "show them to data owners only.[/]"
        )


def render_remote_blocks(views: list[dict[str, Any]], stream: str, *, last: int = 0) -> None:
    """Print the blocks table from a server's answer (row counts only where the server sent
    them: to the stream's owners and admins)."""
    if last > 0:
        views = views[-last:]
    ctxs = sorted({c for v in views for c in v["remaining_fraction"]})
    with_rows = any(v.get("rows") is not None for v in views)
    table = Table(title=f"blocks of {stream} — remaining budget per context")
    table.add_column("block")
    if with_rows:
        table.add_column("rows", justify="right")
    table.add_column("state")
    for c in ctxs:
        table.add_column(c)
    for v in views:
        state = "[red]retired[/]" if v["retired"] else ("sealed" if v["sealed"] else "open")
        state += ", [yellow]retiring[/]" if v.get("retiring") else ""
        cells = [bar(v["remaining_fraction"].get(c, 1.0)) for c in ctxs]
        rows = [f"{v['rows']:,}"] if with_rows else []
        table.add_row(v["block_id"], *rows, state, *cells)
    console.print(table)
    console.print(retiring_line(sum(bool(v.get("retiring")) for v in views)))


def retiring_line(count: int) -> str:
    """The line under a blocks table: how many blocks are retiring (the definition every view
    shares: :mod:`blockbudget.lowbudget`)."""
    return f"{count} retiring block(s): live, under {RETIRING_BELOW:.0%} left in every open context"

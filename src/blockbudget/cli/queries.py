"""DP queries and the audit log — on a local home or against a server."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from blockbudget.cli.common import (
    DEFAULT_HOME,
    ContextOpt,
    HomeOpt,
    KeyOpt,
    ServerOpt,
    audit_app,
    console,
    handle_errors,
    local_context,
    open_platform,
    query_app,
    remote,
)

if TYPE_CHECKING:
    from blockbudget.service.client import ServiceClient

# --- queries -------------------------------------------------------------------------------------


def _run_remote(kind: str, stream: str, body: dict[str, Any], client: ServiceClient) -> None:
    out = client.query(stream, kind, body)
    cost = out["cost"]
    console.print(
        f"[bold]{kind}[/] over {len(out['blocks'])} block(s) in context {out['context']!r}:"
    )
    console.print(f"  DP answer: {out['value']}")
    console.print(f"  cost: (ε={cost['epsilon']}, δ={cost['delta']})   noise: {out['noise']}")


def _run_query(
    kind: str,
    stream: str,
    *,
    home: Path,
    context: str | None,
    epsilon: float,
    last: int,
    block: list[str] | None,
    column: str | None = None,
    lower: float | None = None,
    upper: float | None = None,
    categories: str | None = None,
    client: ServiceClient | None = None,
) -> None:
    cats = [c.strip() for c in categories.split(",") if c.strip()] if categories else None
    if client is not None:
        body: dict[str, Any] = {"epsilon": epsilon}
        if context:
            body["context"] = context  # left out: the principal's only bound context
        if block:
            body["blocks"] = list(block)
        else:
            body["last"] = last
        for name, value in (("column", column), ("lower", lower), ("upper", upper)):
            if value is not None:
                body[name] = value
        if cats:
            body["categories"] = cats
        _run_remote(kind, stream, body, client)
        return
    from blockbudget.platform import Last
    from blockbudget.query import QueryKind, QuerySpec, run_query

    spec = QuerySpec(
        kind=QueryKind(kind),
        epsilon=epsilon,
        column=column,
        lower=lower,
        upper=upper,
        categories=tuple(cats) if cats else None,
    )
    platform = open_platform(home)
    try:
        ctx = local_context(platform, context)
        selection: list[str] | Last = list(block) if block else Last(last)
        # Checked (column, type, bounds) before anything is reserved or sealed.
        answer = run_query(platform, stream, spec, blocks=selection, context=ctx)
    finally:
        platform.close()
    result = answer.result
    console.print(f"[bold]{kind}[/] over {len(answer.blocks)} block(s) in context {ctx!r}:")
    console.print(f"  DP answer: {result.value}")
    console.print(f"  cost: {result.cost}   noise: {result.noise_summary}")


def _query_command(kind: str) -> None:
    def command(
        stream: str,
        epsilon: Annotated[float, typer.Option(help="ε to spend on every block read.")],
        context: ContextOpt = None,
        last: Annotated[int, typer.Option(help="Use the newest N affordable blocks.")] = 7,
        block: Annotated[list[str] | None, typer.Option(help="Explicit block ids/keys.")] = None,
        column: Annotated[str | None, typer.Option(help="Value column.")] = None,
        lower: Annotated[float | None, typer.Option(help="Clip values below.")] = None,
        upper: Annotated[float | None, typer.Option(help="Clip values above.")] = None,
        categories: Annotated[
            str | None, typer.Option(help="Comma-separated public bins (histogram).")
        ] = None,
        home: HomeOpt = DEFAULT_HOME,
        server: ServerOpt = None,
        api_key: KeyOpt = None,
    ) -> None:
        _run_query(
            kind,
            stream,
            home=home,
            context=context,
            epsilon=epsilon,
            last=last,
            block=block,
            column=column,
            lower=lower,
            upper=upper,
            categories=categories,
            client=remote(server, api_key),
        )

    command.__doc__ = f"DP {kind} over a window of blocks."
    query_app.command(kind)(handle_errors(command))


for _kind in ("count", "sum", "mean", "histogram"):
    _query_command(_kind)


# --- audit ---------------------------------------------------------------------------------------


@audit_app.command("verify")
@handle_errors
def audit_verify(
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
    full: Annotated[
        bool, typer.Option("--full", help="replay the whole log, not only after the checkpoint")
    ] = False,
) -> None:
    """Replay the audit log (after the last verified checkpoint, or all of it with --full);
    check the ledger and every filter."""
    client = remote(server, api_key)
    report: Any
    if client is not None:
        from types import SimpleNamespace

        report = SimpleNamespace(**client.verify(full=full))
    else:
        platform = open_platform(home)
        try:
            report = platform.verify(full=full)
        finally:
            platform.close()
    print_verify(report)
    if not report.ok:
        raise typer.Exit(code=1)


def print_verify(report: Any) -> None:
    """Print a verify report (shared with the demo)."""
    if report.ok:
        since = getattr(report, "checkpoint_seq", 0)
        how = (
            f"{report.events} events verified ({report.replayed} replayed after the checkpoint "
            f"at seq {since})"
            if since
            else f"{report.events} events replayed"
        )
        console.print(
            f"[bold green]audit verify: OK[/] — {how} over "
            f"{report.blocks} blocks and {report.contexts} contexts; ledger matches the log and "
            "every filter accepts every block's history"
        )
    else:
        console.print(f"[bold red]audit verify: FAILED[/] — {len(report.problems)} problem(s)")
        for p in report.problems[:20]:
            console.print(f"  - {p}")


@audit_app.command("log")
@handle_errors
def audit_log(
    limit: Annotated[int, typer.Option(help="Newest N events.")] = 20,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Show the newest audit events."""
    table = Table("seq", "kind", "context", "request", "payload")
    client = remote(server, api_key)
    if client is not None:
        rows: list[tuple[Any, ...]] = []
        after = 0
        while True:  # page through the log, keeping the newest `limit`
            page = client.events(after_seq=after, limit=1000)
            rows.extend(
                (e["seq"], e["kind"], e["context"], e["request_id"], e["payload"]) for e in page
            )
            rows = rows[-limit:]
            if len(page) < 1000:
                break
            after = page[-1]["seq"]
    else:
        platform = open_platform(home)
        try:
            rows = [
                (e.seq, e.kind.value, e.context, e.request_id, e.payload)
                for e in platform.ledger.events()[-limit:]
            ]
        finally:
            platform.close()
    for seq, kind, context, request_id, payload in rows:
        table.add_row(str(seq), str(kind), context or "", request_id, str(payload)[:80])
    console.print(table)

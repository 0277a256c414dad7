"""DP queries and the audit log — on a local home or against a server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from blockbudget.budget import Budget
from blockbudget.cli.common import (
    DEFAULT_HOME,
    HomeOpt,
    KeyOpt,
    ServerOpt,
    audit_app,
    console,
    handle_errors,
    query_app,
    remote,
)
from blockbudget.grant import group_cost
from blockbudget.platform import Last, Platform
from blockbudget.service.client import ServiceClient

# --- queries -------------------------------------------------------------------------------------


def _run_query(
    kind: str,
    stream: str,
    *,
    home: Path,
    context: str,
    epsilon: float,
    last: int,
    block: list[str] | None,
    column: str | None = None,
    lower: float | None = None,
    upper: float | None = None,
    categories: str | None = None,
    client: ServiceClient | None = None,
) -> None:
    if client is not None:
        body: dict[str, Any] = {"epsilon": epsilon, "context": context}
        if block:
            body["blocks"] = list(block)
        else:
            body["last"] = last
        if column is not None:
            body["column"] = column
        if lower is not None:
            body["lower"] = lower
        if upper is not None:
            body["upper"] = upper
        if categories:
            body["categories"] = [c.strip() for c in categories.split(",") if c.strip()]
        out = client.query(stream, kind, body)
        cost = out["cost"]
        console.print(f"[bold]{kind}[/] over {len(out['blocks'])} block(s) in context {context!r}:")
        console.print(f"  DP answer: {out['value']}")
        console.print(f"  cost: (ε={cost['epsilon']}, δ={cost['delta']})   noise: {out['noise']}")
        return
    from blockbudget.mechanisms import DPResult
    from blockbudget.mechanisms import statistics as stats

    platform = Platform(home)
    cost = Budget(epsilon=epsilon)
    # On user streams a draw of ε is charged for a group of rows_per_user rows.
    reserve = group_cost(cost, platform.stream(stream).blocking.rows_per_user or 1)
    selection: list[str] | Last = list(block) if block else Last(last)
    result: DPResult[Any]
    with platform.request(stream, blocks=selection, budget=reserve, context=context) as grant:
        frame = grant.frame()
        if kind == "count":
            result = stats.dp_count(grant, frame, epsilon=epsilon)
        else:
            if column is None or column not in frame.columns:
                raise typer.BadParameter(f"--column must name a column of {stream}: {column!r}")
            if kind == "histogram":
                if not categories:
                    raise typer.BadParameter(
                        "--categories is required: a DP histogram's bins must be public"
                    )
                cats = [c.strip() for c in categories.split(",") if c.strip()]
                result = stats.dp_histogram(
                    grant, frame[column].astype(str).to_numpy(), categories=cats, epsilon=epsilon
                )
            else:
                if lower is None or upper is None:
                    raise typer.BadParameter("--lower and --upper clip the values; both needed")
                values = frame[column].dropna().to_numpy(dtype=float)
                fn = {"sum": stats.dp_sum, "mean": stats.dp_mean}[kind]
                result = fn(grant, values, epsilon=epsilon, lower=lower, upper=upper)
        blocks_used = grant.blocks
    console.print(f"[bold]{kind}[/] over {len(blocks_used)} block(s) in context {context!r}:")
    console.print(f"  DP answer: {result.value}")
    console.print(f"  cost: {result.cost}   noise: {result.noise_summary}")


def _query_command(kind: str) -> None:
    def command(
        stream: str,
        epsilon: Annotated[float, typer.Option(help="ε to spend on every block read.")],
        context: Annotated[str, typer.Option(help="Context that pays.")] = "default",
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
    home: HomeOpt = DEFAULT_HOME, server: ServerOpt = None, api_key: KeyOpt = None
) -> None:
    """Replay the audit log; check the ledger and every filter."""
    client = remote(server, api_key)
    report: Any
    if client is not None:
        from types import SimpleNamespace

        report = SimpleNamespace(**client.verify())
    else:
        report = Platform(home).verify()
    print_verify(report)
    if not report.ok:
        raise typer.Exit(code=1)


def print_verify(report: Any) -> None:
    """Print a verify report (shared with the demo)."""
    if report.ok:
        console.print(
            f"[bold green]audit verify: OK[/] — {report.events} events replayed over "
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
        rows = [
            (e.seq, e.kind.value, e.context, e.request_id, e.payload)
            for e in Platform(home).ledger.events()[-limit:]
        ]
    for seq, kind, context, request_id, payload in rows:
        table.add_row(str(seq), str(kind), context or "", request_id, str(payload)[:80])
    console.print(table)

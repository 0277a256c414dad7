"""The ``blockbudget`` command line (Typer + rich).

Every command works on a platform home folder (``--home``, or ``$BLOCKBUDGET_HOME``, default
``./.blockbudget``) — or, given ``--server URL --api-key KEY`` (or ``$BLOCKBUDGET_SERVER`` and
``$BLOCKBUDGET_API_KEY``), against a running ``blockbudget serve`` as that key's principal.
Errors from the platform or the server are printed as one clear line with exit code 2; nothing
is charged by a refused command.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import BlockBudgetError
from blockbudget.grant import group_cost
from blockbudget.platform import Last, Platform
from blockbudget.service.client import ServiceClient
from blockbudget.store import Blocking, LatePolicy, Unit

app = typer.Typer(
    name="blockbudget",
    help="Differential-privacy budgets for growing datasets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
stream_app = typer.Typer(help="Create and list streams.", no_args_is_help=True)
query_app = typer.Typer(help="Run DP queries over a window of blocks.", no_args_is_help=True)
audit_app = typer.Typer(help="Inspect and verify the audit log.", no_args_is_help=True)
context_app = typer.Typer(
    help="Register and list contexts (one per-block budget per group of non-colluding users).",
    no_args_is_help=True,
)
app.add_typer(stream_app, name="stream")
app.add_typer(context_app, name="context")
app.add_typer(query_app, name="query")
app.add_typer(audit_app, name="audit")

console = Console()
F = TypeVar("F", bound=Callable[..., Any])

HomeOpt = Annotated[
    Path,
    typer.Option(
        "--home",
        envvar="BLOCKBUDGET_HOME",
        help="Platform folder (database and block files).",
    ),
]
DEFAULT_HOME = Path(os.environ.get("BLOCKBUDGET_HOME", ".blockbudget"))
ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", envvar="BLOCKBUDGET_SERVER", help="URL of a running `blockbudget serve`."
    ),
]
KeyOpt = Annotated[
    str | None,
    typer.Option("--api-key", envvar="BLOCKBUDGET_API_KEY", help="API key for --server."),
]
principal_app = typer.Typer(
    help="Principals, API keys and stream access of a service.", no_args_is_help=True
)
app.add_typer(principal_app, name="principal")


def remote(server: str | None, api_key: str | None) -> ServiceClient | None:
    """A client of ``server`` when one is given (then an API key is required), else None."""
    if not server:
        return None
    if not api_key:
        raise typer.BadParameter("--server needs --api-key (or $BLOCKBUDGET_API_KEY)")
    return ServiceClient(server, api_key)


def handle_errors(fn: F) -> F:
    """Turn platform errors into one red line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BlockBudgetError as exc:
            console.print(f"[bold red]error:[/] {type(exc).__name__}: {exc}")
            raise typer.Exit(code=2) from exc

    return wrapper  # type: ignore[return-value]


def parse_window(text: str) -> timedelta:
    """``1d``, ``6h``, ``15m`` or ``30s`` as a timedelta."""
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    text = text.strip().lower()
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit() or int(text[:-1]) <= 0:
        raise typer.BadParameter(f"window must look like 1d, 6h, 15m or 30s; got {text!r}")
    return timedelta(**{units[text[-1]]: int(text[:-1])})


def bar(fraction: float, width: int = 10) -> str:
    """A text bar for a remaining fraction, colored by how much is left."""
    fraction = max(0.0, min(1.0, fraction))
    full = round(fraction * width)
    color = "green" if fraction > 0.5 else "yellow" if fraction > 0.15 else "red"
    return f"[{color}]{'█' * full}[/][dim]{'░' * (width - full)}[/] {fraction:5.1%}"


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
    platform = Platform(home)
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
    platform = Platform(home)
    for spec in platform.streams():
        table.add_row(
            spec.name,
            str(spec.policy),
            spec.accounting.value,
            f"{spec.blocking.unit.value}({spec.blocking.column})",
            str(len(platform.store.blocks(spec.name))),
        )
    console.print(table)


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
        Platform(home).add_context(name, description=description)
    console.print(f"context [bold]{name}[/] registered")


@context_app.command("list")
@handle_errors
def context_list(
    home: HomeOpt = DEFAULT_HOME, server: ServerOpt = None, api_key: KeyOpt = None
) -> None:
    """List the registered contexts (on a server: those the key's principal may use)."""
    table = Table("context", "description", "registered")
    client = remote(server, api_key)
    if client is not None:
        for c in client.contexts():
            table.add_row(c["name"], c["description"], str(c["created_at"]))
        console.print(table)
        return
    platform = Platform(home)
    for info in platform.ledger.context_infos():
        table.add_row(info.name, info.description, str(info.created_at))
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
        report = Platform(home).ingest(stream, path, format=format)
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
        list[str] | None, typer.Option(help="Context(s) to show (default: all known).")
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
    platform = Platform(home)
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
        cells = [bar(v.remaining_fraction.get(c, 1.0)) for c in ctxs]
        table.add_row(v.block_id, f"{v.rows:,}", state, *cells)
    console.print(table)
    registered = platform.contexts()
    if len(registered) > 1:
        coalition = len(registered) * float(platform.stream(stream).policy.epsilon)
        console.print(
            f"[dim]{len(registered)} contexts are registered: a coalition of all of them could "
            f"learn up to {len(registered)} × ε_g = {coalition:g}"
            " about any one block. Row counts are exact: show them to data owners only.[/]"
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
        cells = [bar(v["remaining_fraction"].get(c, 1.0)) for c in ctxs]
        rows = [f"{v['rows']:,}"] if with_rows else []
        table.add_row(v["block_id"], *rows, state, *cells)
    console.print(table)


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


# --- service ------------------------------------------------------------------------------------


@app.command()
@handle_errors
def serve(
    home: HomeOpt = DEFAULT_HOME,
    database: Annotated[
        str | None,
        typer.Option(
            envvar="BLOCKBUDGET_DATABASE",
            help="SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db, shared by several "
            "server processes (default: the SQLite file in --home).",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Server processes.")] = 1,
    group_commit: Annotated[
        bool, typer.Option(help="Batch concurrent ledger writes into one durable commit.")
    ] = True,
) -> None:
    """Serve the platform over HTTP (API, OpenAPI schema at /docs, dashboard at /dashboard).

    On first start (no principal yet) an admin principal is created and its key printed once.
    """
    from blockbudget.service.server import bootstrap_admin
    from blockbudget.service.server import serve as run_server

    key = bootstrap_admin(home, database)
    if key is not None:
        console.print(
            f"created principal [bold]admin[/]; its API key (shown once): {key}", soft_wrap=True
        )
    console.print(
        f"serving on http://{host}:{port} ({workers} process(es)); dashboard at /dashboard"
    )
    run_server(
        home=home,
        database=database,
        host=host,
        port=port,
        workers=workers,
        group_commit=group_commit,
    )


@principal_app.command("add")
@handle_errors
def principal_add(
    name: str,
    role: Annotated[str, typer.Option(help="admin, owner or analyst.")] = "analyst",
    context: Annotated[
        list[str] | None, typer.Option(help="Context(s) the principal may spend in.")
    ] = None,
    home: HomeOpt = DEFAULT_HOME,
    database: Annotated[str | None, typer.Option(envvar="BLOCKBUDGET_DATABASE")] = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Create a principal and print its first API key (shown once, stored hashed)."""
    from blockbudget.service.auth import KeyStore, Role

    contexts = list(context or [])
    client = remote(server, api_key)
    if client is not None:
        key = client.add_principal(name, role, contexts)["api_key"]
    else:
        try:
            role_value = Role(role)
        except ValueError:
            raise typer.BadParameter(
                f"role must be admin, owner or analyst, not {role!r}"
            ) from None
        platform = Platform(home, database_url=database)
        unknown = sorted(set(contexts) - set(platform.contexts()))
        if unknown:
            raise typer.BadParameter(f"unknown context(s) {unknown}: register them first")
        keys = KeyStore(platform.ledger.engine)
        keys.add_principal(name, role_value, contexts=tuple(contexts))
        key = keys.create_key(name)
    console.print(
        f"principal [bold]{name}[/] ({role}); API key (shown once): {key}", soft_wrap=True
    )


@principal_app.command("grant")
@handle_errors
def principal_grant(
    name: str,
    stream: str,
    permission: Annotated[str, typer.Option(help="read or own.")] = "read",
    home: HomeOpt = DEFAULT_HOME,
    database: Annotated[str | None, typer.Option(envvar="BLOCKBUDGET_DATABASE")] = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Give a principal read (or own) access to a stream."""
    from blockbudget.service.auth import KeyStore, Permission

    client = remote(server, api_key)
    if client is not None:
        client.grant(name, stream, permission)
    else:
        try:
            perm = Permission(permission)
        except ValueError:
            raise typer.BadParameter(
                f"permission must be read or own, not {permission!r}"
            ) from None
        platform = Platform(home, database_url=database)
        platform.stream(stream)
        KeyStore(platform.ledger.engine).grant(name, stream, perm)
    console.print(f"principal [bold]{name}[/] may now {permission} stream {stream}")


# --- demo ----------------------------------------------------------------------------------------


@app.command()
@handle_errors
def demo(
    days: Annotated[int, typer.Option(help="How many days of 2013 to stream.")] = 365,
    home: Annotated[Path, typer.Option(help="Demo folder (recreated).")] = Path("results/demo"),
) -> None:
    """Stream the 2013 NYC flights day by day and run DP queries from two contexts."""
    from blockbudget.demo import run_demo

    run_demo(home=home, days=days, console=console)


# --- experiments ---------------------------------------------------------------------------------

experiment_app = typer.Typer(
    help="Reproduce the seeds' tables and figures (CSV + PNG under results/).",
    no_args_is_help=True,
)
app.add_typer(experiment_app, name="experiment")


@experiment_app.command("list")
def experiment_list() -> None:
    """List the experiments with the table or figure each one reproduces."""
    from blockbudget.experiments import all_experiments

    table = Table("name", "reproduces", "what")
    for name, experiment in sorted(all_experiments().items()):
        table.add_row(name, experiment.source, experiment.summary)
    console.print(table)


@experiment_app.command("run")
@handle_errors
def experiment_run(
    name: Annotated[str, typer.Argument(help="Experiment name (see `experiment list`).")],
    quick: Annotated[bool, typer.Option(help="The small form that the tests run.")] = False,
    out: Annotated[Path | None, typer.Option(help="Output folder (default results/NAME).")] = None,
    seed: Annotated[int, typer.Option(help="Base seed for the run.")] = 0,
) -> None:
    """Run one experiment, write its CSV/PNG files and print its table."""
    run_experiment(name, quick=quick, out=out, seed=seed)


def run_experiment(name: str, *, quick: bool, out: Path | None, seed: int) -> None:
    """Run experiment ``name`` and print its headline table and files."""
    from blockbudget.experiments import ExperimentContext, get_experiment

    experiment = get_experiment(name)
    ctx = ExperimentContext(
        name=name,
        out_dir=out if out is not None else Path("results") / name,
        quick=quick,
        seed=seed,
        console=console,
    )
    result = experiment.run(ctx)
    if result.rows:
        table = Table(*[str(key) for key in result.rows[0]], title=f"{name} ({experiment.source})")
        for row in result.rows:
            table.add_row(*[_cell(value) for value in row.values()])
        console.print(table)
    for note in result.notes:
        console.print(note)
    for path in [*ctx.files, *[f for f in result.files if f not in ctx.files]]:
        console.print(f"wrote {path}")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def main() -> None:  # pragma: no cover - console-script entry
    app()

"""Server mode: ``serve`` and the local ``demo`` (principals: :mod:`blockbudget.cli.admin`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from blockbudget.cli.common import (
    DEFAULT_HOME,
    PIPELINE_MODULES,
    HomeOpt,
    app,
    console,
    handle_errors,
    missing_extra,
)

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
    data_root: Annotated[
        str | None,
        typer.Option(
            envvar="BLOCKBUDGET_DATA_ROOT",
            help="Where block files live: a directory or a filesystem URI, e.g. "
            "s3://bucket/prefix (a MinIO adds ?endpoint_override=host:9000&scheme=http; "
            "credentials from the environment; default: blocks/ in --home).",
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            envvar="BLOCKBUDGET_HOST",
            help="Address to listen on (0.0.0.0 in a container, behind a TLS proxy).",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="BLOCKBUDGET_PORT", help="Port to listen on.")] = 8000,
    workers: Annotated[
        int, typer.Option(envvar="BLOCKBUDGET_WORKERS", help="Server processes.")
    ] = 1,
    group_commit: Annotated[
        bool, typer.Option(help="Batch concurrent ledger writes into one durable commit.")
    ] = True,
    scheduler: Annotated[
        str | None,
        typer.Option(
            envvar="BLOCKBUDGET_SCHEDULER",
            help="The default scheduler of every stream's tasks, name[:key=value,...] (e.g. "
            "dpf-n:n=10,lend=1, dpf-n:n=10, dpf-t:lifetime=3600, dpack, online-threshold, fcfs; "
            "default dpf-n:n=10,lend=1: DPF that grants a task no other waiting task competes "
            "with at once; an admin overrides it per stream).",
        ),
    ] = None,
    pipeline_scheduler: Annotated[
        str | None,
        typer.Option(
            envvar="BLOCKBUDGET_PIPELINE_SCHEDULER",
            help="The strategy that gives pipelines their budget (default sage-block-conserve).",
        ),
    ] = None,
    metrics_token: Annotated[
        str | None,
        typer.Option(
            envvar="BLOCKBUDGET_METRICS_TOKEN",
            help="A bearer token that may read /metrics (a Prometheus scraper's; prefer the "
            "environment variable). Admin API keys may always read it.",
        ),
    ] = None,
    request_log: Annotated[
        str | None,
        typer.Option(
            envvar="BLOCKBUDGET_REQUEST_LOG",
            help="Where the JSON request log goes: - (stderr, the default), off, or a file.",
        ),
    ] = None,
    alert_below: Annotated[
        float | None,
        typer.Option(
            envvar="BLOCKBUDGET_ALERT_BELOW",
            min=0.0,
            max=1.0,
            help="Low-budget alert threshold: the dashboard (and metrics) flag live blocks with "
            "less than this fraction of their budget left in a context (default 0.1).",
        ),
    ] = None,
    mark_every: Annotated[
        str | None,
        typer.Option(
            envvar="BLOCKBUDGET_MARK_EVERY",
            help="When the audit log's high-water mark beside the block files advances: charge "
            "(the default: after every write that charges, before its answer leaves; others "
            "within about a second), commit (after every write), N (events), Ts (seconds), "
            "N,Ts, or off (no mark, no check).",
        ),
    ] = None,
) -> None:
    """Serve the platform over HTTP (API, OpenAPI schema at /docs, dashboard at /dashboard,
    Prometheus metrics at /metrics).

    On first start (no principal yet) an admin principal is created and its key printed once.
    """
    try:
        from blockbudget.service.server import bootstrap_admin
        from blockbudget.service.server import serve as run_server
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "serve") from exc
    from blockbudget.service.app import DEFAULT_PIPELINE_SCHEDULER
    from blockbudget.tasks.queue import DEFAULT_SCHEDULER
    from blockbudget.tasks.schedspec import parse_spec

    scheduler = scheduler or DEFAULT_SCHEDULER
    pipeline_scheduler = pipeline_scheduler or DEFAULT_PIPELINE_SCHEDULER
    parse_spec(scheduler)  # a clear error before anything starts
    parse_spec(pipeline_scheduler)
    if alert_below is not None:  # worker processes read it from the environment
        os.environ["BLOCKBUDGET_ALERT_BELOW"] = repr(alert_below)
    if mark_every is not None:
        from blockbudget.store.watermark import MARK_ENV, parse_policy

        os.environ[MARK_ENV] = parse_policy(mark_every).describe()  # checked before starting
    check_schema(home, database)  # refuse an old schema before anything opens it
    check_data_root(home / "blocks" if data_root is None else data_root)
    warn_behind_mark(home, database, data_root)
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
        scheduler=scheduler,
        pipeline_scheduler=pipeline_scheduler,
        data_root=data_root,
        metrics_token=metrics_token,
        request_log=request_log,
        pipelines=PIPELINE_MODULES,
    )


def check_schema(home: Path, database: str | None) -> None:
    """The start check of ``serve``: refuse a database whose schema needs ``blockbudget db
    upgrade`` (one message naming that command with this ``--home``/``--database``), and
    create every table of an empty one.

    An empty database is brought to the head by :func:`blockbudget.migrations.upgrade`, which
    holds the writers' lock, before anything opens a table set: servers starting together on
    it wait for one another instead of racing to create the same tables (the later ones find
    the head and change nothing).

    Raises:
        SchemaRevisionError: the database is behind (or from a newer release).
    """
    from blockbudget.cli.db import database_url, upgrade_command
    from blockbudget.migrations import SchemaState, require_current, status, upgrade

    url = database_url(home, database)
    require_current(url, command=upgrade_command(home, database))
    if status(url).state is SchemaState.EMPTY:
        if database is None:
            home.mkdir(parents=True, exist_ok=True)  # the SQLite file's folder
        upgrade(url)


def warn_behind_mark(home: Path, database: str | None, data_root: str | None) -> None:
    """Say at start when the database is behind the audit log's high-water mark kept beside the
    block files (restored from an older backup): the server starts anyway — reads, health,
    metrics and ``blockbudget db reconcile --server`` work — but refuses every budget write
    (503) until an administrator reconciles."""
    from blockbudget.platform import Platform

    platform = Platform(home, database_url=database, data_root=data_root)
    try:
        status = platform.mark_status(refresh=True)
    finally:
        platform.close()
    if status is not None and status.refusing:
        console.print(
            f"[bold yellow]warning:[/] budgets are refused (503): {escape(str(status.message))}",
            soft_wrap=True,
        )


def check_data_root(root: str | Path) -> None:
    """The start check of ``serve`` for the block files: the data root exists (or can be
    created) and takes a file, checked by writing and removing one small probe file.

    Raises:
        InvalidRequestError: the root is unreachable or not writable (one line naming it and
            the cause: a missing bucket, a path that is a file, refused credentials, ...).
    """
    import uuid

    from blockbudget.errors import InvalidRequestError
    from blockbudget.store.files import DataFiles

    shown = str(root).split("?", 1)[0]  # the query may carry endpoints, never secrets
    try:
        files = DataFiles(root)
        probe = files.full(f".blockbudget-probe-{uuid.uuid4().hex}")
        with files.fs.open_output_stream(probe) as out:
            out.write(b"ok")
        files.fs.delete_file(probe)
    except InvalidRequestError:
        raise
    except Exception as exc:  # OSError, pyarrow's errors: the operator's to read, on one line
        cause = " ".join(str(exc).split()) or type(exc).__name__
        raise InvalidRequestError(
            f"the data root {shown} is not usable ({cause}): create it (a bucket, a writable "
            "directory) or fix --data-root/BLOCKBUDGET_DATA_ROOT, then start the server again"
        ) from exc


# --- demo ----------------------------------------------------------------------------------------


@app.command()
@handle_errors
def demo(
    days: Annotated[int, typer.Option(help="How many days of 2013 to stream.")] = 365,
    home: Annotated[Path, typer.Option(help="Demo folder (recreated).")] = Path("results/demo"),
) -> None:
    """Stream the 2013 NYC flights day by day and run DP queries from two contexts."""
    from blockbudget.apps.demo import run_demo

    run_demo(home=home, days=days, console=console)

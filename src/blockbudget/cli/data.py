"""Streams, contexts, ingest and the blocks table — on a local home or against a server."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from blockbudget.accounting import Accounting, rule_names
from blockbudget.budget import Budget
from blockbudget.cli.common import (
    DEFAULT_HOME,
    HomeOpt,
    JsonOpt,
    KeyOpt,
    ServerOpt,
    YesOpt,
    app,
    confirm_irreversible,
    console,
    context_app,
    emit_json,
    handle_errors,
    iso,
    open_platform,
    parse_window,
    remote,
    stream_app,
    utc,
)
from blockbudget.errors import InvalidRequestError
from blockbudget.render import render_blocks, render_remote_blocks
from blockbudget.store import Blocking, LatePolicy, OnOverlap, Unit

if TYPE_CHECKING:
    from blockbudget.platform import Platform
    from blockbudget.store import FileCheck

# --- streams -------------------------------------------------------------------------------------

#: The registered accounting rules, as click shows choices (``blockbudget.accounting`` has
#: imported every rule module already, so listing them costs nothing at ``--help``).
_RULES_METAVAR = "[" + "|".join(rule_names()) + "]"


def _rule_option(value: str) -> str:
    """The ``--accounting`` value, checked against the registry."""
    if value not in rule_names():
        raise typer.BadParameter(
            f"{value[:40]!r} is not a registered accounting rule: {', '.join(rule_names())}"
        )
    return value


@stream_app.command("create")
@handle_errors
def stream_create(
    name: str,
    epsilon: Annotated[float, typer.Option(help="Global ε_g per block.")],
    delta: Annotated[float, typer.Option(help="Global δ_g per block.")] = 1e-6,
    accounting: Annotated[
        str,
        typer.Option(
            help="Composition rule (a registered rule).",
            metavar=_RULES_METAVAR,
            callback=_rule_option,
        ),
    ] = Accounting.BASIC,
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
    as_json: JsonOpt = False,
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
                "accounting": accounting,
                "by": by.value,
                "column": column,
                "window_seconds": int(parse_window(window).total_seconds()),
                "ids_per_block": ids_per_block,
                "rows_per_user": rows_per_user,
                "late_policy": late_policy.value if late_policy is not None else None,
            }
        )
        if as_json:
            emit_json(out)
            return
        policy = out["policy"]
        console.print(
            f"created stream [bold]{escape(out['name'])}[/] with policy "
            f"(ε={policy['epsilon']}, δ={policy['delta']}) on {escape(server or '')}"
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
        accounting=Accounting(accounting),
        late_policy=late_policy
        if late_policy is not None
        else (LatePolicy.DROP if by is Unit.USER else LatePolicy.NEW_BLOCK),
    )
    if as_json:
        emit_json(_stream_json(platform, spec.name))
        return
    console.print(f"created stream [bold]{escape(spec.name)}[/] with policy {spec.policy}")


def _stream_json(platform: Platform, name: str) -> dict[str, Any]:
    """A local stream in the server's form (``StreamOut``)."""
    spec = platform.stream(name)
    return {
        "name": spec.name,
        "policy": spec.policy.to_json(),
        "accounting": spec.accounting.value,
        "unit": spec.blocking.unit.value,
        "column": spec.blocking.column,
        "blocks": len(platform.block_metas(spec.name)),
        "description": spec.description,
        "permission": None,
    }


@stream_app.command("list")
@handle_errors
def stream_list(
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """List the streams."""
    client = remote(server, api_key)
    if client is not None:
        streams = client.streams()
    else:
        platform = open_platform(home)
        streams = [_stream_json(platform, spec.name) for spec in platform.streams()]
    if as_json:
        emit_json({"streams": streams})
        return
    table = Table("stream", "policy", "accounting", "blocking", "blocks")
    for st in streams:
        pol = st["policy"]
        table.add_row(
            escape(st["name"]),
            f"(ε={pol['epsilon']}, δ={pol['delta']})",
            st["accounting"],
            escape(f"{st['unit']}({st['column']})"),
            str(st["blocks"]),
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
    as_json: JsonOpt = False,
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
    if as_json:
        emit_json(out)
        return
    console.print(
        f"stream [bold]{escape(stream)}[/]: released maximum id {out['released_max']:.1f}; "
        f"blocks up to id {out['safe_max']} can be selected (secure noise: {out['secure_noise']})"
    )


# --- contexts ------------------------------------------------------------------------------------


@context_app.command("add")
@handle_errors
def context_add(
    name: str,
    description: Annotated[str, typer.Option(help="Who the context is for.")] = "",
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Register a context (administrators only: each context gets a full budget per block)."""
    client = remote(server, api_key)
    if client is not None:
        out = _context_json(client.add_context(name, description))
    else:
        platform = open_platform(home)
        platform.add_context(name, description=description)
        out = _context_json(_local_info(platform, name))
    if as_json:
        emit_json(out)
        return
    console.print(f"context [bold]{escape(name)}[/] registered")


@context_app.command("close")
@handle_errors
def context_close(
    name: str,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Close a context for good (administrators only; audited): it never spends again, no
    longer keeps exhausted blocks from retiring, and counts in the coalition bound only if it
    ever charged. E.g. the `default` context that older ledgers registered by themselves.
    Asks first unless --yes (required with --json or without a terminal)."""
    confirm_irreversible(f"close context {name!r} for good?", yes=yes, as_json=as_json)
    client = remote(server, api_key)
    if client is not None:
        info = client.close_context(name)
    else:
        platform = open_platform(home)
        platform.close_context(name)
        info = _local_info(platform, name)
    if as_json:
        emit_json(_context_json(info))
        return
    console.print(f"context [bold]{escape(name)}[/] closed at {utc(info.get('closed_at'))}")


@context_app.command("list")
@handle_errors
def context_list(
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """List the registered contexts (on a server: those the key's principal may use)."""
    client = remote(server, api_key)
    if client is not None:
        infos = client.contexts()
    else:
        infos = [_info_dict(i) for i in open_platform(home).context_infos()]
    if as_json:
        emit_json({"contexts": [_context_json(c) for c in infos]})
        return
    table = Table("context", "description", "registered", "closed")
    for c in infos:
        table.add_row(
            escape(c["name"]),
            escape(c["description"]),
            utc(c["created_at"]),
            utc(c.get("closed_at")),
        )
    console.print(table)


def _local_info(platform: Platform, name: str) -> dict[str, Any]:
    """The local context ``name`` in the server's form."""
    infos = platform.context_infos()
    return next(_info_dict(i) for i in infos if i.name == name)


def _info_dict(info: Any) -> dict[str, Any]:
    """A local :class:`~blockbudget.ledger.ContextInfo` in the server's form."""
    return {
        "name": info.name,
        "description": info.description,
        "created_at": info.created_at,
        "closed_at": info.closed_at,
    }


def _context_json(c: dict[str, Any]) -> dict[str, Any]:
    """A context for ``--json``: times in ISO 8601 (UTC)."""
    return {
        "name": c["name"],
        "description": c["description"],
        "created_at": iso(c["created_at"]),
        "closed_at": iso(c.get("closed_at")),
    }


# --- ingest and blocks ---------------------------------------------------------------------------


@app.command()
@handle_errors
def ingest(
    stream: str,
    path: Path,
    format: Annotated[str | None, typer.Option(help="csv or parquet (default: suffix).")] = None,
    ingest_id: Annotated[
        str | None,
        typer.Option(
            "--ingest-id",
            help="This ingest's id (default: the content hash of the rows). The same id again "
            "changes nothing; with other content it is refused.",
        ),
    ] = None,
    on_overlap: Annotated[
        OnOverlap,
        typer.Option(
            "--on-overlap",
            help="Rows equal to rows already stored under their block key: refuse the "
            "ingest, skip-duplicates (leave them out) or append them.",
        ),
    ] = OnOverlap.REFUSE,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Ingest a CSV or Parquet file into a stream's blocks (all rows or none; idempotent)."""
    client = remote(server, api_key)
    if client is not None:
        with client:
            out = client.ingest_csv(
                stream,
                _csv_upload(path, format),
                ingest_id=ingest_id,
                on_overlap=on_overlap.value,
            )
    else:
        report = open_platform(home).ingest(
            stream, path, format=format, ingest_id=ingest_id, on_overlap=on_overlap
        )
        # the keys of the server's answer (the source and per-block rows stay local)
        hidden = ("source", "stream", "block_rows")
        out = {k: v for k, v in report.to_json().items() if k not in hidden}
    if as_json:
        emit_json(out)
        return
    console.print(escape(ingest_text(out)))


def _csv_upload(path: Path, format: str | None) -> bytes:
    """The CSV bytes to upload for ``path`` (a Parquet file converted in memory: the server
    takes CSV or JSON records).

    Raises:
        DataError: the file cannot be read (missing, unreadable, not Parquet).
    """
    from blockbudget.errors import DataError

    kind = format or path.suffix.lstrip(".").lower()
    try:
        if kind != "parquet":
            return path.read_bytes()
        import pandas as pd

        return pd.read_parquet(path).to_csv(index=False).encode()
    except OSError as exc:
        raise DataError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except ValueError as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"cannot read {str(path)!r} as Parquet: {exc}") from None


def ingest_text(out: dict[str, Any]) -> str:
    """What an ingest did (or, for a repeat, did the first time), in words."""
    done = (
        f"{out['rows']} rows: {len(out['new_blocks'])} new block(s), "
        f"{len(out['appended_blocks'])} appended, {out['late_rows']} late row(s)"
    )
    if out["repeat"]:
        return f"already ingested as {done} (ingest id {out['ingest_id']}); nothing changed"
    text = f"ingested {done} (ingest id {out['ingest_id']})"
    overlap = out.get("overlap") or {}
    if overlap.get("rows"):
        text += (
            f"\n{overlap['rows']} row(s) fell in blocks that already had rows"
            f" ({', '.join(sorted(overlap['keys']))})"
        )
        if overlap.get("checked"):
            text += f"; {overlap['duplicate_rows']} were exact duplicates"
            if overlap.get("skipped_rows"):
                text += f", {overlap['skipped_rows']} skipped"
    return text


@app.command()
@handle_errors
def blocks(
    stream: Annotated[
        str | None,
        typer.Argument(help="The stream (with --check-files: default, the whole data root)."),
    ] = None,
    context: Annotated[
        list[str] | None, typer.Option(help="Context(s) to show (default: every open one).")
    ] = None,
    last: Annotated[int, typer.Option(help="Show only the newest N blocks (0: all).")] = 0,
    check_files: Annotated[
        bool,
        typer.Option(
            "--check-files",
            help="Compare the block files under the data root with the catalog instead: "
            "orphans (files no catalog entry lists, left by killed ingests) and missing files "
            "(listed parts whose file is gone, e.g. after a restore). Exit 1 if any missing "
            "file or any orphan older than --grace is left.",
        ),
    ] = False,
    remove_orphans: Annotated[
        bool,
        typer.Option(
            "--remove-orphans",
            help="With --check-files: delete the orphans older than --grace (never a file the "
            "catalog lists).",
        ),
    ] = False,
    grace: Annotated[
        str,
        typer.Option(
            help="With --check-files: orphans younger than this may belong to an ingest still "
            "running and are kept (1d, 6h, 15m, 30s).",
        ),
    ] = "1h",
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Show each block's remaining budget, per context, as a bar (exact with --json); or, with
    --check-files, compare the block files with the catalog."""
    if check_files or remove_orphans:
        _check_files(
            stream,
            remove=remove_orphans,
            checking=check_files,
            grace=grace,
            as_json=as_json,
            home=home,
            server=server,
        )
        return
    if stream is None:
        raise typer.BadParameter("give a stream (or --check-files)", param_hint="STREAM")
    client = remote(server, api_key)
    if client is not None:
        views = client.blocks(stream, context)
        if as_json:
            emit_json({"stream": stream, "blocks": views[-last:] if last > 0 else views})
            return
        render_remote_blocks(views, stream, console=console, last=last)
        return
    platform = open_platform(home)
    if as_json:
        emit_json({"stream": stream, "blocks": _blocks_json(platform, stream, context, last)})
        return
    render_blocks(platform, stream, console=console, contexts=context, last=last)


def _check_files(
    stream: str | None,
    *,
    remove: bool,
    checking: bool,
    grace: str,
    as_json: bool,
    home: Path,
    server: str | None,
) -> None:
    """``blocks --check-files [--remove-orphans]``: see :func:`blocks`."""
    if not checking:
        raise InvalidRequestError("--remove-orphans goes with --check-files")
    if server:
        raise InvalidRequestError(
            "--check-files reads the data root itself: run it where the store is (its --home, "
            "or BLOCKBUDGET_DATABASE and BLOCKBUDGET_DATA_ROOT), not against --server"
        )
    age = parse_window(grace, name="--grace")
    platform = open_platform(home)
    try:
        removed = platform.remove_orphans(stream, older_than=age) if remove else []
        check = platform.check_files(stream)
    finally:
        platform.close()
    old = check.orphans_older_than(age)
    failed = bool(check.missing or old)
    if as_json:
        emit_json(
            {
                "stream": stream,
                "ok": not failed,
                "files": check.files,
                "parts": check.parts,
                "orphans": [{"path": p, "modified": iso(_ts(m))} for p, m in check.orphans],
                "missing": list(check.missing),
                "removed": removed,
                "grace_seconds": age.total_seconds(),
            }
        )
    else:
        _print_file_check(check, stream, removed=removed, old=old, grace=grace)
    if failed:
        raise typer.Exit(code=1)


def _ts(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _print_file_check(
    check: FileCheck, stream: str | None, *, removed: list[str], old: list[str], grace: str
) -> None:
    where = f"stream {escape(stream)}" if stream is not None else "the data root"
    console.print(
        f"{where}: {check.files} part file(s) found, {check.parts} listed in the catalog",
        soft_wrap=True,
    )
    for path in removed:
        console.print(f"removed orphan {escape(path)}", soft_wrap=True)
    stale = set(old)
    for path, modified in check.orphans:
        why = (
            "older than --grace: remove with --remove-orphans"
            if path in stale
            else f"younger than {escape(grace)}: an ingest may still commit it; kept"
        )
        when = utc(_ts(modified)) or "at an unknown time"
        console.print(f"[yellow]orphan[/] {escape(path)} (modified {when}; {why})", soft_wrap=True)
    for path in check.missing:
        console.print(
            f"[bold red]missing[/] {escape(path)}: the catalog lists it but the file is gone "
            "(a store restored from an older backup, or files removed by hand); reading its "
            "block fails",
            soft_wrap=True,
        )
    if not check.orphans and not check.missing:
        console.print("[green]ok[/]: every listed part has its file and no file is unlisted")


def _blocks_json(
    platform: Platform, stream: str, contexts: list[str] | None, last: int
) -> list[dict[str, Any]]:
    """The blocks in the server's form (``BlockOut``): remaining budgets exact."""
    views = platform.blocks(stream, contexts=contexts, last=last if last > 0 else None)
    return [v.to_json() for v in views]

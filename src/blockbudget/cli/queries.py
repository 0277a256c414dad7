"""DP queries and the audit log — on a local home or against a server."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Column, Table

from blockbudget.cli.common import (
    DEFAULT_HOME,
    ContextOpt,
    HomeOpt,
    JsonOpt,
    KeyOpt,
    ServerOpt,
    audit_app,
    budget_number,
    console,
    emit_json,
    handle_errors,
    iso,
    local_context,
    open_platform,
    print_blocks_used,
    query_app,
    remote,
    utc,
)
from blockbudget.render import print_verify

if TYPE_CHECKING:
    from blockbudget.service.client import ServiceClient

# --- queries -------------------------------------------------------------------------------------
# Every query command builds the query's JSON form and validates it once (Query.from_dict); a
# local home runs it with blockbudget.query.run / price, a server with the same JSON form. The
# answer is printed from its JSON form in both cases, so both print the same thing.


def _query_form(
    statistic: str,
    *,
    epsilon: str,
    mechanism: str = "laplace",
    delta: str | None = None,
    column: str | None,
    lower: float | None,
    upper: float | None,
    categories: str | None,
    other: bool,
    quantiles: str | None,
    bins: int | None,
    where: list[str] | None,
    group_by: list[str] | None,
    params: list[str] | None = None,
) -> dict[str, Any]:
    from blockbudget.query.text import parse_filter, parse_group_by, parse_list, parse_param

    form: dict[str, Any] = {"statistic": statistic, "epsilon": budget_number(epsilon)}
    if mechanism != "laplace" or delta is not None:  # the version-2 noise fields
        form.update(version=2, mechanism=mechanism)
        if delta is not None:
            form["delta"] = budget_number(delta, name="--delta")
    for name, value in (("column", column), ("lower", lower), ("upper", upper), ("bins", bins)):
        if value is not None:
            form[name] = value
    if categories:
        form["categories"] = parse_list(categories)
    if other:
        form["other"] = True
    if quantiles:
        form["quantiles"] = parse_list(quantiles)
    if where:
        form["where"] = [parse_filter(w) for w in where]
    if group_by:
        form["group_by"] = [parse_group_by(g) for g in group_by]
    for text in params or ():
        form.update([parse_param(text)])
    return form


def _read_spec(spec: str) -> dict[str, Any]:
    """A query's JSON form from ``--spec``: inline JSON, or ``@FILE``."""
    import json

    from blockbudget.errors import InvalidRequestError

    try:
        text = Path(spec[1:]).read_text() if spec.startswith("@") else spec
    except OSError as exc:
        raise InvalidRequestError(f"cannot read --spec file {spec[1:]!r}: {exc.strerror}") from None
    try:
        form = json.loads(text)
    except ValueError as exc:
        raise InvalidRequestError(f"--spec is not JSON: {exc}") from None
    if not isinstance(form, dict):
        raise InvalidRequestError("--spec must be a JSON object (the query's JSON form)")
    return form


def _execute(
    form: dict[str, Any],
    stream: str,
    *,
    home: Path,
    context: str | None,
    last: int,
    block: list[str] | None,
    dry_run: bool,
    client: ServiceClient | None,
    reservation: str | None = None,
) -> dict[str, Any]:
    """Validate the JSON form (one validator), run or price it locally or on the server, and
    return the answer's JSON form. With ``reservation`` the query spends that open reservation
    (its blocks; nothing is reserved) instead of choosing blocks."""
    from blockbudget.errors import InvalidRequestError
    from blockbudget.query import from_dict, price, run, to_dict

    query = from_dict(form)  # refused here, before any request is made
    if reservation is not None and (block or dry_run):
        raise InvalidRequestError(
            "--reservation runs on the reservation's blocks: it takes neither --block nor --dry-run"
        )
    if client is not None:
        body: dict[str, Any] = {"query": to_dict(query)}
        if context:
            body["context"] = context  # left out: the principal's only bound context
        if reservation is not None:
            body["reservation_id"] = reservation
        else:
            body.update({"blocks": list(block)} if block else {"last": last})
        out = client.price(stream, body) if dry_run else client.run_query(stream, body)
        if reservation is None and not block:
            out["last"] = _moved(out["blocks"], last, _remote_newest(client, stream, context, last))
        return out
    from blockbudget.budget import Budget
    from blockbudget.platform import Last

    platform = open_platform(home)
    try:
        if reservation is not None:  # context: when named, it must be the reservation's
            return run(platform, stream, query, reservation=reservation, context=context).to_dict()
        ctx = local_context(platform, context)
        selection: list[str] | Last = list(block) if block else Last(last)
        newest = None
        if not block:  # the newest live blocks, to say when --last moved to older ones
            newest = platform.select(
                stream, Last(last, affordable=False), context=ctx, cost=Budget.zero()
            )
        if dry_run:
            out = price(platform, stream, query, blocks=selection, context=ctx).to_dict()
        else:  # checked (columns, types, bounds, price) before anything is reserved or sealed
            out = run(platform, stream, query, blocks=selection, context=ctx).to_dict()
        if newest is not None:
            out["last"] = _moved(out["blocks"], last, list(newest))
        return out
    finally:
        platform.close()


def _remote_newest(
    client: ServiceClient, stream: str, context: str | None, last: int
) -> list[str] | None:
    """The newest ``last`` live blocks as the server names them (None if it cannot say)."""
    from blockbudget.service.client import ServiceError

    params: dict[str, Any] = {"last": last}
    if context:
        params["context"] = context
    try:
        return list(client.call("GET", f"/v1/streams/{stream}/afford", params=params)["blocks"])
    except ServiceError:
        return None


def _moved(used: list[str], last: int, newest: list[str] | None) -> dict[str, Any]:
    """The ``last`` part of an answer: the newest live blocks and whether ``--last`` had to
    move to older ones (newer blocks could not afford the request and were skipped)."""
    if newest is None:
        return {"n": last, "newest_live": None, "moved_to_older": None, "skipped": None}
    skipped = [b for b in newest if b not in set(used)]
    return {"n": last, "newest_live": newest, "moved_to_older": bool(skipped), "skipped": skipped}


def _text(value: Any) -> str:
    """A value of the JSON form as text: pairs ``[key, value]`` as ``key: value``."""
    if isinstance(value, list):
        return ", ".join(f"{_text(k)}: {v:.6g}" for k, v in value)
    if isinstance(value, dict) and len(value) == 1:
        return str(next(iter(value.values())))
    if isinstance(value, float):
        return f"{value:.6g}"
    return "other" if value is None else str(value)


def print_answer(out: dict[str, Any], *, as_json: bool, dry_run: bool) -> None:
    """Print an answer's (or a dry run's) JSON form, as one JSON document or as text: the
    answer (a table for histograms and quantiles), its cost, and the blocks it used."""
    if as_json:
        emit_json(out)
        return
    statistic = out["query"]["statistic"]
    where = f"over {len(out['blocks'])} block(s) in context {escape(repr(out['context']))}"
    cost = out["cost"]
    if "epsilon" in cost:
        cost_text = f"ε={cost['epsilon']}, δ={cost['delta']}"
    elif "rdp" in cost:
        cost_text = "RDP ε(α) = " + ", ".join(cost["rdp"])
    else:  # another registered kind (e.g. μ-GDP): its own text
        from blockbudget.budget import cost_from_json

        cost_text = str(cost_from_json(cost)).strip("()")
    moved = out.get("last") or {}
    if dry_run:
        ok = "every block can afford it" if out["ok"] else "NOT every block can afford it"
        console.print(f"[bold]dry run: {statistic}[/] {where} — nothing reserved or charged")
        console.print(f"  cost per block: ({cost_text})   {ok}")
        console.print(f"  noise: {escape(out['noise'])}")
        print_blocks_used(
            out["blocks"],
            last=moved.get("n"),
            newest=moved.get("newest_live"),
            label="blocks it would use",
        )
        return
    console.print(f"[bold]{statistic}[/] {where}:")
    if any(isinstance(g["value"], list) for g in out["groups"]):
        console.print(answer_table(out))
    for g in out["groups"]:
        if isinstance(g["value"], list):
            continue
        label = "DP answer" if not g["key"] else "  ".join(_text(k) for k in g["key"])
        interval = g["interval"]
        ci = "" if interval is None else f"   95% CI [{interval[0]:.6g}, {interval[1]:.6g}]"
        console.print(f"  {escape(label)}: {escape(_text(g['value']))}{ci}")
    console.print(f"  cost per block: ({cost_text})   noise: {escape(out['noise'])}")
    if out.get("resolution") is not None:
        console.print(f"  resolution (bin width): {out['resolution']:.6g}")
    print_blocks_used(out["blocks"], last=moved.get("n"), newest=moved.get("newest_live"))
    if not out["secure_noise"]:
        console.print("  [bold yellow]noise is NOT secure (seeded): not fit for release[/]")


def answer_table(out: dict[str, Any]) -> Table:
    """A histogram's (or quantiles') answer as a table: one row per group and bin, with the
    group-by columns first."""
    query = out["query"]
    by = [g["column"] for g in query.get("group_by") or []]
    what = "quantile" if query["statistic"] == "quantiles" else "category"
    table = Table(*[escape(c) for c in by], what, "DP value")
    for column in table.columns[-1:]:
        column.justify = "right"
    for g in out["groups"]:
        keys = [escape(_text(k)) for k in g["key"]]
        for name, value in g["value"]:
            table.add_row(*keys, escape(_text(name)), f"{value:.6g}")
    return table


WhereOpt = Annotated[
    list[str] | None,
    typer.Option("--where", help="Row filter 'COLUMN OP VALUE' (repeatable), e.g. 'dest == BOS'."),
]
GroupOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--group-by", help="Public key with its declared domain 'COLUMN=V1,V2,...' (repeatable)."
    ),
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Price only: reserve, seal and charge nothing.")
]
MechanismOpt = Annotated[
    str,
    typer.Option(
        "--mechanism",
        help="Noise: 'laplace' (pure ε-DP) or 'gaussian' (analytic Gaussian, needs --delta).",
    ),
]
DeltaOpt = Annotated[
    str | None,
    typer.Option(
        "--delta",
        help="δ of a Gaussian query (0 < δ < 1), charged with ε (an exact decimal).",
    ),
]
LastOpt = Annotated[int, typer.Option(help="Use the newest N affordable blocks.")]
BlockOpt = Annotated[list[str] | None, typer.Option(help="Explicit block ids/keys.")]
ParamOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--param",
        help="The statistic's own parameter 'NAME=VALUE' (repeatable), e.g. 'k=3' for top_k.",
    ),
]
ReservationOpt = Annotated[
    str | None,
    typer.Option(
        "--reservation",
        help="Spend this open reservation (e.g. a granted task's) instead of reserving: its "
        "blocks are read and the draw comes out of it (--last/--block do not apply).",
    ),
]


def _query_command(statistic: str, summary: str) -> None:
    def command(
        stream: str,
        epsilon: Annotated[
            str,
            typer.Option(
                help="ε to spend on every block read: an exact decimal (e.g. the epsilon or "
                "epsilon_exact that `blockbudget afford` prints)."
            ),
        ],
        mechanism: MechanismOpt = "laplace",
        delta: DeltaOpt = None,
        context: ContextOpt = None,
        last: LastOpt = 7,
        block: BlockOpt = None,
        reservation: ReservationOpt = None,
        column: Annotated[str | None, typer.Option(help="Value column.")] = None,
        lower: Annotated[float | None, typer.Option(help="Clip values below.")] = None,
        upper: Annotated[float | None, typer.Option(help="Clip values above.")] = None,
        categories: Annotated[
            str | None, typer.Option(help="Comma-separated public bins (histogram).")
        ] = None,
        other: Annotated[bool, typer.Option(help="Histogram: also count the rest.")] = False,
        quantiles: Annotated[
            str | None, typer.Option(help="Comma-separated probabilities (quantiles).")
        ] = None,
        bins: Annotated[int | None, typer.Option(help="Quantiles: equal-width bins.")] = None,
        where: WhereOpt = None,
        group_by: GroupOpt = None,
        param: ParamOpt = None,
        dry_run: DryRunOpt = False,
        as_json: JsonOpt = False,
        home: HomeOpt = DEFAULT_HOME,
        server: ServerOpt = None,
        api_key: KeyOpt = None,
    ) -> None:
        form = _query_form(
            statistic,
            epsilon=epsilon,
            mechanism=mechanism,
            delta=delta,
            column=column,
            lower=lower,
            upper=upper,
            categories=categories,
            other=other,
            quantiles=quantiles,
            bins=bins,
            where=where,
            group_by=group_by,
            params=param,
        )
        out = _execute(
            form,
            stream,
            home=home,
            context=context,
            last=last,
            block=block,
            dry_run=dry_run,
            client=remote(server, api_key),
            reservation=reservation,
        )
        print_answer(out, as_json=as_json, dry_run=dry_run)

    command.__doc__ = summary
    query_app.command(statistic)(handle_errors(command))


def _statistic_commands() -> None:
    """One command per registered statistic (its name and summary, read from the catalogue,
    which loads no statistic)."""
    from blockbudget.query.catalog import STATISTICS

    for name, summary in STATISTICS:
        _query_command(name, summary)


_statistic_commands()


@query_app.command("run")
@handle_errors
def query_run(
    stream: str,
    spec: Annotated[str, typer.Option(help="The query's JSON form, inline or @FILE.")],
    context: ContextOpt = None,
    last: LastOpt = 7,
    block: BlockOpt = None,
    reservation: ReservationOpt = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Run (or --dry-run) a query given in its JSON form (docs/queries.md)."""
    out = _execute(
        _read_spec(spec),
        stream,
        home=home,
        context=context,
        last=last,
        block=block,
        dry_run=dry_run,
        client=remote(server, api_key),
        reservation=reservation,
    )
    print_answer(out, as_json=as_json, dry_run=dry_run)


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
    as_json: JsonOpt = False,
) -> None:
    """Replay the audit log (after the last verified checkpoint, or all of it with --full);
    check the ledger and every filter.

    Says which database it checked (password hidden). A ledger with no event at all fails
    (exit 1): it is most likely not the one meant (a shell without $BLOCKBUDGET_DATABASE, a
    wrong --home), and an empty home is not created.
    """
    client = remote(server, api_key)
    report: Any
    if client is not None:
        checked = f"the server at {server}"
        report = SimpleNamespace(**client.verify(full=full))
    else:
        from blockbudget.cli.db import database_url
        from blockbudget.migrations import SchemaState, status

        url = database_url(home, os.environ.get("BLOCKBUDGET_DATABASE") or None)
        found = status(url)  # reads only: a missing SQLite file is not created
        checked = found.database
        if found.state is SchemaState.EMPTY:
            report = _NO_LEDGER
        else:
            platform = open_platform(home)
            try:
                report = platform.verify(full=full)
            finally:
                platform.close()
    empty = report.ok and report.events == 0
    problems = list(report.problems)
    if empty:
        problems = [
            f"the ledger at {checked} is empty (no audit event): is "
            "BLOCKBUDGET_DATABASE/--home (or --server) right?"
        ]
    if as_json:
        emit_json(
            {
                "ok": report.ok and not empty,
                "database": checked,
                "empty": empty,
                "events": report.events,
                "blocks": report.blocks,
                "contexts": report.contexts,
                "problems": problems,
                "replayed": getattr(report, "replayed", None),
                "checkpoint_seq": getattr(report, "checkpoint_seq", None),
            }
        )
    elif empty:
        console.print(f"[bold red]audit verify: EMPTY[/] — {escape(problems[0])}", soft_wrap=True)
    else:
        console.print(f"database: {escape(checked)}", soft_wrap=True)
        print_verify(report, console=console)
    if not report.ok or empty:
        raise typer.Exit(code=1)


#: The report of a database with none of the platform's tables (nothing to open).
_NO_LEDGER = SimpleNamespace(ok=True, events=0, blocks=0, contexts=0, problems=())


@audit_app.command("log")
@handle_errors
def audit_log(
    limit: Annotated[int, typer.Option(help="Newest N events.")] = 20,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Show the newest audit events."""
    client = remote(server, api_key)
    if client is not None:
        rows: list[tuple[Any, ...]] = []
        after = 0
        while True:  # page through the log, keeping the newest `limit`
            page = client.events(after_seq=after, limit=1000)
            rows.extend(
                (e["seq"], e["ts"], e["kind"], e["context"], e["request_id"], e["payload"])
                for e in page
            )
            rows = rows[-limit:]
            if len(page) < 1000:
                break
            after = page[-1]["seq"]
    else:
        platform = open_platform(home)
        try:
            rows = [
                (e.seq, e.ts, e.kind.value, e.context, e.request_id, e.payload)
                for e in platform.events()[-limit:]
            ]
        finally:
            platform.close()
    if as_json:
        keys = ("seq", "ts", "kind", "context", "request_id", "payload")
        emit_json(
            {"events": [dict(zip(keys, (r[0], iso(r[1]), *r[2:]), strict=True)) for r in rows]}
        )
        return
    import json

    table = Table("seq", Column("time", no_wrap=True), "kind", "context", "request", "payload")
    for seq, ts, kind, context, request_id, payload in rows:
        table.add_row(
            str(seq),
            utc(ts),
            str(kind),
            escape(context or ""),
            escape(request_id),
            escape(json.dumps(payload, sort_keys=True)[:80]),
        )
    console.print(table)

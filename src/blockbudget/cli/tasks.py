"""``blockbudget task submit|list|show|why|cancel|scheduler``: tasks decided by a stream's
scheduler, on a running service (``--server``) or on the local platform.

A task says what it needs — a DP query (``--statistic`` with the query commands' flags, or
``--query-spec``), or a plain budget (``--epsilon``/``--delta``) — and which blocks it may use
(``--block``, ``--newest``, ``--range START END --k K``, ``--any K``); the stream's scheduler
chooses blocks and budget, and its grant is the reservation the work spends. Without
``--server`` the commands open a :class:`~blockbudget.tasks.TaskQueue` on the local platform
(``--home``, ``$BLOCKBUDGET_DATABASE``) and ``submit`` pumps it until the task is decided
(``--wait``). Every command prints the task's JSON form with ``--json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
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
    app,
    budget_number,
    console,
    emit_json,
    handle_errors,
    iso,
    load_pipelines,
    local_context,
    open_platform,
    print_blocks_used,
    remote,
    utc,
)
from blockbudget.cli.queries import GroupOpt, WhereOpt, _query_form, _read_spec, print_answer
from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    from blockbudget.platform import Platform
    from blockbudget.tasks.model import Task
    from blockbudget.tasks.queue import TaskQueue

task_app = typer.Typer(
    help="Tasks: DP queries and budget demands decided by a stream's scheduler.",
    no_args_is_help=True,
)
app.add_typer(task_app, name="task")

#: How long a local ``submit`` pumps by default (a server pumps by itself: no wait there).
LOCAL_WAIT_SECONDS = 30.0


@contextmanager
def _local_queue(home: Path) -> Iterator[TaskQueue]:
    """A task queue on the local platform, closed (with the platform) afterwards."""
    from blockbudget.tasks.leader import leadership_for
    from blockbudget.tasks.queue import TaskQueue

    load_pipelines()  # a pipeline task stored by a server may be resumed here
    platform = open_platform(home)
    queue = TaskQueue(platform, leadership=leadership_for(platform.database, name="tasks"))
    queue.access_check = _service_access(platform)
    try:
        yield queue
    finally:
        queue.close()
        platform.close()


def _service_access(platform: Platform) -> Callable[[Task], str | None] | None:
    """On a home a server also uses, the service's access re-check
    (:func:`blockbudget.service.standing.task_access`): a local pump that leads never grants
    or runs a task whose principal lost its access. None on a home without principals."""
    import sqlalchemy as sa

    engine = platform.database
    if not sa.inspect(engine).has_table("service_principals"):
        return None
    from blockbudget.service.auth import KeyStore
    from blockbudget.service.standing import task_access

    return task_access(KeyStore(engine))


def _selector(
    block: list[str] | None,
    newest: int | None,
    range_: tuple[str, str] | None,
    k: int | None,
    any_: int | None,
    min_k: int,
) -> dict[str, Any]:
    """The selector's JSON form from the options (exactly one way of choosing blocks)."""
    given = [
        name
        for name, value in (
            ("--block", block),
            ("--newest", newest),
            ("--range", range_),
            ("--any", any_),
        )
        if value
    ]
    if len(given) != 1:
        raise InvalidRequestError(
            f"give exactly one of --block, --newest, --range START END --k K, --any K; got {given}"
        )
    if block:
        return {"named": list(block)}
    if newest:
        return {"newest": newest}
    if range_:
        if k is None:
            raise InvalidRequestError("--range START END needs --k K (how many blocks)")
        return {"range": {"k": k, "start": range_[0], "end": range_[1]}}
    return {"any": {"k": any_, "min_k": min_k}}


def _query_spec(spec: str) -> dict[str, Any]:
    """A query's JSON form: inline JSON, ``@FILE`` or a file path."""
    return _read_spec(spec if spec.lstrip().startswith(("{", "@")) else f"@{spec}")


def _work(query_spec: str | None, statistic: str | None, epsilon: str | None) -> dict[str, Any]:
    """The body's kind and work: a query from a spec, a query from the flags (its ``query`` is
    filled in by the caller) or a budget."""
    if query_spec and statistic:
        raise InvalidRequestError("give --query-spec or --statistic, not both")
    if query_spec:
        if epsilon is not None:
            raise InvalidRequestError("--epsilon goes into the --query-spec's JSON form")
        return {"kind": "query", "query": _query_spec(query_spec)}
    if epsilon is None:
        raise InvalidRequestError("give --epsilon (the query's ε, or the budget demanded)")
    if statistic:
        return {"kind": "query"}
    return {"kind": "budget", "epsilon": budget_number(epsilon)}


def _submit_local(
    queue: TaskQueue, stream: str, body: dict[str, Any], context: str, wait: float
) -> dict[str, Any]:
    from blockbudget.budget import Budget
    from blockbudget.query import from_dict
    from blockbudget.service.task_forms import refusal_json, selector_of_wire, task_json

    selector = selector_of_wire(body["selector"])
    common: dict[str, Any] = {
        "selector": selector,
        "context": context,
        "significance": body.get("significance"),
        "deadline_seconds": body.get("timeout_seconds"),
        "request_id": body.get("request_id"),
    }
    if body["kind"] == "query":
        task = queue.submit_query(stream, from_dict(body["query"]), **common)
    else:
        demand = Budget(epsilon=body["epsilon"], delta=body.get("delta", 0.0))
        task = queue.submit_budget(stream, demand, **common)
    if wait > 0:
        task = queue.wait(task.id, timeout=wait)
    return task_json(task, refusal=refusal_json(queue, task))


@task_app.command("submit")
@handle_errors
def task_submit(
    stream: Annotated[str, typer.Argument(help="Stream whose blocks the task may use.")],
    epsilon: Annotated[
        str | None,
        typer.Option(
            help="The query's ε (with --statistic), or the ε demanded: an exact decimal "
            "(e.g. what `blockbudget afford` prints)."
        ),
    ] = None,
    delta: Annotated[
        str, typer.Option(help="δ demanded on each block (budget; an exact decimal).")
    ] = "0",
    query_spec: Annotated[
        str | None, typer.Option(help="A query's JSON form: a file, @FILE or inline JSON.")
    ] = None,
    statistic: Annotated[
        str | None,
        typer.Option(help="A query: count, sum, mean, variance, quantiles or histogram."),
    ] = None,
    column: Annotated[str | None, typer.Option(help="Query: value column.")] = None,
    lower: Annotated[float | None, typer.Option(help="Query: clip values below.")] = None,
    upper: Annotated[float | None, typer.Option(help="Query: clip values above.")] = None,
    categories: Annotated[str | None, typer.Option(help="Query: comma-separated bins.")] = None,
    quantiles: Annotated[str | None, typer.Option(help="Query: probabilities.")] = None,
    bins: Annotated[int | None, typer.Option(help="Query (quantiles): bins.")] = None,
    where: WhereOpt = None,
    group_by: GroupOpt = None,
    block: Annotated[
        list[str] | None, typer.Option("--block", help="A block id or key (repeatable).")
    ] = None,
    newest: Annotated[int | None, typer.Option(help="The newest N blocks.")] = None,
    last: Annotated[int | None, typer.Option(help="The same as --newest.", hidden=True)] = None,
    range_: Annotated[
        tuple[str, str] | None,
        typer.Option("--range", help="Any --k blocks whose window starts in [START, END)."),
    ] = None,
    k: Annotated[int | None, typer.Option("--k", help="How many blocks (--range).")] = None,
    any_: Annotated[
        int | None, typer.Option("--any", help="Any blocks of the stream, at most K.")
    ] = None,
    min_k: Annotated[int, typer.Option(help="--any: at least this many blocks.")] = 1,
    significance: Annotated[
        str | None,
        typer.Option(help='JSON: {block: p} or a provider, e.g. \'{"provider": "recency"}\'.'),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds the task may wait before it expires.")
    ] = None,
    request_id: Annotated[str | None, typer.Option(help="Idempotency key.")] = None,
    wait: Annotated[
        float | None,
        typer.Option(help="Seconds to wait for a decision (default: 30 locally, 0 on a server)."),
    ] = None,
    context: ContextOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Price the task and check its blocks only: nothing is queued, reserved or "
            "charged. It says whether the blocks have enough budget now; only the fcfs "
            "scheduler grants whenever they do (the default, dpf-n with lend=1, does unless "
            "other waiting tasks compete for its blocks; plain dpf, dpack and the others may "
            "hold a task that fits to serve others first).",
        ),
    ] = False,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Submit a task; the stream's scheduler grants it, and the grant is what the work spends
    (--dry-run: only price it)."""
    body = _work(query_spec, statistic, epsilon)
    if statistic and epsilon is not None:
        body["query"] = _query_form(
            statistic,
            epsilon=epsilon,
            column=column,
            lower=lower,
            upper=upper,
            categories=categories,
            other=False,
            quantiles=quantiles,
            bins=bins,
            where=where,
            group_by=group_by,
        )
    if body["kind"] == "budget" and budget_number(delta, name="--delta"):
        body["delta"] = budget_number(delta, name="--delta")
    body["selector"] = _selector(block, newest or last, range_, k, any_, min_k)
    for name, value in (("timeout_seconds", timeout), ("request_id", request_id)):
        if value is not None:
            body[name] = value
    if significance:
        try:
            body["significance"] = json.loads(significance)
        except ValueError as exc:
            raise InvalidRequestError(f"--significance is not JSON: {exc}") from None
        if isinstance(body["significance"], dict):
            from blockbudget.tasks.significance import refuse_noise_controls

            refuse_noise_controls(body["significance"])  # the CLI's user is a principal
    client = remote(server, api_key)
    if dry_run:
        priced = _dry_run(body, stream, context, home, client)
        print_dry_run(priced, as_json=as_json)
        if not priced["ok"]:  # as a refused task: exit 2, after what the blocks lack
            raise typer.Exit(code=2)
        return
    if client is not None:
        if context:
            body["context"] = context  # left out: the principal's only bound context
        with client:
            task = client.submit_task(stream, body)
            if wait:
                task = client.wait_task(task["id"], wait)
    else:
        with _local_queue(home) as queue:
            ctx = local_context(queue.platform, context)
            task = _submit_local(
                queue, stream, body, ctx, LOCAL_WAIT_SECONDS if wait is None else wait
            )
    print_task(task, as_json=as_json)
    if task["state"] == "refused":  # as a refused query: exit 2, after what it lacked
        raise typer.Exit(code=2)


def _dry_run(
    body: dict[str, Any], stream: str, context: str | None, home: Path, client: Any
) -> dict[str, Any]:
    from blockbudget.cli.dry_run import price_task_local, price_task_remote

    if client is not None:
        from blockbudget.service.client import ServiceError

        with client:
            out = price_task_remote(client, stream, body, context=context)
            try:
                out["scheduler"] = client.scheduler(stream)["scheduler"]
            except ServiceError:  # a principal who may not read it: the text says so
                out["scheduler"] = None
        return out
    with _local_queue(home) as queue:
        ctx = local_context(queue.platform, context)
        out = price_task_local(queue.platform, stream, body, context=ctx)
        out["scheduler"] = queue.scheduler_for(stream)
        return out


#: Schedulers that grant a task as soon as its blocks have enough budget (first come, first
#: served); the others (DPF and the rest) may hold a task that fits, to serve others first.
GRANT_WHEN_BUDGET_SUFFICES = ("fcfs",)


def dry_run_verdict(out: dict[str, Any]) -> str:
    """What a dry run can promise: that the blocks have enough budget now — a grant now only
    under a scheduler that grants whenever the budget suffices (:data:`GRANT_WHEN_BUDGET_SUFFICES`).
    """
    if not out["ok"]:
        return "the blocks do NOT have enough budget now: it could not be granted now"
    scheduler = out.get("scheduler")
    name = None if scheduler is None else str(scheduler).split(":")[0].split("(")[0].strip()
    if name in GRANT_WHEN_BUDGET_SUFFICES:
        return f"could be granted now (the scheduler {scheduler} grants whenever budget suffices)"
    return (
        "the blocks have enough budget now; whether and when it is granted is up to the "
        f"scheduler {scheduler or '(not readable with this key)'}"
    )


def print_dry_run(out: dict[str, Any], *, as_json: bool) -> None:
    """A task's dry run, as JSON or as text."""
    if as_json:
        emit_json(out)
        return
    verdict = dry_run_verdict(out)
    console.print(
        f"[bold]dry run: {escape(out['kind'])} task[/] on {escape(out['stream'])} in context "
        f"{escape(repr(out['context']))} — {verdict}; nothing queued, reserved or charged"
    )
    console.print(f"  demand per block: {escape(_budget_text(out['demand']))}")
    if out.get("largest_epsilon") is not None:
        console.print(f"  largest ε those blocks can still afford: {out['largest_epsilon']}")
    if out.get("affordable") is not None:
        console.print(f"  {len(out['affordable'])} of {len(out['blocks'])} block(s) can afford it")
    print_blocks_used(out["blocks"], label="blocks priced")
    if out.get("refusal"):
        print_refusal(out["refusal"], verb="short")


def _budget_text(form: dict[str, Any]) -> str:
    from blockbudget.accounting.filters import exact_text

    return exact_text(form) if ("rdp" in form or "epsilon" in form) else json.dumps(form)


def _task_doc(task: dict[str, Any]) -> dict[str, Any]:
    """A task for ``--json``: its times in ISO 8601 (UTC)."""
    out = dict(task)
    for name in ("submitted_at", "deadline", "decided_at"):
        if isinstance(out.get(name), int | float):
            out[name] = iso(out[name])
    return out


def print_task(task: dict[str, Any], *, as_json: bool) -> None:
    """A task's JSON form, as JSON or as a few lines of text (with its answer once done)."""
    if as_json:
        emit_json(_task_doc(task))
        return
    grant = f", reservation {escape(task['reservation_id'])}" if task["reservation_id"] else ""
    note = task["note"] or ""
    if note.startswith(f"{task['state']} "):  # "cancelled by local": the state once
        note = note[len(task["state"]) + 1 :]
    note = f" ({escape(note)})" if note else ""
    console.print(f"task {escape(task['id'])}: [bold]{task['state']}[/]{grant}{note}")
    demand = task["demand"] or {}
    console.print(
        f"  {task['kind']} on {escape(task['stream'])} in context "
        f"{escape(repr(task['context']))}; selector "
        f"{escape(json.dumps(task['selector']))}; demand {escape(_budget_text(demand))}; "
        f"{len(task['blocks'])} block(s) granted; submitted {utc(task.get('submitted_at'))}"
    )
    if task["blocks"]:
        print_blocks_used(list(task["blocks"]), label="blocks granted")
    if task.get("why"):
        print_why(task["why"])
    if task.get("refusal"):
        print_refusal(task["refusal"])
    if task.get("result") and task["kind"] == "query":
        print_answer(task["result"], as_json=False, dry_run=False)


def print_why(why: dict[str, Any]) -> None:
    console.print(f"  waits: {escape(why['reason'])}")
    from blockbudget.accounting.filters import exact_text

    for row in why["shortfall"][:20]:
        has = "retired" if row["has"] is None else exact_text(row["has"])
        console.print(
            f"    {escape(row['block'])}: needs {escape(exact_text(row['needs']))}, "
            f"has {escape(has)}"
        )


def print_refusal(refusal: dict[str, Any], *, verb: str = "refused") -> None:
    """A refused task's blocks now (or a dry run's that does not fit, ``verb="short"``): how
    many afford its demand, the others' remaining budget and shortfall (as a refused query
    prints them), and the next step."""
    from blockbudget.accounting.filters import exact_text

    if refusal.get("considered") is not None:
        console.print(
            f"  {verb}: {refusal['affordable']} of the {refusal['considered']} block(s) it may "
            f"use can afford its demand in context {escape(repr(refusal['context']))} now; it "
            f"needs {refusal['needed']}"
        )
    for row in refusal["blocks"][:20]:
        if row["retired"]:
            console.print(f"    {escape(row['block'])}: retired")
            continue
        console.print(
            f"    {escape(row['block'])}: remaining {escape(exact_text(row['remaining']))}, "
            f"short by {escape(exact_text(row['shortfall']))}"
        )
    if len(refusal["blocks"]) > 20:
        console.print(f"    … ({len(refusal['blocks']) - 20} more; --json lists them)")
    console.print(f"[dim]next: {escape(refusal['next'])}[/]")


def _one(task_id: str, home: Path, server: str | None, api_key: str | None) -> dict[str, Any]:
    client = remote(server, api_key)
    if client is not None:
        with client:
            return client.task(task_id)
    from blockbudget.service.task_forms import refusal_json, task_json, why_json

    with _local_queue(home) as queue:
        task = queue.task(task_id)
        return task_json(task, why=why_json(queue, task), refusal=refusal_json(queue, task))


@task_app.command("show")
@handle_errors
def task_show(
    task_id: str,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """One task: its state, grant, why it waits, its answer once done."""
    print_task(_one(task_id, home, server, api_key), as_json=as_json)


@task_app.command("why")
@handle_errors
def task_why(
    task_id: str,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Why a task waits: which blocks lack what."""
    task = _one(task_id, home, server, api_key)
    why = task.get("why")
    if as_json:
        emit_json({"id": task["id"], "state": task["state"], "why": why})
    elif why is None:
        console.print(f"task {escape(task['id'])} does not wait: it is [bold]{task['state']}[/]")
    else:
        console.print(f"task {escape(task['id'])}: [bold]waiting[/]")
        print_why(why)


@task_app.command("cancel")
@handle_errors
def task_cancel(
    task_id: str,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Cancel a waiting, granted or running task; its reservation is released at once."""
    client = remote(server, api_key)
    if client is not None:
        with client:
            task = client.cancel_task(task_id)
    else:
        from blockbudget.service.task_forms import task_json

        with _local_queue(home) as queue:
            task = task_json(queue.cancel(task_id, by="local", admin=True))
    print_task(task, as_json=as_json)


@task_app.command("list")
@handle_errors
def task_list(
    stream: Annotated[str | None, typer.Option(help="Only this stream's tasks.")] = None,
    state: Annotated[
        str | None, typer.Option(help="waiting, granted, running, done, failed, ...")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="query, budget or pipeline.")] = None,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Tasks with state and grant: yours on a server (an admin's key: everyone's), all locally."""
    client = remote(server, api_key)
    if client is not None:
        with client:
            queue_json = client.tasks(stream, state, kind)
    else:
        queue_json = _list_local(home, stream, state, kind)
    if as_json:
        emit_json({**queue_json, "tasks": [_task_doc(t) for t in queue_json["tasks"]]})
        return
    schedulers = queue_json.get("schedulers") or {}

    def own(name: str) -> str:  # each stream's own scheduler (an older server: its default)
        return str(schedulers.get(name, queue_json["scheduler"]))

    table = Table(
        Column("task", no_wrap=True),
        "principal",
        "stream",
        "context",
        "kind",
        "demand",
        "blocks",
        Column("state", no_wrap=True),
        "grant",
        title="tasks" if stream is None else f"tasks (scheduler {escape(str(own(stream)))})",
    )
    for t in queue_json["tasks"]:
        demand = t["demand"] or {}
        table.add_row(
            escape(t["id"][:12]),
            escape(t["principal"]),
            escape(t["stream"]),
            escape(t["context"]),
            t["kind"],
            ", ".join(f"{k}={v}" for k, v in demand.items() if k != "rdp") or "rdp",
            str(len(t["blocks"])),
            t["state"],
            escape(t["reservation_id"] or "-"),
        )
    console.print(table)
    # each listed stream's own scheduler, one line each and never wrapped (a table column is
    # cut to "fc…" on a narrow console)
    for name in sorted({t["stream"] for t in queue_json["tasks"] if t["kind"] != "pipeline"}):
        console.print(f"scheduler of {escape(name)}: {escape(own(name))}", soft_wrap=True)


def _list_local(
    home: Path, stream: str | None, state: str | None, kind: str | None
) -> dict[str, Any]:
    from blockbudget.service.task_forms import task_json
    from blockbudget.tasks.model import TaskState, WorkKind

    try:
        wanted = None if state is None else TaskState(state)
        of_kind = None if kind is None else WorkKind(kind)
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None
    with _local_queue(home) as queue:
        found = queue.tasks(stream=stream, state=wanted, kind=of_kind)
        spec = queue.scheduler_for(stream) if stream else queue.default_spec.text
        schedulers = {s: queue.scheduler_for(s) for s in sorted({t.stream for t in found})}
        return {
            "scheduler": spec,
            "schedulers": schedulers,
            "tasks": [task_json(t) for t in found],
        }


@task_app.command("scheduler")
@handle_errors
def task_scheduler(
    stream: str,
    spec: Annotated[
        str | None, typer.Argument(help="Set it: name[:key=value,...] (admins).")
    ] = None,
    as_json: JsonOpt = False,
    home: HomeOpt = DEFAULT_HOME,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Show (or set) the scheduler that decides a stream's tasks."""
    client = remote(server, api_key)
    if client is not None:
        with client:
            out = client.scheduler(stream) if spec is None else client.set_scheduler(stream, spec)
    else:
        with _local_queue(home) as queue:
            queue.platform.stream(stream)
            if spec is not None:
                queue.set_scheduler(stream, spec)
            out = {
                "stream": stream,
                "scheduler": queue.scheduler_for(stream),
                "pipeline_scheduler": queue.pipeline_spec.text,
            }
    if as_json:
        emit_json(out)
    else:
        console.print(
            f"stream {escape(stream)}: scheduler [bold]{escape(str(out['scheduler']))}[/], "
            f"pipelines {escape(str(out['pipeline_scheduler']))}"
        )

"""``blockbudget task submit|list``: the scheduler queue of a running service (server mode only:
the queue lives in the service, see :mod:`blockbudget.service.queue`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Column, Table

from blockbudget.cli.common import (
    ContextOpt,
    KeyOpt,
    ServerOpt,
    app,
    console,
    handle_errors,
    remote,
)

if TYPE_CHECKING:
    from blockbudget.service.client import ServiceClient

task_app = typer.Typer(
    help="Submit tasks to a service's scheduler queue and follow them.", no_args_is_help=True
)
app.add_typer(task_app, name="task")


def _client(server: str | None, api_key: str | None) -> ServiceClient:
    client = remote(server, api_key)
    if client is None:
        raise typer.BadParameter("the scheduler queue lives in a service: give --server URL")
    return client


@task_app.command("submit")
@handle_errors
def task_submit(
    stream: Annotated[str, typer.Argument(help="Stream whose blocks the task needs.")],
    epsilon: Annotated[float, typer.Option(help="ε demanded on each block.")],
    delta: Annotated[float, typer.Option(help="δ demanded on each block.")] = 0.0,
    context: ContextOpt = None,
    last: Annotated[int | None, typer.Option(help="The newest N blocks.")] = None,
    block: Annotated[
        list[str] | None, typer.Option("--block", help="A block id or key (repeatable).")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds the task may wait before it expires.")
    ] = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Queue a task; the service's scheduler grants it as a reservation you draw from."""
    if (last is None) == (not block):
        raise typer.BadParameter("give exactly one of --last N and --block ID")
    body: dict[str, object] = {"epsilon": epsilon, "delta": delta}
    if context:
        body["context"] = context  # left out: the principal's only bound context
    body.update({"last": last} if last is not None else {"blocks": list(block or [])})
    if timeout is not None:
        body["timeout_seconds"] = timeout
    with _client(server, api_key) as client:
        task = client.submit_task(stream, body)
    grant = f", reservation {task['reservation_id']}" if task["reservation_id"] else ""
    console.print(f"task {task['id']}: [bold]{task['state']}[/]{grant} {task['note']}".rstrip())


@task_app.command("list")
@handle_errors
def task_list(
    stream: Annotated[str | None, typer.Option(help="Only this stream's tasks.")] = None,
    state: Annotated[str | None, typer.Option(help="waiting, granted, expired, refused.")] = None,
    server: ServerOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """The queue: your tasks (an admin's key: everyone's) with state and grant."""
    with _client(server, api_key) as client:
        queue = client.tasks(stream, state)
    table = Table(
        Column("task", no_wrap=True),
        "principal",
        "stream",
        "context",
        "ε",
        "δ",
        "blocks",
        Column("state", no_wrap=True),
        "grant",
        title=f"scheduler queue ({queue['scheduler']})",
    )
    for t in queue["tasks"]:
        table.add_row(
            t["id"][:12],
            t["principal"],
            t["stream"],
            t["context"],
            t["epsilon"],
            t["delta"],
            str(len(t["blocks"])),
            t["state"],
            t["reservation_id"] or "-",
        )
    console.print(table)

"""Shared pieces of the command line: the Typer apps, the options every command takes, error
handling and small text helpers."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from blockbudget.errors import BlockBudgetError
from blockbudget.service.client import ServiceClient

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

"""Shared pieces of the command line: the Typer apps, the options every command takes, error
handling and small text helpers.

Start-up stays light: the command modules import only Typer, rich and blockbudget's small value
modules at import time; the platform (SQLAlchemy, pyarrow, pandas), the mechanisms (OpenDP) and
the HTTP client (httpx; the service extra) are imported inside the commands that use them, so
``blockbudget --help`` is quick and the local commands work without the service extra."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from blockbudget.errors import BlockBudgetError, InvalidRequestError

if TYPE_CHECKING:
    from blockbudget.platform import Platform
    from blockbudget.service.client import ServiceClient

app = typer.Typer(
    name="blockbudget",
    help="Differential-privacy budgets for growing datasets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("blockbudget")
        except PackageNotFoundError:  # run from a source tree that is not installed
            from blockbudget import __version__ as installed
        typer.echo(f"blockbudget {installed}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the installed version and exit.",
        ),
    ] = False,
) -> None:
    """Differential-privacy budgets for growing datasets."""


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
ContextOpt = Annotated[
    str | None,
    typer.Option(
        "--context",
        envvar="BLOCKBUDGET_CONTEXT",
        help="Registered context that pays (or $BLOCKBUDGET_CONTEXT). With --server it may be "
        "left out when the key's principal is bound to exactly one context.",
    ),
]
#: ``--json`` on every command: one JSON document on stdout (see :func:`emit_json`).
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", help="Print one JSON document (stable keys; budgets as exact decimal strings)."
    ),
]
principal_app = typer.Typer(
    help="Principals, API keys and stream access of a service.", no_args_is_help=True
)
app.add_typer(principal_app, name="principal")


#: What to install for ``--server`` and ``serve`` (the HTTP client and server).
SERVICE_EXTRA_HINT = "pip install 'blockbudget[service]'"


def missing_extra(exc: ModuleNotFoundError, what: str) -> typer.Exit:
    """Print that ``what`` needs the service extra; the exit (code 2) to raise."""
    console.print(
        f"[bold red]error:[/] {what} needs the service extra ({exc.name} is not installed): "
        f"{escape(SERVICE_EXTRA_HINT)}"
    )
    return typer.Exit(code=2)


def remote(server: str | None, api_key: str | None) -> ServiceClient | None:
    """A client of ``server`` when one is given (then an API key is required), else None.

    Raises:
        typer.Exit: (code 2) the service extra (httpx) is not installed.
    """
    if not server:
        return None
    if not api_key:
        raise InvalidRequestError("--server needs --api-key (or $BLOCKBUDGET_API_KEY)")
    try:
        from blockbudget.service.client import ServiceClient
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "--server") from exc
    return ServiceClient(server, api_key)


def open_platform(home: Path) -> Platform:
    """The platform in the home folder (imported here: the platform's libraries are heavy),
    with its ledger in ``$BLOCKBUDGET_DATABASE`` and its block files under
    ``$BLOCKBUDGET_DATA_ROOT`` when they are set (as for ``serve``), so the local commands see
    what a server sees."""
    from blockbudget.platform import Platform

    return Platform(
        home,
        database_url=os.environ.get("BLOCKBUDGET_DATABASE") or None,
        data_root=os.environ.get("BLOCKBUDGET_DATA_ROOT") or None,
    )


def local_context(platform: Platform, context: str | None) -> str:
    """The context a local command spends in: the one named by ``--context`` or
    ``$BLOCKBUDGET_CONTEXT``. There is no implicit one.

    Raises:
        InvalidRequestError: no context was named.
    """
    if context:
        return context
    known = platform.contexts()
    listed = ", ".join(known) if known else "none yet: an administrator adds them with "
    hint = "" if known else "`blockbudget context add NAME`"
    raise InvalidRequestError(
        "name the context that pays with --context NAME (or set $BLOCKBUDGET_CONTEXT); "
        f"registered contexts: {listed}{hint}"
    )


#: Python names that may reach a message, and the command a CLI user runs instead.
CLI_NAMES = {
    "Ledger.add_context": "`blockbudget context add NAME`",
    "Platform.add_context": "`blockbudget context add NAME`",
    "Ledger.close_context": "`blockbudget context close NAME`",
    "Platform.close_context": "`blockbudget context close NAME`",
}
#: Hints the CLI adds after an error of these classes (local or from a server).
CLI_HINTS = {
    "NothingAffordableError": "`blockbudget afford STREAM --context C --last N` says the "
    "largest ε those blocks can still afford",
    "BudgetExceededError": "`blockbudget afford STREAM --context C --block B` says the largest "
    "ε those blocks can still afford",
}


def error_json(exc: BlockBudgetError) -> dict[str, Any]:
    """The ``--json`` form of an error: ``{"error": {"type", "message"}}`` plus ``status`` (the
    HTTP status, for a server's refusal) and ``refusal`` (a budget refusal's exact remaining
    budget and shortfall as decimal strings) when known."""
    from blockbudget.errors import BudgetExceededError, NothingAffordableError

    kind, message = type(exc).__name__, cli_text(str(exc))
    out: dict[str, Any] = {"type": kind, "message": message}
    status = getattr(exc, "status", None)
    if isinstance(status, int) and type(exc).__name__ == "ServiceError":
        out.update(type=getattr(exc, "error", kind), status=status)
        out["message"] = cli_text(getattr(exc, "detail", message))
        if getattr(exc, "refusal", None) is not None:
            out["refusal"] = exc.refusal  # type: ignore[attr-defined]
    elif isinstance(exc, NothingAffordableError) or (
        isinstance(exc, BudgetExceededError) and exc.exact
    ):
        out["refusal"] = exc.refusal_json()
    return {"error": out}


def cli_text(message: str) -> str:
    """A platform message as a CLI user reads it: Python calls named by their commands (except
    in a clause that names them as Python, ``Python: Ledger.add_context``, beside the command),
    and ``last`` as the ``--last`` option.

    Example:
        >>> cli_text("register it (Python: Ledger.add_context); or Ledger.add_context")
        'register it (Python: Ledger.add_context); or `blockbudget context add NAME`'
        >>> cli_text("last must be at least 1 (how many of the newest blocks), got 0")
        '--last must be at least 1 (how many of the newest blocks), got 0'
    """
    import re

    for python, command in CLI_NAMES.items():
        message = re.sub(rf"(?<!Python: ){re.escape(python)}", command, message)
    if message.startswith("last must be at least 1"):
        message = "--" + message
    return message


def handle_errors(fn: F) -> F:
    """Turn platform (and server) errors into exit code 2 with one clear message: a red line
    on the terminal (brackets printed literally), or with ``--json`` the document of
    :func:`error_json` on stdout."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BlockBudgetError as exc:
            if kwargs.get("as_json"):
                emit_json(error_json(exc))
                raise typer.Exit(code=2) from exc
            doc = error_json(exc)["error"]
            what = doc["type"] if "status" not in doc else f"HTTP {doc['status']} {doc['type']}"
            console.print(
                f"[bold red]error:[/] {escape(what)}: {escape(doc['message'])}", soft_wrap=True
            )
            hint = CLI_HINTS.get(doc["type"])
            if hint:
                console.print(f"[dim]hint: {escape(hint)}[/]")
            raise typer.Exit(code=2) from exc

    return wrapper  # type: ignore[return-value]


def utc(ts: float | None) -> str:
    """A Unix time as people read it: ``2026-11-24 03:12 UTC`` (empty for None)."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def iso(ts: float | None) -> str | None:
    """A Unix time in ISO 8601, UTC (``2026-11-24T03:12:05.250000Z``; None stays None)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


def print_blocks_used(
    blocks: list[str],
    *,
    last: int | None = None,
    newest: list[str] | None = None,
    label: str = "blocks used",
) -> None:
    """Print the blocks an answer used; with ``--last N``, say so when they are not the newest
    ``N`` live blocks (newer ones could not afford the request and were skipped)."""
    shown = (
        ", ".join(blocks)
        if len(blocks) <= 12
        else f"{', '.join(blocks[:6])}, … ({len(blocks) - 12} more) …, {', '.join(blocks[-6:])}"
    )
    console.print(f"  {label} ({len(blocks)}): {escape(shown)}")
    if last is not None and newest is not None and set(newest) != set(blocks):
        used = set(blocks)
        skipped = [b for b in newest if b not in used]
        console.print(
            f"  [yellow]note:[/] --last {last} moved to older blocks: of the newest {last} live "
            f"block(s), {len(skipped)} could not afford the request and were skipped "
            f"({escape(', '.join(skipped[:6]))}{', …' if len(skipped) > 6 else ''})"
        )


def _json_default(value: object) -> object:
    """JSON for the value types commands print: exact decimals as strings, times in ISO 8601."""
    from blockbudget.budget import canonical_decimal

    if isinstance(value, Decimal):
        return canonical_decimal(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    if isinstance(value, Path | Enum):
        return str(value) if isinstance(value, Path) else value.value
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return value.item()
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def emit_json(document: object) -> None:
    """Print ``document`` as one JSON document on stdout, keys sorted, no markup.

    The form every ``--json`` option prints: stable keys, budgets as exact decimal strings
    (never floats or display strings), times in ISO 8601 (UTC).
    """
    typer.echo(json.dumps(document, sort_keys=True, default=_json_default))


#: ``--yes`` on a command that cannot be undone.
YesOpt = Annotated[
    bool,
    typer.Option(
        "--yes", help="Confirm without a prompt (required with --json or without a terminal)."
    ),
]


def confirm_irreversible(question: str, *, yes: bool, as_json: bool) -> None:
    """Ask ``question`` before an action that cannot be undone, unless ``--yes`` was given.

    With ``--json`` or without a terminal nothing is asked (a prompt would mix with the JSON
    on stdout, or wait on a script forever): ``--yes`` is required. The prompt goes to stderr.

    Raises:
        InvalidRequestError: neither ``--yes`` nor a terminal to ask on (or ``--json``).
        typer.Abort: the person answered no.
    """
    import sys

    if yes:
        return
    if as_json or not sys.stdin.isatty():
        raise InvalidRequestError(
            f"{question.rstrip('?')} cannot be undone: pass --yes to confirm (required with "
            "--json or without a terminal)"
        )
    typer.confirm(question, abort=True, err=True)


def budget_number(text: str, *, name: str = "--epsilon") -> float | str:
    """An ε or δ option as the JSON form carries it: a number when the text is exactly a
    float's shortest decimal (``0.5``), else the exact decimal string (``0.341279519435449196``,
    which a float would round), so that the ledger charges exactly what was typed.

    Raises:
        InvalidRequestError: the text is not a finite number of a budget's magnitude.
    """
    from blockbudget.budget import canonical_decimal, to_decimal
    from blockbudget.errors import InvalidBudgetError

    try:
        value = to_decimal(text, name=name)
    except InvalidBudgetError as exc:
        raise InvalidRequestError(str(exc)) from None
    if not value.is_finite():
        raise InvalidRequestError(f"{name} must be finite, got {text!r}")
    as_float = float(value)
    return as_float if Decimal(repr(as_float)) == value else canonical_decimal(value)


def parse_window(text: str, *, name: str = "--window") -> timedelta:
    """``1d``, ``6h``, ``15m`` or ``30s`` as a timedelta.

    Raises:
        InvalidRequestError: other text (the message names the option, ``name``).
    """
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    text = text.strip().lower()
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit() or int(text[:-1]) <= 0:
        raise InvalidRequestError(f"{name} must look like 1d, 6h, 15m or 30s; got {text!r}")
    return timedelta(**{units[text[-1]]: int(text[:-1])})


#: The applications' modules whose pipeline kinds ``serve`` and the local task queue offer
#: (:mod:`blockbudget.tasks.pipeline_kinds`).
PIPELINE_MODULES = ("blockbudget.apps.flights.pipelines",)


def load_pipelines() -> None:
    """Register the pipeline kinds of :data:`PIPELINE_MODULES` (before a task queue opens)."""
    from blockbudget.tasks.pipeline_kinds import load_pipeline_modules

    load_pipeline_modules(PIPELINE_MODULES)

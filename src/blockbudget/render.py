"""Text views of a platform for people (rich markup): the blocks table and the audit verify
report, shared by the command line (:mod:`blockbudget.cli`) and the demo
(:mod:`blockbudget.apps.demo`). Each prints to the :class:`rich.console.Console` it is given.

Example:
    >>> bar(0.5, width=4)
    '[yellow]██[/][dim]░░[/] 50.0%'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from blockbudget.lowbudget import RETIRING_BELOW

if TYPE_CHECKING:
    from rich.console import Console

    from blockbudget.platform import Platform

__all__ = ["bar", "print_verify", "render_blocks", "render_remote_blocks", "retiring_line"]


def bar(fraction: float, width: int = 10) -> str:
    """A text bar for a remaining fraction, colored by how much is left."""
    fraction = max(0.0, min(1.0, fraction))
    full = round(fraction * width)
    color = "green" if fraction > 0.5 else "yellow" if fraction > 0.15 else "red"
    return f"[{color}]{'█' * full}[/][dim]{'░' * (width - full)}[/] {fraction:5.1%}"


def render_blocks(
    platform: Platform,
    stream: str,
    *,
    console: Console,
    contexts: list[str] | None = None,
    last: int = 0,
) -> None:
    """Print the blocks table of a local platform: rows, state and a bar of the remaining
    budget per context (``contexts``, default every open one), the newest ``last`` (0: all)."""
    views = platform.blocks(stream, contexts=contexts)
    if last > 0:
        views = views[-last:]
    ctxs = list(contexts) if contexts else platform.contexts()
    table = Table(title=f"blocks of {escape(stream)} — remaining budget per context")
    table.add_column("block")
    table.add_column("rows", justify="right")
    table.add_column("state")
    for c in ctxs:
        table.add_column(escape(c))
    for v in views:
        state = "[red]retired[/]" if v.retired else ("sealed" if v.sealed else "open")
        state += ", [yellow]retiring[/]" if any(v.retiring_in.values()) else ""
        cells = [bar(v.remaining_fraction.get(c, 1.0)) for c in ctxs]
        table.add_row(escape(v.block_id), f"{v.rows:,}", state, *cells)
    console.print(table)
    per = {c: sum(bool(v.retiring_in.get(c)) for v in views) for c in ctxs}
    console.print(retiring_line(per, sum(v.retiring for v in views)))
    coalition = platform.coalition_contexts()
    if len(coalition) > 1:
        console.print(
            f"[dim]{len(coalition)} contexts count ({escape(', '.join(coalition))}): a coalition "
            f"of all of them could learn up to {len(coalition)} × ε_g = "
            f"{platform.coalition_epsilon(stream):g} about any one block. Row counts are exact: "
            "show them to data owners only.[/]"
        )


def render_remote_blocks(
    views: list[dict[str, Any]], stream: str, *, console: Console, last: int = 0
) -> None:
    """Print the blocks table from a server's answer (row counts only where the server sent
    them: to the stream's owners and admins)."""
    if last > 0:
        views = views[-last:]
    ctxs = sorted({c for v in views for c in v["remaining_fraction"]})
    with_rows = any(v.get("rows") is not None for v in views)
    table = Table(title=f"blocks of {escape(stream)} — remaining budget per context")
    table.add_column("block")
    if with_rows:
        table.add_column("rows", justify="right")
    table.add_column("state")
    for c in ctxs:
        table.add_column(escape(c))
    for v in views:
        state = "[red]retired[/]" if v["retired"] else ("sealed" if v["sealed"] else "open")
        retiring_in = v.get("retiring_in") or {}
        state += ", [yellow]retiring[/]" if any(retiring_in.values()) else ""
        cells = [bar(v["remaining_fraction"].get(c, 1.0)) for c in ctxs]
        rows = [f"{v['rows']:,}"] if with_rows else []
        table.add_row(escape(v["block_id"]), *rows, state, *cells)
    console.print(table)
    per = {c: sum(bool((v.get("retiring_in") or {}).get(c)) for v in views) for c in ctxs}
    flags = [v.get("retiring") for v in views]
    everywhere = None if any(f is None for f in flags) else sum(bool(f) for f in flags)
    console.print(retiring_line(per, everywhere))


def retiring_line(per_context: dict[str, int], everywhere: int | None = None) -> str:
    """The line under a blocks table: how many blocks are retiring in each context shown (live,
    under 10% left there: the definition every view shares, :mod:`blockbudget.lowbudget`) and,
    for a viewer who sees every open context, in all of them.

    Example:
        >>> retiring_line({"team-a": 2, "team-b": 0}, 0)
        'retiring block(s), live and under 10% left: team-a 2, team-b 0; in every open context 0'
    """
    counts = ", ".join(f"{c} {n}" for c, n in per_context.items()) or "no context shown"
    line = f"retiring block(s), live and under {RETIRING_BELOW:.0%} left: {counts}"
    return line if everywhere is None else f"{line}; in every open context {everywhere}"


def print_verify(report: Any, *, console: Console) -> None:
    """Print an audit verify report (:meth:`blockbudget.platform.Platform.verify`)."""
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
        for note in getattr(report, "notes", ())[:20]:
            console.print(f"  [yellow]note[/]: {escape(str(note))}")
    else:
        console.print(f"[bold red]audit verify: FAILED[/] — {len(report.problems)} problem(s)")
        for p in report.problems[:20]:
            console.print(f"  - {escape(str(p))}")

"""The live budget dashboard's data: a blocks × time heatmap of consumed budget per context.

The heatmap is computed from the audit log, so it shows history, not only the present: for each
context, every ``charged`` event adds its cost's filter features to its blocks, and the cell
(block, bucket) is the fraction of the block's budget consumed (charged; reservations not yet
drawn are not consumption) at the end of that time bucket — ``1 − filter.remaining_fraction``.
Exactly the arithmetic the ledger's filters use, so the last column equals the blocks table
when no reservation is open (the table also subtracts what open reservations hold).

Each cell also carries the exact remaining budget (``filter.describe_remaining``: the decimal
(ε, δ) left under basic composition). :class:`Heatmap` ``series`` is the remaining budget over
time per context: at the end of each bucket, the mean remaining fraction over the shown blocks
that existed then (a retired block counts 0). :func:`low_budget_alerts` lists the
(stream, context) pairs with live blocks under the alert threshold
(:mod:`blockbudget.lowbudget`), for the page's banner and the metrics.

The page itself (``static/dashboard.html`` + ``dashboard.js`` + ``dashboard.css``) ships in the
package and loads nothing from elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from blockbudget.accounting import Combine, Filter, add_vectors
from blockbudget.accounting.filters import Vector, exact_text
from blockbudget.budget import cost_from_json
from blockbudget.ledger import AuditEvent, EventKind
from blockbudget.lowbudget import check_threshold, is_low

if TYPE_CHECKING:
    from blockbudget.platform import BlockView, Platform

STATIC_DIR = Path(__file__).parent / "static"


@dataclass(frozen=True)
class Heatmap:
    """Consumed fraction per (context, block, bucket); see the module docstring.

    Attributes:
        blocks: the rows, in display order.
        retired: the blocks that retired, in the order they did.
        times: the end of each bucket (Unix seconds; the first bucket starts at ``start``).
        cells: per context, per block, per bucket: the consumed fraction.
        retired_at: the bucket in which each retired block retired.
        remaining: per context, per block, per bucket: the exact remaining budget as text.
        series: per context, per bucket: the mean remaining fraction over the blocks that
            existed at the end of the bucket (a retired one counts 0; None before any).
        start: the start of the first bucket.
    """

    blocks: tuple[str, ...]
    retired: tuple[str, ...]
    times: tuple[float, ...]
    cells: dict[str, list[list[float]]]
    retired_at: dict[str, int]
    remaining: dict[str, list[list[str]]]
    series: dict[str, list[float | None]]
    start: float


@dataclass(frozen=True)
class _Axis:
    """The time buckets between the first and the last event."""

    t0: float
    t1: float
    buckets: int

    @property
    def width(self) -> float:
        return (self.t1 - self.t0) / self.buckets if self.t1 > self.t0 else 1.0

    def bucket_of(self, ts: float) -> int:
        if self.t1 <= self.t0:
            return self.buckets - 1
        return max(0, min(self.buckets - 1, int((ts - self.t0) / self.width)))

    def ends(self) -> tuple[float, ...]:
        return tuple(self.t0 + self.width * (k + 1) for k in range(self.buckets))


def heatmap(
    events: Sequence[AuditEvent],
    *,
    blocks: Sequence[str],
    contexts: Sequence[str],
    filter_: Filter,
    buckets: int = 24,
) -> Heatmap:
    """Replay ``charged``, ``retired`` and ``block_added`` events into per-bucket consumed
    fractions, exact remaining budgets and the remaining-over-time series.

    Args:
        events: the stream's audit events, oldest first (other kinds and blocks are skipped).
        blocks: the stream's blocks, in display order.
        contexts: the contexts to show.
        filter_: the stream's per-block filter.
        buckets: how many time buckets between the first and the last event.

    Raises:
        ValueError: ``buckets`` < 1.

    Example:
        >>> from blockbudget.accounting import Accounting, make_filter
        >>> from blockbudget.budget import Budget
        >>> hm = heatmap([], blocks=["s/a"], contexts=["t"], buckets=2,
        ...              filter_=make_filter(Accounting.BASIC, capacity=Budget(epsilon=1)))
        >>> hm.cells["t"], hm.remaining["t"], hm.series["t"]
        ([[0.0, 0.0]], [['ε=1, δ=0', 'ε=1, δ=0']], [1.0, 1.0])
    """
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    wanted = {b: i for i, b in enumerate(blocks)}
    axis = _Axis(events[0].ts, events[-1].ts, buckets) if events else _Axis(0.0, 0.0, buckets)
    retired_at: dict[str, int] = {}
    born: dict[int, int] = {}  # row -> the bucket its block was added in
    for e in events:
        if e.kind is EventKind.RETIRED:
            for b in e.payload["blocks"]:
                if b in wanted and b not in retired_at:
                    retired_at[b] = axis.bucket_of(e.ts)
        elif e.kind is EventKind.BLOCK_ADDED and e.payload.get("block") in wanted:
            born.setdefault(wanted[e.payload["block"]], axis.bucket_of(e.ts))
    out = _Replay(filter_, blocks, contexts, buckets, retired_at, born)
    k = 0
    for e in events:
        if e.kind is not EventKind.CHARGED or e.context not in out.used:
            continue
        bucket = axis.bucket_of(e.ts)
        while k < bucket:  # close the buckets before this event
            out.snapshot(k)
            k += 1
        feats = filter_.features(cost_from_json(e.payload["cost"]))
        row = out.used[str(e.context)]
        for b in e.payload["blocks"]:
            i = wanted.get(b)
            if i is not None:
                row[i] = add_vectors(row[i], feats)
    while k < buckets:
        out.snapshot(k)
        k += 1
    return Heatmap(
        blocks=tuple(blocks),
        retired=tuple(retired_at),
        times=axis.ends(),
        cells=out.cells,
        retired_at=retired_at,
        remaining=out.texts,
        series=out.series,
        start=axis.t0,
    )


def exact_remaining(filter_: Filter, used: Vector) -> str:
    """What a block whose summed features are ``used`` has left: exact decimal ε and δ when the
    filter's test is linear in every feature and what remains is one (ε, δ) pair (basic,
    advanced composition: :meth:`~blockbudget.accounting.filters.Filter.remaining_json`), the
    filter's own statement otherwise (under strong composition, RDP and GDP what is left is not
    one (ε, δ) pair).

    Example:
        >>> from blockbudget.accounting import Accounting, make_filter
        >>> from blockbudget.budget import Budget
        >>> f = make_filter(Accounting.BASIC, capacity=Budget(epsilon=1, delta="1e-6"))
        >>> exact_remaining(f, f.features(Budget(epsilon="0.95")))
        'ε=0.05, δ=0.000001'
    """
    if filter_.combine is Combine.ALL:
        form = filter_.remaining_json(used)
        if set(form) == {"epsilon", "delta"}:
            return exact_text(form)
    return filter_.describe_remaining(used)


class _Replay:
    """The running per-block sums of one heatmap replay and the snapshots taken of them."""

    def __init__(
        self,
        filter_: Filter,
        blocks: Sequence[str],
        contexts: Sequence[str],
        buckets: int,
        retired_at: dict[str, int],
        born: dict[int, int],
    ) -> None:
        self.filter = filter_
        self.blocks = list(blocks)
        self.retired_at = retired_at
        self.born = born
        self.used: dict[str, list[Vector]] = {c: [filter_.zero() for _ in blocks] for c in contexts}
        self.cells = {c: [[0.0] * buckets for _ in blocks] for c in contexts}
        self.texts = {c: [[""] * buckets for _ in blocks] for c in contexts}
        self.series: dict[str, list[float | None]] = {c: [None] * buckets for c in contexts}
        self._described: dict[Vector, tuple[float, str]] = {}

    def _describe(self, vec: Vector) -> tuple[float, str]:
        found = self._described.get(vec)
        if found is None:
            found = (self.filter.remaining_fraction(vec), exact_remaining(self.filter, vec))
            self._described[vec] = found
        return found

    def snapshot(self, k: int) -> None:
        """Record every block's state at the end of bucket ``k``."""
        for c, rows in self.used.items():
            total, alive = 0.0, 0
            for i, vec in enumerate(rows):
                left, text = self._describe(vec)
                self.cells[c][i][k] = round(1.0 - left, 6)
                self.texts[c][i][k] = text
                if self.born.get(i, 0) > k:
                    continue  # not added yet
                gone = self.retired_at.get(self.blocks[i])
                alive += 1
                total += 0.0 if gone is not None and gone <= k else left
            self.series[c][k] = round(total / alive, 6) if alive else None


@dataclass(frozen=True)
class LowBudgetAlert:
    """The live blocks of one stream with less than ``below`` of their budget left in one
    context (:func:`blockbudget.lowbudget.is_low`).

    Attributes:
        stream: the stream.
        context: the context.
        below: the threshold (a fraction of a block's budget).
        blocks: the low blocks' ids, in the stream's block order.
        lowest: the smallest remaining fraction among them.
    """

    stream: str
    context: str
    below: float
    blocks: tuple[str, ...]
    lowest: float

    def to_json(self) -> dict[str, object]:
        """The alert as JSON (block ids as given)."""
        return {
            "stream": self.stream,
            "context": self.context,
            "below": self.below,
            "blocks": list(self.blocks),
            "lowest": self.lowest,
        }


def alerts_from_views(
    stream: str, views: Iterable[BlockView], *, below: float, contexts: Sequence[str]
) -> list[LowBudgetAlert]:
    """The low-budget alerts of ``stream`` given its block views (one per context in
    ``contexts`` with a low live block), in ``contexts`` order."""
    below = check_threshold(below)
    live = [v for v in views if not v.retired]
    out = []
    for c in contexts:
        low = [v for v in live if c in v.remaining_fraction]
        low = [v for v in low if is_low(v.remaining_fraction[c], below=below)]
        if low:
            out.append(
                LowBudgetAlert(
                    stream=stream,
                    context=c,
                    below=below,
                    blocks=tuple(v.block_id for v in low),
                    lowest=min(v.remaining_fraction[c] for v in low),
                )
            )
    return out


def low_budget_alerts(
    platform: Platform,
    *,
    below: float,
    streams: Sequence[str] | None = None,
    contexts: Sequence[str] | None = None,
) -> list[LowBudgetAlert]:
    """Every (stream, context) with live blocks whose remaining fraction is under ``below``,
    read from the database now (so every server process agrees; cheap enough per scrape: one
    read of each stream's block catalog and ledger rows).

    Args:
        platform: the platform to read.
        below: the threshold, a fraction in [0, 1] (the server's ``--alert-below``).
        streams: the streams to check (default: all).
        contexts: the contexts to check (default: every open one).

    Raises:
        InvalidRequestError: ``below`` is not in [0, 1].

    Example:
        >>> import tempfile
        >>> from blockbudget.platform import Platform
        >>> p = Platform(tempfile.mkdtemp())
        >>> low_budget_alerts(p, below=0.1)
        []
        >>> p.close()
    """
    below = check_threshold(below)
    ctxs = list(contexts) if contexts is not None else platform.contexts()
    names = list(streams) if streams is not None else [s.name for s in platform.streams()]
    out: list[LowBudgetAlert] = []
    for stream in names:
        views = platform.blocks(stream, contexts=ctxs)
        out.extend(alerts_from_views(stream, views, below=below, contexts=ctxs))
    return out


def retiring_counts(platform: Platform, *, streams: Sequence[str] | None = None) -> dict[str, int]:
    """The number of retiring blocks per stream (:func:`blockbudget.lowbudget.is_retiring`: the
    count every view shows), read from the database now.

    Example:
        >>> import tempfile
        >>> from blockbudget.platform import Platform
        >>> p = Platform(tempfile.mkdtemp())
        >>> retiring_counts(p)
        {}
        >>> p.close()
    """
    names = list(streams) if streams is not None else [s.name for s in platform.streams()]
    return {s: sum(v.retiring for v in platform.blocks(s, contexts=[])) for s in names}


def page() -> str:
    """The dashboard's HTML (scripts and styles are served from ``/static``)."""
    return (STATIC_DIR / "dashboard.html").read_text(encoding="utf-8")


def manifest() -> str:
    """The names of the shipped static files, as JSON (for a test that nothing is missing)."""
    return json.dumps(sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file()))

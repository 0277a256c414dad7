"""The live budget dashboard's data: a blocks × time heatmap of consumed budget per context.

The heatmap is computed from the audit log, so it shows history, not only the present: for each
context, every ``charged`` event adds its cost's filter features to its blocks, and the cell
(block, bucket) is the fraction of the block's budget consumed (charged; reservations not yet
drawn are not consumption) at the end of that time bucket — ``1 − filter.remaining_fraction``.
Exactly the arithmetic the ledger's filters use, so the last column equals the blocks table.

The page itself (``static/dashboard.html`` + ``dashboard.js`` + ``dashboard.css``) ships in the
package and loads nothing from elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from blockbudget.accounting import Filter, add_vectors
from blockbudget.budget import cost_from_json
from blockbudget.ledger import AuditEvent, EventKind

STATIC_DIR = Path(__file__).parent / "static"

#: A block is shown as "retiring" when every visible context has at most this much left.
RETIRING_FRACTION = 0.1


@dataclass(frozen=True)
class Heatmap:
    """Consumed fraction per (context, block, bucket); see the module docstring."""

    blocks: tuple[str, ...]
    retired: tuple[str, ...]
    times: tuple[float, ...]
    cells: dict[str, list[list[float]]]
    retired_at: dict[str, int]


def heatmap(
    events: Sequence[AuditEvent],
    *,
    blocks: Sequence[str],
    contexts: Sequence[str],
    filter_: Filter,
    buckets: int = 24,
) -> Heatmap:
    """Replay ``charged`` and ``retired`` events into per-bucket consumed fractions.

    Args:
        events: audit events, oldest first (any stream; others are skipped).
        blocks: the stream's blocks, in display order.
        contexts: the contexts to show.
        filter_: the stream's per-block filter.
        buckets: how many time buckets between the first and the last event.
    """
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    wanted = {b: i for i, b in enumerate(blocks)}
    relevant: list[AuditEvent] = []
    retirements: list[AuditEvent] = []
    for e in events:
        if e.kind is EventKind.CHARGED and e.context in contexts:
            relevant.append(e)
        elif e.kind is EventKind.RETIRED:
            retirements.append(e)
    if events:
        t0, t1 = events[0].ts, events[-1].ts
    else:
        t0 = t1 = 0.0
    width = (t1 - t0) / buckets if t1 > t0 else 1.0

    def bucket_of(ts: float) -> int:
        return min(buckets - 1, int((ts - t0) / width)) if t1 > t0 else buckets - 1

    retired_at: dict[str, int] = {}
    for e in retirements:
        for b in e.payload["blocks"]:
            if b in wanted and b not in retired_at:
                retired_at[b] = bucket_of(e.ts)
    times = tuple(t0 + width * (k + 1) for k in range(buckets))
    used = {c: [filter_.zero() for _ in blocks] for c in contexts}
    cells = {c: [[0.0] * buckets for _ in blocks] for c in contexts}
    k = 0
    for e in relevant:
        bucket = bucket_of(e.ts)
        while k < bucket:  # close the buckets before this event
            _snapshot(cells, used, filter_, k)
            k += 1
        payload = e.payload
        feats = filter_.features(cost_from_json(payload["cost"]))
        row = used[str(e.context)]
        for b in payload["blocks"]:
            i = wanted.get(b)
            if i is not None:
                row[i] = add_vectors(row[i], feats)
    while k < buckets:
        _snapshot(cells, used, filter_, k)
        k += 1
    return Heatmap(tuple(blocks), tuple(retired_at), times, cells, retired_at)


def _snapshot(
    cells: dict[str, list[list[float]]],
    used: dict[str, list[tuple[int, ...]]],
    filter_: Filter,
    k: int,
) -> None:
    for c, rows in used.items():
        for i, vec in enumerate(rows):
            cells[c][i][k] = round(1.0 - filter_.remaining_fraction(vec), 6)


def page() -> str:
    """The dashboard's HTML (scripts and styles are served from ``/static``)."""
    return (STATIC_DIR / "dashboard.html").read_text(encoding="utf-8")


def manifest() -> str:
    """The names of the shipped static files, as JSON (for a test that nothing is missing)."""
    return json.dumps(sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file()))

"""The database side of ``/metrics``: budgets, blocks, reservations, ledger events and task queues,
read from the database at scrape time so that every server process reports the same numbers.

A scrape must not cost more as the ledger's history grows. :class:`BudgetTracker` therefore keeps,
per process, the remaining fraction of every (live block, open context) and the cumulative count
of audit events, *current to an audit seq*, and brings them forward incrementally:

* the first refresh (or one that finds more than :data:`REBUILD_AFTER` new events) reads the
  tables directly, in one read snapshot: the live blocks, their budget rows, the event counts
  grouped by (kind, context), and the audit tip they are current to;
* every later refresh reads only the audit events after its seq (a range of the log's key), learns
  which blocks they touched (charged, reserved, released, expired, retired, added) and re-reads
  those blocks' budget rows by key;
* a refresh that finds the audit tip unchanged reads nothing else at all (every change to the
  ledger appends an event in the same transaction, so the state is a function of the tip).

Sequence numbers follow commit order with no gaps (:mod:`blockbudget.ledger.audit`), so an event
range read once is never completed later. Open reservations (an index on their state) and the
task queue's live tasks (an index on theirs) are counted on every scrape; neither grows with
history. The per-scrape work is then the new events plus one pass over the live blocks to
aggregate them per (stream, context).

The remaining fraction of a block in a context is the ledger's own
(:meth:`blockbudget.accounting.Filter.remaining_fraction` of charged + reserved), the number the
blocks view shows; *low* and *retiring* are :mod:`blockbudget.lowbudget`'s predicates, the ones
every other view uses.

Example:
    >>> from blockbudget.accounting import Accounting
    >>> from blockbudget.budget import UNIT, Budget, units_down
    >>> from blockbudget.ledger import Ledger
    >>> ledger = Ledger("sqlite://")
    >>> _ = ledger.add_context("ads")
    >>> _ = ledger.add_blocks(["s/1", "s/2"], stream="s", capacity=Budget(epsilon=1),
    ...                       accounting=Accounting.BASIC)
    >>> _ = ledger.charge(["s/1"], Budget(epsilon=0.95), context="ads")
    >>> low_budget_block_counts(ledger.engine, below=0.1)
    {('s', 'ads'): 1}
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, func, inspect, select

from blockbudget.accounting import Accounting, Filter, make_filter
from blockbudget.budget import Budget
from blockbudget.ledger.db import run_transaction
from blockbudget.ledger.fastsql import chunks
from blockbudget.ledger.schema import audit, blocks, budgets, contexts, reservations
from blockbudget.ledger.types import EventKind, ReservationState, Vector, decode_vector
from blockbudget.lowbudget import check_threshold, is_low, is_retiring

__all__ = [
    "LIVE_TASK_STATES",
    "REBUILD_AFTER",
    "BudgetSummary",
    "BudgetTracker",
    "LedgerSnapshot",
    "low_budget_block_counts",
]

#: More new audit events than this since the last refresh: read the tables afresh instead.
REBUILD_AFTER = 50_000

#: The task states a queue length counts (the others are final and only grow with history).
LIVE_TASK_STATES = ("waiting", "running")


@dataclass(frozen=True)
class _Left:
    """What one live block has left in one context."""

    fraction: float
    epsilon: float | None  # the ε one more charge may take (basic, strong, …); None for RDP, GDP


@dataclass(frozen=True)
class BudgetSummary:
    """The live blocks of one stream in one open context.

    Attributes:
        blocks: how many live blocks.
        min_fraction: the smallest remaining fraction among them.
        mean_fraction: their mean remaining fraction.
        min_epsilon: the ε left on the most-spent block (None when the stream's accounting
            has no single ε, i.e. RDP).
    """

    blocks: int
    min_fraction: float
    mean_fraction: float
    min_epsilon: float | None


@dataclass(frozen=True)
class LedgerSnapshot:
    """The ledger's numbers at one audit seq (see the module docstring)."""

    seq: int
    blocks: Mapping[tuple[str, str], int]  # (stream, live|retiring|retired) → count
    budgets: Mapping[tuple[str, str], BudgetSummary]  # (stream, context) → summary
    events: Mapping[tuple[str, str], int]  # (kind, context or "") → cumulative count
    low: Mapping[tuple[str, str], int]  # (stream, context) → live blocks below the threshold


class BudgetTracker:
    """Per-process, incrementally refreshed budget state of a ledger database (thread-safe).

    Args:
        engine: the ledger's engine.
        alert_below: the low-budget threshold, a fraction in [0, 1].

    Example:
        >>> from blockbudget.ledger import Ledger
        >>> ledger = Ledger("sqlite://")
        >>> tracker = BudgetTracker(ledger.engine)
        >>> tracker.snapshot().seq
        0
        >>> _ = ledger.add_context("ads")
        >>> snap = tracker.snapshot()  # reads the one new event only
        >>> snap.seq, snap.events
        (1, {('context_added', 'ads'): 1})
    """

    def __init__(self, engine: Engine, *, alert_below: float = 0.1) -> None:
        self.engine = engine
        self.alert_below = check_threshold(alert_below)
        self._lock = threading.Lock()
        self._seq = -1  # nothing read yet
        self._contexts: tuple[str, ...] = ()
        self._live: dict[str, tuple[str, Filter]] = {}  # block → (stream, filter)
        self._left: dict[tuple[str, str], _Left] = {}  # (block, context) → what is left
        self._retired: Counter[str] = Counter()  # stream → retired blocks
        self._events: Counter[tuple[str, str]] = Counter()
        self._filters: dict[tuple[str, str, str, float | None], Filter] = {}
        self._snapshot: LedgerSnapshot | None = None

    # --- reading ------------------------------------------------------------------------------

    def snapshot(self) -> LedgerSnapshot:
        """Bring the state to the database's audit tip and summarize it."""
        with self._lock:
            changed = run_transaction(self.engine, self._refresh, write=False, attempts=3)
            if changed or self._snapshot is None:
                self._snapshot = self._summarize()
            return self._snapshot

    def low_budget_counts(self, below: float | None = None) -> dict[tuple[str, str], int]:
        """Live blocks per (stream, open context) whose remaining fraction is under ``below``
        (default: this tracker's ``alert_below``); pairs with none are left out."""
        snap = self.snapshot()
        if below is None or below == self.alert_below:
            return dict(snap.low)
        with self._lock:
            return _count_low(self._live, self._left, self._contexts, below)

    def _refresh(self, conn: Connection) -> bool:
        tip = int(conn.execute(select(func.max(audit.c.seq))).scalar() or 0)
        if tip == self._seq:
            return False
        if self._seq < 0 or tip - self._seq > REBUILD_AFTER or tip < self._seq:
            self._rebuild(conn, tip)
        else:
            self._advance(conn, tip)
        self._seq = tip
        return True

    def _rebuild(self, conn: Connection, tip: int) -> None:
        self._contexts = _open_contexts(conn)
        self._live.clear()
        self._left.clear()
        self._retired.clear()
        for r in conn.execute(select(blocks).where(blocks.c.retired.is_(False))):
            self._live[r.block_id] = (r.stream, self._filter_of(r._mapping))
        q = select(blocks.c.stream, func.count()).where(blocks.c.retired.is_(True))
        for stream, n in conn.execute(q.group_by(blocks.c.stream)):
            self._retired[stream] = int(n)
        self._load_budgets(conn, list(self._live))
        self._events.clear()
        q = select(audit.c.kind, audit.c.context, func.count()).where(audit.c.seq <= tip)
        for kind, context, n in conn.execute(q.group_by(audit.c.kind, audit.c.context)):
            self._events[(kind, context or "")] += int(n)

    def _advance(self, conn: Connection, tip: int) -> None:
        """Apply the events in (seq, tip]: count them, then re-read what they touched."""
        q = select(audit.c.kind, audit.c.context, audit.c.payload).where(
            audit.c.seq > self._seq, audit.c.seq <= tip
        )
        added: list[str] = []
        touched: set[str] = set()
        retired: set[str] = set()
        contexts_changed = False
        for kind, context, payload in conn.execute(q.order_by(audit.c.seq)):
            self._events[(kind, context or "")] += 1
            if kind in _TOUCHING:
                touched.update(_touched_blocks(kind, json.loads(payload)))
            elif kind == EventKind.BLOCK_ADDED.value:
                added.append(str(json.loads(payload)["block"]))
            elif kind == EventKind.RETIRED.value:
                retired.update(json.loads(payload)["blocks"])
            else:  # context added or closed
                contexts_changed = True
        if contexts_changed:
            self._contexts = _open_contexts(conn)
        for part in chunks(sorted(set(added))):
            for r in conn.execute(select(blocks).where(blocks.c.block_id.in_(list(part)))):
                self._live[r.block_id] = (r.stream, self._filter_of(r._mapping))
        for b in retired:
            gone = self._live.pop(b, None)
            if gone is not None:
                self._retired[gone[0]] += 1
        self._load_budgets(conn, [b for b in touched if b in self._live])

    def _load_budgets(self, conn: Connection, ids: list[str]) -> None:
        """(Re)read the budget rows of blocks ``ids`` (a row is never deleted: reading them
        again replaces what was known)."""
        q = select(budgets.c.block_id, budgets.c.context, budgets.c.charged, budgets.c.reserved)
        for part in chunks(sorted(ids)):
            for r in conn.execute(q.where(budgets.c.block_id.in_(list(part)))):
                f = self._live[r.block_id][1]
                used = tuple(a + b for a, b in zip(*_vectors(r.charged, r.reserved), strict=True))
                self._left[(r.block_id, r.context)] = _left_of(f, used)

    def _filter_of(self, m: Any) -> Filter:
        key = (m["accounting"], m["capacity_epsilon"], m["capacity_delta"], m["slack_delta"])
        f = self._filters.get(key)
        if f is None:
            capacity = Budget(epsilon=Decimal(key[1]), delta=Decimal(key[2]))
            f = make_filter(Accounting(key[0]), capacity=capacity, slack_delta=key[3])
            self._filters[key] = f
        return f

    # --- summarizing --------------------------------------------------------------------------

    def _summarize(self) -> LedgerSnapshot:
        block_counts: Counter[tuple[str, str]] = Counter()
        for stream, n in self._retired.items():
            block_counts[(stream, "retired")] = n
        acc: dict[tuple[str, str], list[Any]] = {}  # (stream, ctx) → [n, min, sum, min ε]
        fresh: dict[Filter, _Left] = {}
        for b, (stream, f) in self._live.items():
            fractions: dict[str, float] = {}
            for c in self._contexts:
                left = self._left.get((b, c))
                if left is None:
                    left = fresh.get(f) or fresh.setdefault(f, _left_of(f, f.zero()))
                fractions[c] = left.fraction
                a = acc.get((stream, c))
                if a is None:
                    acc[(stream, c)] = [1, left.fraction, left.fraction, left.epsilon]
                    continue
                a[0] += 1
                a[1] = min(a[1], left.fraction)
                a[2] += left.fraction
                if left.epsilon is not None:
                    a[3] = left.epsilon if a[3] is None else min(a[3], left.epsilon)
            retiring = is_retiring(fractions, retired=False)
            block_counts[(stream, "retiring" if retiring else "live")] += 1
        summaries = {
            key: BudgetSummary(blocks=n, min_fraction=lo, mean_fraction=s / n, min_epsilon=e)
            for key, (n, lo, s, e) in acc.items()
        }
        low = _count_low(self._live, self._left, self._contexts, self.alert_below)
        return LedgerSnapshot(
            seq=self._seq,
            blocks=dict(block_counts),
            budgets=summaries,
            events=dict(self._events),
            low=low,
        )


def low_budget_block_counts(engine: Engine, *, below: float = 0.1) -> dict[tuple[str, str], int]:
    """Live blocks per (stream, open context) whose remaining fraction in that context is under
    ``below``, read from the database (pairs with none are left out).

    This is the computation behind the ``blockbudget_low_budget_blocks`` gauge; a caller that
    asks repeatedly keeps a :class:`BudgetTracker` and calls its
    :meth:`~BudgetTracker.low_budget_counts` instead (incremental).

    Args:
        engine: the ledger's engine.
        below: the threshold, a fraction in [0, 1] (``--alert-below``).
    """
    return BudgetTracker(engine, alert_below=below).low_budget_counts()


def open_reservations(engine: Engine) -> dict[str, int]:
    """Open reservations per context (an indexed count)."""

    def read(conn: Connection) -> dict[str, int]:
        q = (
            select(reservations.c.context, func.count())
            .where(reservations.c.state == ReservationState.OPEN.value)
            .group_by(reservations.c.context)
        )
        return {str(c): int(n) for c, n in conn.execute(q)}

    return run_transaction(engine, read, write=False, attempts=3)


def live_tasks(engine: Engine) -> dict[tuple[str, str], int]:
    """Tasks per (stream, state) in :data:`LIVE_TASK_STATES` (an indexed count; empty when the
    database has no task table)."""
    from blockbudget.tasks.table import tasks_table as t

    def read(conn: Connection) -> dict[tuple[str, str], int]:
        if not inspect(conn).has_table(t.name):
            return {}
        q = (
            select(t.c.stream, t.c.state, func.count())
            .where(t.c.state.in_(LIVE_TASK_STATES))
            .group_by(t.c.stream, t.c.state)
        )
        return {(str(s), str(st)): int(n) for s, st, n in conn.execute(q)}

    return run_transaction(engine, read, write=False, attempts=3)


# --- helpers -----------------------------------------------------------------------------------

_TOUCHING = frozenset(
    k.value for k in (EventKind.CHARGED, EventKind.RESERVED, EventKind.RELEASED, EventKind.EXPIRED)
)


def _touched_blocks(kind: str, payload: Mapping[str, Any]) -> Iterable[str]:
    if kind in (EventKind.CHARGED.value, EventKind.RESERVED.value):
        return [str(b) for b in payload["blocks"]]
    return [str(b) for b in payload.get("returned", {})]


def _open_contexts(conn: Connection) -> tuple[str, ...]:
    q = select(contexts.c.name).where(contexts.c.closed_at.is_(None)).order_by(contexts.c.name)
    return tuple(str(r[0]) for r in conn.execute(q))


def _vectors(charged: str, reserved: str) -> tuple[Vector, Vector]:
    return decode_vector(charged), decode_vector(reserved)


def _left_of(f: Filter, used: Vector) -> _Left:
    """What is left: the fraction, and the ε one more pure charge may take where the rule
    states one (:meth:`~blockbudget.accounting.filters.Filter.remaining_json`: ε_g − Σε under
    basic composition, the largest next ε under strong and advanced composition; None under RDP
    and GDP, whose remainder is not one ε)."""
    left = f.remaining_json(used).get("epsilon")
    eps = float(left) if isinstance(left, str) else None
    return _Left(fraction=float(f.remaining_fraction(used)), epsilon=eps)


def _count_low(
    live: Mapping[str, tuple[str, Filter]],
    left: Mapping[tuple[str, str], _Left],
    open_contexts: Iterable[str],
    below: float,
) -> dict[tuple[str, str], int]:
    out: Counter[tuple[str, str]] = Counter()
    ctxs = tuple(open_contexts)
    untouched: dict[Filter, float] = {}  # a block no charge or reservation touched yet
    for b, (stream, f) in live.items():
        for c in ctxs:
            found = left.get((b, c))
            if found is not None:
                fraction = found.fraction
            elif (fraction := untouched.get(f, -1.0)) < 0:
                fraction = untouched[f] = f.remaining_fraction(f.zero())
            if is_low(fraction, below=below):
                out[(stream, c)] += 1
    return dict(out)

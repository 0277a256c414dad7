"""A scheduler's :class:`~blockbudget.scheduling.Pool` kept in step with the live ledger.

The ledger is the truth; a pool is one scheduler's in-memory view of one (stream, context).
:class:`LivePool` keeps the two in step, incrementally:

* **retired blocks** — a ``retired`` event → :meth:`Pool.retire`: no scheduler can place
  budget there again (the ledger would refuse it), and selectors never bind to it;
* **new blocks** — a ``block_added`` event of the stream → :meth:`Pool.add_block` and
  :meth:`Scheduler.on_block` (the block arrives now, all its budget unallocated);
* **usage beyond the pool** — the ledger shows more used on a block (charged + reserved) than
  the pool counts (a direct charge, a DP query, a pipeline, another process) → the excess is
  charged in the pool to the synthetic, never-scheduled task ``__ledger__``;
* **usage below the pool** — the ledger shows less (a grant spent less than it held and was
  closed, a cancelled grant, an expired reservation) → :meth:`Pool.credit` gives the difference
  back (a ``CREDIT`` decision), and the scheduler retries the waiting tasks that may use the
  credited blocks (:meth:`Scheduler.on_credit`): a task waiting behind a cancelled grant is
  granted at once, with no new block and no tick.

Each sync reads the audit log after the last seq it saw (:class:`LedgerFeed`, one range read
of the log's key shared by every pool of a queue) and then the ledger rows of the blocks those
events touched only (:meth:`Ledger.states` with ``blocks``): a sync costs what changed, not
what the stream holds. The first sync of a pool reads the stream's rows once.

Example:
    >>> from blockbudget import Budget
    >>> from blockbudget.accounting import Accounting
    >>> from blockbudget.ledger import Ledger
    >>> from blockbudget.scheduling import get_scheduler
    >>> ledger = Ledger("sqlite://")
    >>> _ = ledger.add_context("team")
    >>> _ = ledger.add_blocks(["s/1"], stream="s", capacity=Budget(epsilon=1),
    ...                       accounting=Accounting.BASIC)
    >>> live = LivePool(ledger, stream="s", context="team", scheduler=get_scheduler("fcfs"))
    >>> _ = ledger.charge(["s/1"], Budget(epsilon=0.25), context="team")
    >>> live.sync().charged
    1
    >>> round(float(live.pool.charged[0][0]), 6)
    0.25
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from blockbudget.accounting import Accounting, get_rule
from blockbudget.budget import UNIT, Budget, Cost
from blockbudget.errors import BlockBudgetError, InternalError, UnknownBlockError
from blockbudget.ledger import BlockState, Ledger
from blockbudget.ledger.types import EventKind
from blockbudget.scheduling import BlockSpec, Pool, Scheduler, TaskSpec

__all__ = ["LEDGER_TASK", "FeedBatch", "LedgerFeed", "LivePool", "SyncReport"]

log = logging.getLogger("blockbudget.tasks")

#: The synthetic pool task that carries budget used outside the scheduler.
LEDGER_TASK = "__ledger__"
#: Below this many fixed-point units (1e-12 of ε) a pool/ledger difference is float rounding.
SYNC_SLACK_UNITS = 10**6
#: Audit events read per page.
_PAGE = 5000


@dataclass
class FeedBatch:
    """What the audit log says changed since the previous poll.

    Attributes:
        tip: the seq the batch is current to.
        added: stream → ids of blocks registered, in order.
        touched: context → blocks whose rows changed there (reserve, charge, release, expiry).
        retired: blocks retired (in every context).
        events: how many events were read.
    """

    tip: int
    added: dict[str, list[str]] = field(default_factory=dict)
    touched: dict[str, set[str]] = field(default_factory=dict)
    retired: set[str] = field(default_factory=set)
    events: int = 0

    def merge(self, other: FeedBatch) -> None:
        """Add a later batch to this one."""
        self.tip = max(self.tip, other.tip)
        for s, ids in other.added.items():
            self.added.setdefault(s, []).extend(ids)
        for c, blocks in other.touched.items():
            self.touched.setdefault(c, set()).update(blocks)
        self.retired |= other.retired
        self.events += other.events


class LedgerFeed:
    """Reads the ledger's audit log incrementally (one key range per poll).

    Args:
        ledger: the ledger.
        after_seq: the seq already seen (default: the log's tip now).
    """

    def __init__(self, ledger: Ledger, *, after_seq: int | None = None) -> None:
        self.ledger = ledger
        self.seq = ledger.audit_seq() if after_seq is None else after_seq

    def poll(self) -> FeedBatch:
        """The events after the last poll, summarised (see :class:`FeedBatch`)."""
        batch = FeedBatch(tip=self.seq)
        while True:
            events = self.ledger.events(self.seq, limit=_PAGE)
            for ev in events:
                _absorb(batch, ev.kind, ev.context, json.loads(ev.payload_json))
                self.seq = ev.seq
            batch.events += len(events)
            batch.tip = self.seq
            if len(events) < _PAGE:
                return batch


def _absorb(batch: FeedBatch, kind: EventKind, context: str | None, p: dict[str, object]) -> None:
    if kind is EventKind.BLOCK_ADDED:
        batch.added.setdefault(str(p["stream"]), []).append(str(p["block"]))
    elif kind is EventKind.RETIRED:
        batch.retired.update(map(str, _list(p.get("blocks"))))
    elif context is not None and kind in (EventKind.RESERVED, EventKind.CHARGED):
        batch.touched.setdefault(context, set()).update(map(str, _list(p.get("blocks"))))
    elif context is not None and kind in (EventKind.RELEASED, EventKind.EXPIRED):
        returned = p.get("returned")
        if isinstance(returned, dict):
            batch.touched.setdefault(context, set()).update(map(str, returned))


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


@dataclass(frozen=True)
class SyncReport:
    """What one sync changed in the pool.

    Attributes:
        added: blocks added; charged: blocks charged to ``__ledger__``; credited: blocks
        credited; read: ledger rows read.
    """

    added: int = 0
    charged: int = 0
    credited: int = 0
    read: int = 0


class LivePool:
    """One scheduler's pool for one (stream, context), in step with the ledger.

    Args:
        ledger: the ledger.
        stream, context: what the pool schedules.
        scheduler: the scheduler that acts on :attr:`pool` (its ``on_block`` is called for
            every block, the existing ones first, oldest first).
        clock: the time the pool and scheduler see (``pool.now``), e.g. wall-clock seconds.
        feed: a shared :class:`LedgerFeed` (the queue's); None gives the pool its own.
        accounting: the stream's rule (needed only while the stream has no blocks yet).

    Raises:
        UnknownBlockError: the stream has no blocks in the ledger and no ``accounting``.
        InvalidRequestError: the scheduler does not support the stream's accounting.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        stream: str,
        context: str,
        scheduler: Scheduler,
        clock: Callable[[], float] | None = None,
        feed: LedgerFeed | None = None,
        accounting: Accounting | None = None,
    ) -> None:
        self.ledger = ledger
        self.stream = stream
        self.context = context
        self.scheduler = scheduler
        self.clock = clock or (lambda: 0.0)
        self.feed = feed if feed is not None else LedgerFeed(ledger)
        self._own_feed = feed is None
        self.retired: set[str] = set()
        self._dirty: set[str] = set()
        order = [b for b, s in ledger.added_blocks(0)[0] if s == stream]
        states = {s.block: s for s in ledger.states(stream, context)}
        if states:
            accounting = next(iter(states.values())).accounting
        elif accounting is None:
            raise UnknownBlockError(f"stream {stream!r} has no blocks to schedule yet")
        scheduler.check_serves(accounting, stream=stream)
        self.accounting: Accounting = accounting
        self.pool = Pool(accounting, slack_delta=stream_slack(ledger, stream, accounting))
        self.pool.now = self.clock()
        self.pool.submit(
            TaskSpec(LEDGER_TASK, arrival=self.pool.now, demand=Budget(epsilon="1e-12"))
        )
        known = set(order)
        ordered = [states[b] for b in order if b in states]
        ordered += [states[b] for b in sorted(states) if b not in known]
        self._add(ordered)
        self._reconcile_states(ordered)

    # --- syncing ---------------------------------------------------------------------------

    def absorb(self, batch: FeedBatch) -> None:
        """Note what a feed batch says about this pool (new blocks are added now; usage is
        reconciled by the next :meth:`reconcile`)."""
        self.pool.now = self.clock()
        new = [b for b in batch.added.get(self.stream, []) if b not in self.pool.block_index]
        if new:
            states = self._read(new)
            self._add([s for s in states if not s.retired])
            self._dirty.update(s.block for s in states if not s.retired)
        for b in sorted(batch.retired - self.retired):
            if b in self.pool.block_index:
                self.retired.add(b)
                self.pool.retire(b)  # never used again: every fit there is refused
        touched = batch.touched.get(self.context, ())
        self._dirty.update(b for b in touched if b in self.pool.block_index)

    def reconcile(self) -> SyncReport:
        """Bring the pool's usage of every touched block to the ledger's (see the module
        docstring). Call it only when every decision of the pool has been applied to the
        ledger: a decision still in flight would be undone as a credit."""
        if not self._dirty:
            return SyncReport()
        dirty, self._dirty = sorted(self._dirty), set()
        states = self._read(dirty)
        charged, credited = self._reconcile_states(states)
        if credited:
            try:
                self.scheduler.on_credit(self.pool, credited)
            except BlockBudgetError as exc:  # a scheduler bug: the pool refused, unchanged
                log.error("scheduler %s failed on a credit", self.scheduler.name, exc_info=exc)
        return SyncReport(charged=charged, credited=len(credited), read=len(states))

    def sync(self, batch: FeedBatch | None = None) -> SyncReport:
        """:meth:`absorb` a batch (polled from the pool's own feed when None) and
        :meth:`reconcile`."""
        n = self.pool.n_blocks
        if batch is None:
            batch = self.feed.poll()
        self.absorb(batch)
        report = self.reconcile()
        return SyncReport(
            added=self.pool.n_blocks - n,
            charged=report.charged,
            credited=report.credited,
            read=report.read,
        )

    # --- internals -------------------------------------------------------------------------

    def _read(self, blocks: Sequence[str]) -> list[BlockState]:
        return self.ledger.states(self.stream, self.context, blocks=blocks)

    def _add(self, states: Iterable[BlockState]) -> None:
        for st in states:
            if st.block in self.pool.block_index:
                continue
            spec = BlockSpec(st.block, arrival=self.pool.now, capacity=st.capacity)
            self.pool.add_block(spec)
            if st.retired:
                self.retired.add(st.block)
                self.pool.retire(st.block)
            try:
                self.scheduler.on_block(self.pool, spec)
            except BlockBudgetError as exc:  # a scheduler bug: the pool refused, unchanged
                log.error("scheduler %s failed on a new block", self.scheduler.name, exc_info=exc)

    def _reconcile_states(self, states: Iterable[BlockState]) -> tuple[int, list[str]]:
        """Charges and credits (see the module docstring): (blocks charged, blocks credited)."""
        pool = self.pool
        charged = 0
        credited: list[str] = []
        for st in states:
            i = pool.block_index.get(st.block)
            if i is None:
                continue
            counted = pool.charged[i] + pool.reserved[i]
            diff = [
                u - int(Decimal(float(c)) * UNIT) for u, c in zip(st.used, counted, strict=True)
            ]
            more = [max(0, d) for d in diff]
            less = [max(0, -d) for d in diff]
            # charge() is False (nothing changed) only where the pool's block is full to its
            # float margin; the ledger then refuses any grant there, which refuses the task.
            if max(more) > SYNC_SLACK_UNITS and pool.charge(
                LEDGER_TASK,
                {st.block: cost_of_units(more, self.accounting)},
                units={st.block: tuple(more)},  # the ledger's own units, exactly
            ):
                charged += 1
            if max(less) > SYNC_SLACK_UNITS:
                # rounded toward counting more: the pool never counts less than the ledger
                back = [max(0, x - SYNC_SLACK_UNITS) for x in less]
                pool.credit(
                    st.block,
                    cost_of_units(back, self.accounting),
                    task_id=LEDGER_TASK,
                    note="the ledger shows less used",
                    units=tuple(back),
                )
                credited.append(st.block)
        return charged, credited


def stream_slack(ledger: Ledger, stream: str, accounting: Accounting) -> float | None:
    """The slack δ̃ the ledger stores for the stream's blocks (None for rules without one), so
    that the pool's filters are the ledger's exactly.

    Raises:
        InternalError: the stream's blocks disagree (one stream has one spec, so one slack).
    """
    if not get_rule(accounting).takes_slack:
        return None
    slacks = {info.slack_delta for info in ledger.blocks(stream)}
    if len(slacks) > 1:
        raise InternalError(f"the blocks of stream {stream!r} have different slacks: {slacks}")
    return next(iter(slacks), None)


def cost_of_units(units: Sequence[int], accounting: Accounting) -> Cost:
    """A cost of the rule's own kind describing a feature vector ``units`` (fixed-point
    integers), for the pool's decision log: the pool counts ``units`` themselves
    (:meth:`Pool.charge` / :meth:`Pool.credit` with ``units``), so the description need not
    carry every feature (:meth:`~blockbudget.accounting.rule.AccountingRule.cost_of_features`).

    Example:
        >>> print(cost_of_units([3 * 10**17, 0], Accounting.BASIC))
        (ε=0.3, δ=0)
    """
    return get_rule(accounting).cost_of_features(units)

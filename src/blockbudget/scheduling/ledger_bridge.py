"""Running a scheduler's decisions against the real :class:`~blockbudget.ledger.Ledger`.

A :class:`~blockbudget.scheduling.pool.Pool` is the scheduler's in-memory view; the ledger is
the durable truth (invariants 1–5 in docs/architecture.md: no overspend, atomic,
conservative, idempotent, audited). :class:`LedgerBridge` applies the pool's decision
log to a ledger, one ledger operation per decision, each with an idempotent request id derived
from the run and the decision's sequence number (a replay after a crash never charges twice):

* ``RESERVE`` → :meth:`Ledger.reserve` on the one block, held by the task;
* ``RELEASE`` → :meth:`Ledger.release` of every reservation the task holds on that block;
* ``CHARGE`` / ``OVERHEAD`` → a direct :meth:`Ledger.charge` (the pool logs the RELEASE of the
  task's own reservation on that block just before, so the budget is free again);
* terminal decisions change no budget, and neither does ``CREDIT`` (the pool learning that the
  ledger already got budget back).

Because the pool's floats are conservative with respect to the ledger's fixed-point integers,
a decision the pool accepted is never refused by the ledger (tested). A platform loop would call
:meth:`LedgerBridge.apply_new` after every scheduler callback, before handing data to a task.
"""

from __future__ import annotations

from collections import defaultdict

from blockbudget.accounting import Accounting
from blockbudget.ledger import Ledger
from blockbudget.ledger.types import DEFAULT_CONTEXT
from blockbudget.scheduling.base import Decision, DecisionKind
from blockbudget.scheduling.pool import Pool

__all__ = ["LedgerBridge"]


class LedgerBridge:
    """Applies a pool's decisions to a ledger, in order, exactly once.

    Args:
        ledger: the ledger.
        stream: the stream the blocks belong to.
        run_id: prefix of every request id (distinct per run).
        context: the ledger context to charge.
    """

    def __init__(
        self, ledger: Ledger, *, stream: str, run_id: str, context: str = DEFAULT_CONTEXT
    ) -> None:
        self.ledger = ledger
        self.stream = stream
        self.run_id = run_id
        self.context = context
        self.applied = 0
        self.registered: set[str] = set()
        self.holds: dict[tuple[str, str], list[str]] = defaultdict(list)

    def register_blocks(self, pool: Pool) -> None:
        """Add the pool's blocks to the ledger (idempotent)."""
        accounting: Accounting = pool.accounting
        for block in pool.blocks:
            if block.block_id in self.registered:
                continue
            self.ledger.add_blocks(
                [block.block_id],
                stream=self.stream,
                capacity=block.capacity,
                accounting=accounting,
                slack_delta=pool.rule.slack(pool.slack_delta),
                request_id=f"{self.run_id}:block:{block.block_id}",
            )
            self.registered.add(block.block_id)

    def apply(self, decision: Decision) -> None:
        """Apply one decision (see the module docstring).

        Raises:
            BudgetExceededError: the ledger refuses (never expected; it would be a bug).
        """
        d = decision
        rid = f"{self.run_id}:{d.seq}"
        if d.block_id is None or d.cost is None or d.kind is DecisionKind.CREDIT:
            return
        key = (d.task_id, d.block_id)
        if d.kind is DecisionKind.RESERVE:
            res = self.ledger.reserve(
                [d.block_id],
                d.cost,
                context=self.context,
                request_id=rid,
                holder=d.task_id,
                ttl_seconds=10**9,
            )
            if res.id not in self.holds[key]:  # a retried decision replays its reservation
                self.holds[key].append(res.id)
        elif d.kind is DecisionKind.RELEASE:
            for k, res_id in enumerate(self.holds.get(key, [])):
                self.ledger.release(res_id, request_id=f"{rid}:{k}")
            self.holds.pop(key, None)  # forgotten only once every release committed
        else:
            self.ledger.charge([d.block_id], d.cost, context=self.context, request_id=rid)

    def apply_new(self, pool: Pool) -> int:
        """Register new blocks and apply every decision not applied yet; returns how many."""
        self.register_blocks(pool)
        start = self.applied
        for done, d in enumerate(pool.decisions[start:], start=start + 1):
            self.apply(d)
            self.applied = done  # only once its ledger write committed: a failure retries it
        return self.applied - start

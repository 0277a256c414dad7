"""Applying a live pool's decisions to the ledger: a grant is ONE reservation.

:class:`GrantBridge` is a :class:`~blockbudget.scheduling.ledger_bridge.LedgerBridge` whose
``CHARGE`` decisions for a task are only collected, and whose ``GRANT`` reserves, in one
all-or-nothing ledger operation, the task's grant on the blocks it was charged: held by the
task's principal, with the idempotent request id ``<principal %3A-escaped>:queue:<task id>``
(:func:`grant_request_id`; a replay after a crash reserves once). The work then spends exactly
that reservation.

Per-block partial grants (seed 000 Alg. 3, Eq. (18): a block may give less than the demand)
become one **uniform** grant of the smallest per-block amount (:func:`smallest`): a
reservation holds one cost on every block, and a query then runs at that ε. What the pool
charged beyond it on some blocks comes back to the pool as a credit at the next sync.

``RESERVE``/``RELEASE`` (a waiting task's holds, e.g. Sage's Block/Conserve) become ledger
reservations held by the task id with request ids under :data:`HOLD_PREFIX`, so that a new
leader finds and releases the holds of a dead one; ``OVERHEAD`` (Alg. 1's ε0) is a direct
charge; the synthetic ``__ledger__`` task's decisions are the ledger's own and are skipped.

Example:
    >>> from blockbudget import Budget
    >>> smallest([Budget(epsilon="0.5", delta="1e-6"), Budget(epsilon="0.2", delta="1e-5")])
    Budget(epsilon='0.2', delta='0.000001')
    >>> grant_request_id("team:alice", "t1")
    'team%3Aalice:queue:t1'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from blockbudget.accounting import AccountingRule
from blockbudget.budget import Cost, sum_costs
from blockbudget.errors import InvalidBudgetError
from blockbudget.ledger import Ledger
from blockbudget.scheduling import Decision, DecisionKind
from blockbudget.scheduling.ledger_bridge import LedgerBridge
from blockbudget.tasks.livepool import LEDGER_TASK

__all__ = [
    "HOLD_PREFIX",
    "GrantBridge",
    "grant_request_id",
    "run_request_id",
    "run_task_of",
    "smallest",
]

#: Request-id prefix of the ledger reservations that carry waiting tasks' pool holds.
HOLD_PREFIX = "tasks-hold:"


def grant_request_id(principal: str, task_id: str) -> str:
    """The request id of a task's grant: the principal's name encoded as the service scopes
    request ids (``:`` → ``%3A``), so no other principal's request id can equal it."""
    return f"{principal.replace(':', '%3A')}:queue:{task_id}"


def run_request_id(principal: str, task_id: str, number: int, term: str) -> str:
    """The request id of a pipeline run's grant: ``<principal>:pipeline:<task>:run:<n>:<term>``
    (``term``: a nonce of the leader's lane, so a run redone by a later leader never replays
    an earlier one's id)."""
    return f"{principal.replace(':', '%3A')}:pipeline:{task_id}:run:{number}:{term}"


def run_task_of(request_id: str | None) -> tuple[str, str] | None:
    """(escaped principal, task id) of a pipeline run's request id (older ones, without a
    term, included); None for any other request id.

    Example:
        >>> run_task_of(run_request_id("team:a", "t1", 2, "ab12"))
        ('team%3Aa', 't1')
    """
    parts = (request_id or "").split(":")
    if len(parts) in (5, 6) and parts[1] == "pipeline" and parts[3] == "run":
        return parts[0], parts[2]
    return None


def smallest(costs: Sequence[Cost], *, rule: AccountingRule | None = None) -> Cost:
    """The largest cost that is at most each of ``costs`` (their :meth:`~Cost.meet`).

    Costs of mixed kinds (a pure budget beside RDP curves, say) are first read in ``rule``'s
    own kind (:meth:`AccountingRule.own_kind`).

    Raises:
        InvalidBudgetError: no costs, or costs of mixed kinds that ``rule`` (or, without one,
            the kinds themselves) cannot compare.
    """
    if not costs:
        raise InvalidBudgetError("a grant needs at least one block's cost")
    if all(c == costs[0] for c in costs[1:]):
        return costs[0]  # a uniform cost (any kind)
    if rule is not None and any(type(c) is not type(costs[0]) for c in costs):
        costs = [rule.own_kind(c) for c in costs]
    found = costs[0]
    for c in costs[1:]:
        found = found.meet(c)
    return found


class GrantBridge(LedgerBridge):
    """See the module docstring.

    Args:
        ledger, stream, context: as :class:`LedgerBridge`.
        run_id: unique per pool and leader term; hold request ids are ``<run_id>:<seq>``.
        holder_of: task id → (principal, grant request id).
        grant_ttl_seconds: how long a grant's reservation stays open.
        rule: the stream's accounting rule, which reads the per-block costs of a grant in its
            own kind when they are of mixed kinds (see :func:`smallest`).

    Attributes:
        granted: task id → (reservation id, blocks, the uniform cost), for grants applied and
            not yet taken by the queue.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        stream: str,
        context: str,
        run_id: str,
        holder_of: Callable[[str], tuple[str, str]],
        grant_ttl_seconds: float,
        rule: AccountingRule | None = None,
    ) -> None:
        super().__init__(ledger, stream=stream, run_id=run_id, context=context)
        self.holder_of = holder_of
        self.grant_ttl_seconds = grant_ttl_seconds
        self.rule = rule
        self.charged: dict[str, dict[str, list[Cost]]] = {}
        self.granted: dict[str, tuple[str, tuple[str, ...], Cost]] = {}

    def apply(self, decision: Decision) -> None:
        """Apply one decision.

        Raises:
            BlockBudgetError: the ledger refused (nothing of this decision happened).
        """
        d = decision
        if d.task_id == LEDGER_TASK:
            return
        if d.kind is DecisionKind.CHARGE and d.block_id is not None and d.cost is not None:
            per_block = self.charged.setdefault(d.task_id, {})
            seen = per_block.setdefault(d.block_id, [])
            seen.append(d.cost)
        elif d.kind is DecisionKind.GRANT:
            per_block = self.charged.get(d.task_id, {})
            blocks = sorted(per_block)
            cost = smallest([sum_costs(per_block[b]) for b in blocks], rule=self.rule)
            principal, request_id = self.holder_of(d.task_id)
            res = self.ledger.reserve(
                blocks,
                cost,
                context=self.context,
                holder=principal,
                ttl_seconds=self.grant_ttl_seconds,
                request_id=request_id,
            )
            self.charged.pop(d.task_id, None)  # only once the reservation committed
            self.granted[d.task_id] = (res.id, tuple(res.blocks), cost)
        elif d.kind in (DecisionKind.REJECT, DecisionKind.EXPIRE):
            self.charged.pop(d.task_id, None)
        else:
            super().apply(d)

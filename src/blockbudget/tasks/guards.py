"""Small guards of the live scheduler's DP accounting (used by the decider and the queue).

Example:
    >>> round_down(Decimal("0.1")) <= 0.1
    True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from blockbudget.accounting import Accounting, Combine, get_rule
from blockbudget.errors import BlockBudgetError, HighWaterMarkError, InvalidRequestError

if TYPE_CHECKING:
    from blockbudget.scheduling import Decision
    from blockbudget.tasks.bridge import GrantBridge

__all__ = ["INSECURE", "TRANSIENT", "durable_overhead", "refuse_strong", "round_down"]


#: What a task's result says when its paid significance was measured with seeded noise.
INSECURE: Mapping[str, Any] = {"significance_secure_noise": False}


def _transient_errors() -> tuple[type[BaseException], ...]:
    import sqlalchemy.exc

    # HighWaterMarkError: the ledger refuses budgets until `blockbudget db reconcile` (or
    # until its mark can be written): the same decision is retried, nothing is refused.
    return (
        OSError,
        sqlalchemy.exc.OperationalError,
        sqlalchemy.exc.InterfaceError,
        HighWaterMarkError,
    )


TRANSIENT = _transient_errors()


def durable_overhead(bridge: GrantBridge, decision: Decision) -> bool:
    """A pool's overhead sink: write an OVERHEAD decision (an AboveThreshold run's ε0) to the
    ledger at once, before the scheduler draws the noise it pays for. The decider's later
    apply of the same decision replays it (same request id ``<run_id>:<seq>``: not charged
    twice). False when the ledger refuses (a stale pool, a retired block): nothing changed."""
    try:
        bridge.apply(decision)
    except BlockBudgetError:
        return False
    return True


def refuse_strong(stream: str, accounting: Accounting) -> None:
    """The live queue schedules streams whose rule has a linear fit test only (ALL or ANY
    shape: basic, RDP, μ-GDP, advanced composition; docs/scheduling.md, "Running").

    A rule with a non-linear test (:attr:`~blockbudget.accounting.Combine.FILTER`, e.g.
    adaptive strong composition, whose ledger state is (ε, ε², g, δ)) is refused: the live
    pool decides its fits on float rows and could not decide them as the filter does without
    the exact sums of every block (the earlier service queue refused STRONG streams for the
    same reason).

    Raises:
        InvalidRequestError: the rule's fit test is FILTER-shaped.
    """
    rule = get_rule(accounting)
    if rule.combine is Combine.FILTER:
        raise InvalidRequestError(
            f"the task queue does not schedule stream {stream!r}: its accounting is "
            f"{rule.name} (a non-linear fit test: {rule.title}), which the live scheduler "
            "cannot mirror; use direct requests naming blocks on it"
        )


def round_down(exact: Decimal) -> float:
    """The largest float ≤ ``exact``."""
    out = float(exact)
    return math.nextafter(out, 0.0) if Decimal(out) > exact else out

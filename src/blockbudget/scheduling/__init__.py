"""Schedulers: who gets which blocks and how much of their budget.

One interface (:class:`~blockbudget.scheduling.base.Scheduler`) acting on one checked budget
state (:class:`~blockbudget.scheduling.pool.Pool`); every module in this package lists its
implementations in ``SCHEDULERS`` and :func:`scheduler_classes` finds them. See
``docs/scheduling.md`` for the catalogue and the simulator.
"""

from __future__ import annotations

from blockbudget.scheduling.base import (
    BlockSpec,
    Decision,
    DecisionKind,
    Scheduler,
    TaskShape,
    TaskSpec,
    TaskStatus,
    get_scheduler,
    scheduler_classes,
)
from blockbudget.scheduling.pool import Pool

__all__ = [
    "BlockSpec",
    "Decision",
    "DecisionKind",
    "Pool",
    "Scheduler",
    "TaskShape",
    "TaskSpec",
    "TaskStatus",
    "get_scheduler",
    "scheduler_classes",
]

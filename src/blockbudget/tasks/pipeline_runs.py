"""The pieces of a pipeline task's runs: the strategy, its profile, the bridge, one run.

See :mod:`blockbudget.tasks.pipelines` for how they fit together (seed
``004_2b5d216070ae2ded.txt`` §3.3, §5.4).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from blockbudget.budget import Budget, Cost
from blockbudget.errors import BlockBudgetError, InvalidRequestError
from blockbudget.failures import failure_of, new_reference
from blockbudget.outcome import Outcome
from blockbudget.scheduling import Decision, DecisionKind, Pool
from blockbudget.scheduling.base import scheduler_classes
from blockbudget.scheduling.budgets import capped_cost
from blockbudget.scheduling.ledger_bridge import LedgerBridge
from blockbudget.scheduling.sage import SageStrategy, Usage
from blockbudget.tasks.livepool import LEDGER_TASK
from blockbudget.tasks.model import Task, TaskState
from blockbudget.tasks.pipeline_kinds import get_pipeline_kind
from blockbudget.tasks.pipeline_work import (
    MAX_LEVELS,
    PipelineWork,
    build_pipeline,
    describe_model,
)

if TYPE_CHECKING:  # pragma: no cover
    from blockbudget.ledger import Ledger
    from blockbudget.platform import Platform

__all__ = [
    "RUN_TTL_SECONDS",
    "RunBridge",
    "RunProfile",
    "RunRecord",
    "TaskMoves",
    "capped",
    "configure",
    "make_strategy",
    "release_open",
    "release_quietly",
    "run_on_grant",
]

log = logging.getLogger("blockbudget.tasks")


class TaskMoves(Protocol):
    """The queue's task rows (:class:`~blockbudget.tasks.rows.TaskRows`): the one write the
    family makes to them."""

    def move(
        self,
        task_id: str,
        *,
        frm: Collection[TaskState],
        to: TaskState,
        when: float | None = None,
        note: str | None = None,
        reservation_id: str | None = None,
        blocks: tuple[str, ...] | None = None,
        result: Mapping[str, Any] | None = None,
    ) -> bool:
        """Move a task from one of ``frm`` to ``to``; False when it was in none of them."""
        ...


@dataclass(frozen=True)
class RunRecord:
    """One run of a pipeline, as shown in its summary.

    Attributes:
        iteration: 1-based.
        epsilon, delta: the run's grant per block.
        blocks: the window (block ids).
        reservation_id: the run's grant in the ledger.
        outcome: ACCEPT / REJECT / RETRY, or ``"DISCARDED"`` (the task was stopped meanwhile)
            or ``"FAILED"``.
    """

    iteration: int
    epsilon: Decimal
    delta: Decimal
    blocks: tuple[str, ...]
    reservation_id: str
    outcome: str

    def to_json(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "epsilon": str(self.epsilon),
            "delta": str(self.delta),
            "blocks": len(self.blocks),
            "reservation_id": self.reservation_id,
            "outcome": self.outcome,
        }


class RunProfile:
    """A :class:`~blockbudget.scheduling.sage.PipelineProfile` whose outcome is not known when
    the strategy asks: it answers None ("running") and the real run reports later."""

    def outcome(self, *, epsilon_fraction: float, blocks: int, partitioned: bool) -> None:
        del epsilon_fraction, blocks, partitioned
        return None


class RunBridge(LedgerBridge):
    """The RESERVE/RELEASE path of :class:`LedgerBridge` (a pipeline's shares, held by the
    task id); CHARGE decisions are not applied — a run's charges become its one grant
    (:class:`~blockbudget.tasks.pipelines.PipelineFamily`) — and the ledger task's are
    skipped (the ledger already shows them)."""

    def apply(self, decision: Decision) -> None:
        d = decision
        if d.task_id == LEDGER_TASK or d.kind is DecisionKind.CHARGE:
            return
        super().apply(d)


#: A run's grant lives this long at most (a run that outlives it is refused by the ledger).
RUN_TTL_SECONDS = 86_400.0


def make_strategy(spec: str) -> SageStrategy:
    """A fresh pipeline strategy from ``name[:key=value,...]``.

    Block/Conserve-like strategies get ``levels`` = :data:`MAX_LEVELS` unless the spec says
    otherwise, so that every task's own ε0 can be honoured (:func:`_configure`).

    Raises:
        InvalidRequestError: not one of Sage's strategies, or bad options.
    """
    from blockbudget.scheduling import get_scheduler

    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not value.strip().isdigit():
            raise InvalidRequestError(f"pipeline scheduler options are key=int, got {item!r}")
        options[key.strip()] = int(value)
    cls = scheduler_classes().get(name.strip())
    if cls is None or not issubclass(cls, SageStrategy):
        raise InvalidRequestError(f"pipelines need one of Sage's strategies (sage-*), got {spec!r}")
    if "levels" not in options and cls.usage is Usage.CONSERVE:
        options["levels"] = MAX_LEVELS
    strategy = get_scheduler(name.strip(), **options)
    assert isinstance(strategy, SageStrategy)
    return strategy


def capped(share: Cost, demand: Cost, pool: Pool) -> Cost:
    """``share``, never above ``demand`` (:func:`blockbudget.scheduling.budgets.capped_cost`)."""
    return capped_cost(share, demand, pool)


def configure(strategy: SageStrategy, task_id: str, work: PipelineWork) -> None:
    """The task's own ε0 (the strategy's ``levels`` is one for all): Block/Conserve's run
    spends 2**(level − levels) of the demand, so level = levels − k starts the search at
    ``max_epsilon / 2**k``. Its first window is the TaskSpec's ``min_blocks``."""
    if strategy.usage is Usage.CONSERVE:
        state = strategy.state[task_id]
        state.level = max(strategy.levels - work.levels, 0)


def run_on_grant(
    platform: Platform,
    task: Task,
    reservation_id: str,
    budget: Budget,
    *,
    number: int,
    seed: int | None,
) -> tuple[Outcome | None, dict[str, Any] | None, dict[str, str] | None]:
    """Run ``number`` of a pipeline on its grant (``reservation_id``, ``budget`` per block).

    Returns:
        (outcome, public summary, None), or (None, None, failure) — the failure in our own
        words (:func:`~blockbudget.failures.failure_of`); the traceback goes to the
        log only, under a reference the message repeats.
    """
    from blockbudget.training.adaptive import run_iteration

    work = PipelineWork.from_json(dict(task.work or {}))
    try:
        columns = list(get_pipeline_kind(work.kind).columns)
        grant = platform.grant(reservation_id, holder=task.principal, columns=columns)
        with grant:
            result = run_iteration(
                grant,
                build_pipeline(work.kind, work.target),
                epsilon=budget.epsilon,
                delta=budget.delta,
                eta=work.eta_of(number),
                iteration=number,
                seed=seed,
            )
        summary = {
            "model": describe_model(result.model),
            "secure_noise": bool(result.secure_noise),
        }
        return result.validation.outcome, summary, None
    except Exception as exc:  # its text may quote a cell: only our words leave
        ref = new_reference()
        log.error(
            "pipeline task %s run %d failed (reference %s)",
            task.id,
            number,
            ref,
            exc_info=exc,
        )
        release_quietly(platform.ledger, reservation_id)
        return None, None, failure_of(exc, what="pipeline", ref=ref).to_json()


def release_quietly(ledger: Ledger, reservation_id: str) -> None:
    with contextlib.suppress(BlockBudgetError):  # the grant closed it already
        ledger.release(reservation_id)


def release_open(ledger: Ledger, prefixes: tuple[str, ...]) -> None:
    """Release every open reservation whose request id starts with one of ``prefixes``."""
    if not prefixes:
        return
    from blockbudget.ledger import ReservationState

    for res in ledger.reservations(state=ReservationState.OPEN):
        if (res.request_id or "").startswith(prefixes):
            release_quietly(ledger, res.id)

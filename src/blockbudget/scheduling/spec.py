"""The scheduling model's value types: blocks, tasks and the decisions a pool records.

The vocabulary that :class:`~blockbudget.scheduling.pool.Pool` and every
:class:`~blockbudget.scheduling.base.Scheduler` share; see :mod:`blockbudget.scheduling.base`
for the model (seed ``000_de3e86489c8646aa.txt`` §IV-B, Eq. (5)) and the run loop. Kept apart
so that the pool depends on these values only, and the scheduler interface on the pool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from blockbudget.budget import Budget, Cost
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError

__all__ = [
    "TERMINAL_KINDS",
    "BlockSpec",
    "Decision",
    "DecisionKind",
    "SignificanceFn",
    "TaskShape",
    "TaskSpec",
    "TaskStatus",
    "ValidatorFn",
    "check_positive",
]

#: Significance p_ij of a block (by id) to one task: a function or a mapping block id → value.
SignificanceFn = Callable[[str], float]

#: A task's validator: called with the ids of the blocks charged so far (in order); True means
#: the model passed validation and the task needs no more blocks (seed 000 Alg. 2, *Flag*).
ValidatorFn = Callable[[tuple[str, ...]], bool]


class TaskShape(Enum):
    """How a task asks for blocks."""

    NAMED = "named"  # the task names its blocks; all-or-nothing with `demand` on each
    OPEN = "open"  # any blocks; the scheduler picks up to `max_blocks` (seed 000 Eq. (5))


class TaskStatus(Enum):
    """Where a task is in its life; every status but PENDING is terminal."""

    PENDING = "pending"
    GRANTED = "granted"
    REJECTED = "rejected"
    EXPIRED = "expired"


class DecisionKind(Enum):
    """The kind of one recorded decision (see the module docstring)."""

    RESERVE = "reserve"
    RELEASE = "release"
    CHARGE = "charge"
    OVERHEAD = "overhead"
    GRANT = "grant"
    REJECT = "reject"
    EXPIRE = "expire"
    CREDIT = "credit"


TERMINAL_KINDS = frozenset({DecisionKind.GRANT, DecisionKind.REJECT, DecisionKind.EXPIRE})


def _check_time(value: float, *, name: str) -> float:
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise InvalidRequestError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def check_positive(value: float, *, name: str, allow_zero: bool = False) -> float:
    """A scheduler parameter that must be a finite real number > 0 (≥ 0 with ``allow_zero``).

    Raises:
        InvalidRequestError: for booleans, non-numbers, NaN, infinities and values out of range.
    """
    value = _check_time(value, name=name)
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidRequestError(f"{name} must be {bound}, got {value!r}")
    return value


def _check_int(value: int, *, name: str, minimum: int) -> int:
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRequestError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class BlockSpec:
    """A block arriving at the scheduler.

    Attributes:
        block_id: unique id (as in the ledger).
        arrival: arrival time (any unit, the same as the tasks').
        capacity: the block's global budget (ε_g, δ_g).
        features: optional public description of the block (e.g. its day), for significance
            providers; never private data.
    """

    block_id: str
    arrival: float
    capacity: Budget
    features: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.block_id, str) or not self.block_id:
            raise InvalidRequestError(f"block_id must be a non-empty string, got {self.block_id!r}")
        object.__setattr__(self, "arrival", _check_time(self.arrival, name="arrival"))
        if not isinstance(self.capacity, Budget):
            raise InvalidRequestError(
                f"a block's capacity must be a Budget (ε_g, δ_g), got {self.capacity!r}"
            )


@dataclass(frozen=True)
class TaskSpec:
    """A task (query, pipeline) arriving at the scheduler.

    Attributes:
        task_id: unique id.
        arrival: arrival time.
        demand: the budget it needs on each block it uses (ε_j in seed 000 Eq. (5); a demand
            vector d_{j} per block in PrivateKube/DPack). A cost of a kind the accounting rule
            accounts (the rule's own kind, or a pure Budget under RDP and μ-GDP).
        blocks: for NAMED tasks, the block ids it needs (non-empty, distinct); None makes it OPEN.
        max_blocks: c_j, the most blocks an OPEN task may use (seed 000 Eq. (5)); None means no
            limit. For NAMED tasks it must be None or ≥ len(blocks).
        profit: the task's weight in "profit" metrics (DPack's p_j); 1.0 counts tasks.
        significance: p_ij per block for OPEN tasks — a mapping block id → value or a function
            of the block id (see :mod:`blockbudget.scheduling.significance`). None means
            ``profit`` on every block.
        timeout: how long the task may wait (from its arrival) before it expires; None = forever.
        validator: seed 000 Alg. 2's Flag: called with the blocks charged so far after each
            charge; once it returns True the task needs no more blocks. Nothing is charged for
            it, so it must read only DP outputs already paid for (the task's noisy model, each
            block's noise drawn once) and public data — its answer steers which blocks are used.
        min_blocks: the fewest blocks an OPEN task needs before it may be granted (default 1).
        eligible: for OPEN tasks, the blocks it may use (a selector such as "any k blocks of
            this time range"); None means any block. The pool refuses a reservation or charge
            on any other block (:meth:`~blockbudget.scheduling.pool.Pool.eligible`).
    """

    task_id: str
    arrival: float
    demand: Cost
    blocks: tuple[str, ...] | None = None
    max_blocks: int | None = None
    profit: float = 1.0
    significance: Mapping[str, float] | SignificanceFn | None = None
    timeout: float | None = None
    validator: ValidatorFn | None = None
    min_blocks: int = 1
    eligible: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.task_id, str) or not self.task_id:
            raise InvalidRequestError(f"task_id must be a non-empty string, got {self.task_id!r}")
        object.__setattr__(self, "arrival", _check_time(self.arrival, name="arrival"))
        if not isinstance(self.demand, Cost):
            raise InvalidRequestError(
                f"a task's demand must be a Cost (Budget, RdpCurve, GaussianDp, ...), got "
                f"{self.demand!r}"
            )
        if self.demand.is_zero:
            raise InvalidRequestError(f"task {self.task_id!r} demands zero budget")
        if self.blocks is not None:
            if isinstance(self.blocks, str) or not all(
                isinstance(b, str) and b for b in self.blocks
            ):
                raise InvalidRequestError(
                    f"task {self.task_id!r}: blocks must be a sequence of block ids, "
                    f"got {self.blocks!r}"
                )
            blocks = tuple(self.blocks)
            if not blocks or len(set(blocks)) != len(blocks):
                raise InvalidRequestError(
                    f"task {self.task_id!r}: named blocks must be non-empty and distinct"
                )
            object.__setattr__(self, "blocks", blocks)
        if self.max_blocks is not None:
            _check_int(self.max_blocks, name="max_blocks", minimum=1)
        if (
            self.blocks is not None
            and self.max_blocks is not None
            and self.max_blocks < len(self.blocks)
        ):
            raise InvalidRequestError(
                f"task {self.task_id!r} names {len(self.blocks)} blocks but max_blocks is "
                f"{self.max_blocks}"
            )
        object.__setattr__(
            self, "profit", check_positive(self.profit, name="profit", allow_zero=True)
        )
        if self.timeout is not None:
            object.__setattr__(self, "timeout", check_positive(self.timeout, name="timeout"))
        _check_int(self.min_blocks, name="min_blocks", minimum=1)
        if self.max_blocks is not None and self.min_blocks > self.max_blocks:
            raise InvalidRequestError(
                f"task {self.task_id!r}: min_blocks {self.min_blocks} exceeds max_blocks "
                f"{self.max_blocks} (it could never be granted)"
            )
        if self.eligible is not None:
            if self.blocks is not None:
                raise InvalidRequestError(
                    f"task {self.task_id!r}: a task names its blocks or says which are "
                    "eligible, not both"
                )
            if isinstance(self.eligible, str) or not all(
                isinstance(b, str) and b for b in self.eligible
            ):
                raise InvalidRequestError(
                    f"task {self.task_id!r}: eligible must be a set of block ids"
                )
            object.__setattr__(self, "eligible", frozenset(self.eligible))
        if self.blocks is not None and self.min_blocks > len(self.blocks):
            raise InvalidRequestError(
                f"task {self.task_id!r}: min_blocks {self.min_blocks} exceeds the "
                f"{len(self.blocks)} named blocks"
            )

    @property
    def shape(self) -> TaskShape:
        """NAMED when the task names its blocks, else OPEN."""
        return TaskShape.OPEN if self.blocks is None else TaskShape.NAMED

    @property
    def deadline(self) -> float:
        """Arrival + timeout (inf without a timeout)."""
        return float("inf") if self.timeout is None else self.arrival + self.timeout

    @property
    def access_limit(self) -> int | None:
        """c_j: ``max_blocks``, or the number of named blocks for a NAMED task."""
        if self.max_blocks is not None:
            return self.max_blocks
        return None if self.blocks is None else len(self.blocks)

    def may_use(self, block_id: str) -> bool:
        """Whether the task may use a block: a named one (NAMED), an eligible one (OPEN)."""
        if self.blocks is not None:
            return block_id in self.blocks
        return self.eligible is None or block_id in self.eligible

    def significance_of(self, block_id: str) -> float:
        """p_ij for this task and ``block_id`` (``profit`` when no significance is given)."""
        sig = self.significance
        if sig is None:
            return self.profit
        value = sig.get(block_id, 0.0) if isinstance(sig, Mapping) else sig(block_id)
        value = float(value)
        if not np.isfinite(value) or value < 0:
            raise InvalidRequestError(
                f"significance of block {block_id!r} to task {self.task_id!r} must be finite "
                f"and >= 0, got {value!r}"
            )
        return value


@dataclass(frozen=True)
class Decision:
    """One recorded decision (see :class:`DecisionKind`).

    Attributes:
        seq: position in the log (0, 1, 2, ...).
        time: the simulation time at which it was made.
        kind: what was decided.
        task_id: the task concerned.
        block_id: the block (RESERVE, RELEASE, CHARGE, OVERHEAD); None for terminal decisions.
        cost: the budget moved (RESERVE, RELEASE, CHARGE, OVERHEAD); None otherwise.
        note: a short reason (e.g. ``"above-threshold comparison"``, ``"timeout"``).
    """

    seq: int
    time: float
    kind: DecisionKind
    task_id: str
    block_id: str | None = None
    cost: Cost | None = None
    note: str = ""

    def key(self) -> tuple[Any, ...]:
        """A hashable, comparable form (for determinism checks)."""
        cost = None if self.cost is None else str(self.cost.to_json())
        return (self.seq, self.time, self.kind.value, self.task_id, self.block_id, cost, self.note)

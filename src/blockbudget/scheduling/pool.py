"""The budget state a scheduler acts on: per-block capacity, charges, reservations, decisions.

:class:`Pool` is the only way a :class:`~blockbudget.scheduling.base.Scheduler` changes
anything. It keeps, per block, float vectors in the feature layout of the block's filter
(:mod:`blockbudget.accounting.filters`): ``capacity``, ``charged`` and ``reserved`` (the sum of
every waiting task's reservation). Every operation is checked and either done completely and
logged as :class:`~blockbudget.scheduling.spec.Decision` records, or refused with nothing
changed:

* an operation that would push a block beyond its filter returns ``False``;
* an operation on a task that already has a terminal decision raises
  :class:`~blockbudget.errors.InternalError` (decisions are irrevocable);
* an operation that needs budget on a retired block (:meth:`Pool.retire`, a live platform's
  retirement) returns ``False``;
* a reservation or charge on a block a NAMED task did not ask for or an OPEN task may not use
  (:attr:`TaskSpec.eligible`), or beyond an OPEN task's ``max_blocks``, raises
  :class:`~blockbudget.errors.InternalError` (a scheduler bug).

The budget half — per-block capacities and usage in the filter's layout, holds, and the fit
tests, which ask the rule for the shape of its test and each filter for its capacities and
exact test, never which rule it is — lives in :mod:`blockbudget.scheduling.budgets`
(:class:`~blockbudget.scheduling.budgets.BlockBudgets`, which :class:`Pool` extends with
tasks and the decision log). Decisions replayed on a real :class:`~blockbudget.ledger.Ledger`
are never refused (tested in ``tests/scheduling/test_ledger_bridge.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping

import numpy as np
import numpy.typing as npt

from blockbudget.accounting import Accounting
from blockbudget.budget import Cost, sum_costs
from blockbudget.errors import InternalError, InvalidRequestError
from blockbudget.scheduling.budgets import (
    CAPACITY_MARGIN,
    EXACT_WINDOW,
    BlockBudgets,
    CostVector,
    FloatArray,
    Hold,
    IntArray,
)
from blockbudget.scheduling.exact import Vector, add_units, up_vector
from blockbudget.scheduling.spec import (
    Decision,
    DecisionKind,
    TaskShape,
    TaskSpec,
    TaskStatus,
)

__all__ = ["CAPACITY_MARGIN", "EXACT_WINDOW", "CostVector", "FloatArray", "IntArray", "Pool"]


class Pool(BlockBudgets):
    """Per-block budget state under one accounting rule, with a checked decision log.

    Args:
        accounting: the rule guarding every block (any registered rule).
        slack_delta: the slack of rules that take one (e.g. δ̃ of strong composition,
            default δ_g/2); ignored by the others.

    Attributes:
        now: the current time; the driver sets it before each event.
        decisions: the decision log, in order.
        tasks: every submitted task, by id.
        status: every submitted task's status.
    """

    def __init__(self, accounting: Accounting, *, slack_delta: float | None = None) -> None:
        super().__init__(accounting, slack_delta=slack_delta)
        self.now = 0.0
        self.decisions: list[Decision] = []
        #: Makes an OVERHEAD decision durable before it is logged (see :meth:`charge_overhead`);
        #: None (the simulator) logs it only.
        self.overhead_sink: Callable[[Decision], bool] | None = None
        self.tasks: dict[str, TaskSpec] = {}
        #: submission order of each task (0, 1, ...): ties in a scheduler's order are broken
        #: by arrival, then by this (queue order, as the PrivateKube and DPack authors do)
        self.seq: dict[str, int] = {}
        # (deadline, submission order, id) of tasks with a timeout: expire_due pops the due
        # ones instead of scanning every task at every event
        self._deadlines: list[tuple[float, int, str]] = []
        self.status: dict[str, TaskStatus] = {}
        self.charged_blocks: dict[str, list[str]] = {}
        self.granted_at: dict[str, float] = {}
        self.decided_at: dict[str, float] = {}
        # task id -> (blocks seen, indices of its usable blocks among them), for restricted tasks
        self._usable: dict[str, tuple[int, list[int]]] = {}

    # --- tasks ------------------------------------------------------------------------------

    def is_pending(self, task_id: str) -> bool:
        """Whether the task waits for a decision."""
        return self.status.get(task_id) is TaskStatus.PENDING

    def pending(self) -> list[str]:
        """Ids of the waiting tasks, in submission order."""
        return [t for t, s in self.status.items() if s is TaskStatus.PENDING]

    def submit(self, task: TaskSpec) -> None:
        """Register an arriving task as PENDING.

        Raises:
            InvalidRequestError: a task with this id was already submitted.
            UnknownBlockError: a NAMED task names a block that has not arrived.
            InvalidBudgetError: a demand the accounting rule cannot account.
        """
        if task.task_id in self.tasks:
            raise InvalidRequestError(f"task {task.task_id!r} submitted twice")
        if task.blocks is not None:
            for b in task.blocks:
                self.index(b)
        self.vector(task.demand)
        self.tasks[task.task_id] = task
        self.seq[task.task_id] = len(self.seq)
        if task.timeout is not None:
            heapq.heappush(self._deadlines, (task.deadline, self.seq[task.task_id], task.task_id))
        self.status[task.task_id] = TaskStatus.PENDING
        self.charged_blocks[task.task_id] = []

    # --- operations -------------------------------------------------------------------------

    def _log(
        self,
        kind: DecisionKind,
        task_id: str,
        block: int | None = None,
        cost: Cost | None = None,
        note: str = "",
    ) -> None:
        block_id = None if block is None else self.blocks[block].block_id
        self.decisions.append(
            Decision(len(self.decisions), self.now, kind, task_id, block_id, cost, note)
        )

    def _open(self, task_id: str) -> TaskSpec:
        status = self.status.get(task_id)
        if status is None:
            raise InternalError(f"task {task_id!r} was never submitted")
        if status is not TaskStatus.PENDING:
            raise InternalError(
                f"task {task_id!r} is already {status.value}; decisions are irrevocable"
            )
        return self.tasks[task_id]

    def eligible(self, task_id: str, block_id: str) -> bool:
        """Whether a task may use a block (named by a NAMED task; eligible for an OPEN one)."""
        return self.tasks[task_id].may_use(block_id)

    def restricted(self, task_id: str) -> bool:
        """Whether a task may use only some blocks (it names them, or says which are eligible)."""
        task = self.tasks[task_id]
        return task.blocks is not None or task.eligible is not None

    def usable_indices(self, task_id: str) -> IntArray:
        """Indices (ascending) of the arrived blocks a task may use — every block for an
        unrestricted OPEN task.

        Incremental: the first call looks up the task's named or eligible blocks (cost of the
        set, not of the pool); later calls look only at blocks that arrived since. Schedulers
        combine it with their vectorized tests (``order[pool.usable_mask(t)[order]]``).

        Example:
            >>> from blockbudget.accounting import Accounting
            >>> from blockbudget.budget import Budget
            >>> from blockbudget.scheduling import BlockSpec
            >>> pool = Pool(Accounting.BASIC)
            >>> for b in ("b0", "b1", "b2"):
            ...     _ = pool.add_block(BlockSpec(b, 0.0, Budget(epsilon=1.0)))
            >>> pool.submit(TaskSpec("t", 0.0, Budget(epsilon=0.1),
            ...                      eligible=frozenset({"b2", "b0", "b9"})))
            >>> pool.usable_indices("t").tolist()
            [0, 2]
            >>> _ = pool.add_block(BlockSpec("b9", 1.0, Budget(epsilon=1.0)))
            >>> pool.usable_indices("t").tolist(), pool.usable_mask("t").tolist()
            ([0, 2, 3], [True, False, True, True])
        """
        n = self.n_blocks
        task = self.tasks[task_id]
        names = task.blocks if task.blocks is not None else task.eligible
        if names is None:
            return np.arange(n, dtype=np.int64)
        seen = self._usable.get(task_id)
        if seen is None:
            found = sorted(i for b in names if (i := self.block_index.get(b)) is not None)
        else:
            found = seen[1] + [i for i in range(seen[0], n) if self.blocks[i].block_id in names]
        if self.status.get(task_id) is TaskStatus.PENDING:
            self._usable[task_id] = (n, found)
        return np.asarray(found, dtype=np.int64)

    def usable_mask(self, task_id: str) -> npt.NDArray[np.bool_]:
        """(n_blocks,) True where the task may use the block (see :meth:`usable_indices`)."""
        if not self.restricted(task_id):
            return np.ones(self.n_blocks, dtype=bool)
        mask = np.zeros(self.n_blocks, dtype=bool)
        mask[self.usable_indices(task_id)] = True
        return mask

    def reserve(self, task_id: str, block_id: str, cost: Cost, *, note: str = "") -> bool:
        """Add ``cost`` to a waiting task's reservation on one block, if it fits.

        Returns:
            True when reserved; False (nothing changed) when the block cannot fit it.

        Raises:
            InternalError: a block the task may not use, or a terminal task.
        """
        task = self._open(task_id)
        if not task.may_use(block_id):
            raise InternalError(f"task {task_id!r} may not use block {block_id!r}")
        i = self.index(block_id)
        vec, units = self.vector(cost), self.units(cost)
        if not bool(self.fits_many([i], vec)[0]):
            return False
        holds = self._holds.setdefault(task_id, {})
        old = holds.get(i)
        if old is None:
            holds[i] = Hold(vec.copy(), [cost], units)
        else:
            holds[i] = Hold(old.vec + vec, [*old.costs, cost], add_units(old.units, units))
        self._reserved[i] += vec
        self._exact.reserve(i, units)
        self._log(DecisionKind.RESERVE, task_id, i, cost, note)
        return True

    def release(self, task_id: str, block_id: str | None = None, *, note: str = "") -> None:
        """Return a waiting task's reservation on one block (or on all, when None)."""
        self._open(task_id)
        self._release(task_id, None if block_id is None else self.index(block_id), note)

    def _release(self, task_id: str, block: int | None, note: str) -> None:
        holds = self._holds.get(task_id, {})
        targets = list(holds) if block is None else ([block] if block in holds else [])
        for i in targets:
            hold = holds.pop(i)
            self._exact.release(i, hold.units)
            self._reserved[i] = up_vector(self._exact.reserved[i])  # never below the truth
            self._log(DecisionKind.RELEASE, task_id, i, sum_costs(hold.costs), note)
        if not holds:
            self._holds.pop(task_id, None)

    def charge(
        self,
        task_id: str,
        costs: Mapping[str, Cost],
        *,
        note: str = "",
        units: Mapping[str, Vector] | None = None,
    ) -> bool:
        """Charge a waiting task's computation on several blocks, all-or-nothing.

        On each block the task's own reservation is consumed first (released, then charged).
        ``units`` (a live driver mirroring the ledger) gives the exact features to count on
        each block instead of the costs' own; the costs then only describe them in the log.

        Returns:
            True when charged; False (nothing changed) when some block cannot fit its cost.

        Raises:
            InternalError: a block a NAMED task did not name, more distinct blocks than an
                OPEN task's ``max_blocks``, or a terminal task.
        """
        task = self._open(task_id)
        idx = [self.index(b) for b in costs]
        if task.blocks is not None:  # NAMED: one set, not a tuple scan per block
            named = set(task.blocks)
            extra = [b for b in costs if b not in named]
        else:
            extra = [b for b in costs if not task.may_use(b)]
        if extra:
            raise InternalError(f"task {task_id!r} may not use blocks {sorted(extra)}")
        limit = task.access_limit
        used_blocks = set(self.charged_blocks[task_id]) | set(costs)
        if limit is not None and len(used_blocks) > limit:
            raise InternalError(
                f"task {task_id!r} may use at most {limit} blocks (c_j); got {len(used_blocks)}"
            )
        if len(set(idx)) != len(idx):
            raise InternalError(f"task {task_id!r}: a block appears twice in one charge")
        values = list(costs.values())
        first = values[0] if values else None
        if units is not None:  # the ledger's own units: the costs only label the log
            exact = [tuple(units[b]) for b in costs]
            vecs = np.array([up_vector(u) for u in exact]).reshape(len(idx), self.dims)
        elif first is not None and all(c is first for c in values):  # one cost on every block
            vecs = np.broadcast_to(self.vector(first), (len(idx), self.dims))
            exact = [self.units(first)] * len(idx)
        else:
            vecs = np.array([self.vector(c) for c in values]).reshape(len(idx), self.dims)
            exact = [self.units(c) for c in values]
        arr = np.asarray(idx, dtype=np.int64)
        used = self._charged[arr] + self._reserved[arr] + vecs
        holds = self._holds.get(task_id)
        if holds:
            for k, i in enumerate(idx):
                if i in holds:
                    used[k] -= holds[i].vec
        if not bool(np.all(self._fits_rows(used, arr, exact.__getitem__, task_id))):
            return False
        if holds:
            for i in idx:
                if i in holds:
                    self._release(task_id, i, "consumed by charge")
        np.add.at(self._charged, arr, vecs)
        seen = set(self.charged_blocks[task_id])
        for k, (block_id, cost) in enumerate(costs.items()):
            self._exact.charge(idx[k], exact[k])
            self._log(DecisionKind.CHARGE, task_id, idx[k], cost, note)
            if block_id not in seen:
                self.charged_blocks[task_id].append(block_id)
                seen.add(block_id)
        return True

    def charge_overhead(self, task_id: str, block_id: str, cost: Cost, *, note: str) -> bool:
        """Charge a block for the scheduler's own DP work on behalf of a task (seed 000
        Alg. 1's comparison cost ε0). The block does not count toward the task's c_j.

        With an :attr:`overhead_sink` (a live driver's ledger write), the decision is handed to
        it *before* it is logged or counted: the charge is durable before the caller does the
        DP work it pays for (e.g. draws AboveThreshold's threshold noise). A sink that refuses
        (returns False: the ledger refused it) leaves the pool unchanged.

        Returns:
            True when charged; False (nothing changed) when the block cannot fit it, or the
            sink refused it.
        """
        self._open(task_id)
        i = self.index(block_id)
        vec = self.vector(cost)
        if not bool(self.fits_many([i], vec)[0]):
            return False
        if self.overhead_sink is not None:
            pending = Decision(
                len(self.decisions), self.now, DecisionKind.OVERHEAD, task_id, block_id, cost, note
            )
            if not self.overhead_sink(pending):
                return False
        self._charged[i] += vec
        self._exact.charge(i, self.units(cost))
        self._log(DecisionKind.OVERHEAD, task_id, i, cost, note)
        return True

    def credit(
        self,
        block_id: str,
        cost: Cost,
        *,
        task_id: str,
        note: str = "",
        units: Vector | None = None,
    ) -> None:
        """Give a block back ``cost`` of its charged budget (never below zero), logged as a
        CREDIT under ``task_id`` (the driver's synthetic task for usage outside the pool).

        Only a live driver calls it, when the ledger shows less used on a block than the pool
        counts (a grant spent less than it held, a cancelled grant): the ledger is the truth.
        Schedulers never call it. The task's status is not checked or changed. ``units``
        gives the exact features to credit instead of the cost's own (which then only
        describes them in the log).
        """
        i = self.index(block_id)
        self._exact.credit(i, self.units(cost) if units is None else units)  # the ledger's
        self._charged[i] = up_vector(self._exact.charged[i])  # never below the truth
        self._log(DecisionKind.CREDIT, task_id, i, cost, note)

    def grant(
        self, task_id: str, costs: Mapping[str, Cost] | None = None, *, note: str = ""
    ) -> bool:
        """Serve a task (terminal): charge ``costs`` (if any) and close it.

        For a NAMED task with ``costs`` None, its ``demand`` is charged on every named block
        (all-or-nothing). For an OPEN task, ``costs`` may be None when it was already charged
        block by block (:meth:`charge`); it must then have at least ``min_blocks`` blocks.
        Whatever the task still holds reserved is released.

        Returns:
            True when granted; False (nothing changed) when the charge does not fit.
        """
        task = self._open(task_id)
        if costs is None and task.blocks is not None and not self.charged_blocks[task_id]:
            costs = {b: task.demand for b in task.blocks}
        if costs and not self.charge(task_id, costs, note=note):
            return False
        if task.shape is TaskShape.OPEN and len(self.charged_blocks[task_id]) < task.min_blocks:
            raise InternalError(
                f"task {task_id!r} needs at least {task.min_blocks} blocks before a grant"
            )
        self._release(task_id, None, "granted")
        self.status[task_id] = TaskStatus.GRANTED
        self._usable.pop(task_id, None)
        self.granted_at[task_id] = self.now
        self.decided_at[task_id] = self.now
        self._log(DecisionKind.GRANT, task_id, note=note)
        return True

    def reject(self, task_id: str, *, note: str = "") -> None:
        """Turn a waiting task down (terminal); its reservations are released. Budget it was
        already charged stays spent."""
        self._open(task_id)
        self._release(task_id, None, "rejected")
        self.status[task_id] = TaskStatus.REJECTED
        self._usable.pop(task_id, None)
        self.decided_at[task_id] = self.now
        self._log(DecisionKind.REJECT, task_id, note=note)

    def _expire(self, task_id: str, note: str) -> None:
        self._release(task_id, None, note)
        self.status[task_id] = TaskStatus.EXPIRED
        self._usable.pop(task_id, None)
        self.decided_at[task_id] = self.now
        self._log(DecisionKind.EXPIRE, task_id, note=note)

    def expire_due(self, now: float | None = None) -> list[str]:
        """Expire every waiting task whose deadline is before ``now`` (default ``self.now``)."""
        t = self.now if now is None else now
        found = []
        while self._deadlines and self._deadlines[0][0] < t:
            _, seq, tid = heapq.heappop(self._deadlines)
            if self.status[tid] is TaskStatus.PENDING:
                found.append((seq, tid))
        due = [tid for _, tid in sorted(found)]  # in submission order, as before
        for tid in due:
            self._expire(tid, "timeout")
        return due

    def close(self) -> list[str]:
        """End of the run: expire every task that still waits."""
        left = self.pending()
        for tid in left:
            self._expire(tid, "end of run")
        return left

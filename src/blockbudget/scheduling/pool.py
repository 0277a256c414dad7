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

Two views of usage, one decision. Conservative floats (the vectorised fast path): demands are
the filter's fixed-point features (rounded up) divided by the unit and nudged up one ulp;
capacities are the filter's capacities rounded down and shrunk by :data:`CAPACITY_MARGIN`
(relative). Float sums therefore stay above the exact integer sums the ledger keeps for far
more than a million charges per block, so whatever the float test admits, the ledger admits.
Exact integers (:class:`~blockbudget.scheduling.exact.ExactUsage`): per block, the filter's
features of everything charged and reserved, and per hold what it reserved, updated by every
operation. A float test that refuses with the deciding features within :data:`EXACT_WINDOW` of
capacity is decided again by ``filter.fits`` on the exact sums — the ledger's own test — so a
block's last budget can be given (ten charges of 0.1 on ε_g = 1, one charge of all of it).
Subtractions (release, credit) re-derive the float row from the exact one, so float usage
never drifts below the truth. Decisions replayed on a real :class:`~blockbudget.ledger.Ledger`
are never refused (tested in ``tests/scheduling/test_ledger_bridge.py``). Under BASIC a block
fits while *every* feature is within capacity; under RDP while *some* order is (PrivateKube
OSDI'21 §4, DPack §3); under STRONG the filter's own non-linear test decides on the exact
sums, one block at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from blockbudget.accounting import Accounting, Filter, make_filter
from blockbudget.budget import Budget, Cost, RdpCurve, sum_costs
from blockbudget.errors import InternalError, InvalidRequestError, UnknownBlockError
from blockbudget.scheduling.exact import (
    CAPACITY_MARGIN,
    EXACT_WINDOW,
    ExactUsage,
    Vector,
    add_units,
    capacity_vector,
    decide_rows,
    nominal_vector,
    to_units,
    up_vector,
)
from blockbudget.scheduling.spec import (
    BlockSpec,
    Decision,
    DecisionKind,
    TaskShape,
    TaskSpec,
    TaskStatus,
)

__all__ = ["CAPACITY_MARGIN", "EXACT_WINDOW", "CostVector", "FloatArray", "IntArray", "Pool"]


FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class CostVector:
    """A cost with its conservative float features (cached by :meth:`Pool.vector`)."""

    cost: Cost
    vec: FloatArray


@dataclass
class _Hold:
    """A waiting task's open reservation on one block: float sum, costs, exact units."""

    vec: FloatArray
    costs: list[Cost]
    units: Vector


class Pool:
    """Per-block budget state under one accounting rule, with a checked decision log.

    Args:
        accounting: the rule guarding every block (BASIC, RDP or STRONG).
        slack_delta: δ̃ for STRONG accounting (default δ_g/2).

    Attributes:
        now: the current time; the driver sets it before each event.
        decisions: the decision log, in order.
        tasks: every submitted task, by id.
        status: every submitted task's status.
    """

    def __init__(self, accounting: Accounting, *, slack_delta: float | None = None) -> None:
        if not isinstance(accounting, Accounting):
            raise InvalidRequestError(f"accounting must be an Accounting, got {accounting!r}")
        self.accounting = accounting
        self.slack_delta = slack_delta
        probe = make_filter(accounting, capacity=Budget(epsilon=1.0, delta=1e-6), slack_delta=None)
        self.dims = probe.dims
        self.now = 0.0
        self.decisions: list[Decision] = []
        #: Makes an OVERHEAD decision durable before it is logged (see :meth:`charge_overhead`);
        #: None (the simulator) logs it only.
        self.overhead_sink: Callable[[Decision], bool] | None = None
        self.tasks: dict[str, TaskSpec] = {}
        self.status: dict[str, TaskStatus] = {}
        self.blocks: list[BlockSpec] = []
        self.block_index: dict[str, int] = {}
        self.filters: list[Filter] = []
        self._filter_cache: dict[Budget, tuple[Filter, FloatArray, FloatArray]] = {}
        self._vec_cache: dict[Cost, FloatArray] = {}
        self._units_cache: dict[Cost, Vector] = {}
        # id of a cached float vector -> (that vector, its exact units): fits_many's exact path
        self._vec_units: dict[int, tuple[FloatArray, Vector]] = {}
        self._exact = ExactUsage(self.dims)
        self._cap = np.zeros((16, self.dims))
        # per block: the capacity, and the same widened by EXACT_WINDOW (exact checks below it)
        self._caps = np.zeros((16, 2, self.dims))
        self._nominal = np.zeros((16, self.dims))
        self._charged = np.zeros((16, self.dims))
        self._reserved = np.zeros((16, self.dims))
        self._retired = np.zeros(16, dtype=bool)
        # task id -> block index -> its open reservation there
        self._holds: dict[str, dict[int, _Hold]] = {}
        self.charged_blocks: dict[str, list[str]] = {}
        self.granted_at: dict[str, float] = {}
        self.decided_at: dict[str, float] = {}
        # task id -> (blocks seen, indices of its usable blocks among them), for restricted tasks
        self._usable: dict[str, tuple[int, list[int]]] = {}

    # --- views ------------------------------------------------------------------------------

    @property
    def n_blocks(self) -> int:
        """How many blocks have arrived."""
        return len(self.blocks)

    @property
    def capacity(self) -> FloatArray:
        """(n_blocks, dims) conservative capacities (read-only view)."""
        return self._view(self._cap)

    @property
    def nominal_capacity(self) -> FloatArray:
        """(n_blocks, dims) the filters' capacities as floats, unshrunk (inf under STRONG): a
        reference for fairness limits (DPF's unlocking), not a safety bound (read-only view)."""
        return self._view(self._nominal)

    def exact_used(self, block_id: str) -> Vector:
        """Exact integer features (the filter's layout) charged + reserved on a block: what
        the ledger would count; ``filter.fits`` of it always holds."""
        return self._exact.used(self.index(block_id))

    @property
    def charged(self) -> FloatArray:
        """(n_blocks, dims) charged features (read-only view)."""
        return self._view(self._charged)

    @property
    def reserved(self) -> FloatArray:
        """(n_blocks, dims) features reserved for waiting tasks (read-only view)."""
        return self._view(self._reserved)

    @property
    def retired(self) -> npt.NDArray[np.bool_]:
        """(n_blocks,) True where the block is retired (:meth:`retire`; read-only view)."""
        view = self._retired[: self.n_blocks]
        view.flags.writeable = False
        return view

    def _view(self, array: FloatArray) -> FloatArray:
        view = array[: self.n_blocks]
        view.flags.writeable = False
        return view

    def remaining(self) -> FloatArray:
        """(n_blocks, dims) capacity − charged − reserved (negative where an order is spent;
        at most 0 on a retired block)."""
        n = self.n_blocks
        out: FloatArray = self._cap[:n] - self._charged[:n] - self._reserved[:n]
        retired = self._retired[:n]
        if retired.any():
            out[retired] = np.minimum(out[retired], 0.0)
        return out

    def used_fraction(self, indices: Sequence[int] | IntArray | None = None) -> FloatArray:
        """z_i of seed 000 Alg. 1: the consumed proportion of each block (charged + reserved).

        BASIC: the largest used/capacity over (ε, δ); RDP: the smallest over usable orders (the
        block lasts while its best order lasts); STRONG: 1 − the filter's remaining fraction.
        A retired block is wholly used (1).
        """
        idx = np.arange(self.n_blocks) if indices is None else np.asarray(indices, dtype=np.int64)
        if self.accounting is Accounting.STRONG:
            out = np.array(
                [
                    1.0 - self.filters[i].remaining_fraction(self._exact.used(i))
                    for i in idx.tolist()
                ]
            )
        else:
            used = self._charged[idx] + self._reserved[idx]
            cap = self._cap[idx]
            with np.errstate(divide="ignore", invalid="ignore"):
                frac = np.where(cap > 0, used / np.where(cap > 0, cap, 1.0), np.nan)
            if self.accounting is Accounting.BASIC:
                out = np.nanmax(np.where(np.isnan(frac), -np.inf, frac), axis=1)
            else:
                out = np.nanmin(np.where(np.isnan(frac), np.inf, frac), axis=1)
        clipped: FloatArray = np.clip(out, 0.0, 1.0)
        clipped[self._retired[idx]] = 1.0
        return clipped

    def index(self, block_id: str) -> int:
        """The index of a block.

        Raises:
            UnknownBlockError: the block has not arrived.
        """
        try:
            return self.block_index[block_id]
        except KeyError:
            raise UnknownBlockError(f"block {block_id!r} has not arrived") from None

    def is_pending(self, task_id: str) -> bool:
        """Whether the task waits for a decision."""
        return self.status.get(task_id) is TaskStatus.PENDING

    def pending(self) -> list[str]:
        """Ids of the waiting tasks, in submission order."""
        return [t for t, s in self.status.items() if s is TaskStatus.PENDING]

    def held(self, task_id: str) -> dict[str, FloatArray]:
        """A waiting task's reservations: block id → reserved features."""
        return {self.blocks[i].block_id: h.vec for i, h in self._holds.get(task_id, {}).items()}

    def held_cost(self, task_id: str, block_id: str) -> Cost | None:
        """The exact total a task holds reserved on one block, or None."""
        hold = self._holds.get(task_id, {}).get(self.index(block_id))
        return None if hold is None else sum_costs(hold.costs)

    def vector(self, cost: Cost) -> FloatArray:
        """Conservative float features of a cost (rounded up), cached.

        Raises:
            InvalidBudgetError: the accounting rule cannot account this kind of cost.
        """
        vec = self._vec_cache.get(cost)
        if vec is None:
            units = self.units(cost)
            vec = up_vector(units)
            vec.flags.writeable = False
            self._vec_cache[cost] = vec
            self._vec_units[id(vec)] = (vec, units)
        return vec

    def units(self, cost: Cost) -> Vector:
        """Exact fixed-point features of a cost (rounded up; the ledger's), cached.

        Raises:
            InvalidBudgetError: the accounting rule cannot account this kind of cost.
        """
        units = self._units_cache.get(cost)
        if units is None:
            filt = self.filters[0] if self.filters else self._probe()
            units = tuple(filt.features(cost))
            self._units_cache[cost] = units
        return units

    def _probe(self) -> Filter:
        return make_filter(self.accounting, capacity=Budget(epsilon=1.0, delta=1e-6))

    def capacity_share(self, block_id: str, fraction: float) -> Cost:
        """A cost worth ``fraction`` of a block's capacity (Sage's even split, DPF's unlock).

        BASIC: (fraction·ε_g, fraction·δ_g); RDP: a curve of fraction·capacity(α) at every
        usable order and 0 where the capacity is negative; STRONG: (fraction·ε_g, fraction·δ_g),
        which may not all fit (strong composition is not linear in ε).
        """
        if not (0 < fraction <= 1):
            raise InvalidRequestError(f"fraction must be in (0, 1], got {fraction!r}")
        block = self.blocks[self.index(block_id)]
        f = fraction * (1 - 4 * CAPACITY_MARGIN)
        if self.accounting is Accounting.RDP:
            caps = self._cap[self.index(block_id)]
            return RdpCurve([v if v > 1e-90 else 0.0 for v in (float(c) * f for c in caps)])
        eps, delta = block.capacity.as_floats()
        return Budget(epsilon=eps * f, delta=delta * f)

    # --- fit tests --------------------------------------------------------------------------

    def _fits_rows(
        self,
        used: FloatArray,
        idx: IntArray,
        candidate: Callable[[int], Vector | None] | None = None,
        task_id: str | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Float test of ``used`` rows on blocks ``idx``; rows it refuses by a hair are decided
        exactly when ``candidate(k)`` gives row k's exact units (``task_id``'s own hold on the
        block is then available to it, as in ``used``)."""
        live = ~self._retired[idx]

        def exact(k: int) -> bool | None:
            units = None if candidate is None else candidate(k)
            return None if units is None else self._exact_fits(int(idx[k]), units, task_id)

        if self.accounting is not Accounting.STRONG:
            return decide_rows(self.accounting, used, self._caps[idx], live, exact)
        out = np.zeros(len(idx), dtype=bool)  # non-linear: the filter decides, exactly
        for k in np.flatnonzero(live).tolist():
            verdict = exact(k)  # else a float vector of no known cost: its units rounded up
            out[k] = (
                self.filters[int(idx[k])].fits(to_units(used[k])) if verdict is None else verdict
            )
        return out

    def _exact_fits(self, i: int, units: Vector, task_id: str | None) -> bool:
        hold = None if task_id is None else self._holds.get(task_id, {}).get(i)
        return self._exact.fits(self.filters[i], i, units, None if hold is None else hold.units)

    def _known_units(self, vec: FloatArray) -> Vector | None:
        entry = self._vec_units.get(id(vec))
        return entry[1] if entry is not None and entry[0] is vec else None

    def fits_many(
        self, indices: Sequence[int] | IntArray, vec: FloatArray
    ) -> npt.NDArray[np.bool_]:
        """Whether ``vec`` (one vector, or one row per index) fits on each block by index,
        on top of everything charged and reserved.

        Vectorised in float; when ``vec`` is a cost's own :meth:`vector`, rows refused within
        :data:`EXACT_WINDOW` of capacity are decided exactly (the ledger's test). Any other
        float vector (a scaled demand) gets the conservative float answer only.

        Example:
            >>> from blockbudget.accounting import Accounting
            >>> pool = Pool(Accounting.BASIC)
            >>> _ = pool.add_block(BlockSpec("b", 0.0, Budget(epsilon=1.0)))
            >>> pool.submit(TaskSpec("t", 0.0, Budget(epsilon=0.5), blocks=("b",)))
            >>> pool.grant("t")
            True
            >>> half = pool.vector(Budget(epsilon=0.5))
            >>> pool.fits_many([0], half).tolist(), pool.fits_many([0], half * 1.0).tolist()
            ([True], [False])
        """
        idx = np.asarray(indices, dtype=np.int64)
        used = self._charged[idx] + self._reserved[idx] + vec
        units = self._known_units(vec)
        return self._fits_rows(used, idx, None if units is None else (lambda _k: units))

    def fits(self, task_id: str | None, block_id: str, cost: Cost) -> bool:
        """Whether ``cost`` fits on a block for a task, counting the task's own reservation
        there as available to it (exactly near capacity, as the ledger would)."""
        i = self.index(block_id)
        used = self._charged[i] + self._reserved[i] + self.vector(cost)
        if task_id is not None:
            hold = self._holds.get(task_id, {}).get(i)
            if hold is not None:
                used = used - hold.vec
        units = self.units(cost)
        return bool(self._fits_rows(used[None, :], np.array([i]), lambda _k: units, task_id)[0])

    # --- registration -----------------------------------------------------------------------

    def add_block(self, block: BlockSpec) -> int:
        """Add an arriving block with its full capacity unallocated; returns its index.

        Raises:
            InvalidRequestError: a block with this id already arrived.
            InvalidBudgetError: a capacity the accounting rule cannot use.
        """
        if block.block_id in self.block_index:
            raise InvalidRequestError(f"block {block.block_id!r} arrived twice")
        cached = self._filter_cache.get(block.capacity)
        if cached is None:
            filt = make_filter(
                self.accounting, capacity=block.capacity, slack_delta=self.slack_delta
            )
            cached = (filt, capacity_vector(filt), nominal_vector(filt))
            self._filter_cache[block.capacity] = cached
        n = self.n_blocks
        if n == len(self._cap):
            grow = max(16, n)
            pad = np.zeros((grow, self.dims))
            self._cap = np.vstack([self._cap, pad])
            self._caps = np.vstack([self._caps, np.zeros((grow, 2, self.dims))])
            self._nominal = np.vstack([self._nominal, pad])
            self._charged = np.vstack([self._charged, pad])
            self._reserved = np.vstack([self._reserved, pad])
            self._retired = np.concatenate([self._retired, np.zeros(grow, dtype=bool)])
        self._cap[n] = cached[1]
        self._caps[n] = (cached[1], cached[1] + np.abs(cached[1]) * EXACT_WINDOW)
        self._nominal[n] = cached[2]
        self._exact.add_block()
        self.blocks.append(block)
        self.filters.append(cached[0])
        self.block_index[block.block_id] = n
        return n

    def retire(self, block_id: str) -> None:
        """The block never serves again (a live platform retired it): every later reserve,
        charge or grant that needs budget there is refused (``False``), :meth:`remaining` is
        at most 0 and :meth:`used_fraction` 1 there. What is reserved there may still be
        released; credits still count. Idempotent; not a decision about any task.

        Raises:
            UnknownBlockError: the block has not arrived.

        Example:
            >>> from blockbudget.accounting import Accounting
            >>> pool = Pool(Accounting.BASIC)
            >>> _ = pool.add_block(BlockSpec("b", 0.0, Budget(epsilon=1.0)))
            >>> pool.retire("b")
            >>> bool(pool.fits(None, "b", Budget(epsilon=0.1))), pool.used_fraction().tolist()
            (False, [1.0])
        """
        self._retired[self.index(block_id)] = True

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
            holds[i] = _Hold(vec.copy(), [cost], units)
        else:
            holds[i] = _Hold(old.vec + vec, [*old.costs, cost], add_units(old.units, units))
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

    def charge(self, task_id: str, costs: Mapping[str, Cost], *, note: str = "") -> bool:
        """Charge a waiting task's computation on several blocks, all-or-nothing.

        On each block the task's own reservation is consumed first (released, then charged).

        Returns:
            True when charged; False (nothing changed) when some block cannot fit its cost.

        Raises:
            InternalError: a block a NAMED task did not name, more distinct blocks than an
                OPEN task's ``max_blocks``, or a terminal task.
        """
        task = self._open(task_id)
        idx = [self.index(b) for b in costs]
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
        if first is not None and all(c is first for c in values):  # one cost on every block
            vecs = np.broadcast_to(self.vector(first), (len(idx), self.dims))
            units = [self.units(first)] * len(idx)
        else:
            vecs = np.array([self.vector(c) for c in values]).reshape(len(idx), self.dims)
            units = [self.units(c) for c in values]
        arr = np.asarray(idx, dtype=np.int64)
        used = self._charged[arr] + self._reserved[arr] + vecs
        holds = self._holds.get(task_id)
        if holds:
            for k, i in enumerate(idx):
                if i in holds:
                    used[k] -= holds[i].vec
        if not bool(np.all(self._fits_rows(used, arr, units.__getitem__, task_id))):
            return False
        if holds:
            for i in idx:
                if i in holds:
                    self._release(task_id, i, "consumed by charge")
        np.add.at(self._charged, arr, vecs)
        seen = set(self.charged_blocks[task_id])
        for k, (block_id, cost) in enumerate(costs.items()):
            self._exact.charge(idx[k], units[k])
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

    def credit(self, block_id: str, cost: Cost, *, task_id: str, note: str = "") -> None:
        """Give a block back ``cost`` of its charged budget (never below zero), logged as a
        CREDIT under ``task_id`` (the driver's synthetic task for usage outside the pool).

        Only a live driver calls it, when the ledger shows less used on a block than the pool
        counts (a grant spent less than it held, a cancelled grant): the ledger is the truth.
        Schedulers never call it. The task's status is not checked or changed.
        """
        i = self.index(block_id)
        self._exact.credit(i, self.units(cost))  # the ledger's units
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
        due = [tid for tid in self.pending() if self.tasks[tid].deadline < t]
        for tid in due:
            self._expire(tid, "timeout")
        return due

    def close(self) -> list[str]:
        """End of the run: expire every task that still waits."""
        left = self.pending()
        for tid in left:
            self._expire(tid, "end of run")
        return left

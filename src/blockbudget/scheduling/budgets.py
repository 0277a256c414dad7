"""Per-block budget state under one accounting rule: capacities, usage, holds and fit tests.

:class:`BlockBudgets` is the half of :class:`~blockbudget.scheduling.pool.Pool` that knows
budgets and nothing of tasks' lifecycles: per block, float vectors in the feature layout of the
block's filter (``capacity``, ``charged``, ``reserved``), each waiting task's open
reservation (a hold), and the fit tests. It never asks which rule it holds: it asks the rule
(:class:`~blockbudget.accounting.AccountingRule`) for the *shape* of its fit test
(:attr:`~blockbudget.accounting.Combine`) and each block's filter for its capacity per
feature (:meth:`~blockbudget.accounting.Filter.capacity_units`), its features, its exact test
and its capacity shares (:meth:`~blockbudget.accounting.Filter.share`).

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
never drifts below the truth.

The shapes (:class:`~blockbudget.accounting.Combine`): under ALL a block fits while *every*
feature is within capacity (basic, μ-GDP, advanced composition); under ANY while *some*
feature is (some RDP order: PrivateKube OSDI'21 §4, DPack §3); under FILTER the filter's own
non-linear test decides on the exact sums, one block at a time (strong composition).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from blockbudget.accounting import Accounting, AccountingRule, Combine, Filter, get_rule
from blockbudget.budget import Budget, Cost, sum_costs
from blockbudget.errors import InvalidBudgetError, InvalidRequestError, UnknownBlockError
from blockbudget.scheduling.exact import (
    CAPACITY_MARGIN,
    EXACT_WINDOW,
    ExactUsage,
    Vector,
    capacity_vector,
    decide_rows,
    nominal_vector,
    to_units,
    up_vector,
)
from blockbudget.scheduling.spec import BlockSpec

__all__ = [
    "CAPACITY_MARGIN",
    "EXACT_WINDOW",
    "BlockBudgets",
    "CostVector",
    "FloatArray",
    "Hold",
    "IntArray",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: The capacity of the probe filter that prices costs before any block has arrived.
_PROBE = Budget(epsilon=1.0, delta=1e-6)


@dataclass(frozen=True)
class CostVector:
    """A cost with its conservative float features (cached by :meth:`BlockBudgets.vector`)."""

    cost: Cost
    vec: FloatArray


@dataclass
class Hold:
    """A waiting task's open reservation on one block: float sum, costs, exact units."""

    vec: FloatArray
    costs: list[Cost]
    units: Vector


class BlockBudgets:
    """Per-block budget state under one accounting rule (see the module docstring).

    Args:
        accounting: the rule guarding every block (any registered rule).
        slack_delta: the slack of rules that take one (:attr:`AccountingRule.takes_slack`;
            default: the rule's own, e.g. δ_g/2); ignored by the others.

    Attributes:
        accounting: the rule's name; ``rule`` the rule and ``combine`` the shape of its test.
        blocks: every arrived block, in arrival order; ``filters`` their filters.
    """

    def __init__(self, accounting: Accounting, *, slack_delta: float | None = None) -> None:
        if not isinstance(accounting, Accounting):
            raise InvalidRequestError(f"accounting must be an Accounting, got {accounting!r}")
        self.accounting = accounting
        self.rule: AccountingRule = get_rule(accounting)
        self.combine: Combine = self.rule.combine
        self.slack_delta = slack_delta
        self.dims = self._probe().dims
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
        self._holds: dict[str, dict[int, Hold]] = {}

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
        """(n_blocks, dims) the filters' capacities as floats, unshrunk (inf under a non-linear
        filter): a reference for fairness limits (DPF's unlocking), not a safety bound
        (read-only view)."""
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

        By the shape of the rule's test: ALL, the largest used/capacity over the features with
        a positive capacity (the block lasts while every feature does); ANY, the smallest (it
        lasts while its best RDP order does); FILTER, 1 − the filter's remaining fraction of
        the exact sums. A retired block is wholly used (1).
        """
        idx = np.arange(self.n_blocks) if indices is None else np.asarray(indices, dtype=np.int64)
        if self.combine is Combine.FILTER:
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
            if self.combine is Combine.ALL:
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

    def held(self, task_id: str) -> dict[str, FloatArray]:
        """A waiting task's reservations: block id → reserved features."""
        return {self.blocks[i].block_id: h.vec for i, h in self._holds.get(task_id, {}).items()}

    def held_cost(self, task_id: str, block_id: str) -> Cost | None:
        """The exact total a task holds reserved on one block, or None."""
        hold = self._holds.get(task_id, {}).get(self.index(block_id))
        return None if hold is None else sum_costs(hold.costs)

    # --- costs ------------------------------------------------------------------------------

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
        """A filter of the rule for pricing before any block arrived (features do not depend
        on the capacity)."""
        return self.rule.filter(capacity=_PROBE)

    def capacity_share(self, block_id: str, fraction: float) -> Cost:
        """A cost worth ``fraction`` of a block's capacity (Sage's even split, DPF's unlock):
        the block's filter's :meth:`~blockbudget.accounting.Filter.share` of ``fraction`` less
        4 × :data:`CAPACITY_MARGIN`, so that shares summing to the whole still fit the
        conservative floats — (fraction·ε_g, fraction·δ_g) for basic and strong (which may
        not all fit: strong composition is not linear in ε), a curve of fraction·capacity(α)
        at every usable order for RDP, μ_g·√fraction for μ-GDP.

        Raises:
            InvalidRequestError: ``fraction`` is not in (0, 1].
        """
        if not (0 < fraction <= 1):
            raise InvalidRequestError(f"fraction must be in (0, 1], got {fraction!r}")
        return self.filters[self.index(block_id)].share(fraction * (1 - 4 * CAPACITY_MARGIN))

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

        if self.combine is not Combine.FILTER:
            return decide_rows(self.combine, used, self._caps[idx], live, exact)
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
            >>> from blockbudget.scheduling import Pool, TaskSpec
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

    # --- blocks -----------------------------------------------------------------------------

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
            filt = self.rule.filter(capacity=block.capacity, slack_delta=self.slack_delta)
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
            >>> from blockbudget.scheduling import Pool
            >>> pool = Pool(Accounting.BASIC)
            >>> _ = pool.add_block(BlockSpec("b", 0.0, Budget(epsilon=1.0)))
            >>> pool.retire("b")
            >>> bool(pool.fits(None, "b", Budget(epsilon=0.1))), pool.used_fraction().tolist()
            (False, [1.0])
        """
        self._retired[self.index(block_id)] = True


def capped_cost(share: Cost, demand: Cost, budgets: BlockBudgets) -> Cost:
    """``share`` but never above ``demand``, feature by feature: both read in the rule's own
    kind (:meth:`~blockbudget.accounting.rule.AccountingRule.own_kind`: a pure budget as its
    price), then their :meth:`~blockbudget.budget.Cost.meet`. Costs the rule cannot read in its
    kind (an (ε, δ>0) demand on an RDP pool) fall back to the float features: a share whose
    features all reach the demand's becomes the demand.

    Example:
        >>> from blockbudget.accounting import Accounting
        >>> from blockbudget.budget import Budget
        >>> pool = BlockBudgets(Accounting.BASIC)
        >>> capped_cost(Budget(epsilon=0.5, delta=1e-9), Budget(epsilon=0.2), pool)
        Budget(epsilon='0.2', delta='0')
    """
    rule = budgets.rule
    try:
        return rule.own_kind(share).meet(rule.own_kind(demand))
    except InvalidBudgetError:
        if bool(np.all(budgets.vector(share) >= budgets.vector(demand))):
            return demand
        return share

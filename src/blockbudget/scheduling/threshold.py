"""Seed 000's online budgeting: filtering by threshold (Alg. 1), online budgeting (Alg. 2) and
online budgeting with mixed (large) queries (Alg. 3).

Seed ``000_de3e86489c8646aa.txt`` ("Privacy Budgeting for Growing Machine Learning Datasets")
§VI: Alg. 1 and Alg. 2 in §VI-A, Thm. 3 and Thm. 4 in §VI-B, Alg. 3 and Thm. 5 in §VI-C. Under
Assumption 2 (L ≤ p_ij/ε ≤ U, Eq. (8), ε the
query's *total* privacy cost on the block):

* z0 = 1 / (1 + ln(U/L)) and the threshold of Eq. (9):
  T(z) = L for 0 ≤ z ≤ z0, (Ue/L)^z · L/e for z0 < z ≤ 1 (:func:`threshold`);
* Alg. 1 (filtering by threshold): while block i's consumed proportion z_i < z0 it takes any
  query that fits, with no comparison; above z0 it admits query j only if
  p_ij/(ε_j+ε0) + Lap(4Δ/ε0) ≥ T(z_i) + Lap(2Δ/ε0) (≥ as in Dwork & Roth; the seed writes >)
  and ε_j fits in what is left;
* Alg. 2 (:class:`OnlineThreshold`): each arriving query visits the pool's blocks in random
  order and takes those that pass Alg. 1, until it has c_j blocks, the blocks run out, or its
  model passes validation (*Flag*); Thm. 4: competitive ratio 1 + ln(U/L) under Assumptions 1–2;
* Alg. 3 (:class:`MixedThreshold`): constant threshold T = U/(1+ln(U/L)); ε* solves
  p_ij/(ε*+κ) = T (Eq. (17), κ the privacy overhead of one admission, see below); the block
  admits the query if ε* + Lap(4Δ/ε0) ≥ η·ε_j + Lap(2Δ/ε0) and grants
  ε_ij = min{ε*, ε_j, what is left} (Eq. (18)) — a *partial* grant when ε* < ε_j;
  Thm. 5: competitive ratio 1 + ln(U/L) under Assumption 2 — only under the conditions below.

Privacy accounting of the comparisons (one AboveThreshold per block). Each block keeps at most
one open *run* of AboveThreshold (Dwork & Roth 2014, "The Algorithmic Foundations of
Differential Privacy", §3.6, Algorithm 1; :class:`~blockbudget.mechanisms.sparse_vector.\
AboveThreshold`): one threshold noise ρ ~ Lap(2Δ/ε0), drawn when the run starts and kept across
every refused comparison, fresh ν ~ Lap(4Δ/ε0) per comparison, and the run halts at its first
pass. By Dwork & Roth Thm 3.23 the whole run — any number of refusals and the one pass — is
ε0-DP for the block's data, for adaptively chosen queries of sensitivity Δ. The public
threshold T(z_i) (Alg. 1) or η·ε_j (Alg. 3) is moved into the query (value − bar ≥ ρ), which
keeps the sensitivity Δ; z_i and ε_j depend only on public demands and earlier outputs.

*When ε0 is charged.* The seed adds ε0 to z_i on a pass only (Alg. 1 line 8, Alg. 3 line 10),
which would be Dwork & Roth's price if every run ended in a pass. A run may instead end
unfinished — the stream stops, or the block can fit no further query — and its refusals were
released all the same, so charging at the pass would leave up to ε0 per block unaccounted. We
therefore charge ε0 when a run *starts*, before its threshold noise is drawn, and nothing for
the comparisons inside it, pass or fail: every run, finished or not, is paid exactly once, and
the block's total is (its queries' charges) + ε0 × (runs started), which composes sequentially
(seed Thm. 1; the pool's filter under the stream's rule, ε0 priced by the rule's
:meth:`~blockbudget.accounting.AccountingRule.pure`).
Compared with the seed's charging this costs at most one extra ε0 per block (its open run);
compared with charging ε0 per comparison it no longer lets a stream of refused queries drain a
block (about 1/ε0 refusals used to exhaust it, breaking Thm. 4). A comparison is made only
when the public state lets the block fit the query's demand on top of the run's ε0.

Alg. 3's granted amount min{ε*, ...} is a function of p_ij that the comparison does not cover:
after a pass we charge a second ε0 and release ε* with fresh Lap(Δ/ε0) noise (Numeric Sparse,
Dwork & Roth §3.6; the seed uses the exact ε*). One admission therefore costs κ = 2ε0 of
overhead (the run's ε0 and the release's ε0), and Eq. (17) uses that κ so that every admitted
query is worth T per unit of budget it consumes — the step Thm. 5's proof (Eq. (20)) rests on.

When the theorems hold (tested in ``tests/scheduling/test_competitive_ratio.py`` with exact
comparisons, i.e. zero noise, and the offline optimum of Eq. (5) by HiGHS):

* Thm. 4 (Alg. 2): with queries small against a block (Assumption 1, steps δ ≤ max ε_j + ε0)
  and the offline optimum paying the same ε_j + ε0 per access, OPT/ALG ≤ r·e^{r(2δ+ε0)} with
  r = 1 + ln(U/L) on one block — the theorem's r up to the Assumption-1 discretisation factor;
  against an optimum that pays only ε_j, up to a further factor 1 + ε0/min ε_j.
* Thm. 5 (Alg. 3) holds — OPT/ALG ≤ r/Z, Z the block's final consumed fraction — only if (a) a
  partial grant earns the query's full p_ij (the paper's accounting; pro rata credit breaks it),
  and (b) every query within Assumption 2 passes the exact comparison:
  L·(ε_j + κ) ≥ T·(κ + η·ε_j), i.e. η ≤ :meth:`MixedThreshold.eta_limit` (ε_j) =
  L/T − (1 − L/T)·κ/ε_j. For κ → 0 this is η ≤ L(1 + ln(U/L))/U. With a larger η a stream of
  density-L queries is refused entirely and OPT/ALG = ∞. The default η is therefore 0, and even
  then ε0 must be small: ε_j ≥ κ·(T/L − 1) for every query.

With private comparisons neither bound is guaranteed: the Laplace noise of scale 4Δ/ε0 must be
small against the compared ratios, and at Δ = 1, ε0 = 0.01 the filter is close to random
(docs/results.md, competitive ratio).

Units: ε_j of a demand on a block is its ε-equivalent share, the fraction of an empty block's
capacity it uses times ε_g, so z_i grows by ε_j/ε_gi as in Alg. 1 line 3. The fraction follows
the shape of the rule's fit test (:class:`~blockbudget.accounting.Combine`): ALL, the largest
feature/capacity over the capped features (basic: the larger of ε/ε_g, δ/δ_g; μ-GDP: μ²/μ_g²;
advanced composition: the larger of Σε² and Σδ over their caps); ANY, the smallest over the
usable features (RDP orders); FILTER, ε/ε_g (a non-linear filter accounts (ε, δ) budgets, its
first feature ε). The AboveThreshold sensitivity Δ of
the compared quantity is a parameter (the seed takes 1).

Randomness. The comparisons read private data (p_ij): their Laplace noise comes from
``self.noise`` — OpenDP's secure sampler unless a test or experiment passes a SeededNoise, and
then :attr:`~blockbudget.scheduling.base.Scheduler.secure_noise` and the simulation result say
``secure_noise=False``. The order in which Alg. 2 / Alg. 3 visit the blocks is public randomness
(it never looks at data, so even a known order costs no privacy): ``self.rng``, OS entropy
unless a ``seed`` is given.

Adaptive composition (seed 000 §VI-B, after Rogers et al. 2016): run either scheduler on a pool
under a fully adaptive filter — strong composition (``"strong"``, a non-linear FILTER-shaped
test), or the advanced-composition filter of Whitehouse et al. 2023 (``"whitehouse"``, linear);
z_i comes from the pool's filter. The comparisons' ε0 is priced by the rule
(:meth:`~blockbudget.accounting.AccountingRule.pure`).
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from blockbudget.accounting import Accounting, Combine, Filter
from blockbudget.budget import Budget, Cost
from blockbudget.errors import InternalError, InvalidRequestError
from blockbudget.mechanisms.calibration import laplace_scale
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.mechanisms.sparse_vector import AboveThreshold
from blockbudget.scheduling.base import Scheduler, TaskShape, TaskSpec, check_positive
from blockbudget.scheduling.pool import FloatArray, Pool

__all__ = [
    "SCHEDULERS",
    "MixedThreshold",
    "OnlineThreshold",
    "competitive_ratio",
    "demand_share",
    "epsilon_floor",
    "threshold",
    "z_zero",
]


def z_zero(*, upper: float, lower: float) -> float:
    """z0 = 1/(1 + ln(U/L)) (seed ``000_de3e86489c8646aa.txt`` §VI-A, below Eq. (8)).

    Raises:
        InvalidRequestError: unless 0 < L ≤ U < inf.
    """
    _check_bounds(upper, lower)
    return 1.0 / (1.0 + math.log(upper / lower))


def competitive_ratio(*, upper: float, lower: float) -> float:
    """1 + ln(U/L): the competitive ratio of Alg. 2 (Thm. 4, §VI-B, Eq. (16)) and Alg. 3
    (Thm. 5, §VI-C) of seed ``000_de3e86489c8646aa.txt``."""
    _check_bounds(upper, lower)
    return 1.0 + math.log(upper / lower)


def threshold(z: float, *, upper: float, lower: float) -> float:
    """T(z) of seed ``000_de3e86489c8646aa.txt`` §VI-A, Eq. (9): L up to z0, then
    (Ue/L)^z · L/e (reaching U at z = 1)."""
    z0 = z_zero(upper=upper, lower=lower)
    if z <= z0:
        return lower
    return float((upper * math.e / lower) ** z * lower / math.e)


def _check_bounds(upper: float, lower: float) -> None:
    if not (0 < lower <= upper < math.inf):
        raise InvalidRequestError(f"need 0 < L <= U < inf, got L={lower!r}, U={upper!r}")


def demand_share(pool: Pool, vec: FloatArray, index: int) -> float:
    """The fraction of block ``index``'s capacity that features ``vec`` use (see Units above)."""
    if pool.combine is Combine.FILTER:  # no capacity per feature: ε/ε_g
        return float(vec[0] / float(pool.blocks[index].capacity.epsilon))
    cap = pool.capacity[index]
    usable = cap > 0
    if not np.any(usable):
        return math.inf
    ratios = vec[usable] / cap[usable]
    if pool.combine is Combine.ALL:
        return float(np.max(ratios))
    return float(np.min(ratios))


def epsilon_floor(block_filter: Filter, demand: Cost) -> float:
    """A lower bound on ε_j (see Units above) of ``demand`` on any block guarded by
    ``block_filter``: what the comparison sensitivity Δ_p/(ε_j + ε0) of Alg. 1 may assume
    (:meth:`_ThresholdBase.compared_sensitivity`).

    By the shape of the filter's test: FILTER, the demand's ε (ε_j is ε/ε_g·ε_g, rounded up);
    ALL, the largest feature/capacity ratio over the capped features times ε_g, raised by a
    relative 5e-10 — still below what the scheduler computes on the pool's conservative floats
    (capacities shrunk by a relative 1e-9, demands rounded up) — and never above the demand's
    ε for an (ε, δ) demand (basic: ε_j ≥ ε; advanced composition: ε_j = ε²/S·ε_g may be
    smaller); ANY, 0 (the best order's share may be arbitrarily small).

    Example:
        >>> from blockbudget.accounting import get_rule
        >>> from blockbudget.budget import Budget
        >>> f = get_rule("basic").filter(capacity=Budget(epsilon=1))
        >>> epsilon_floor(f, Budget(epsilon=0.09))
        0.09
    """
    eps = float(demand.epsilon) if isinstance(demand, Budget) else None
    if block_filter.combine is Combine.FILTER:
        return 0.0 if eps is None else eps
    caps = block_filter.capacity_units()
    if block_filter.combine is not Combine.ALL or caps is None:
        return 0.0
    units = block_filter.features(demand)
    ratios = [u / c for u, c in zip(units, caps, strict=True) if c > 0]
    if not ratios:
        return 0.0
    floor = max(ratios) * float(block_filter.capacity.epsilon) * (1 + 5e-10)
    return floor if eps is None else min(eps, floor)


def _largest_fraction(pool: Pool, vec: FloatArray, index: int) -> float:
    """The largest f in [0, 1] with f·vec fitting on the block: per feature for a linear test
    (ALL: the tightest feature; ANY: the loosest), by bisection on the filter's test else."""
    if pool.combine is Combine.FILTER:
        lo, hi = 0.0, 1.0
        for _ in range(30):
            mid = (lo + hi) / 2
            if pool.fits_many([index], vec * mid)[0]:
                lo = mid
            else:
                hi = mid
        return lo
    left = pool.remaining()[index]
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(vec > 0, left / np.where(vec > 0, vec, 1.0), np.inf)
    per = np.clip(per, 0.0, np.inf)
    best = float(np.min(per)) if pool.combine is Combine.ALL else float(np.max(per))
    return min(1.0, best) * (1 - 1e-6)


class _OverheadRefused(Exception):
    """A block refused a run's ε0 (a live pool's ledger refused it): no run, no comparison."""


class _BlockSource:
    """One block of a pool as a :class:`~blockbudget.mechanisms.source.BudgetSource`: a draw
    is an OVERHEAD charge on the block on behalf of the task that opens the run."""

    def __init__(self, pool: Pool, task_id: str, block_id: str) -> None:
        self.pool = pool
        self.task_id = task_id
        self.block_id = block_id

    @property
    def accounting(self) -> Accounting:
        """The pool's accounting rule."""
        return self.pool.accounting

    def draw(self, cost: Cost, *, label: str) -> None:
        """Charge ``cost`` to the block (durably first where the pool has an overhead sink);
        the caller checked that it fits the pool.

        Raises:
            _OverheadRefused: the block refused it (a live pool's ledger refused: the pool was
                stale, or the block retired); nothing was charged and no noise is drawn.
        """
        if not self.pool.charge_overhead(self.task_id, self.block_id, cost, note=label):
            raise _OverheadRefused(self.block_id)


class _ThresholdBase(Scheduler):
    """Shared parameters and the per-block AboveThreshold runs of Alg. 1 and Alg. 3."""

    shapes = frozenset({TaskShape.OPEN})
    combines = frozenset({Combine.ALL, Combine.ANY, Combine.FILTER})

    def __init__(
        self,
        *,
        seed: int | None = None,
        noise: NoiseSource | None = None,
        upper: float = 100.0,
        lower: float = 1.0,
        comparison_epsilon: float = 0.01,
        sensitivity: float = 1.0,
    ) -> None:
        super().__init__(seed=seed, noise=noise)
        upper = check_positive(upper, name="U (upper)")
        lower = check_positive(lower, name="L (lower)")
        _check_bounds(upper, lower)
        self.upper = upper
        self.lower = lower
        self.epsilon0 = check_positive(comparison_epsilon, name="comparison ε0")
        self.sensitivity = check_positive(sensitivity, name="comparison sensitivity Δ")
        self.comparisons = 0
        self.runs_started = 0
        # per pool, the open AboveThreshold run of each block (at most one; none after a pass)
        self._runs: weakref.WeakKeyDictionary[Pool, dict[str, AboveThreshold]] = (
            weakref.WeakKeyDictionary()
        )

    def _overhead(self, pool: Pool, epsilon: float) -> Cost:
        """The price of an ε-DP step (an AboveThreshold run, a Laplace release) under the
        pool's rule."""
        return pool.rule.pure(epsilon)

    def has_open_run(self, pool: Pool, block_id: str) -> bool:
        """Whether the block has an AboveThreshold run whose ε0 is paid and which has not yet
        passed (its next comparison costs nothing more)."""
        return block_id in self._runs.get(pool, {})

    def _run(self, pool: Pool, task: TaskSpec, block_id: str) -> AboveThreshold | None:
        """The block's open run, or a new one: ε0 charged (durably, on a live pool), then its
        threshold noise drawn; None when the block refused the ε0 (no comparison is made)."""
        runs = self._runs.setdefault(pool, {})
        run = runs.get(block_id)
        if run is None:
            try:
                run = AboveThreshold(
                    _BlockSource(pool, task.task_id, block_id),
                    epsilon=self.epsilon0,
                    threshold=0.0,
                    sensitivity=self.sensitivity,
                    noise=self.noise,
                    label="above-threshold run",
                )
            except _OverheadRefused:
                return None
            runs[block_id] = run
            self.runs_started += 1
        return run

    def _compare(self, pool: Pool, block_id: str, run: AboveThreshold, excess: float) -> bool:
        """One comparison of the run: excess (value − public bar) + ν ≥ ρ. A pass halts the
        run; the block's next comparison opens a new one."""
        self.comparisons += 1
        if run.query(excess):
            del self._runs[pool][block_id]
            return True
        return False

    def _take(self, pool: Pool, task: TaskSpec, block_id: str, cost: Cost, note: str) -> bool:
        """Give a task ``cost`` of a block that admitted it: charged at once (seed 000's
        Alg. 2 trains on each block as it is chosen), or — for a task that needs several
        blocks or none (``min_blocks`` > 1: a selector's k blocks) — reserved until the task
        has them all, so a task refused for lack of blocks is charged nothing but the
        comparisons' ε0."""
        if task.min_blocks > 1:
            return pool.reserve(task.task_id, block_id, cost, note=note)
        return pool.charge(task.task_id, {block_id: cost}, note=note)

    def _taken(self, pool: Pool, task: TaskSpec) -> tuple[str, ...]:
        """The blocks the task got so far, in the order it got them."""
        if task.min_blocks > 1:
            return tuple(pool.held(task.task_id))
        return tuple(pool.charged_blocks[task.task_id])

    def _finish(self, pool: Pool, task: TaskSpec) -> None:
        taken = self._taken(pool, task)
        if len(taken) < task.min_blocks:
            pool.reject(task.task_id, note="too few blocks passed the threshold")
        elif task.min_blocks > 1:  # all at once: the reservations become the charges
            costs = {b: pool.held_cost(task.task_id, b) for b in taken}
            if not pool.grant(task.task_id, {b: c for b, c in costs.items() if c is not None}):
                raise InternalError(f"task {task.task_id!r}: its own reservations did not fit")
        else:
            pool.grant(task.task_id)

    def compared_sensitivity(self, value_sensitivity: float, *, demand_epsilon: float) -> float:
        """Δ of the quantity this scheduler's AboveThreshold compares, for significance values
        of sensitivity ``value_sensitivity`` and a demand of ε-share ``demand_epsilon`` (Alg. 1:
        p_ij/(ε_j + ε0), so Δ_p/(ε_j + ε0); a smaller ``demand_epsilon`` is a safe bound).
        The runs are ε0-DP only when :attr:`sensitivity` is at least this.

        Example:
            >>> OnlineThreshold(comparison_epsilon=0.01).compared_sensitivity(
            ...     5.0, demand_epsilon=0.24)
            20.0
        """
        return value_sensitivity / (demand_epsilon + self.epsilon0)

    def describe(self) -> str:
        return f"{self.name}(U={self.upper:g}, L={self.lower:g}, ε0={self.epsilon0:g})"


class OnlineThreshold(_ThresholdBase):
    """Seed 000 Alg. 2 (online budgeting) with Alg. 1 (filtering by threshold) per block.

    Seed ``000_de3e86489c8646aa.txt`` §VI-A (Alg. 1, Alg. 2; threshold T(z) of Eq. (9) under
    Assumption 2, Eq. (8)); competitive ratio 1 + ln(U/L) by Thm. 4, §VI-B, Eqs. (11)–(16).
    Blocks are visited in random order among those the task may use
    (:attr:`~blockbudget.scheduling.base.TaskSpec.eligible`). Above z0 a block compares
    p_ij/(ε_j+ε0) with T(z_i) in its open AboveThreshold run (see the module docstring): ε0 is
    paid when a run starts, never per refused comparison.

    Args:
        seed: seed of the (public) block order; None (default) for OS entropy.
        noise: the comparisons' noise; None (default) for SecureNoise.
        upper: U of Assumption 2 (Eq. (8)).
        lower: L of Assumption 2.
        comparison_epsilon: ε0, the price of one AboveThreshold run on a block.
        sensitivity: Δ of p_ij/(ε_j+ε0) for the Laplace scales 4Δ/ε0 and 2Δ/ε0.

    Example:
        >>> from blockbudget.accounting import Accounting
        >>> from blockbudget.budget import Budget
        >>> from blockbudget.scheduling import BlockSpec, TaskSpec
        >>> from blockbudget.scheduling.simulator import simulate
        >>> blocks = [BlockSpec("b0", 0.0, Budget(epsilon=1.0))]
        >>> tasks = [TaskSpec("q", 1.0, Budget(epsilon=0.1), significance={"b0": 5.0})]
        >>> sched = OnlineThreshold(upper=100.0, lower=1.0, seed=0)
        >>> simulate(sched, blocks, tasks, accounting=Accounting.BASIC).allocated
        1
    """

    name = "online-threshold"

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        vec = pool.vector(task.demand)
        limit = task.access_limit or pool.n_blocks
        z0 = z_zero(upper=self.upper, lower=self.lower)
        over = pool.vector(self._overhead(pool, self.epsilon0))
        order = self.rng.permutation(pool.usable_indices(task.task_id))  # eligible blocks
        candidates = order[pool.fits_many(order, vec)] if len(order) else order
        taken = 0
        for i in (int(k) for k in candidates):
            if taken >= limit:
                break
            block_id = pool.blocks[i].block_id
            if float(pool.used_fraction([i])[0]) < z0:  # Alg. 1 lines 1–3
                if not self._take(pool, task, block_id, task.demand, "z < z0"):
                    continue
            elif not self._filter(pool, task, i, vec, over):  # Alg. 1 lines 5–10
                continue
            taken += 1
            if task.validator is not None and task.validator(self._taken(pool, task)):
                break  # Flag = True
        self._finish(pool, task)

    def _filter(
        self, pool: Pool, task: TaskSpec, i: int, vec: FloatArray, over: FloatArray
    ) -> bool:
        """Alg. 1 lines 5–10 (seed 000 §VI-A) above z0: compare p_ij/(ε_j+ε0) with T(z_i) of
        Eq. (9) in the block's run, charge the demand on a pass."""
        block_id = pool.blocks[i].block_id
        need = vec if self.has_open_run(pool, block_id) else vec + over
        if not pool.fits_many([i], need)[0]:
            return False  # public: the block cannot take the query; no comparison, no cost
        eps_j = demand_share(pool, vec, i) * float(pool.blocks[i].capacity.epsilon)
        ratio = task.significance_of(block_id) / (eps_j + self.epsilon0)
        run = self._run(pool, task, block_id)
        if run is None:
            return False
        bar = threshold(float(pool.used_fraction([i])[0]), upper=self.upper, lower=self.lower)
        if not self._compare(pool, block_id, run, ratio - bar):
            return False
        return self._take(pool, task, block_id, task.demand, "above T(z)")


class MixedThreshold(_ThresholdBase):
    """Seed 000 Alg. 3 (online budgeting with large queries), with partial grants (Eq. (18)).

    Seed ``000_de3e86489c8646aa.txt`` §VI-C: constant threshold T = U/(1 + ln(U/L)), ε* of
    Eq. (17) (with κ = 2ε0 in place of ε0, module docstring), grant ε_ij of Eq. (18); Thm. 5
    (§VI-C, Eq. (20)) values a partial grant at the query's full p_ij — the simulator's
    :attr:`~blockbudget.scheduling.simulator.PartialCredit.FULL`. Blocks are visited in random
    order among those the task may use (:attr:`~blockbudget.scheduling.base.TaskSpec.eligible`).
    Thm. 5 holds only with full credit for partial grants and η ≤ :meth:`eta_limit` for every
    query (module docstring); the default η = 0 is the only value safe for every demand.

    Args:
        eta: η ∈ [0, 1]: a block refuses a query whose ε* is below η·ε_j. Default 0.
        upper, lower, comparison_epsilon, sensitivity: as for :class:`OnlineThreshold`.

    Example:
        >>> sched = MixedThreshold(upper=100.0, lower=1.0, comparison_epsilon=1e-4)
        >>> round(sched.eta_limit(0.5), 4)  # the largest η for Thm. 5 at ε_j = 0.5
        0.0557
    """

    name = "mixed-threshold"

    def __init__(
        self,
        *,
        seed: int | None = None,
        noise: NoiseSource | None = None,
        upper: float = 100.0,
        lower: float = 1.0,
        comparison_epsilon: float = 0.01,
        sensitivity: float = 1.0,
        eta: float = 0.0,
    ) -> None:
        super().__init__(
            seed=seed,
            noise=noise,
            upper=upper,
            lower=lower,
            comparison_epsilon=comparison_epsilon,
            sensitivity=sensitivity,
        )
        eta = check_positive(eta, name="η", allow_zero=True)
        if not (0 <= eta <= 1):
            raise InvalidRequestError(f"η must be in [0, 1], got {eta!r}")
        self.eta = eta
        self.constant = upper / (1.0 + math.log(upper / lower))

    @property
    def overhead(self) -> float:
        """κ = 2ε0: the privacy overhead of one admission (its run's ε0 and the release of ε*)."""
        return 2.0 * self.epsilon0

    def eta_limit(self, epsilon: float) -> float:
        """The largest η with which every query of demand share ``epsilon`` within
        Assumption 2 passes the exact comparison: L/T − (1 − L/T)·κ/ε_j (negative when even
        η = 0 refuses density-L queries). Thm. 5 needs η ≤ this for every query.

        Raises:
            InvalidRequestError: unless ``epsilon`` > 0.
        """
        eps = check_positive(epsilon, name="ε_j")
        ratio = self.lower / self.constant
        return ratio - (1.0 - ratio) * self.overhead / eps

    def compared_sensitivity(self, value_sensitivity: float, *, demand_epsilon: float) -> float:
        """Δ of the compared ε* − η·ε_j = p_ij/T − κ − η·ε_j (Eq. (17)): Δ_p/T — the demand
        is public and does not enter it.

        Example:
            >>> MixedThreshold(upper=100.0, lower=100.0).compared_sensitivity(
            ...     5.0, demand_epsilon=0.1)
            0.05
        """
        return value_sensitivity / self.constant

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        vec = pool.vector(task.demand)
        over = pool.vector(self._overhead(pool, self.epsilon0))
        limit = task.access_limit or pool.n_blocks
        order = self.rng.permutation(pool.usable_indices(task.task_id))  # eligible blocks
        # worth a comparison only if the block can take the release's ε0 and some demand
        candidates = order[pool.fits_many(order, over + vec * 1e-3)] if len(order) else order
        taken = 0
        for i in (int(k) for k in candidates):
            if taken >= limit:
                break
            if not self._admit(pool, task, i, vec, over):
                continue
            taken += 1
            if task.validator is not None and task.validator(self._taken(pool, task)):
                break
        self._finish(pool, task)

    def _admit(self, pool: Pool, task: TaskSpec, i: int, vec: FloatArray, over: FloatArray) -> bool:
        """Alg. 3 lines 7–12 (seed 000 §VI-C) on block ``i``: compare ε* of Eq. (17) with
        η·ε_j, release ε*, charge the partial grant ε_ij of Eq. (18)."""
        block_id = pool.blocks[i].block_id
        runs = 1 if self.has_open_run(pool, block_id) else 2
        if not pool.fits_many([i], over * runs + vec * 1e-3)[0]:
            return False
        eps_j = demand_share(pool, vec, i) * float(pool.blocks[i].capacity.epsilon)
        eps_star = task.significance_of(block_id) / self.constant - self.overhead  # Eq. (17)
        run = self._run(pool, task, block_id)
        if run is None:
            return False
        if not self._compare(pool, block_id, run, eps_star - self.eta * eps_j):
            return False
        release = self._overhead(pool, self.epsilon0)
        if not pool.charge_overhead(task.task_id, block_id, release, note="release ε*"):
            return False
        scale = laplace_scale(sensitivity=self.sensitivity, epsilon=self.epsilon0)
        noisy = eps_star + float(self.noise.laplace_samples(1, scale=scale)[0])
        fraction = min(max(noisy, 0.0) / eps_j, 1.0, _largest_fraction(pool, vec, i))
        if fraction <= 1e-6:
            return False
        cost = task.demand if fraction >= 1.0 else task.demand.scaled(round(fraction, 9))
        return self._take(pool, task, block_id, cost, f"partial {fraction:.3f}")

    def describe(self) -> str:
        return f"{super().describe()[:-1]}, η={self.eta:g})"


SCHEDULERS: tuple[type[Scheduler], ...] = (OnlineThreshold, MixedThreshold)

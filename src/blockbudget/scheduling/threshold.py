"""Seed 000's online budgeting: filtering by threshold (Alg. 1), online budgeting (Alg. 2) and
online budgeting with mixed (large) queries (Alg. 3).

Seed ``000_de3e86489c8646aa.txt`` §VI. Under Assumption 2 (L ≤ p_ij/ε ≤ U, Eq. (8)):

* z0 = 1 / (1 + ln(U/L)) and the threshold of Eq. (9):
  T(z) = L for 0 ≤ z ≤ z0, (Ue/L)^z · L/e for z0 < z ≤ 1 (:func:`threshold`);
* Alg. 1 (filtering by threshold): while block i's consumed proportion z_i < z0 it takes any
  query that fits; above z0 it admits query j only if
  p_ij/(ε_j+ε0) + Lap(4Δ/ε0) > T(z_i) + Lap(2Δ/ε0) and ε_j + ε0 fits in what is left
  (an AboveThreshold comparison, Dwork & Roth Alg. 1; Thm. 3: ε0-DP);
* Alg. 2 (:class:`OnlineThreshold`): each arriving query visits the pool's blocks in random
  order and takes those that pass Alg. 1, until it has c_j blocks, the blocks run out, or its
  model passes validation (*Flag*); Thm. 4: competitive ratio 1 + ln(U/L) under Assumptions 1–2;
* Alg. 3 (:class:`MixedThreshold`): constant threshold T = U/(1+ln(U/L)); ε* solves
  p_ij/(ε*+ε0) = T (Eq. (17)); the block admits the query if ε* + Lap(4Δ/ε0) ≥ η·ε_j + Lap(2Δ/ε0)
  and grants ε_ij = min{ε*, ε_j, ε^r_gi − ε0} (Eq. (18)) — a *partial* grant when ε* < ε_j;
  Thm. 5: competitive ratio 1 + ln(U/L) under Assumption 2 alone.

Units: ε_j of a demand on a block is its ε-equivalent share, the fraction of an empty block's
capacity it uses (BASIC: the largest of ε/ε_g, δ/δ_g; RDP: the smallest over usable orders)
times ε_g, so z_i grows by ε_j/ε_gi as in Alg. 1 line 3.

Deviations, each on the side of privacy:

1. The comparison cost ε0 is charged to the block *before* the noise is drawn and whether or
   not the query passes (the seed adds ε0 to z_i only on success, Alg. 1 line 8; but the
   comparison reveals information either way). Comparisons are skipped (and cost nothing) when
   the public budget state already rules the block out.
2. Alg. 3's granted amount min{ε*, ...} is a function of p_ij, which the comparison alone does
   not cover; we release ε* with fresh Laplace noise of scale Δ/ε0 and charge a second ε0 for it
   (Numeric Sparse, Dwork & Roth §3.6). The seed uses the exact ε*.
3. The AboveThreshold sensitivity Δ of the compared quantity is a parameter (the seed takes 1).

Randomness. The comparisons read private data (p_ij): their Laplace noise comes from
``self.noise`` — OpenDP's secure sampler unless a test or experiment passes a SeededNoise, and
then :attr:`~blockbudget.scheduling.base.Scheduler.secure_noise` and the simulation result say
``secure_noise=False``. The order in which Alg. 2 / Alg. 3 visit the blocks is public randomness
(it never looks at data, so even a known order costs no privacy): ``self.rng``, OS entropy
unless a ``seed`` is given.

Adaptive composition (seed 000 §VI-B, after Rogers et al. 2016): run either scheduler on a pool
with :attr:`~blockbudget.accounting.Accounting.STRONG` accounting; the pool's filter is the
adaptive strong-composition filter, and z_i comes from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.scheduling.base import Scheduler, TaskShape, TaskSpec, check_positive
from blockbudget.scheduling.pool import FloatArray, Pool

__all__ = [
    "SCHEDULERS",
    "MixedThreshold",
    "OnlineThreshold",
    "competitive_ratio",
    "demand_share",
    "threshold",
    "z_zero",
]


def z_zero(*, upper: float, lower: float) -> float:
    """z0 = 1/(1 + ln(U/L)) (seed 000 §VI-A, below Eq. (8)).

    Raises:
        InvalidRequestError: unless 0 < L ≤ U < inf.
    """
    _check_bounds(upper, lower)
    return 1.0 / (1.0 + math.log(upper / lower))


def competitive_ratio(*, upper: float, lower: float) -> float:
    """1 + ln(U/L): the competitive ratio of Alg. 2 (Thm. 4) and Alg. 3 (Thm. 5)."""
    _check_bounds(upper, lower)
    return 1.0 + math.log(upper / lower)


def threshold(z: float, *, upper: float, lower: float) -> float:
    """T(z) of seed 000 Eq. (9): L up to z0, then (Ue/L)^z · L/e (reaching U at z = 1)."""
    z0 = z_zero(upper=upper, lower=lower)
    if z <= z0:
        return lower
    return float((upper * math.e / lower) ** z * lower / math.e)


def _check_bounds(upper: float, lower: float) -> None:
    if not (0 < lower <= upper < math.inf):
        raise InvalidRequestError(f"need 0 < L <= U < inf, got L={lower!r}, U={upper!r}")


def demand_share(pool: Pool, vec: FloatArray, index: int) -> float:
    """The fraction of block ``index``'s capacity that features ``vec`` use (see Units above)."""
    cap = pool.capacity[index]
    if pool.accounting is Accounting.STRONG:
        return float(vec[0] / float(pool.blocks[index].capacity.epsilon))
    usable = cap > 0
    if not np.any(usable):
        return math.inf
    ratios = vec[usable] / cap[usable]
    if pool.accounting is Accounting.BASIC:
        return float(np.max(ratios))
    return float(np.min(ratios))


def _largest_fraction(pool: Pool, vec: FloatArray, index: int) -> float:
    """The largest f in [0, 1] with f·vec fitting on the block (linear accounting rules)."""
    if pool.accounting is Accounting.STRONG:
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
    best = float(np.min(per)) if pool.accounting is Accounting.BASIC else float(np.max(per))
    return min(1.0, best) * (1 - 1e-6)


class _ThresholdBase(Scheduler):
    """Shared parameters and the AboveThreshold comparison of Alg. 1 and Alg. 3."""

    shapes = frozenset({TaskShape.OPEN})
    accountings = frozenset({Accounting.BASIC, Accounting.RDP, Accounting.STRONG})

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

    def _overhead(self, pool: Pool, epsilon: float) -> Cost:
        if pool.accounting is Accounting.RDP:
            return RdpCurve.from_pure_dp(epsilon)
        return Budget(epsilon=epsilon)

    def _above(self, pool: Pool, task: TaskSpec, block_id: str, value: float, bar: float) -> bool:
        """Charge ε0, then the noisy comparison value + Lap(4Δ/ε0) > bar + Lap(2Δ/ε0)."""
        cost = self._overhead(pool, self.epsilon0)
        if not pool.charge_overhead(task.task_id, block_id, cost, note="above-threshold"):
            return False
        self.comparisons += 1
        noise = self.noise.laplace_samples(1, scale=4 * self.sensitivity / self.epsilon0)[0]
        bar_noise = self.noise.laplace_samples(1, scale=2 * self.sensitivity / self.epsilon0)[0]
        return bool(value + noise > bar + bar_noise)

    def _finish(self, pool: Pool, task: TaskSpec) -> None:
        if len(pool.charged_blocks[task.task_id]) >= task.min_blocks:
            pool.grant(task.task_id)
        else:
            pool.reject(task.task_id, note="no block passed the threshold")

    def describe(self) -> str:
        return f"{self.name}(U={self.upper:g}, L={self.lower:g}, ε0={self.epsilon0:g})"


class OnlineThreshold(_ThresholdBase):
    """Seed 000 Alg. 2 (online budgeting) with Alg. 1 (filtering by threshold) per block.

    Args:
        seed: seed of the (public) block order; None (default) for OS entropy.
        noise: the comparisons' noise; None (default) for SecureNoise.
        upper: U of Assumption 2 (Eq. (8)).
        lower: L of Assumption 2.
        comparison_epsilon: ε0, the AboveThreshold cost charged to a block per comparison.
        sensitivity: Δ of p_ij/(ε_j+ε0) for the Laplace scales 4Δ/ε0 and 2Δ/ε0.
    """

    name = "online-threshold"

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        vec = pool.vector(task.demand)
        limit = task.access_limit or pool.n_blocks
        z0 = z_zero(upper=self.upper, lower=self.lower)
        over = pool.vector(self._overhead(pool, self.epsilon0))
        order = self.rng.permutation(pool.n_blocks)
        candidates = order[pool.fits_many(order, vec)] if len(order) else order
        taken = 0
        for i in (int(k) for k in candidates):
            if taken >= limit:
                break
            block_id = pool.blocks[i].block_id
            z = float(pool.used_fraction([i])[0])
            if z < z0:  # Alg. 1 lines 1–3
                if not pool.charge(task.task_id, {block_id: task.demand}, note="z < z0"):
                    continue
            else:  # Alg. 1 lines 5–10
                if not pool.fits_many([i], vec + over)[0]:
                    continue
                eps_j = demand_share(pool, vec, i) * float(pool.blocks[i].capacity.epsilon)
                ratio = task.significance_of(block_id) / (eps_j + self.epsilon0)
                bar = threshold(z, upper=self.upper, lower=self.lower)
                if not self._above(pool, task, block_id, ratio, bar):
                    continue
                if not pool.charge(task.task_id, {block_id: task.demand}, note="above T(z)"):
                    continue
            taken += 1
            if task.validator is not None and task.validator(
                tuple(pool.charged_blocks[task.task_id])
            ):
                break  # Flag = True
        self._finish(pool, task)


class MixedThreshold(_ThresholdBase):
    """Seed 000 Alg. 3 (online budgeting with large queries), with partial grants (Eq. (18)).

    Args:
        eta: η ∈ [0, 1]: a block ignores a query whose ε* is below η·ε_j.
        upper, lower, comparison_epsilon, sensitivity: as for :class:`OnlineThreshold`.
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
        eta: float = 0.5,
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

    def on_task(self, pool: Pool, task: TaskSpec) -> None:
        vec = pool.vector(task.demand)
        over = pool.vector(self._overhead(pool, self.epsilon0))
        limit = task.access_limit or pool.n_blocks
        order = self.rng.permutation(pool.n_blocks)
        # a block is worth a comparison only if it can take two ε0 and some of the demand
        candidates = order[pool.fits_many(order, 2 * over + vec * 1e-3)] if len(order) else order
        grants: Mapping[str, Cost]
        taken = 0
        for i in (int(k) for k in candidates):
            if taken >= limit:
                break
            block_id = pool.blocks[i].block_id
            eps_g = float(pool.blocks[i].capacity.epsilon)
            eps_j = demand_share(pool, vec, i) * eps_g
            eps_star = task.significance_of(block_id) / self.constant - self.epsilon0  # Eq. (17)
            if not self._above(pool, task, block_id, eps_star, self.eta * eps_j):
                continue
            # Numeric release of ε* (deviation 2): a second ε0, then fresh noise.
            release = self._overhead(pool, self.epsilon0)
            if not pool.charge_overhead(task.task_id, block_id, release, note="release ε*"):
                continue
            noisy = eps_star + float(
                self.noise.laplace_samples(1, scale=self.sensitivity / self.epsilon0)[0]
            )
            fraction = min(max(noisy, 0.0) / eps_j, 1.0, _largest_fraction(pool, vec, i))
            if fraction <= 1e-6:
                continue
            cost = task.demand if fraction >= 1.0 else task.demand.scaled(round(fraction, 9))
            grants = {block_id: cost}
            if not pool.charge(task.task_id, grants, note=f"partial {fraction:.3f}"):
                continue
            taken += 1
            if task.validator is not None and task.validator(
                tuple(pool.charged_blocks[task.task_id])
            ):
                break
        self._finish(pool, task)

    def describe(self) -> str:
        return f"{super().describe()[:-1]}, η={self.eta:g})"


SCHEDULERS: tuple[type[Scheduler], ...] = (OnlineThreshold, MixedThreshold)

"""DPI: releasing a PDF every time slot, for ever, within a bounded user-level ε.

Seed ``002_e6d4c77f2abb3a16.txt`` §3–5, Alg. 1 (DPI with bi-directional boosting), Alg. 2 (0-DP
pool),
Alg. 3/4 (random budget allocation), Thm 5.1 (per-slot cost), Thm 5.4 (series). Per slot t:

1. **Budget.** ε_t comes from the allocator (Alg. 3 or 4) over the Thm 5.4 series; the accountant
   refuses the slot if ε_t does not fit (nothing is sampled then). ε_t is halved between the query
   direction and the synopsis direction (Alg. 1, line 5).
2. **Query direction** (reweights P_Q; Alg. 1 lines 9–14, 17–19). The score of query q is how badly
   the current public release R answers it: ``b_q = −s(|q(T_t) − q(R)|)`` with Alg. 1's clipped
   score ``s(d) = 1`` if d < λ, ``−1`` if d ≥ λ + μ, else ``1 − 2(d − λ)/μ`` (slope 2/μ, so ``b``
   moves by at most ``2Δ_Q/μ``). ``k_s`` queries are drawn, each ∝ ``P_Q(q)·exp(α^Q·b_q)``
   (report-noisy-max, :mod:`~blockbudget.streaming.selection`): bad queries are boosted.
3. **Synopsis direction** (reweights P_A). For each drawn query, a synopsis a of the 0-DP pool is
   drawn
   ∝ ``P_A(a)·exp(α^A·s(|q(T_t) − q(a)|))``: accurate synopses are boosted. Its answer ``q(a)`` is
   the
   slot's private measurement of q.
4. **Boosting (public).** P_A ← P_A·exp(α^A·s(|m_q − q(a)|)) over the whole pool, and
   P_Q(q) ← P_Q(q)·exp(−α^Q·s(|m_q − q(R)|)) for the measured queries, normalised (Alg. 1 lines
   17–19 with α_t = ½·ln((1+2η_t)/(1−2η_t))). These use only released draws and public state.
5. **Release** R_t = Σ_a P_A(a)·a, a PDF over the domain, with spent/remaining ε.

Privacy (the reading that keeps the claim; see docs/dpi.md). The only data-dependent steps are the
draws in 2 and 3. Each is a report-noisy-max whose base weights are public (functions of earlier
releases only), so slot t costs exactly ``ε_t = Σ_draws 2·α·(2Δ_Q/μ)`` — Thm 5.1's
``(2Δ_Q/μ)·[ln((1+2η^A)/(1−2η^A)) + ln((1+2η^Q)/(1−2η^Q))]`` — and the stream's loss is the sum over
slots (basic composition across slots, user-level: every slot may contain every user), which the
accountant keeps ≤ ε. Alg. 1 as printed samples from weights that accumulate raw-data scores over
all past slots; sampling from those every slot would cost Σ_t Σ_{j≤t} α_j, which no converging
series bounds — so the accumulated weights here are updated from released draws only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import numpy.typing as npt

from blockbudget.decimals import shortest_decimal
from blockbudget.errors import InvalidRequestError
from blockbudget.streaming.accountant import StreamAccountant
from blockbudget.streaming.allocation import (
    BudgetAllocator,
    RandomBudgetAllocation,
    RangeBudgetAllocation,
)
from blockbudget.streaming.compression import Compression
from blockbudget.streaming.config import AllocationKind, DPIConfig, Estimator, Horizon
from blockbudget.streaming.queries import QueryPool
from blockbudget.streaming.selection import SecureSelector, Selector
from blockbudget.streaming.series import DPISeries, eta_from_alpha
from blockbudget.streaming.synopses import SynopsisPool

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

__all__ = [
    "AllocationKind",
    "DPIConfig",
    "DPIStream",
    "Estimator",
    "Horizon",
    "SlotRelease",
    "clipped_score",
    "plausible_interval",
    "plausible_region",
    "tilt_towards",
]


_MAX_TILT = 1.0
"""Largest log-factor one measurement may move any weight by (see :func:`tilt_towards`)."""


@dataclass(frozen=True)
class SlotRelease:
    """What slot t releases (all of it public).

    Attributes:
        t: the slot number (1, 2, …).
        pdf: the released PDF R_t over the domain.
        epsilon: ε_t charged for this slot (0 when refused).
        series_index: the series term spent (0 when refused).
        spent / remaining: the stream's exact running total and what is left of ε.
        refused: True when the slot's term did not fit (R_t is then R_{t−1}).
        queries: the measured query ids; measurements: their private answers q(a).
        eta: η_t of the synopsis direction (Alg. 1's learning rate, ½·tanh(α)).
        secure_noise: whether the private draws used the secure selector (OpenDP); False for a
            :class:`~blockbudget.streaming.selection.SeededSelector` (experiments and tests).
            The stream's ``rng`` (budget allocation, query candidates) never looks at data, so a
            seeded ``rng`` alone does not make a release insecure.
    """

    t: int
    pdf: FloatArray = field(repr=False)
    epsilon: float
    series_index: int
    spent: Decimal
    remaining: Decimal
    refused: bool
    queries: tuple[int, ...]
    measurements: tuple[float, ...]
    eta: float
    secure_noise: bool

    @property
    def secure(self) -> bool:
        """The former name of :attr:`secure_noise`."""
        return self.secure_noise


def clipped_score(error: FloatArray, *, lam: float, mu: float) -> FloatArray:
    """Alg. 1 lines 9–14: 1 below λ, −1 from λ + μ, linear ``1 − 2(d − λ)/μ`` between."""
    return np.clip(1.0 - 2.0 * (np.abs(error) - lam) / mu, -1.0, 1.0)


def _normalise_log(logw: FloatArray) -> FloatArray:
    top = float(logw.max())
    return np.asarray(logw - (top + math.log(float(np.exp(logw - top).sum()))), dtype=np.float64)


def tilt_towards(
    log_weights: FloatArray,
    answers: FloatArray,
    measurement: float,
    *,
    gamma: float,
    tolerance: float = 0.0,
    max_tilt: float = 1.0,
) -> FloatArray:
    """Multiplicative reweighting ``w ∝ w·exp(β·answers)`` with β such that the weighted mean answer
    moves from its current value c a fraction γ of the way to the nearest point of the measurement's
    interval ``[m − tolerance, m + tolerance]``, found by safeguarded Newton
    steps on the (increasing) mean, whose derivative is the weighted variance. ``|β|`` is capped at
    ``max_tilt / (max − min answer)`` so that one measurement cannot wipe out the pool. Returns
    normalised log-weights."""
    logw = _normalise_log(log_weights)
    lo_a, hi_a = float(answers.min()), float(answers.max())
    if hi_a - lo_a <= 0.0 or gamma <= 0.0:
        return logw
    centred = answers - lo_a

    def moments(beta: float) -> tuple[float, float]:
        z = logw + beta * centred
        e = np.exp(z - z.max())
        w = e / e.sum()
        mean = float(w @ centred)
        return mean, float(w @ (centred - mean) ** 2)

    current, _ = moments(0.0)
    m = measurement - lo_a
    nearest = min(max(current, m - tolerance), m + tolerance)
    goal = current + gamma * (nearest - current)
    if abs(goal - current) <= 1e-15:
        return logw
    cap = max_tilt / (hi_a - lo_a)
    lo_b, hi_b = (0.0, cap) if goal > current else (-cap, 0.0)
    beta = 0.0
    for _ in range(30):
        mean, var = moments(beta)
        if abs(mean - goal) <= 1e-9 * (hi_a - lo_a):
            break
        if mean < goal:
            lo_b = beta
        else:
            hi_b = beta
        newton = beta + (goal - mean) / var if var > 0 else math.inf
        beta = newton if lo_b < newton < hi_b else 0.5 * (lo_b + hi_b)
        if hi_b - lo_b <= 1e-12 * cap:
            break
    return _normalise_log(logw + beta * centred)


def plausible_interval(
    pool_answers: FloatArray,
    base_log_weights: FloatArray,
    measurement: float,
    *,
    alpha: float,
    lam: float,
    mu: float,
    quantum: float = 0.0,
    points: int = 201,
    drop: float = 3.0,
) -> tuple[float, float]:
    """The values of the true answer T that make the released measurement plausible.

    The synopsis draw picks a with probability ≈ ``w_a·exp(α·s(q(a) − T)) / Z(T)`` (Alg. 1's clipped
    score s; the exponential mechanism the noisy max stands for), so the measurement m = q(a) has
    log-likelihood ``ℓ(T) = α·s(m − T) − ln Σ_a w_a·exp(α·s(q(a) − T))`` — computable from public
    values only. Returns ``[min, max]`` of the grid points within ``drop`` nats of the best,
    widened by ``quantum`` (half the pool's quantisation step). A sharp draw gives a narrow
    interval; a draw at a tiny budget, or whose candidates all clip at −1, gives a wide one (and
    the release hardly moves).
    """
    lo, hi, _ = plausible_region(
        pool_answers,
        base_log_weights,
        measurement,
        alpha=alpha,
        lam=lam,
        mu=mu,
        quantum=quantum,
        points=points,
        drop=drop,
    )
    return lo, hi


def plausible_region(
    pool_answers: FloatArray,
    base_log_weights: FloatArray,
    measurement: float,
    *,
    alpha: float,
    lam: float,
    mu: float,
    quantum: float = 0.0,
    points: int = 201,
    drop: float = 3.0,
) -> tuple[float, float, float]:
    """:func:`plausible_interval` and the likelihood's peak: ``(lo, hi, argmax ℓ)`` (the peak is
    the centre of the grid points that reach the maximum). Public values only."""
    values, inverse = np.unique(pool_answers, return_inverse=True)
    weights = np.full(values.size, -np.inf)
    np.logaddexp.at(weights, inverse, base_log_weights)
    lo = min(0.0, float(values[0]))
    hi = max(1.0, float(values[-1]))
    grid = np.linspace(lo, hi, points)
    scores = clipped_score(values[None, :] - grid[:, None], lam=lam, mu=mu)
    z = weights[None, :] + alpha * scores
    top = z.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(z - top).sum(axis=1))
    ll = alpha * clipped_score(measurement - grid, lam=lam, mu=mu) - log_z
    best = float(ll.max())
    keep = grid[ll >= best - drop]
    at_peak = grid[ll >= best - 1e-12]
    peak = 0.5 * (float(at_peak.min()) + float(at_peak.max()))
    return float(keep.min()) - quantum, float(keep.max()) + quantum, peak


class DPIStream:
    """One DPI stream: feed it each slot's user records, get a :class:`SlotRelease` back.

    Args:
        config: the parameters (ε, λ, μ, ζ, Λ, …).
        compression: declared domain and public user floor (Δ_P = 2/n_min).
        pool: the 0-DP synopsis pool (Alg. 2) over the same domain.
        queries: the query pool.
        selector: the private selection (secure by default).
        accountant: the ε accountant; a fresh one for ``config.epsilon`` when None (pass the one
            returned by :func:`~blockbudget.streaming.accountant.charge_stream_total` to run against
            the platform's ledger).
        rng: randomness for the budget allocation (data-independent); OS entropy when None.
        name: the stream's name.
    """

    def __init__(
        self,
        *,
        config: DPIConfig,
        compression: Compression,
        pool: SynopsisPool,
        queries: QueryPool,
        selector: Selector | None = None,
        accountant: StreamAccountant | None = None,
        rng: np.random.Generator | None = None,
        name: str = "dpi",
    ) -> None:
        k = compression.domain_size
        if pool.domain_size != k or queries.domain_size != k:
            raise InvalidRequestError(
                f"pool, queries and compression must share one domain, got {pool.domain_size}, "
                f"{queries.domain_size} and {k}"
            )
        if config.queries_per_slot > queries.size:
            raise InvalidRequestError(
                f"queries_per_slot {config.queries_per_slot} exceeds the pool's "
                f"{queries.size} queries"
            )
        self.config = config
        self.compression = compression
        self.pool = pool
        self.queries = queries
        self.selector = selector if selector is not None else SecureSelector()
        if accountant is None:
            accountant = StreamAccountant(epsilon=config.epsilon, name=name)
        elif accountant.target < shortest_decimal(config.epsilon):
            raise InvalidRequestError(
                f"the accountant's epsilon {accountant.target} is below the stream's "
                f"{config.epsilon}"
            )
        self.accountant = accountant
        self.name = name
        gen = rng if rng is not None else np.random.default_rng()
        self._rng = gen  # data-independent randomness: allocation and query candidates
        self.series = DPISeries(epsilon=config.epsilon, mu=config.mu, zeta=config.zeta)
        self.allocator: BudgetAllocator
        if config.allocation is AllocationKind.EXPONENTIAL:
            self.allocator = RandomBudgetAllocation(self.series, rate=config.rate, rng=gen)
        else:
            self.allocator = RangeBudgetAllocation(
                self.series,
                medium_from=config.medium_from,
                small_from=config.small_from,
                rng=gen,
            )
        self._log_pa = np.full(pool.size, -math.log(pool.size))
        self._log_pq = np.full(queries.size, -math.log(queries.size))
        self._items = np.arange(k, dtype=np.int64)
        # The release starts at the uniform PDF (maximum entropy, data-independent).
        self._r = np.full(k, 1.0 / k)
        self._z = 1.0
        self._release = self._mixture()
        self._accumulated = np.zeros(k)
        self._t = 0
        # fitted measurements: (query, lo, hi) — see plausible_interval
        self._history: list[tuple[int, float, float]] = []
        # ℓ∞-sensitivity of one query's score vector: (2/μ)·Δ_P·max|w|.
        self._score_sensitivity = 2.0 / config.mu * compression.sensitivity * queries.max_weight()

    def _mixture(self) -> FloatArray:
        """R = (1 − ρ)·exp(log R) + ρ·uniform (ρ = ``config.smoothing``; post-processing)."""
        k = self.compression.domain_size
        rho = self.config.smoothing
        self._r /= self._r.sum()
        self._z = 1.0
        return np.asarray((1.0 - rho) * self._r + rho / k, dtype=np.float64)

    def _tilt_release(self, query: int, lo: float, hi: float) -> None:
        """Multiplicative-weights step of the released PDF towards one measurement.

        Point and range queries have 0/1 weights, so the I-projection has a closed form: scale the
        mass inside the query by ``g/S_in`` and outside by ``(1 − g)/(1 − S_in)``, with g the goal
        ``S_in + γ·(m − S_in)`` and both factors within ``e^{±max_tilt}``. Linear queries use
        :func:`tilt_towards`.
        """
        n_points = self.queries.points.size
        n_ranges = self.queries.range_lo.size
        r = self._r  # unnormalised; self._z is its total
        if query >= n_points + n_ranges:
            logr = np.log(np.maximum(r / self._z, 1e-300))
            self._r = np.exp(
                tilt_towards(
                    logr,
                    self._domain_weights(query),
                    0.5 * (lo + hi),
                    gamma=1.0,
                    tolerance=0.5 * (hi - lo),
                )
            )
            self._z = float(self._r.sum())
            return
        if query < n_points:
            sl: slice | int = int(self.queries.points[query])
            mass = float(r[sl])
        else:
            j = query - n_points
            sl = slice(int(self.queries.range_lo[j]), int(self.queries.range_hi[j]))
            mass = float(r[sl].sum())
        inside = mass / self._z
        outside = 1.0 - inside
        if inside <= 0.0 or outside <= 1e-12:
            return
        goal = min(max(inside, lo), hi)
        if abs(goal - inside) <= 1e-15:
            return
        if goal <= 0.0:
            log_ratio = -_MAX_TILT
        elif goal >= 1.0:
            log_ratio = _MAX_TILT
        else:
            log_ratio = math.log(goal * outside / ((1.0 - goal) * inside))
        # the inside/outside odds move by e^{β}, |β| <= _MAX_TILT (as tilt_towards caps β)
        factor = math.exp(min(max(log_ratio, -_MAX_TILT), _MAX_TILT))
        r[sl] *= factor
        self._z += mass * (factor - 1.0)
        if not 1e-100 < self._z < 1e100:
            self._z = float(r.sum())

    def _domain_weights(self, query: int) -> FloatArray:
        """The query's weight on every item of the domain."""
        return self.queries.weights_at(query, self._items)

    # --- public state --------------------------------------------------------------------------

    @property
    def t(self) -> int:
        """Slots processed so far."""
        return self._t

    @property
    def release(self) -> FloatArray:
        """The latest released PDF (public)."""
        return self._release.copy()

    @property
    def synopsis_weights(self) -> FloatArray:
        """P_A, the public boosted weights over the pool."""
        return np.asarray(np.exp(self._log_pa), dtype=np.float64)

    @property
    def query_weights(self) -> FloatArray:
        """P_Q, the public boosted weights over the query pool."""
        return np.asarray(np.exp(self._log_pq), dtype=np.float64)

    # --- one slot ------------------------------------------------------------------------------

    def step(self, users: npt.ArrayLike, items: npt.ArrayLike) -> SlotRelease:
        """Process one slot's records (parallel arrays of user ids and items in ``[0, k)``)."""
        return self._step_pdf(self.compression.pdf(users, items))

    def step_counts(self, counts: npt.ArrayLike) -> SlotRelease:
        """One slot given per-item counts where every record is a distinct user (e.g. synthetic
        streams); equivalent to :meth:`step` with one user per record."""
        c = np.asarray(counts)
        k = self.compression.domain_size
        if c.shape != (k,) or not np.issubdtype(c.dtype, np.integer) or (c.size and c.min() < 0):
            raise InvalidRequestError(f"counts must be {k} non-negative ints")
        n = int(c.sum())
        pad = max(0, self.compression.min_users - n)
        pdf = (c.astype(np.float64) + pad / k) / float(n + pad) if n + pad else np.full(k, 1.0 / k)
        return self._step_pdf(np.asarray(pdf / pdf.sum(), dtype=np.float64))

    def step_pdf(self, pdf: npt.ArrayLike) -> SlotRelease:
        """One slot given its compressed PDF (built with this stream's :class:`Compression`, so
        that Δ_P holds; experiments that compare methods on the same PDFs use it).

        Raises:
            InvalidRequestError: not a finite non-negative vector of k entries summing to 1.
        """
        arr = np.asarray(pdf, dtype=np.float64)
        k = self.compression.domain_size
        if arr.shape != (k,) or not np.all(np.isfinite(arr)) or arr.min() < 0:
            raise InvalidRequestError(f"a slot PDF must be {k} finite non-negative floats")
        if abs(float(arr.sum()) - 1.0) > 1e-9:
            raise InvalidRequestError(f"a slot PDF must sum to 1, got {float(arr.sum())!r}")
        return self._step_pdf(arr)

    def _step_pdf(self, pdf: FloatArray) -> SlotRelease:
        self._t += 1
        t = self._t
        self._accumulated += pdf
        accumulative = self.config.horizon is Horizon.ACCUMULATIVE
        target = self._accumulated / t if accumulative else pdf
        allocation = self.allocator.next()
        if not self.accountant.try_charge(allocation.epsilon):
            return self._slot(t, 0.0, 0, refused=True, queries=(), measurements=(), eta=0.0)
        cfg = self.config
        k_s = cfg.queries_per_slot
        eps_dir = allocation.epsilon / 2.0 / k_s  # per draw, per direction
        d = self._score_sensitivity
        alpha = eps_dir / (2.0 * d)  # exponential-mechanism parameter of one draw
        # Query direction (Alg. 1 line 6, Q_s ~ P_Q): a public candidate set is sampled from P_Q
        # without looking at data; among the candidates, queries the current release answers
        # badly are drawn by noisy max.
        m_all = self.queries.size
        n_cand = min(cfg.candidates, m_all)
        if n_cand < m_all:
            cand = self._rng.choice(m_all, size=n_cand, replace=False, p=self.query_weights)
        else:
            cand = np.arange(m_all)
        cand = np.sort(cand)
        true_c = self.queries.answers_at(target, cand)
        release_c = self.queries.answers_at(self._release, cand)
        badness = -clipped_score(true_c - release_c, lam=cfg.lam, mu=cfg.mu)
        available = np.ones(n_cand, dtype=bool)
        chosen_pos: list[int] = []
        for _ in range(k_s):
            ids = np.flatnonzero(available)
            pos = int(ids[self.selector.select(badness[ids], epsilon=eps_dir, sensitivity=d)])
            available[pos] = False
            chosen_pos.append(pos)
        chosen = [int(cand[p]) for p in chosen_pos]
        # Synopsis direction: for each drawn query, draw an accurate synopsis; its answer is the
        # slot's measurement.
        # Base measure of the synopsis draw: half P_A, half uniform (public), so that a pool whose
        # weights have concentrated can still be searched for a synopsis that fits the data.
        base_a = np.logaddexp(self._log_pa + math.log(0.5), math.log(0.5 / self.pool.size))
        offsets_a = base_a / alpha
        measurements: list[float] = []
        answers_of_pool: list[FloatArray] = []
        for pos, j in zip(chosen_pos, chosen, strict=True):
            pool_answers = self.queries.pool_answers(j, self.pool.units)
            scores = clipped_score(true_c[pos] - pool_answers, lam=cfg.lam, mu=cfg.mu)
            a = self.selector.select(scores + offsets_a, epsilon=eps_dir, sensitivity=d)
            m = float(pool_answers[a])
            measurements.append(m)
            answers_of_pool.append(pool_answers)
            # P_Q: a query the release already answers well (per the measurement) loses weight.
            agree = float(clipped_score(np.array([m - release_c[pos]]), lam=cfg.lam, mu=cfg.mu)[0])
            self._log_pq[j] -= alpha * agree
        self._boost(chosen, measurements, answers_of_pool, base_a, alpha)
        self._log_pq = _normalise_log(self._log_pq)
        self._release = self._mixture()
        return self._slot(
            t,
            allocation.epsilon,
            allocation.index,
            refused=False,
            queries=tuple(chosen),
            measurements=tuple(measurements),
            eta=eta_from_alpha(alpha),
        )

    def _boost(
        self,
        chosen: list[int],
        measurements: list[float],
        answers_of_pool: list[FloatArray],
        base_a: FloatArray,
        alpha: float,
    ) -> None:
        """After a slot's draws: tilt P_A and the release towards each measurement, then replay
        earlier ones (post-processing of the released draws only)."""
        cfg = self.config
        k_s = cfg.queries_per_slot
        # Public boosting of P_A and P_Q from the released draws only (post-processing): P_A is
        # tilted multiplicatively, P_A ∝ P_A·exp(β·q(a)), with β chosen so that the release moves
        # a fraction γ_t = 2η_t of the way from q(R) to the measurement (the I-projection onto
        # that constraint; γ_t → 1 when the draw is sharp, → 0 when the budget is tiny).
        quantum = 0.5 / self.pool.n_units
        for j, m, pool_answers in zip(chosen, measurements, answers_of_pool, strict=True):
            lo, hi, peak = plausible_region(
                pool_answers, base_a, m, alpha=alpha, lam=cfg.lam, mu=cfg.mu, quantum=quantum
            )
            if cfg.estimator is Estimator.PEAK:  # post-processing either way (public values)
                lo, hi = max(lo, peak - quantum), min(hi, peak + quantum)
            self._log_pa = tilt_towards(
                self._log_pa, pool_answers, 0.5 * (lo + hi), gamma=1.0, tolerance=0.5 * (hi - lo)
            )
            self._tilt_release(j, lo, hi)
            self._history.append((j, lo, hi))
        # Replay earlier measurements (still post-processing) so that fitting the new one does not
        # undo them — the cyclic projections of multiplicative weights (cf. MWEM).
        fresh = len(chosen)
        window = self._history[-(self.config.replay + fresh) : len(self._history) - fresh]
        for j, lo, hi in window:
            self._tilt_release(j, lo, hi)
        del self._history[: max(0, len(self._history) - 4 * self.config.replay - k_s)]

    def _slot(
        self,
        t: int,
        epsilon: float,
        index: int,
        *,
        refused: bool,
        queries: tuple[int, ...],
        measurements: tuple[float, ...],
        eta: float,
    ) -> SlotRelease:
        return SlotRelease(
            t=t,
            pdf=self._release.copy(),
            epsilon=epsilon,
            series_index=index,
            spent=self.accountant.spent,
            remaining=self.accountant.remaining,
            refused=refused,
            queries=queries,
            measurements=measurements,
            eta=eta,
            secure_noise=self.selector.secure,
        )

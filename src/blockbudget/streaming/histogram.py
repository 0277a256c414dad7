"""User-level histogram releases of an infinite stream: windowed and per-slot (docs/streaming.md).

DPI (seed ``002_e6d4c77f2abb3a16.txt``) spends each slot's ε_t on one exponential-mechanism draw
of one query. The modes here spend a budget on *every* bin of a PDF at once, with the Laplace or
the Gaussian mechanism, and answer each slot by post-processing:

* :attr:`ReleaseMode.WINDOWED` — slots are grouped into windows of ``window`` slots; the first
  one is split into a doubling warm-up (lengths 1, 2, 4, …, then the rest), so the first slot is
  answered at once, and its sub-windows share the first window's budget by length. When a
  window closes, the mean of its slots' compressed PDFs (per-user normalisation and the
  public floor n_min of seed 002 §4.1) is released once, with budget ε_j = ε·k_j from a convergent
  series of :mod:`blockbudget.series` (seed ``003_a7fa9cb9080a05af.txt`` §4.1, Eq. (5),
  Theorem 4; by default :class:`~blockbudget.series.InverseSquareSeries`, k_j = 6/(π²j²)).
* :attr:`ReleaseMode.PER_SLOT` — every slot's PDF is released with DPI's own per-slot budget:
  slot t spends term t of the Thm 5.4 series ε_t = C·(1 − r^t)/t² (seed 002 §5, Eq. (10)–(12)),
  with ζ set by :meth:`~blockbudget.streaming.DPIConfig.for_horizon` when the horizon is known —
  spent on the whole histogram instead of on one query. (DPI's Alg. 3 only permutes those terms
  at random; taking them in order keeps the stream resumable and changes no total.)

Answers (post-processing, no privacy cost): an *accumulative* slot query (the mean PDF of slots
1…t) is the combination ``Σ_j w_j·x̃_j / Σ_j w_j`` of every noisy release x̃_j so far, with
inverse-variance weights ``w_j ∝ 1/Var(x̃_j)`` (:attr:`Combine.INVERSE_VARIANCE`) or weights
proportional to the slots each release covers (:attr:`Combine.SLOT_WEIGHTED`, unbiased for a
drifting stream); an *instantaneous* query is the latest release. The vector is projected onto the
probability simplex (Euclidean projection) and mixed with ``smoothing`` of the uniform PDF, the
same mix DPI applies.

Privacy (user-level, for ever; derived in docs/streaming.md). A user may appear in every slot.
Per slot the compressed PDF moves by at most Δ₁ = 2/n_min in ℓ₁ and Δ₂ = √2/n_min in ℓ₂ when one
user's records change; a window's mean of such PDFs moves by at most the same amounts (triangle
inequality). So a window released with Laplace(Δ₁/ε_j) noise per bin is ε_j-DP and with
N(0, σ_j²) noise, σ_j = Δ₂/√(2ρ_j), is ρ_j-zCDP (Bun & Steinke, "Concentrated differential
privacy", TCC 2016, Prop. 1.6). Releases compose sequentially over time: the stream is
(Σ_j ε_j)-DP, resp. (Σ_j ρ_j)-zCDP, and :class:`~blockbudget.streaming.StreamAccountant` keeps the
sum ≤ ε (resp. ρ) in exact 10⁻¹⁸ units for any number of slots. Gaussian streams are configured by
(ε, δ): the total ρ is the largest with ρ + 2√(ρ·ln(1/δ)) ≤ ε (ibid., Prop. 1.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum

import numpy as np
import numpy.typing as npt

from blockbudget.decimals import plain_fields, shortest_decimal
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import (
    NoiseKind,
    NoiseSource,
    SecureNoise,
    SeededNoise,
    resolve_noise,
)
from blockbudget.series import InfiniteBudgetSequence, InverseSquareSeries, ProportionSeries
from blockbudget.series._exact import FLOOR, grid_floor
from blockbudget.streaming.accountant import StreamAccountant
from blockbudget.streaming.compression import Compression
from blockbudget.streaming.config import DPIConfig, Horizon
from blockbudget.streaming.histogram_noise import GRID_BITS as GRID_BITS
from blockbudget.streaming.histogram_noise import MAX_GRID_EXPONENT as MAX_GRID_EXPONENT
from blockbudget.streaming.histogram_noise import _nudge_up
from blockbudget.streaming.histogram_noise import grid_exponent as grid_exponent
from blockbudget.streaming.histogram_noise import grid_noise as grid_noise
from blockbudget.streaming.histogram_noise import project_to_simplex as project_to_simplex
from blockbudget.streaming.histogram_noise import zcdp_rho as zcdp_rho
from blockbudget.streaming.series import DPISeries, float_at_most

FloatArray = npt.NDArray[np.float64]

__all__ = [
    "Combine",
    "HistogramConfig",
    "HistogramRelease",
    "HistogramState",
    "HistogramStream",
    "ReleaseMode",
    "project_to_simplex",
    "zcdp_rho",
]


class ReleaseMode(Enum):
    """How a histogram stream spends its budget."""

    WINDOWED = "windowed"
    PER_SLOT = "per-slot"


class Combine(Enum):
    """How an accumulative answer combines the noisy releases so far."""

    INVERSE_VARIANCE = "inverse-variance"
    SLOT_WEIGHTED = "slot-weighted"


@dataclass(frozen=True, kw_only=True)
class HistogramConfig:
    """A histogram stream's parameters (keyword-only).

    Attributes:
        epsilon: the total user-level ε for all slots ever (Laplace: pure ε-DP; Gaussian: the ε
            of (ε, δ)-DP, through ρ-zCDP).
        delta: δ of a Gaussian stream (0 for Laplace).
        mode: windowed or per-slot.
        noise: Laplace or Gaussian.
        window: the steady window length in slots (windowed mode).
        warmup: windows double from 1 slot up to ``window`` (windowed mode).
        series: the proportion series of the window budgets (windowed mode).
        horizon: which PDF a slot's answer estimates (accumulative or instantaneous).
        expected_slots: per-slot mode: the horizon DPI's budgets are tuned for
            (:meth:`DPIConfig.for_horizon`); None takes DPI's paper defaults.
        combine: how accumulative answers combine releases.
        smoothing: the uniform share mixed into each answer.
    """

    epsilon: float
    delta: float = 0.0
    mode: ReleaseMode = ReleaseMode.WINDOWED
    noise: NoiseKind = NoiseKind.LAPLACE
    window: int = 30
    warmup: bool = True
    series: ProportionSeries = field(default_factory=InverseSquareSeries)
    horizon: Horizon = Horizon.ACCUMULATIVE
    expected_slots: int | None = 365
    combine: Combine = Combine.INVERSE_VARIANCE
    smoothing: float = 0.01

    def __post_init__(self) -> None:
        plain_fields(self)  # NumPy scalars as Python numbers
        eps = self.epsilon
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise InvalidRequestError(f"epsilon must be a number, got {type(eps).__name__}")
        if not (math.isfinite(eps) and eps > 0):
            raise InvalidRequestError(f"epsilon must be finite and > 0, got {eps!r}")
        for name, kind in (
            ("mode", ReleaseMode),
            ("noise", NoiseKind),
            ("horizon", Horizon),
            ("combine", Combine),
        ):
            if not isinstance(getattr(self, name), kind):
                raise InvalidRequestError(f"{name} must be a {kind.__name__}, got {name!r}")
        if self.noise is NoiseKind.GAUSSIAN:
            zcdp_rho(epsilon=eps, delta=self.delta)  # validates δ
        elif self.delta != 0:
            raise InvalidRequestError(
                f"a Laplace stream is pure DP: delta must be 0, got {self.delta!r}"
            )
        w = self.window
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise InvalidRequestError(f"window must be an int >= 1 slot, got {w!r}")
        if not isinstance(self.series, ProportionSeries):
            raise InvalidRequestError("series must be a blockbudget.series ProportionSeries")
        n = self.expected_slots
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 2):
            raise InvalidRequestError(f"expected_slots must be None or an int >= 2, got {n!r}")
        if not (isinstance(self.smoothing, (int, float)) and 0 <= self.smoothing < 1):
            raise InvalidRequestError(f"smoothing must lie in [0, 1), got {self.smoothing!r}")

    @property
    def budget(self) -> float:
        """What the accountant sums: ε (Laplace) or ρ (Gaussian)."""
        if self.noise is NoiseKind.GAUSSIAN:
            return zcdp_rho(epsilon=self.epsilon, delta=self.delta)
        return float(self.epsilon)

    @property
    def unit(self) -> str:
        """``"epsilon"`` (pure DP) or ``"rho"`` (zCDP)."""
        return "rho" if self.noise is NoiseKind.GAUSSIAN else "epsilon"

    def warmup_lengths(self) -> tuple[int, ...]:
        """The warm-up windows' lengths: 1, 2, 4, … while they fit, then the rest, covering
        exactly the first ``window`` slots (``(window,)`` without warm-up; ``(1,)`` per slot)."""
        if self.mode is ReleaseMode.PER_SLOT:
            return (1,)
        if not self.warmup:
            return (self.window,)
        lengths: list[int] = []
        covered, length = 0, 1
        while covered + length < self.window:
            lengths.append(length)
            covered += length
            length *= 2
        lengths.append(self.window - covered)
        return tuple(lengths)

    def window_length(self, j: int) -> int:
        """The number of slots of window j ≥ 1."""
        if self.mode is ReleaseMode.PER_SLOT:
            return 1
        warm = self.warmup_lengths()
        return warm[j - 1] if j <= len(warm) else self.window


@dataclass(frozen=True)
class HistogramState:
    """A histogram stream's public state between windows (see :meth:`HistogramStream.state`).

    Attributes:
        t: slots processed.
        window: the next window's number.
        numerator / denominator: Σ_j w_j·x̃_j and Σ_j w_j over the noisy releases x̃_j.
        latest: the latest noisy release (None before the first).
        spent_units: the accountant's exact total in 10⁻¹⁸ units.
    """

    t: int
    window: int
    numerator: tuple[float, ...] = field(repr=False)
    denominator: float
    latest: tuple[float, ...] | None = field(repr=False)
    spent_units: int


@dataclass(frozen=True)
class HistogramRelease:
    """What slot t publishes (all of it public).

    Attributes:
        t: the slot (1, 2, …).
        pdf: the slot's answer (accumulative or instantaneous, per the config).
        window: the window slot t belongs to.
        released: whether a window closed (and was released) at this slot.
        cost: the ε (Laplace) or ρ (Gaussian) charged at this slot; 0 between releases.
        unit: ``"epsilon"`` or ``"rho"``.
        spent / remaining: the stream's exact running total and what is left.
        refused: the closing window's budget did not fit (nothing was released or charged).
        secure_noise: whether the noise came from OpenDP's secure samplers.
    """

    t: int
    pdf: FloatArray = field(repr=False)
    window: int
    released: bool
    cost: float
    unit: str
    spent: Decimal
    remaining: Decimal
    refused: bool
    secure_noise: bool


class HistogramStream:
    """A user-level histogram release of an infinite stream (see the module docstring).

    Args:
        config: the parameters.
        compression: the declared domain and public floor n_min (Δ₁ = 2/n_min).
        noise: the noise source; OpenDP's secure samplers when None.
        seed: a seed for reproducible experiments (``SeededNoise``; releases then say
            ``secure_noise=False``); not allowed together with ``noise``.
        accountant: the running-sum accountant; a fresh one for ``config.budget`` when None.
        name: the stream's name (for error messages).

    Example:
        >>> import numpy as np
        >>> from blockbudget.streaming import Compression, HistogramConfig, HistogramStream
        >>> s = HistogramStream(config=HistogramConfig(epsilon=1.0), compression=Compression(3, 50),
        ...                     seed=1)
        >>> r = s.step(np.arange(60), np.zeros(60, dtype=np.int64))
        >>> bool(r.released), round(float(r.pdf.sum()), 6), r.secure_noise
        (True, 1.0, False)
    """

    def __init__(
        self,
        *,
        config: HistogramConfig,
        compression: Compression,
        noise: NoiseSource | None = None,
        seed: int | None = None,
        accountant: StreamAccountant | None = None,
        name: str = "histogram",
    ) -> None:
        if noise is not None and seed is not None:
            raise InvalidRequestError("pass either a noise source or a seed, not both")
        self.config = config
        self.compression = compression
        self.noise = SeededNoise(seed) if seed is not None else resolve_noise(noise)
        if accountant is None:
            accountant = StreamAccountant(epsilon=config.budget, name=name)
        elif accountant.target < shortest_decimal(config.budget):
            raise InvalidRequestError(
                f"the accountant's total {accountant.target} is below the stream's "
                f"{config.unit} {config.budget}"
            )
        self.accountant = accountant
        self.name = name
        self._windows = InfiniteBudgetSequence(
            epsilon=shortest_decimal(config.budget), series=config.series
        )
        self._warm = config.warmup_lengths()
        self._per_slot = config.mode is ReleaseMode.PER_SLOT
        self._per_slot_series: DPISeries | None = None
        if self._per_slot:
            dpi = (
                DPIConfig.for_horizon(epsilon=config.budget, slots=config.expected_slots)
                if config.expected_slots is not None
                else DPIConfig(epsilon=config.budget)
            )
            self._per_slot_series = DPISeries(epsilon=dpi.epsilon, mu=dpi.mu, zeta=dpi.zeta)
        k = compression.domain_size
        self._t = 0
        self._j = 1  # the open window
        self._sum = np.zeros(k)
        self._len = 0
        self._num = np.zeros(k)  # Σ w_j·x̃_j
        self._den = 0.0
        self._latest: FloatArray | None = None
        self._answer = np.full(k, 1.0 / k)

    # --- public state ---------------------------------------------------------------------------

    @property
    def t(self) -> int:
        """Slots processed so far."""
        return self._t

    @property
    def release(self) -> FloatArray:
        """The latest answer (public)."""
        return self._answer.copy()

    @property
    def sensitivity(self) -> float:
        """Δ₁ = 2/n_min (Laplace) or Δ₂ = √2/n_min (Gaussian) of one window's mean PDF."""
        if self.config.noise is NoiseKind.GAUSSIAN:
            return math.sqrt(2.0) / self.compression.min_users
        return self.compression.sensitivity

    def window_budget(self, j: int) -> float:
        """Window j's ε_j (or ρ_j) as charged, read as a float not above the exact value.

        The warm-up windows together are the series' first window: they share its term ε·k₁ in
        proportion to their lengths (rounded down on the 10⁻¹⁸ grid, so their sum is ≤ ε·k₁);
        each later full window takes the next term, ε·k₂, ε·k₃, ….
        """
        warm = self._warm
        if j <= len(warm):
            share = FLOOR.divide(FLOOR.multiply(self._windows.term(1), warm[j - 1]), sum(warm))
            return float_at_most(grid_floor(share))
        return float_at_most(self._windows.term(j - len(warm) + 1))

    def budget_of(self, window: int) -> float:
        """What window ``window`` is charged: :meth:`window_budget`, or per slot DPI's own ε_t
        (Thm 5.4)."""
        if self._per_slot_series is not None:
            return self._per_slot_series.term(window)
        return self.window_budget(window)

    def state(self) -> HistogramState:
        """The stream's public state between windows (noisy releases and totals only).

        Raises:
            InvalidRequestError: a window is open — its running sum is private and is never
                handed out.
        """
        if self._len:
            raise InvalidRequestError(
                f"the state is public only between windows; {self._len} slot(s) of window "
                f"{self._j} are still open"
            )
        return HistogramState(
            t=self._t,
            window=self._j,
            numerator=tuple(float(x) for x in self._num),
            denominator=self._den,
            latest=None if self._latest is None else tuple(float(x) for x in self._latest),
            spent_units=self.accountant.spent_units,
        )

    def resume(self, state: HistogramState) -> None:
        """Continue from :meth:`state` of a stream with the same configuration (a fresh stream
        only: nothing processed and nothing charged yet).

        Raises:
            InvalidRequestError: this stream already ran, or the state does not fit its domain.
        """
        k = self.compression.domain_size
        if self._t or self.accountant.spent_units:
            raise InvalidRequestError("resume() needs a fresh stream (no slot processed yet)")
        if len(state.numerator) != k or (state.latest is not None and len(state.latest) != k):
            raise InvalidRequestError(f"the saved state is not over a domain of {k} items")
        self.accountant.restore(state.spent_units)
        self._t, self._j = state.t, state.window
        self._num = np.asarray(state.numerator, dtype=np.float64)
        self._den = float(state.denominator)
        self._latest = None if state.latest is None else np.asarray(state.latest)
        if self._latest is not None:
            self._answer_from(self._latest)

    # --- slots ----------------------------------------------------------------------------------

    def step(self, users: npt.ArrayLike, items: npt.ArrayLike) -> HistogramRelease:
        """One slot from parallel arrays of user ids and items in ``[0, k)``."""
        return self.step_pdf(self.compression.pdf(users, items))

    def step_counts(self, counts: npt.ArrayLike) -> HistogramRelease:
        """One slot from per-item counts where every record is a distinct user."""
        c = np.asarray(counts)
        k = self.compression.domain_size
        if c.shape != (k,) or not np.issubdtype(c.dtype, np.integer) or (c.size and c.min() < 0):
            raise InvalidRequestError(f"counts must be {k} non-negative ints")
        n = int(c.sum())
        pad = max(0, self.compression.min_users - n)
        pdf = (c.astype(np.float64) + pad / k) / float(n + pad) if n + pad else np.full(k, 1 / k)
        return self.step_pdf(np.asarray(pdf, dtype=np.float64))

    def step_pdf(self, pdf: FloatArray) -> HistogramRelease:
        """One slot given its compressed PDF (already floored at n_min by the caller).

        Raises:
            InvalidRequestError: ``pdf`` is not k finite non-negative floats summing to 1 (the
                stream is left unchanged).
        """
        vec = np.asarray(pdf, dtype=np.float64)
        k = self.compression.domain_size
        if vec.shape != (k,) or not np.all(np.isfinite(vec)) or (k and vec.min() < 0):
            raise InvalidRequestError(f"a slot's PDF must be {k} finite non-negative floats")
        if abs(float(vec.sum()) - 1.0) > 1e-9:
            raise InvalidRequestError(f"a slot's PDF must sum to 1, got {float(vec.sum())!r}")
        self._t += 1
        self._sum += vec
        self._len += 1
        window = self._j
        if self._per_slot:
            length = 1
        else:
            length = self._warm[window - 1] if window <= len(self._warm) else self.config.window
        if self._len < length:
            return self._slot(window, released=False, cost=0.0, refused=False)
        mean = self._sum / self._len
        length = self._len
        self._sum = np.zeros_like(self._sum)
        self._len = 0
        self._j += 1
        budget = self.budget_of(window)
        if budget <= 0.0 or not self.accountant.try_charge(budget):
            return self._slot(window, released=False, cost=0.0, refused=True)
        self._publish(mean, budget=budget, length=length)
        return self._slot(window, released=True, cost=budget, refused=False)

    def skip_window(self) -> list[HistogramRelease]:
        """Close the next window unreleased but charged: a window whose release was charged and
        then lost (it counts against ε; nothing new is published, no data is needed).

        Raises:
            InvalidRequestError: a window is open.
        """
        if self._len:
            raise InvalidRequestError("skip_window() needs no open window")
        window = self._j
        length = self.config.window_length(window)
        budget = self.budget_of(window)
        charged = budget > 0.0 and self.accountant.try_charge(budget)
        self._j += 1
        out = []
        for i in range(length):
            self._t += 1
            cost = budget if charged and i == length - 1 else 0.0
            out.append(self._slot(window, released=False, cost=cost, refused=False))
        return out

    def _publish(self, mean: FloatArray, *, budget: float, length: int) -> None:
        """Add noise to one window's mean PDF and update the answers (post-processing after)."""
        gaussian = self.config.noise is NoiseKind.GAUSSIAN
        if gaussian:
            scale = self.sensitivity / math.sqrt(2.0 * budget)
        else:
            scale = self.sensitivity / budget
        if isinstance(self.noise, SecureNoise):
            noisy, scale = grid_noise(
                mean, sensitivity=self.sensitivity, budget=budget, gaussian=gaussian
            )
        elif gaussian:
            noisy = self.noise.add_gaussian(mean, sigma=_nudge_up(scale))
        else:
            noisy = self.noise.add_laplace(mean, scale=_nudge_up(scale))
        variance = scale * scale if gaussian else 2.0 * scale * scale
        weight = 1.0 / variance if self.config.combine is Combine.INVERSE_VARIANCE else length
        self._num += weight * noisy
        self._den += weight
        self._latest = noisy
        self._answer_from(noisy)

    def _answer_from(self, latest: FloatArray) -> None:
        """The public answer: the combination (accumulative) or the latest release, projected
        onto the simplex and mixed with the uniform PDF."""
        if self.config.horizon is Horizon.ACCUMULATIVE and self._den > 0:
            estimate = self._num / self._den
        else:
            estimate = latest
        k = self.compression.domain_size
        rho = self.config.smoothing
        self._answer = (1.0 - rho) * project_to_simplex(estimate) + rho / k

    def _slot(self, window: int, *, released: bool, cost: float, refused: bool) -> HistogramRelease:
        return HistogramRelease(
            t=self._t,
            pdf=self._answer.copy(),
            window=window,
            released=released,
            cost=cost,
            unit=self.config.unit,
            spent=self.accountant.spent,
            remaining=self.accountant.remaining,
            refused=refused,
            secure_noise=self.noise.secure,
        )

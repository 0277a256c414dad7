"""A DPI stream's parameters: the horizon, the allocation scheme and :class:`DPIConfig`.

Seed ``002_e6d4c77f2abb3a16.txt`` Alg. 1 (λ, μ, k_s), Thm 5.4 (ζ), Alg. 3 (Λ) and Alg. 4 (index
ranges), §6.2 (instantaneous and accumulative queries). :meth:`DPIConfig.for_horizon` picks ζ and
Λ for a stream with a known expected horizon (see ``docs/dpi.md``, reading 9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from blockbudget.decimals import plain_fields
from blockbudget.errors import InvalidRequestError
from blockbudget.streaming.series import series_constant, zeta_for_horizon


class Horizon(Enum):
    """Which PDF the queries are asked of: the slot's own (instantaneous) or the running mean of all
    slots so far (accumulative). §6.2, Fig. 3."""

    INSTANTANEOUS = "instantaneous"
    ACCUMULATIVE = "accumulative"


class AllocationKind(Enum):
    """Alg. 3 (nearest unused term to an Exp(Λ) draw) or Alg. 4 (three index ranges)."""

    EXPONENTIAL = "exponential"
    RANGES = "ranges"


class Estimator(Enum):
    """Where a measurement moves the release (post-processing of the released draw): to the
    nearest edge of its plausible interval (``INTERVAL``, conservative; the default) or to the
    likelihood's peak (``PEAK``, within half a pool quantum), see
    :func:`~blockbudget.streaming.release.plausible_region`."""

    INTERVAL = "interval"
    PEAK = "peak"


@dataclass(frozen=True, kw_only=True)
class DPIConfig:
    """A DPI stream's parameters (keyword-only).

    For a stream with a known expected horizon, :meth:`for_horizon` picks ζ and Λ so that the
    horizon spends most of ε; the defaults (ζ = 0.2, Λ = 10⁸) are the paper's, which spend ≈ 10⁻⁸
    per slot.

    Attributes:
        epsilon: the total user-level budget ε, for all slots ever.
        lam: λ, the error under which a synopsis counts as accurate (Alg. 1).
        mu: μ, the extra margin before it counts as wrong (> 0; the score's slope is 2/μ).
        zeta: ζ, the series' decay rate (Thm 5.4).
        rate: Λ of Alg. 3 (mean draw 1/Λ; the paper uses 10⁸).
        allocation: Alg. 3 or Alg. 4.
        queries_per_slot: k_s, queries measured per slot (the paper's single-query case is 1).
        horizon: instantaneous or accumulative queries.
        medium_from / small_from: Alg. 4's index ranges.
        replay: earlier measurements re-fitted after each slot (public post-processing).
        candidates: queries sampled from P_Q per slot (data-independent, Alg. 1 line 6) among
            which the query draw chooses.
        smoothing: ρ ∈ [0, 1), the uniform share mixed into each release (keeps KL finite).
        estimator: how a measurement moves the release (post-processing; no privacy effect).
    """

    epsilon: float
    lam: float = 0.01
    mu: float = 0.5
    zeta: float = 0.2
    rate: float = 1e8
    allocation: AllocationKind = AllocationKind.EXPONENTIAL
    queries_per_slot: int = 1
    horizon: Horizon = Horizon.INSTANTANEOUS
    medium_from: int = 10
    small_from: int = 100
    replay: int = 128
    candidates: int = 256
    smoothing: float = 0.01
    estimator: Estimator = Estimator.INTERVAL

    def __post_init__(self) -> None:
        plain_fields(self)  # NumPy scalars as Python numbers
        for name in ("epsilon", "mu", "zeta", "rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidRequestError(f"{name} must be a number, got {type(value).__name__}")
            if not math.isfinite(value) or value <= 0:
                raise InvalidRequestError(f"{name} must be finite and > 0, got {value!r}")
        series_constant(sensitivity=2.0, mu=self.mu, zeta=self.zeta)  # DPISeries' C = 2/(μζ)
        if not isinstance(self.estimator, Estimator):
            raise InvalidRequestError(f"estimator must be an Estimator, got {self.estimator!r}")
        if not isinstance(self.horizon, Horizon):
            raise InvalidRequestError(f"horizon must be a Horizon, got {self.horizon!r}")
        if not isinstance(self.allocation, AllocationKind):
            raise InvalidRequestError(
                f"allocation must be an AllocationKind, got {self.allocation!r}"
            )
        for name in ("lam", "smoothing"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidRequestError(f"{name} must be a number, got {type(value).__name__}")
        for name in ("medium_from", "small_from"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidRequestError(f"{name} must be an int, got {value!r}")
        if not 1 < self.medium_from < self.small_from:
            raise InvalidRequestError(
                f"need 1 < medium_from < small_from, got {self.medium_from} and {self.small_from}"
            )
        if not (isinstance(self.lam, (int, float)) and math.isfinite(self.lam) and self.lam >= 0):
            raise InvalidRequestError(f"lam must be finite and >= 0, got {self.lam!r}")
        if not (isinstance(self.smoothing, (int, float)) and 0 <= self.smoothing < 1):
            raise InvalidRequestError(f"smoothing must lie in [0, 1), got {self.smoothing!r}")
        c = self.candidates
        if isinstance(c, bool) or not isinstance(c, int) or c < self.queries_per_slot:
            raise InvalidRequestError(
                f"candidates must be an int >= queries_per_slot, got {self.candidates!r}"
            )
        if isinstance(self.replay, bool) or not isinstance(self.replay, int) or self.replay < 0:
            raise InvalidRequestError(f"replay must be an int >= 0, got {self.replay!r}")
        k = self.queries_per_slot
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidRequestError(f"queries_per_slot must be an int >= 1, got {k!r}")

    @classmethod
    def for_horizon(cls, *, epsilon: float, slots: int, **overrides: Any) -> DPIConfig:
        """A configuration for a stream whose expected horizon is ``slots`` time slots.

        The paper's Λ = 10⁸ and ζ = 0.2 spend ≈ 10⁻⁸ per slot (Fig. 10): the budget lasts for ever
        but no slot can move the release. Knowing the expected horizon T, this picks

        * ζ from :func:`~blockbudget.streaming.series.zeta_for_horizon` (the series' knee at T,
          so the first T terms hold 85–88% of ε and decay like 1/t, not 1/t²), and
        * Λ = T/(4ε) for Alg. 3 (draws of mean 4ε/T: the nearest unused terms are the large ones,
          so a T-slot run spends 73–85% of ε; measured in ``docs/results.md``).

        Slots past T still run — on the series' tail, with ever smaller terms — and the accountant
        keeps the total at most ε whatever happens. ``overrides`` set any other field (μ, λ,
        horizon, allocation, …; an explicit ``zeta`` or ``rate`` wins).

        Raises:
            InvalidRequestError: ε or μ invalid, or ``slots`` not an int >= 2.
        """
        mu = overrides.get("mu", cls.mu)
        zeta = overrides.pop("zeta", None)
        if zeta is None:
            zeta = zeta_for_horizon(epsilon=epsilon, slots=slots, mu=mu)
        rate = overrides.pop("rate", None)
        if rate is None:
            rate = slots / (4.0 * epsilon)
        return cls(epsilon=epsilon, zeta=zeta, rate=rate, **overrides)

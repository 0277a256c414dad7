"""AboveThreshold, the sparse vector technique for one above-threshold answer.

Dwork & Roth 2014, "The Algorithmic Foundations of Differential Privacy", §3.6, Algorithm 1
(AboveThreshold) and Theorem 3.23; Lyu, Su & Li, "Understanding the Sparse Vector Technique for
Differential Privacy", PVLDB 2017, Algorithm 1 with c = 1. With queries of sensitivity Δ:

    T̂ = T + Lap(2Δ/ε)                         (once)
    for each query f_i:  ν_i = Lap(4Δ/ε)
        if f_i(D) + ν_i ≥ T̂:  output ⊤ and halt
        else:                  output ⊥

The whole interaction — any number of ⊥ answers and the single ⊤ — is ε-DP, so ε is charged
once, when the object is built, before the threshold noise is drawn. After the ⊤ the object
halts and refuses further queries; the noisy threshold is never exposed.
"""

from __future__ import annotations

import math
import threading
from typing import NoReturn

import numpy as np

from blockbudget.accounting import get_rule
from blockbudget.budget import Cost, Number
from blockbudget.decimals import plain_number
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.calibration import (
    check_sensitivity,
    exact_epsilon,
    laplace_scale,
    split_epsilon,
)
from blockbudget.mechanisms.noise import NoiseKind, NoiseSource, resolve_noise
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.source import BudgetSource, source_accounting


class AboveThreshold:
    """Answer "is this query above the threshold?" until the first yes, for ε in total.

    Args:
        source: where ε is drawn from (once, here).
        epsilon: ε > 0, exact.
        threshold: the public threshold T (finite).
        sensitivity: the sensitivity Δ > 0 of every query that will be asked.
        noise: the noise source; None means SecureNoise.
        label: the label of the charge (default "above_threshold").

    Attributes:
        cost: what was drawn: the rule's price of a pure ε-DP mechanism
            (:meth:`~blockbudget.accounting.rule.AccountingRule.pure`): ``Budget(ε)`` under an
            (ε, δ) rule, on RDP the generic curve ``RdpCurve.from_pure_dp(ε)`` (AboveThreshold
            is not a plain Laplace release, so the Laplace curve does not apply).
        perturbations: the threshold noise Lap(2Δ/ε) and the per-query noise Lap(4Δ/ε), each
            scale rounded up from the exact ε.
        secure_noise: whether the noise source is floating-point safe.
        label: the label of the charge.

    Raises:
        InvalidBudgetError: for a bad ε or sensitivity.
        InvalidRequestError: for a non-finite threshold or a source that is not a BudgetSource.
        BudgetExceededError, ReservationError: from the source; nothing is sampled.

    Example:
        >>> at = AboveThreshold(grant, epsilon=0.5, threshold=100.0)  # doctest: +SKIP
        >>> [at.query(v) for v in daily_counts]  # raises after the first True  # doctest: +SKIP
    """

    def __init__(
        self,
        source: BudgetSource,
        *,
        epsilon: Number,
        threshold: float,
        sensitivity: float = 1.0,
        noise: NoiseSource | None = None,
        label: str | None = None,
    ) -> None:
        accounting = source_accounting(source)
        eps = exact_epsilon(epsilon)
        delta_q = check_sensitivity(sensitivity)
        threshold = plain_number(threshold)
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise InvalidRequestError(f"threshold must be a number, got {threshold!r}")
        if not math.isfinite(threshold):
            raise InvalidRequestError(f"threshold must be finite, got {threshold!r}")
        # 2Δ and 4Δ are exact in binary floating point (multiplication by a power of two).
        threshold_scale = laplace_scale(sensitivity=2.0 * delta_q, epsilon=eps)
        query_scale = laplace_scale(sensitivity=4.0 * delta_q, epsilon=eps)
        self._noise = resolve_noise(noise)
        half = split_epsilon(eps, 2)  # Lyu et al. 2017: ε₁ = ε₂ = ε/2
        self.perturbations = (
            Perturbation("threshold", NoiseKind.LAPLACE, threshold_scale, delta_q, 1, half),
            # the query noise is calibrated to 2Δ at ε/2 (Lyu et al. 2017, Alg. 1, c = 1)
            Perturbation("query", NoiseKind.LAPLACE, query_scale, 2.0 * delta_q, 1, half),
        )
        self.cost: Cost = get_rule(accounting).pure(eps)
        self.secure_noise = self._noise.secure
        self.label = label or "above_threshold"
        self.threshold = float(threshold)
        self.sensitivity = delta_q
        self._query_scale = query_scale
        self._lock = threading.Lock()
        self._halted = False
        self._answered = 0
        source.draw(self.cost, label=self.label)  # before any noise: a refusal samples nothing
        noisy = self._noise.add_laplace(np.array([self.threshold]), scale=threshold_scale)
        self._noisy_threshold = float(noisy[0])

    @property
    def halted(self) -> bool:
        """True once a query was answered True; no further query is allowed."""
        return self._halted

    @property
    def answered(self) -> int:
        """How many queries were answered (the last one True if :attr:`halted`)."""
        return self._answered

    def query(self, value: float) -> bool:
        """Whether ``value + Lap(4Δ/ε) ≥ T̂``; True at most once.

        Args:
            value: the exact answer f_i(D) of a query of sensitivity Δ on the data.

        Raises:
            InvalidRequestError: once the object has halted (after its True answer).
            DataError: for a non-numeric or non-finite value.
        """
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise DataError(f"a query answer must be a number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise DataError(f"a query answer must be finite, got {value!r}")
        with self._lock:
            if self._halted:
                raise InvalidRequestError(
                    f"AboveThreshold {self.label!r} halted after its True answer (query "
                    f"{self._answered}); build a new one, which draws ε again"
                )
            noisy = self._noise.add_laplace(np.array([float(value)]), scale=self._query_scale)
            self._answered += 1
            if float(noisy[0]) >= self._noisy_threshold:
                self._halted = True
                return True
            return False

    def _refuse_copy(self) -> NoReturn:
        raise InvalidRequestError(
            "an AboveThreshold cannot be copied or pickled: a copy would reuse its noisy "
            "threshold past the single True answer that ε pays for"
        )

    def __copy__(self) -> NoReturn:
        self._refuse_copy()

    def __deepcopy__(self, memo: object) -> NoReturn:
        self._refuse_copy()

    def __reduce__(self) -> NoReturn:
        self._refuse_copy()

    def __repr__(self) -> str:
        state = "halted" if self._halted else "open"
        return (
            f"AboveThreshold(label={self.label!r}, threshold={self.threshold}, "
            f"sensitivity={self.sensitivity}, {state}, answered={self._answered})"
        )

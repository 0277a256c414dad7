"""The Validator interface: a DP test of a trained model or statistic (Sage's SLAed validation).

Seed ``004_2b5d216070ae2ded.txt`` §3.3 ("SLAed DP Validation") and Appendix B: a validator
computes DP versions of its test quantities, corrects them for the worst-case impact of the DP
noise, and applies a concentration inequality, so that

* **ACCEPT** — with probability ≥ 1 − η the model meets its target on the data distribution;
* **REJECT** — with probability ≥ 1 − η no model of the class can meet it (loss, accuracy);
* **RETRY** — more data or budget is needed to decide.

Every validator is (ε, 0)-DP (Props. B.3/B.4): it charges its cost to a
:class:`~blockbudget.mechanisms.BudgetSource` **before** any noise is drawn, through the core's
:func:`~blockbudget.mechanisms.source.draw_then_perturb`. The ACCEPT test reads the test split and
the REJECT test the training split; the two splits are disjoint rows of the same blocks, so both
tests together cost ε once (parallel composition, App. B.1 "DP Guarantee").

Modes (:class:`SlaMode`, the columns of seed 004 Tab. 2):

* ``SAGE`` — Sage SLA: DP, corrected for DP noise (App. B). The default.
* ``UNCORRECTED`` — UC DP SLA: DP and the same concentration bound, without the correction.
* ``NO_SLA`` — DP estimate of the metric compared with the target, no statistical rigor.
* ``NON_PRIVATE`` — NP SLA: exact statistics and the concentration bound. It releases a non-DP
  decision, so it runs only without a budget source (simulations and experiments); it refuses a
  platform :class:`~blockbudget.grant.Grant`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from blockbudget.budget import Cost, Number
from blockbudget.decimals import plain_number
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.calibration import exact_epsilon, laplace_scale
from blockbudget.mechanisms.noise import FloatArray, NoiseKind, NoiseSource, resolve_noise
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.source import (
    BudgetSource,
    draw_then_perturb,
    price,
    source_accounting,
)
from blockbudget.outcome import Outcome
from blockbudget.training.bounds import check_probability


class SlaMode(Enum):
    """How rigorous the validation is (the columns of seed 004 Tab. 2)."""

    SAGE = "sage"
    UNCORRECTED = "uc_dp"
    NO_SLA = "no_sla"
    NON_PRIVATE = "np"


class Inequality(Enum):
    """Which concentration inequality a validator applies to its DP-corrected statistics.

    * ``SEED`` — the seed's (App. B): Bernstein with the variance proxy B·L for the loss ACCEPT
      test, Hoeffding for the loss REJECT test and for sum-based statistics. The default.
    * ``EMPIRICAL_BERNSTEIN`` — Maurer & Pontil (2009), Thm 4, on a DP upper bound of the sample
      variance, the drop-in App. B.1 and B.3 name for small variances. It pays for one more
      noisy statistic (a second moment) and wins when the variance is well below B·L (loss) or
      B²/4 (statistics); see docs/training.md for the corrections and the split of η.
    """

    SEED = "seed"
    EMPIRICAL_BERNSTEIN = "empirical_bernstein"


@dataclass(frozen=True)
class ValidationResult:
    """The decision of one validation and the bounds it computed.

    Attributes:
        outcome: ACCEPT, REJECT or RETRY.
        accept_bound: the quantity compared with the target for ACCEPT (an upper bound on the
            loss or error, a lower bound on the accuracy); ``inf``/``0`` when there was no
            evidence.
        reject_bound: the quantity compared with the target for REJECT (None when the
            validator has no REJECT test or it was not run).
        target: the quality target.
        eta: the confidence parameter η (the guarantee holds with probability ≥ 1 − η).
        epsilon: the ε the validation cost (0 for NON_PRIVATE and for a test that only
            post-processes statistics released and paid for earlier).
        mode: the SLA mode.
        cost: what was charged to the source (None when nothing was: NON_PRIVATE, or a test
            that releases nothing new).
        secure_noise: whether the noise came from a floating-point-safe sampler.
    """

    outcome: Outcome
    accept_bound: float
    reject_bound: float | None
    target: float
    eta: float
    epsilon: Decimal
    mode: SlaMode
    cost: Cost | None
    secure_noise: bool


E = TypeVar("E")


@dataclass(frozen=True)
class Released:
    """The noisy (or, in NON_PRIVATE mode, exact) test quantities a decision reads.

    Attributes:
        values: one vector per job, in the order the validator listed them.
        scales: the noise scale of each job (the Laplace b actually used; 0 when exact).
        noisy: False in NON_PRIVATE mode (the values are exact).
    """

    values: tuple[FloatArray, ...]
    scales: tuple[float, ...]
    noisy: bool


class Validator(ABC, Generic[E]):
    """A SLAed validator (seed 004 App. B): one interface, one contract test suite.

    Subclasses are frozen dataclasses with a ``target`` and a ``mode``; they list their noisy
    jobs (:meth:`jobs`) and decide from the released values (:meth:`decide`). The base class
    checks the inputs, charges the source, perturbs, and packs the result.

    Attributes:
        modes: the SLA modes the validator supports.
        has_reject: whether it has a REJECT test.
        higher_is_better: True when the metric is maximized (accuracy): the ACCEPT bound is a
            lower bound that must reach the target; False for losses and errors.
    """

    modes: ClassVar[frozenset[SlaMode]] = frozenset(SlaMode)
    has_reject: ClassVar[bool] = False
    higher_is_better: ClassVar[bool] = False
    target: float
    mode: SlaMode

    @abstractmethod
    def jobs(self, evidence: E, *, epsilon: Decimal) -> list[tuple[Perturbation, FloatArray]]:
        """The (perturbation, exact values) pairs to release for ``evidence`` at ε."""

    @abstractmethod
    def pricing_parts(self, jobs: Sequence[tuple[Perturbation, FloatArray]]) -> list[Perturbation]:
        """The perturbations that price the release (disjoint splits compose in parallel)."""

    @abstractmethod
    def decide(
        self, released: Released, evidence: E, *, epsilon: float, eta: float
    ) -> tuple[Outcome, float, float | None]:
        """(outcome, accept bound, reject bound) from the released values."""

    def validate(
        self,
        source: BudgetSource | None,
        evidence: E,
        *,
        epsilon: Number,
        eta: float,
        noise: NoiseSource | None = None,
        label: str | None = None,
    ) -> ValidationResult:
        """Run the (ε, 0)-DP test on ``evidence`` and charge ``source`` first.

        Args:
            source: the budget source (a Grant); None only in NON_PRIVATE mode.
            evidence: the validator's evidence (see each subclass).
            epsilon: ε > 0 for the whole test (ignored in NON_PRIVATE mode, pass any > 0).
            eta: η in (0, 1): the decision is wrong with probability at most η.
            noise: None means SecureNoise (invariant 7 in docs/architecture.md).
            label: the charge's label (default: the class name).

        Raises:
            InvalidRequestError: bad η, an unsupported mode, a missing source, or a source
                passed in NON_PRIVATE mode.
            InvalidBudgetError: bad ε.
            BudgetExceededError, ReservationError: from the source; nothing is released.
        """
        p = check_probability(eta, name="eta")
        eps = exact_epsilon(epsilon)
        if self.mode not in self.modes:
            raise InvalidRequestError(
                f"{type(self).__name__} does not support mode {self.mode.value!r}; "
                f"supported: {sorted(m.value for m in self.modes)}"
            )
        jobs = self.jobs(evidence, epsilon=eps)
        if not jobs and self.mode is not SlaMode.NON_PRIVATE:
            # Pure post-processing of statistics an earlier release published and paid for.
            outcome, acc, rej = self.decide(
                Released((), (), noisy=True), evidence, epsilon=float(eps), eta=p
            )
            return ValidationResult(
                outcome, acc, rej, self.target, p, Decimal(0), self.mode, None, True
            )
        if self.mode is SlaMode.NON_PRIVATE:
            if source is not None:
                raise InvalidRequestError(
                    "NON_PRIVATE (NP SLA) validation releases a non-DP decision: it runs only "
                    "in simulations, without a budget source; got a source"
                )
            released = Released(
                tuple(values for _, values in jobs), tuple(0.0 for _ in jobs), noisy=False
            )
            outcome, acc, rej = self.decide(released, evidence, epsilon=math.inf, eta=p)
            return ValidationResult(
                outcome, acc, rej, self.target, p, Decimal(0), self.mode, None, False
            )
        if source is None:
            raise InvalidRequestError(
                f"a {self.mode.value!r} validation is DP and needs a budget source to charge"
            )
        accounting = source_accounting(source)
        cost = price(accounting, epsilon=eps, parts=self.pricing_parts(jobs))
        rng = resolve_noise(noise)
        values = draw_then_perturb(
            source, cost=cost, label=label or type(self).__name__, noise=rng, jobs=jobs
        )
        released = Released(
            tuple(np.asarray(v, dtype=np.float64) for v in values),
            tuple(part.scale for part, _ in jobs),
            noisy=True,
        )
        outcome, acc, rej = self.decide(released, evidence, epsilon=float(eps), eta=p)
        return ValidationResult(
            outcome, acc, rej, self.target, p, eps, self.mode, cost, bool(rng.secure)
        )


def check_target(target: float, *, low: float = -math.inf, high: float = math.inf) -> float:
    """A finite target within [low, high].

    Raises:
        InvalidRequestError: for a non-number, NaN, infinity, or a value out of range.
    """
    target = plain_number(target)
    if isinstance(target, bool) or not isinstance(target, (int, float)):
        raise InvalidRequestError(f"target must be a number, got {target!r}")
    value = float(target)
    if not math.isfinite(value) or not (low <= value <= high):
        raise InvalidRequestError(f"target must be finite and in [{low}, {high}], got {target!r}")
    return value


def check_bound(bound: float) -> float:
    """A finite, positive range bound B.

    Raises:
        InvalidRequestError: otherwise.
    """
    bound = plain_number(bound)
    if isinstance(bound, bool) or not isinstance(bound, (int, float)):
        raise InvalidRequestError(f"bound B must be a number, got {bound!r}")
    value = float(bound)
    if not (value > 0 and math.isfinite(value)):
        raise InvalidRequestError(f"bound B must be finite and > 0, got {bound!r}")
    return value


def numeric_vector(values: Any, *, name: str) -> FloatArray:
    """``values`` as a finite 1-D float vector.

    Raises:
        DataError: for non-numeric or non-finite entries.
    """
    try:
        arr = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError) as exc:
        raise DataError(f"{name} must be numeric: {exc}") from exc
    if arr.size and not np.all(np.isfinite(arr)):
        raise DataError(f"{name} must be finite (drop or clip missing values first)")
    return arr


def laplace_job(name: str, sensitivity: float, epsilon: Decimal, size: int) -> Perturbation:
    """The Laplace perturbation of ``size`` values of the given sensitivity at ε."""
    scale = laplace_scale(sensitivity=sensitivity, epsilon=epsilon)
    return Perturbation(name, NoiseKind.LAPLACE, scale, sensitivity, size, epsilon)

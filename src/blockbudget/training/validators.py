"""Sage's SLAed validators: loss, accuracy and sum-based statistics (seed 004 Appendix B).

Each is a frozen dataclass implementing :class:`~blockbudget.training.validation.Validator`; all
run the same contract suite (``tests/training/test_validator_contract.py``). Formulas follow
seed ``004_2b5d216070ae2ded.txt`` App. B.1–B.3 and List. 2 and were cross-checked against
PrivateKube's ``privatekube/privacy/model_validation.py`` (``slaed_loss_validation``,
``binomial_optimal_risk_test``; same correction ``(2/ε)·ln(3/(2η))``, same Bernstein bound with
``4·B·ln(3/η)/n``, same conservative rounding of noisy binomial counts). Our own choices, all on
the safe side, are listed in each docstring.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

import numpy as np

from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.calibration import laplace_scale, split_epsilon
from blockbudget.mechanisms.noise import FloatArray, NoiseKind
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.statistics import sum_sensitivity
from blockbudget.training.bounds import (
    bernstein_upper,
    clopper_pearson_lower,
    clopper_pearson_upper,
    hoeffding_margin,
    laplace_one_sided,
    laplace_two_sided,
)
from blockbudget.training.validation import (
    Outcome,
    Released,
    SlaMode,
    Validator,
    check_bound,
    check_target,
)


def _vector(values: Any, *, name: str) -> FloatArray:
    try:
        arr = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError) as exc:
        raise DataError(f"{name} must be numeric: {exc}") from exc
    if arr.size and not np.all(np.isfinite(arr)):
        raise DataError(f"{name} must be finite (drop or clip missing values first)")
    return arr


def _laplace(name: str, sensitivity: float, epsilon: Decimal, size: int) -> Perturbation:
    scale = laplace_scale(sensitivity=sensitivity, epsilon=epsilon)
    return Perturbation(name, NoiseKind.LAPLACE, scale, sensitivity, size, epsilon)


@dataclass(frozen=True)
class LossEvidence:
    """Per-example losses of a model.

    Attributes:
        test_losses: losses of the DP-trained model f^dp on the test split (ACCEPT).
        train_losses: losses of the empirical risk minimizer f̂ of the model class on the
            training split (REJECT, App. B.1); None skips REJECT. Only valid when f̂ is the
            exact minimizer of the same [0, B]-bounded loss (Prop. B.4's sensitivity argument).
    """

    test_losses: Any
    train_losses: Any = None


@dataclass(frozen=True)
class LossValidator(Validator[LossEvidence]):
    """SLAed loss validator (seed 004 §3.3 List. 2, App. B.1): Bernstein ACCEPT, Hoeffding REJECT.

    ACCEPT (Prop. B.1): ñ_te = n_te + Lap(2/ε) lowered by (2/ε)·ln(3/(2η)); the clipped loss
    sum + Lap(2B/ε) raised by (2B/ε)·ln(3/(2η)); accept when Bernstein's bound at η/3 on their
    ratio is ≤ τ. REJECT (Prop. B.2): ñ_tr bounded on both sides by (2/ε)·ln(3/η), the f̂ loss
    sum lowered by (2B/ε)·ln(3/(2η)); reject when that mean minus B·sqrt(ln(3/η)/n̲_tr) > τ.
    Losses are clipped into [0, B] before summing (List. 2 l. 15). The count and the sum each
    get ε/2 (Prop. B.3); the train split pays nothing extra (disjoint rows).

    Attributes:
        target: τ_loss, the largest acceptable expected loss.
        bound: B, the loss range [0, B].
        mode: the SLA mode (Tab. 2).
    """

    target: float
    bound: float = 1.0
    mode: SlaMode = SlaMode.SAGE
    has_reject: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_target(self.target, low=0.0)
        check_bound(self.bound)
        if not isinstance(self.mode, SlaMode):
            raise InvalidRequestError(f"mode must be a SlaMode, got {self.mode!r}")

    def jobs(
        self, evidence: LossEvidence, *, epsilon: Decimal
    ) -> list[tuple[Perturbation, FloatArray]]:
        if not isinstance(evidence, LossEvidence):
            raise InvalidRequestError(f"evidence must be LossEvidence, got {evidence!r}")
        half = split_epsilon(epsilon, 2)
        out: list[tuple[Perturbation, FloatArray]] = []
        splits = [("test", evidence.test_losses)]
        if evidence.train_losses is not None:
            splits.append(("train", evidence.train_losses))
        for split, raw in splits:
            losses = np.clip(_vector(raw, name=f"{split} losses"), 0.0, self.bound)
            out.append((_laplace(f"{split}_count", 1.0, half, 1), np.array([float(losses.size)])))
            total = math.fsum(losses.tolist())
            sens = sum_sensitivity(self.bound)
            out.append((_laplace(f"{split}_loss_sum", sens, half, 1), np.array([total])))
        return out

    def pricing_parts(self, jobs: Sequence[tuple[Perturbation, FloatArray]]) -> list[Perturbation]:
        return [part for part, _ in jobs[:2]]

    def decide(
        self, released: Released, evidence: LossEvidence, *, epsilon: float, eta: float
    ) -> tuple[Outcome, float, float | None]:
        v = [float(x[0]) for x in released.values]
        b_n, b_s = (released.scales[0], released.scales[1]) if released.noisy else (0.0, 0.0)
        n, s = v[0], v[1]
        big_b, third = self.bound, eta / 3.0
        if self.mode is SlaMode.NO_SLA:
            est = s / n if n > 0 else math.inf
            return (Outcome.ACCEPT if est <= self.target else Outcome.RETRY), est, None
        if self.mode is SlaMode.NON_PRIVATE:
            acc = bernstein_upper(s / n if n > 0 else 0.0, n, bound=big_b, p=eta)
        elif self.mode is SlaMode.UNCORRECTED:
            acc = bernstein_upper(s / n if n > 0 else 0.0, n, bound=big_b, p=third)
        else:
            n_lo = n - laplace_one_sided(b_n, third)
            s_hi = s + laplace_one_sided(b_s, third)
            acc = bernstein_upper(s_hi / n_lo, n_lo, bound=big_b, p=third) if n_lo > 0 else math.inf
        if acc <= self.target:
            return Outcome.ACCEPT, acc, None
        if len(v) < 4:
            return Outcome.RETRY, acc, None
        nt, st = v[2], v[3]
        if self.mode is SlaMode.NON_PRIVATE:
            rej = st / nt - hoeffding_margin(nt, bound=big_b, p=eta) if nt > 0 else -math.inf
        elif self.mode is SlaMode.UNCORRECTED:
            rej = st / nt - hoeffding_margin(nt, bound=big_b, p=third) if nt > 0 else -math.inf
        else:
            c_n = laplace_two_sided(b_n, third)
            n_hi, n_lo = nt + c_n, nt - c_n
            s_lo = st - laplace_one_sided(b_s, third)
            if n_lo <= 0:
                rej = -math.inf
            else:
                rej = s_lo / n_hi - hoeffding_margin(n_lo, bound=big_b, p=third)
        return (Outcome.REJECT if rej > self.target else Outcome.RETRY), acc, rej


@dataclass(frozen=True)
class AccuracyEvidence:
    """Per-example correctness of a classifier.

    Attributes:
        test_correct: 1 where f^dp predicted the test example right (ACCEPT).
        train_correct: 1 where the empirical risk minimizer f̂ predicted the training example
            right (REJECT, App. B.2); None skips REJECT.
    """

    test_correct: Any
    train_correct: Any = None


@dataclass(frozen=True)
class AccuracyValidator(Validator[AccuracyEvidence]):
    """SLAed accuracy validator (seed 004 App. B.2): Clopper–Pearson ACCEPT and REJECT.

    k̃ = #correct + Lap(2/ε), ñ = n + Lap(2/ε) (ε/2 each). ACCEPT when the one-sided
    Clopper–Pearson lower bound at η/3 of (k̃ − (2/ε)ln(3/η)) successes out of
    (ñ + (2/ε)ln(3/η)) trials is ≥ τ; REJECT when the upper bound on the training split with the
    corrections reversed is < τ. Noisy counts are rounded conservatively (k down and n up for the
    lower bound, the reverse for the upper), as PrivateKube does.

    Attributes:
        target: τ_acc in [0, 1], the smallest acceptable accuracy.
        mode: the SLA mode (Tab. 2).
    """

    target: float
    mode: SlaMode = SlaMode.SAGE
    has_reject: ClassVar[bool] = True
    higher_is_better: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_target(self.target, low=0.0, high=1.0)
        if not isinstance(self.mode, SlaMode):
            raise InvalidRequestError(f"mode must be a SlaMode, got {self.mode!r}")

    def jobs(
        self, evidence: AccuracyEvidence, *, epsilon: Decimal
    ) -> list[tuple[Perturbation, FloatArray]]:
        if not isinstance(evidence, AccuracyEvidence):
            raise InvalidRequestError(f"evidence must be AccuracyEvidence, got {evidence!r}")
        half = split_epsilon(epsilon, 2)
        out: list[tuple[Perturbation, FloatArray]] = []
        splits = [("test", evidence.test_correct)]
        if evidence.train_correct is not None:
            splits.append(("train", evidence.train_correct))
        for split, raw in splits:
            hits = _vector(raw, name=f"{split} correctness")
            if hits.size and not np.all((hits == 0) | (hits == 1)):
                raise DataError(f"{split} correctness must be 0/1 (or booleans)")
            out.append((_laplace(f"{split}_count", 1.0, half, 1), np.array([float(hits.size)])))
            out.append((_laplace(f"{split}_correct", 1.0, half, 1), np.array([float(hits.sum())])))
        return out

    def pricing_parts(self, jobs: Sequence[tuple[Perturbation, FloatArray]]) -> list[Perturbation]:
        return [part for part, _ in jobs[:2]]

    def decide(
        self, released: Released, evidence: AccuracyEvidence, *, epsilon: float, eta: float
    ) -> tuple[Outcome, float, float | None]:
        v = [float(x[0]) for x in released.values]
        n, k = v[0], v[1]
        third = eta / 3.0
        b = max(released.scales[0], released.scales[1]) if released.noisy else 0.0
        if self.mode is SlaMode.NO_SLA:
            est = k / n if n > 0 else 0.0
            return (Outcome.ACCEPT if est >= self.target else Outcome.RETRY), est, None
        p = eta if self.mode is SlaMode.NON_PRIVATE else third
        c = laplace_two_sided(b, third) if self.mode is SlaMode.SAGE and b > 0 else 0.0
        acc = clopper_pearson_lower(k - c, n + c, p=p)
        if acc >= self.target:
            return Outcome.ACCEPT, acc, None
        if len(v) < 4:
            return Outcome.RETRY, acc, None
        nt, kt = v[2], v[3]
        rej = clopper_pearson_upper(kt + c, nt - c, p=p)
        return (Outcome.REJECT if rej < self.target else Outcome.RETRY), acc, rej


@dataclass(frozen=True)
class SumStatisticEvidence:
    """What the sum-statistic validator needs about a released per-group mean.

    Attributes:
        counts: the exact number of rows in each group (one entry for an ungrouped mean).
        value_range: B: the values were clipped into [0, B] before the release.
        sum_scale: the Laplace scale b_s of the noise on each group's sum in the release.
        count_scale: the Laplace scale b_c of the noise on each group's count in the release
            (0 when the release divided by an exact, public count).
    """

    counts: Any
    value_range: float
    sum_scale: float
    count_scale: float = 0.0


@dataclass(frozen=True)
class SumStatisticValidator(Validator[SumStatisticEvidence]):
    """SLAed validator for sum-based statistics (seed 004 App. B.3): Hoeffding ACCEPT.

    The target is the largest acceptable absolute error τ_err of every group's DP mean against
    its distribution mean. As in B.3 the test reads only the training data (no test split) and has
    no REJECT (the law of large numbers always gets there). The validator releases the group
    counts with Lap(1/ε) (a histogram: sensitivity 1, so (ε, 0)-DP) and bounds, per group g, with
    η' = η/(4K) for K groups (union bound over four events per group):

        n̲_g = ñ_g − (1/ε)·ln(1/(2η'))
        err_g = (b_s·ln(1/η') + B·b_c·ln(1/η')) / (n̲_g − b_c·ln(1/η')) + B·sqrt(ln(1/η')/n̲_g)

    The first term bounds the release's own DP error — |(S+e₁)/(n+e₂) − S/n| ≤ (|e₁|+B|e₂|)/(n−|e₂|)
    — the second is B.3's Hoeffding term. This generalizes B.3 (one group, the release's noise
    folded into ``(2/ε)ln(2/η)/n``) to the group-by means of List. 1; ACCEPT when max_g err_g ≤ τ.

    Attributes:
        target: τ_err > 0.
        mode: SAGE, UNCORRECTED (no correction of the count noise, Hoeffding only) or
            NON_PRIVATE (exact counts).
    """

    target: float
    mode: SlaMode = SlaMode.SAGE
    modes: ClassVar[frozenset[SlaMode]] = frozenset(
        {SlaMode.SAGE, SlaMode.UNCORRECTED, SlaMode.NON_PRIVATE}
    )

    def __post_init__(self) -> None:
        check_target(self.target, low=0.0)
        if not isinstance(self.mode, SlaMode):
            raise InvalidRequestError(f"mode must be a SlaMode, got {self.mode!r}")

    def jobs(
        self, evidence: SumStatisticEvidence, *, epsilon: Decimal
    ) -> list[tuple[Perturbation, FloatArray]]:
        if not isinstance(evidence, SumStatisticEvidence):
            raise InvalidRequestError(f"evidence must be SumStatisticEvidence, got {evidence!r}")
        check_bound(evidence.value_range)
        for name in ("sum_scale", "count_scale"):
            value = getattr(evidence, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise InvalidRequestError(f"{name} must be finite and >= 0, got {value!r}")
        counts = _vector(evidence.counts, name="counts")
        if counts.size == 0 or np.any(counts < 0):
            raise DataError("counts must be a non-empty vector of non-negative group sizes")
        return [(_laplace("counts", 1.0, epsilon, counts.size), counts)]

    def pricing_parts(self, jobs: Sequence[tuple[Perturbation, FloatArray]]) -> list[Perturbation]:
        return [jobs[0][0]]

    def decide(
        self, released: Released, evidence: SumStatisticEvidence, *, epsilon: float, eta: float
    ) -> tuple[Outcome, float, float | None]:
        counts = released.values[0]
        k = counts.size
        p = eta / (4.0 * k)
        big_b = float(evidence.value_range)
        log_p = math.log(1.0 / p)
        worst = 0.0
        for n_noisy in counts.tolist():
            if self.mode is SlaMode.SAGE:
                n_lo = n_noisy - laplace_one_sided(released.scales[0], p)
            else:
                n_lo = n_noisy
            if self.mode is SlaMode.UNCORRECTED:
                err = hoeffding_margin(n_lo, bound=big_b, p=p)
            else:
                denom = n_lo - evidence.count_scale * log_p
                release = (evidence.sum_scale + big_b * evidence.count_scale) * log_p
                if denom <= 0 or n_lo <= 0:
                    err = math.inf
                else:
                    err = release / denom + hoeffding_margin(n_lo, bound=big_b, p=p)
            worst = max(worst, err)
        return (Outcome.ACCEPT if worst <= self.target else Outcome.RETRY), worst, None

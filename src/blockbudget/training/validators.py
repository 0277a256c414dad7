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
from blockbudget.mechanisms.calibration import split_epsilon
from blockbudget.mechanisms.noise import FloatArray
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.statistics import sum_sensitivity
from blockbudget.outcome import Outcome
from blockbudget.training.bounds import (
    bernstein_upper,
    clopper_pearson_lower,
    clopper_pearson_upper,
    empirical_bernstein_margin,
    hoeffding_margin,
    laplace_one_sided,
    laplace_two_sided,
    variance_upper,
)
from blockbudget.training.sum_statistic import SumStatisticEvidence, SumStatisticValidator
from blockbudget.training.validation import (
    Inequality,
    Released,
    SlaMode,
    Validator,
    check_bound,
    check_target,
    laplace_job,
    numeric_vector,
)

__all__ = [
    "AccuracyEvidence",
    "AccuracyValidator",
    "LossEvidence",
    "LossValidator",
    "SumStatisticEvidence",
    "SumStatisticValidator",
]


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

    With ``inequality=EMPIRICAL_BERNSTEIN`` the ACCEPT test also releases the second moment
    Q = Σ(l − c)² about the public centre c = clip(τ, 0, B) (sensitivity max(c, B − c)²); count,
    sum and Q get ε/3 each (the REJECT split too) and four events share η: n̲ (one-sided), the
    sum raised, Q raised (each corrected at η/4) and Maurer & Pontil's Thm 4 at η/4 on
    V ≤ Q̄/(n̲ − 1). Not the default: it pays a third release and loses to the seed's bound when
    the variance is close to B·L (0/1-like losses); docs/training.md has the proof.

    Attributes:
        target: τ_loss, the largest acceptable expected loss.
        bound: B, the loss range [0, B].
        mode: the SLA mode (Tab. 2).
        inequality: SEED (Bernstein, App. B.1) or EMPIRICAL_BERNSTEIN.
    """

    target: float
    bound: float = 1.0
    mode: SlaMode = SlaMode.SAGE
    inequality: Inequality = Inequality.SEED
    has_reject: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_target(self.target, low=0.0)
        check_bound(self.bound)
        if not isinstance(self.mode, SlaMode):
            raise InvalidRequestError(f"mode must be a SlaMode, got {self.mode!r}")
        if not isinstance(self.inequality, Inequality):
            raise InvalidRequestError(f"inequality must be an Inequality, got {self.inequality!r}")

    @property
    def _empirical(self) -> bool:
        return self.inequality is Inequality.EMPIRICAL_BERNSTEIN

    @property
    def centre(self) -> float:
        """c = clip(τ, 0, B): the public centre of the released second moment."""
        return min(max(self.target, 0.0), self.bound)

    def jobs(
        self, evidence: LossEvidence, *, epsilon: Decimal
    ) -> list[tuple[Perturbation, FloatArray]]:
        if not isinstance(evidence, LossEvidence):
            raise InvalidRequestError(f"evidence must be LossEvidence, got {evidence!r}")
        share = split_epsilon(epsilon, 3 if self._empirical else 2)
        out: list[tuple[Perturbation, FloatArray]] = []
        splits = [("test", evidence.test_losses)]
        if evidence.train_losses is not None:
            splits.append(("train", evidence.train_losses))
        for split, raw in splits:
            losses = np.clip(numeric_vector(raw, name=f"{split} losses"), 0.0, self.bound)
            out.append(
                (laplace_job(f"{split}_count", 1.0, share, 1), np.array([float(losses.size)]))
            )
            total = math.fsum(losses.tolist())
            sens = sum_sensitivity(self.bound)
            out.append((laplace_job(f"{split}_loss_sum", sens, share, 1), np.array([total])))
            if self._empirical and split == "test":
                c = self.centre
                q = math.fsum(((losses - c) ** 2).tolist())
                sens_q = sum_sensitivity(max(c, self.bound - c) ** 2)
                out.append((laplace_job("test_loss_sq", sens_q, share, 1), np.array([q])))
        return out

    def pricing_parts(self, jobs: Sequence[tuple[Perturbation, FloatArray]]) -> list[Perturbation]:
        return [part for part, _ in jobs[: 3 if self._empirical else 2]]

    def correction_rates(self) -> dict[str, float]:
        """Each DP correction's designed failure probability, as a fraction of η.

        ``n_lo`` fails when it exceeds the true count, ``s_hi``/``q_hi`` when below the true
        sum/second moment, the REJECT pair ``train_n`` when n is outside [n̲, n̄] and
        ``train_s_lo`` when above the true sum. docs/training.md proves each.
        """
        one = 0.25 if self._empirical else 1.0 / 3.0
        rates = {"n_lo": one, "s_hi": one, "train_n": 1.0 / 3.0, "train_s_lo": 1.0 / 3.0}
        if self._empirical:
            rates["q_hi"] = one
        return rates

    def corrections(self, released: Released, eta: float) -> dict[str, FloatArray]:
        """The DP-corrected statistics of a SAGE-mode release (elementwise, so that a test can
        pass many draws at once): n̲, S̄ (and Q̄) of the test split, n̲, n̄, S̲ of the train split.
        """
        v = [np.asarray(x, dtype=np.float64) for x in released.values]
        rates = self.correction_rates()
        out = {
            "n_lo": v[0] - laplace_one_sided(released.scales[0], rates["n_lo"] * eta),
            "s_hi": v[1] + laplace_one_sided(released.scales[1], rates["s_hi"] * eta),
        }
        first = 2
        if self._empirical:
            out["q_hi"] = v[2] + laplace_one_sided(released.scales[2], rates["q_hi"] * eta)
            first = 3
        if len(v) > first:
            c_n = laplace_two_sided(released.scales[first], rates["train_n"] * eta)
            out["train_n_lo"], out["train_n_hi"] = v[first] - c_n, v[first] + c_n
            t_s = laplace_one_sided(released.scales[first + 1], rates["train_s_lo"] * eta)
            out["train_s_lo"] = v[first + 1] - t_s
        return out

    def decide(
        self, released: Released, evidence: LossEvidence, *, epsilon: float, eta: float
    ) -> tuple[Outcome, float, float | None]:
        v = [float(x[0]) for x in released.values]
        if self.mode is SlaMode.NO_SLA:
            est = v[1] / v[0] if v[0] > 0 else math.inf
            return (Outcome.ACCEPT if est <= self.target else Outcome.RETRY), est, None
        fixed = None
        if self.mode is SlaMode.SAGE:
            fixed = {k: float(x.ravel()[0]) for k, x in self.corrections(released, eta).items()}
        acc = (
            self._empirical_accept(v, fixed, eta)
            if self._empirical
            else self._accept(v, fixed, eta)
        )
        if acc <= self.target:
            return Outcome.ACCEPT, acc, None
        first = 3 if self._empirical else 2
        if len(v) <= first:
            return Outcome.RETRY, acc, None
        rej = self._reject(v[first], v[first + 1], fixed, eta)
        return (Outcome.REJECT if rej > self.target else Outcome.RETRY), acc, rej

    def _accept(self, v: list[float], fixed: dict[str, float] | None, eta: float) -> float:
        n, s = v[0], v[1]
        big_b = self.bound
        if fixed is None:  # NP at η, UC DP at η/3
            p = eta if self.mode is SlaMode.NON_PRIVATE else eta / 3.0
            return bernstein_upper(s / n if n > 0 else 0.0, n, bound=big_b, p=p)
        n_lo, s_hi = fixed["n_lo"], fixed["s_hi"]
        if not n_lo > 0:
            return math.inf
        return bernstein_upper(s_hi / n_lo, n_lo, bound=big_b, p=eta / 3.0)

    def _empirical_accept(
        self, v: list[float], fixed: dict[str, float] | None, eta: float
    ) -> float:
        """Maurer–Pontil Thm 4 on DP-corrected (n, Σl, Σ(l − c)²); η/4 for each of 4 events."""
        big_b, c = self.bound, self.centre
        if fixed is not None:
            n, s, q, p = fixed["n_lo"], fixed["s_hi"], fixed["q_hi"], eta / 4.0
        else:  # exact (NP, at η) or uncorrected (UC DP, at the SAGE split's η/4)
            n, s, q = v[0], v[1], v[2]
            p = eta if self.mode is SlaMode.NON_PRIVATE else eta / 4.0
            if n > 0:
                q -= n * (s / n - c) ** 2  # (n − 1)·V exactly, from the (noisy) statistics
        if not n > 1:
            return math.inf
        mean = min(max(s / n, 0.0), big_b)
        var = variance_upper(q, n, bound=big_b)
        return mean + empirical_bernstein_margin(var, n, bound=big_b, p=p)

    def _reject(self, nt: float, st: float, fixed: dict[str, float] | None, eta: float) -> float:
        big_b = self.bound
        if fixed is None:
            p = eta if self.mode is SlaMode.NON_PRIVATE else eta / 3.0
            return st / nt - hoeffding_margin(nt, bound=big_b, p=p) if nt > 0 else -math.inf
        n_lo, n_hi, s_lo = fixed["train_n_lo"], fixed["train_n_hi"], fixed["train_s_lo"]
        if n_lo <= 0:
            return -math.inf
        return s_lo / n_hi - hoeffding_margin(n_lo, bound=big_b, p=eta / 3.0)


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
            hits = numeric_vector(raw, name=f"{split} correctness")
            if hits.size and not np.all((hits == 0) | (hits == 1)):
                raise DataError(f"{split} correctness must be 0/1 (or booleans)")
            out.append((laplace_job(f"{split}_count", 1.0, half, 1), np.array([float(hits.size)])))
            out.append(
                (laplace_job(f"{split}_correct", 1.0, half, 1), np.array([float(hits.sum())]))
            )
        return out

    def pricing_parts(self, jobs: Sequence[tuple[Perturbation, FloatArray]]) -> list[Perturbation]:
        return [part for part, _ in jobs[:2]]

    def correction_rates(self) -> dict[str, float]:
        """Each DP correction's designed failure probability, as a fraction of η: the
        two-sided (2/ε)·ln(3/η) leaves η/6 on each side (App. B.2)."""
        return {"k_lo": 1 / 6, "n_hi": 1 / 6, "train_k_hi": 1 / 6, "train_n_lo": 1 / 6}

    def corrections(self, released: Released, eta: float) -> dict[str, FloatArray]:
        """The DP-corrected counts of a SAGE-mode release (elementwise): k̲ = k̃ − c and
        n̄ = ñ + c on the test split, k̄ and n̲ on the train split, c = b·ln(3/η)."""
        v = [np.asarray(x, dtype=np.float64) for x in released.values]
        c = laplace_two_sided(max(released.scales[0], released.scales[1]), eta / 3.0)
        out = {"k_lo": v[1] - c, "n_hi": v[0] + c}
        if len(v) >= 4:
            out["train_k_hi"], out["train_n_lo"] = v[3] + c, v[2] - c
        return out

    def decide(
        self, released: Released, evidence: AccuracyEvidence, *, epsilon: float, eta: float
    ) -> tuple[Outcome, float, float | None]:
        v = [float(x[0]) for x in released.values]
        if self.mode is SlaMode.NO_SLA:
            est = v[1] / v[0] if v[0] > 0 else 0.0
            return (Outcome.ACCEPT if est >= self.target else Outcome.RETRY), est, None
        p = eta if self.mode is SlaMode.NON_PRIVATE else eta / 3.0
        fixed = {"k_lo": v[1], "n_hi": v[0]}
        if len(v) >= 4:
            fixed |= {"train_k_hi": v[3], "train_n_lo": v[2]}
        if self.mode is SlaMode.SAGE:
            fixed = {k: float(x.ravel()[0]) for k, x in self.corrections(released, eta).items()}
        acc = clopper_pearson_lower(fixed["k_lo"], fixed["n_hi"], p=p)
        if acc >= self.target:
            return Outcome.ACCEPT, acc, None
        if len(v) < 4:
            return Outcome.RETRY, acc, None
        rej = clopper_pearson_upper(fixed["train_k_hi"], fixed["train_n_lo"], p=p)
        return (Outcome.REJECT if rej < self.target else Outcome.RETRY), acc, rej

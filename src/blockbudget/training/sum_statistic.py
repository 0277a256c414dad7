"""SLAed validator for sum-based statistics (seed ``004_2b5d216070ae2ded.txt`` App. B.3).

The target is the largest acceptable absolute error τ_err of every group's DP mean against its
distribution mean. Two ways to get the group sizes the bound needs:

* **reuse** (:meth:`SumStatisticEvidence.from_release`) — the noisy counts and sums that
  :func:`~blockbudget.mechanisms.dp_group_by_mean` already published (and paid for) are read as
  they are; with the seed's Hoeffding bound the validation releases nothing and costs nothing,
  with the empirical Bernstein bound it releases only each group's second moment.
* **legacy** (``released_counts=None``) — the validator releases the group counts again with
  Lap(1/ε), as before.

Every correction, the split of η and its proof are in docs/training.md ("Sum statistics").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

import numpy as np

from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.noise import FloatArray
from blockbudget.mechanisms.results import DPResult, GroupMeans, Perturbation
from blockbudget.mechanisms.statistics import sum_sensitivity
from blockbudget.outcome import Outcome
from blockbudget.training.bounds import (
    empirical_bernstein_margin,
    hoeffding_margin,
    laplace_one_sided,
    laplace_two_sided,
    variance_upper,
)
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


@dataclass(frozen=True)
class SumStatisticEvidence:
    """What the sum-statistic validator needs about a released per-group mean.

    Attributes:
        counts: the exact number of rows in each group (one entry for an ungrouped mean); read
            only by the legacy path and by NON_PRIVATE mode.
        value_range: B: the values were clipped into [0, B] before the release.
        sum_scale: the Laplace scale b_s of the noise on each group's sum in the release.
        count_scale: the Laplace scale b_c of the noise on each group's count in the release
            (0 when the release divided by an exact, public count).
        released_counts: the noisy counts the release published (reuse path), or None.
        released_sums: the noisy sums the release published (reuse path), or None.
        keys: each row's group code in [0, K) (reuse path; rows with another code are ignored,
            as the release dropped them).
        values: each row's value (reuse path; clipped into [0, B] here as in the release).
    """

    counts: Any
    value_range: float
    sum_scale: float
    count_scale: float = 0.0
    released_counts: Any = None
    released_sums: Any = None
    keys: Any = None
    values: Any = None

    @classmethod
    def from_release(
        cls, release: DPResult[GroupMeans], keys: Any, values: Any
    ) -> SumStatisticEvidence:
        """The evidence of a :func:`~blockbudget.mechanisms.dp_group_by_mean` release.

        ``keys`` must be the integer codes the release was given (``nkeys=``), ``values`` its
        values. The range B is the release's clipping range, not a constant.

        Example:
            >>> from blockbudget.mechanisms import SeededNoise, dp_group_by_mean
            >>> from blockbudget.training import SumStatisticValidator, MeteredSource
            >>> keys, values = [0, 0, 1, 1] * 500, [0.4, 0.6, 0.5, 0.5] * 500
            >>> src = MeteredSource()
            >>> rel = dp_group_by_mean(src, keys, values, epsilon=10, value_range=1.0, nkeys=2,
            ...                        noise=SeededNoise(1))
            >>> ev = SumStatisticEvidence.from_release(rel, keys, values)
            >>> res = SumStatisticValidator(target=0.2).validate(src, ev, epsilon=1, eta=0.05)
            >>> res.outcome.value, res.cost is None
            ('accept', True)
        """
        scales = {part.name: part.scale for part in release.perturbations}
        try:
            codes = np.asarray(keys, dtype=np.int64).ravel()
        except (TypeError, ValueError) as exc:
            raise InvalidRequestError(
                f"keys must be the integer codes the release was given (nkeys=): {exc}"
            ) from exc
        k = len(release.value.keys)
        exact = np.bincount(codes[(codes >= 0) & (codes < k)], minlength=k)
        return cls(
            counts=exact,
            value_range=release.value.value_range,
            sum_scale=scales["sums"],
            count_scale=scales["counts"],
            released_counts=release.value.counts,
            released_sums=release.value.sums,
            keys=codes,
            values=values,
        )


@dataclass(frozen=True)
class _Groups:
    """The reuse path's per-group inputs, checked."""

    noisy_n: FloatArray
    noisy_s: FloatArray
    rows: list[FloatArray]  # each group's clipped values
    centres: FloatArray


@dataclass(frozen=True)
class SumStatisticValidator(Validator[SumStatisticEvidence]):
    """SLAed validator for sum-based statistics (seed 004 App. B.3): ACCEPT only.

    As in B.3 the test reads only the training data and has no REJECT. Per group g of K, with
    ñ, S̃ the release's noisy count and sum (Laplace scales b_c, b_s) and B the clipping range:

    * **reuse, SEED** (3 events per group, p = η/(3K)): t_c = b_c·ln(1/p), t_s = b_s·ln(1/p),
      n̲ = ñ − t_c, m̄ = min(B, (S̃ + t_s)/n̲), and
      ``err_g = (t_s + m̄·t_c)/ñ + B·sqrt(ln(1/p)/n̲)``.
    * **reuse, EMPIRICAL_BERNSTEIN** (5 events, p = η/(5K)): the validator releases
      Q_g = Σ(x − c_g)² about the release's clamped mean c_g (sensitivity max_g max(c_g, B −
      c_g)², Laplace at the whole ε, parallel over groups), raises it by b_q·ln(1/(2p)), and
      ``err_g = (t_s + m̄·t_c)/ñ + EB(Q̄_g/(n̲ − 1), n̲)`` with Maurer & Pontil's Thm 4 margin
      at p on each side.
    * **legacy** (no released counts; SEED only): releases the counts with Lap(1/ε) and uses
      η/(4K) per event, as before.

    The first term bounds the release's own error exactly: S̃/ñ − S/n = (e_s − m·e_c)/ñ.
    ACCEPT when max_g err_g ≤ τ.

    Attributes:
        target: τ_err > 0.
        mode: SAGE, UNCORRECTED (no corrections, concentration only) or NON_PRIVATE (exact
            statistics, the release's exact error).
        inequality: SEED (Hoeffding, App. B.3) or EMPIRICAL_BERNSTEIN.
    """

    target: float
    mode: SlaMode = SlaMode.SAGE
    inequality: Inequality = Inequality.SEED
    modes: ClassVar[frozenset[SlaMode]] = frozenset(
        {SlaMode.SAGE, SlaMode.UNCORRECTED, SlaMode.NON_PRIVATE}
    )

    def __post_init__(self) -> None:
        check_target(self.target, low=0.0)
        if not isinstance(self.mode, SlaMode):
            raise InvalidRequestError(f"mode must be a SlaMode, got {self.mode!r}")
        if not isinstance(self.inequality, Inequality):
            raise InvalidRequestError(f"inequality must be an Inequality, got {self.inequality!r}")

    @property
    def _empirical(self) -> bool:
        return self.inequality is Inequality.EMPIRICAL_BERNSTEIN

    def jobs(
        self, evidence: SumStatisticEvidence, *, epsilon: Decimal
    ) -> list[tuple[Perturbation, FloatArray]]:
        if not isinstance(evidence, SumStatisticEvidence):
            raise InvalidRequestError(f"evidence must be SumStatisticEvidence, got {evidence!r}")
        big_b = check_bound(evidence.value_range)
        for name in ("sum_scale", "count_scale"):
            value = getattr(evidence, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise InvalidRequestError(f"{name} must be finite and >= 0, got {value!r}")
        if evidence.released_counts is None:
            if self._empirical:
                raise InvalidRequestError(
                    "EMPIRICAL_BERNSTEIN needs the release's counts, sums, keys and values "
                    "(SumStatisticEvidence.from_release); got released_counts=None"
                )
            counts = numeric_vector(evidence.counts, name="counts")
            if counts.size == 0 or np.any(counts < 0):
                raise DataError("counts must be a non-empty vector of non-negative group sizes")
            return [(laplace_job("counts", 1.0, epsilon, counts.size), counts)]
        groups = _groups(evidence, big_b)
        if not self._empirical or self.mode is SlaMode.NON_PRIVATE:
            return []
        q = np.array(
            [
                math.fsum(((x - c) ** 2).tolist())
                for x, c in zip(groups.rows, groups.centres, strict=True)
            ]
        )
        sens = sum_sensitivity(
            float(np.max(np.maximum(groups.centres, big_b - groups.centres))) ** 2
        )
        return [(laplace_job("second_moments", sens, epsilon, q.size), q)]

    def pricing_parts(self, jobs: Sequence[tuple[Perturbation, FloatArray]]) -> list[Perturbation]:
        return [jobs[0][0]]

    def decide(
        self, released: Released, evidence: SumStatisticEvidence, *, epsilon: float, eta: float
    ) -> tuple[Outcome, float, float | None]:
        big_b = float(evidence.value_range)
        if evidence.released_counts is None:
            worst = self._legacy(released, evidence, big_b, eta)
        else:
            groups = _groups(evidence, big_b)
            q = released.values[0] if released.values else None
            b_q = released.scales[0] if released.values else 0.0
            worst = 0.0
            for g in range(groups.noisy_n.size):
                worst = max(worst, self._group_error(groups, g, q, b_q, evidence, eta))
        return (Outcome.ACCEPT if worst <= self.target else Outcome.RETRY), worst, None

    def _group_error(
        self,
        groups: _Groups,
        g: int,
        q: FloatArray | None,
        b_q: float,
        evidence: SumStatisticEvidence,
        eta: float,
    ) -> float:
        k, big_b = groups.noisy_n.size, float(evidence.value_range)
        n_t, s_t = float(groups.noisy_n[g]), float(groups.noisy_s[g])
        if self.mode is SlaMode.NON_PRIVATE:  # exact n, S, variance; the release's exact error
            x = groups.rows[g]
            n = float(x.size)
            if n < 2 or n_t < 1:
                return math.inf
            release = abs(s_t / n_t - float(x.mean()))
            p = eta / (2.0 * k) if self._empirical else eta / k
            if self._empirical:
                return release + empirical_bernstein_margin(
                    float(x.var(ddof=1)), n, bound=big_b, p=p
                )
            return release + hoeffding_margin(n, bound=big_b, p=p)
        p = self.event_probability(k, eta)
        sage = self.mode is SlaMode.SAGE
        q_g = float(q[g]) if q is not None else 0.0
        if sage:
            fixed = group_corrections(
                n_t,
                s_t,
                q_g,
                count_scale=evidence.count_scale,
                sum_scale=evidence.sum_scale,
                q_scale=b_q,
                p=p,
            )
            n_lo, t_c, t_s = (
                float(fixed["n_lo"]),
                n_t - float(fixed["n_lo"]),
                float(fixed["s_hi"]) - s_t,
            )
        else:
            n_lo, t_c, t_s = n_t, 0.0, 0.0
        if n_t < 1 or n_lo <= 1:
            return math.inf
        m_hi = min(big_b, max((s_t + t_s) / n_lo, 0.0))
        release = (t_s + m_hi * t_c) / n_t
        if not self._empirical:
            return release + hoeffding_margin(n_lo, bound=big_b, p=p)
        if sage:
            q_hi = float(fixed["q_hi"])
        else:  # uncorrected: the exact identity (n − 1)·V = Q − n·(x̄ − c)², noisy
            q_hi = q_g - n_lo * (s_t / n_lo - float(groups.centres[g])) ** 2
        var = variance_upper(q_hi, n_lo, bound=big_b)
        return release + empirical_bernstein_margin(var, n_lo, bound=big_b, p=p)

    def event_probability(self, groups: int, eta: float) -> float:
        """p, the failure probability of each of the reuse path's events: η/(3K) with SEED
        (count, sum, Hoeffding), η/(5K) with EMPIRICAL_BERNSTEIN (count, sum, second moment,
        two sides of Maurer–Pontil)."""
        return eta / ((5.0 if self._empirical else 3.0) * groups)

    def _legacy(
        self, released: Released, evidence: SumStatisticEvidence, big_b: float, eta: float
    ) -> float:
        counts = released.values[0]
        p = eta / (4.0 * counts.size)
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
        return worst


def _groups(evidence: SumStatisticEvidence, big_b: float) -> _Groups:
    noisy_n = numeric_vector(evidence.released_counts, name="released_counts")
    noisy_s = numeric_vector(evidence.released_sums, name="released_sums")
    if noisy_n.size == 0 or noisy_n.size != noisy_s.size:
        raise DataError(
            f"released_counts and released_sums must be non-empty and of one length, got "
            f"{noisy_n.size} and {noisy_s.size}"
        )
    if evidence.keys is None or evidence.values is None:
        raise InvalidRequestError("the reuse path needs keys= and values= (one per row)")
    keys = np.asarray(evidence.keys).ravel()
    values = np.clip(numeric_vector(evidence.values, name="values"), 0.0, big_b)
    if keys.size != values.size:
        raise DataError(f"keys and values differ in length ({keys.size} vs {values.size})")
    rows = [values[keys == g] for g in range(noisy_n.size)]
    centres = np.clip(noisy_s / np.maximum(noisy_n, 1.0), 0.0, big_b)  # public: post-processing
    return _Groups(noisy_n, noisy_s, rows, centres)


def group_corrections(
    noisy_n: Any,
    noisy_s: Any,
    noisy_q: Any,
    *,
    count_scale: float,
    sum_scale: float,
    q_scale: float,
    p: float,
) -> dict[str, FloatArray]:
    """The reuse path's DP corrections at p (elementwise over groups or draws).

    ``n_lo``/``n_hi`` = ñ ∓ b_c·ln(1/p) (the true count is outside with probability p),
    ``s_lo``/``s_hi`` = S̃ ∓ b_s·ln(1/p) (likewise), ``q_hi`` = Q̃ + b_q·ln(1/(2p)) (below the
    true second moment with probability p).
    """
    n, s, q = (np.asarray(x, dtype=np.float64) for x in (noisy_n, noisy_s, noisy_q))
    t_c, t_s = laplace_two_sided(count_scale, p), laplace_two_sided(sum_scale, p)
    return {
        "n_lo": n - t_c,
        "n_hi": n + t_c,
        "s_lo": s - t_s,
        "s_hi": s + t_s,
        "q_hi": q + laplace_one_sided(q_scale, p),
    }

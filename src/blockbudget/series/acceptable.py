"""Acceptable budgets, AC- compounding and usefulness (seed 003 §5.2–5.4).

Source: seed ``003_a7fa9cb9080a05af.txt``, §5.2–5.4, Eq. 22–33.

Sensitivity normalization (Definition 3, Eq. 22): every query is rescaled so its global
sensitivity is 1; its Laplace noise then has standard deviation √2/ε_i (Eq. 25), whatever the
query. A user states the largest normalized standard deviation U_s they tolerate.

* :func:`acceptable_budget` — the smallest ε' with √2/ε' ≤ U_s (Definition 4, Eq. 26).
* :func:`lemma2_allows` — n queries can all be acceptable only if √2·n/ε ≤ U_s (Lemma 2).
* :func:`us_interval` — the useful range of U_s for a sequence (Lemma 3, see the note there).
* :func:`compound` — k^A_i = (α/n + k*_i)/(α + 1) (Eq. 30); :func:`blend` is α = 1 ("bl-").
* :func:`ac_compound` — the smallest α of Eq. 29 so every term is acceptable ("AC-").
* :func:`lemma4_usefulness` and :func:`useful_probability` — Definition 5 / Lemma 4.

All terms stay on the 10**-18 grid, rounded down, so each compounded sequence sums to at most ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from blockbudget.budget import Number, to_decimal
from blockbudget.decimals import plain_fields, plain_number
from blockbudget.errors import InvalidBudgetError, InvalidRequestError
from blockbudget.series._exact import CEIL, FLOOR, grid_ceil, grid_floor
from blockbudget.series.sequence import FiniteBudgetSequence, check_count, check_epsilon

#: √2 to 90 digits, rounded up.
_SQRT2_UP = Decimal(2).sqrt(context=CEIL)


def check_noise_bound(u_s: Number) -> Decimal:
    """U_s as an exact decimal, checked to be finite and > 0.

    Raises:
        InvalidBudgetError: otherwise.
    """
    value = to_decimal(u_s, name="U_s")
    if value.is_infinite() or value <= 0:
        raise InvalidBudgetError(
            f"U_s (the tolerated noise standard deviation) must be > 0, got {u_s!r}"
        )
    return value


def _check_finite(sequence: object) -> None:
    if not isinstance(sequence, FiniteBudgetSequence):
        raise InvalidRequestError(
            "this needs a finite budget sequence (take .first(n) of a series), "
            f"got {type(sequence).__name__}"
        )


@dataclass(frozen=True)
class SensitivityNormalization:
    """Scale a query's value domain so its global sensitivity becomes 1 (seed 003 Def. 3).

    With original sensitivity Δf = v, the scaled query is f(D_z) = f(D)/v (Eq. 22) and its
    Laplace noise at budget ε has standard deviation √2/ε, the same for every query (Eq. 25);
    the ratio of noise to true result is unchanged (TR/NR = TR*/NR*), so one bound U_s on the
    normalized noise fits queries of any sensitivity.

    Args:
        sensitivity: the original global sensitivity v > 0 (e.g. max(|lower|, |upper|) of a sum).

    Raises:
        InvalidRequestError: if v is not finite and > 0.
    """

    sensitivity: float

    def __post_init__(self) -> None:
        plain_fields(self)  # NumPy scalars as Python numbers
        v = self.sensitivity
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf):
            raise InvalidRequestError(f"sensitivity must be finite and > 0, got {v!r}")

    def normalize(self, value: float) -> float:
        """f(D_z) = f(D)/v."""
        return value / self.sensitivity

    def denormalize(self, value: float) -> float:
        """Back to the original scale: f(D) = f(D_z)·v (noise scales with it)."""
        return value * self.sensitivity

    def original_noise_std(self, epsilon: Number) -> float:
        """√2·v/ε, the original query's noise standard deviation at ε (Eq. 24)."""
        return noise_std(epsilon) * self.sensitivity


def noise_std(epsilon: Number) -> float:
    """The standard deviation √2/ε of normalized Laplace noise at budget ε (seed 003 Eq. 25)."""
    return math.sqrt(2.0) / float(check_epsilon(epsilon))


def acceptable_budget(u_s: Number) -> Decimal:
    """The smallest grid budget ε' with √2/ε' ≤ U_s (seed 003 Definition 4, Eq. 26).

    √2/U_s rounded *up* to the 10**-18 grid: a budget term ≥ this value is acceptable.
    """
    return grid_ceil(CEIL.divide(_SQRT2_UP, check_noise_bound(u_s)))


def lemma2_allows(n: int, *, epsilon: Number, u_s: Number) -> bool:
    """Whether n terms summing to at most ε can all be acceptable (seed 003 Lemma 2).

    On the grid: the average term ⌊ε/n⌋ must itself be acceptable (√2·n/ε ≤ U_s up to the
    10**-18 resolution of terms).
    """
    n = check_count(n)
    return grid_floor(FLOOR.divide(check_epsilon(epsilon), n)) >= acceptable_budget(u_s)


@dataclass(frozen=True)
class NoiseBoundInterval:
    """The range of U_s that is meaningful for a sequence (seed 003 Lemma 3).

    Attributes:
        lower: √2·n/ε — below it no allocation of ε over n queries is acceptable (Lemma 2).
        upper: √2/ε_min — above it the sequence is already acceptable and AC- changes nothing.
    """

    lower: float
    upper: float


def us_interval(sequence: FiniteBudgetSequence) -> NoiseBoundInterval:
    """The meaningful U_s range for ``sequence`` (seed 003 Lemma 3, corrected).

    Lemma 3 prints the upper end as √2·n/ε_k; the paper's own Tables 3–5 list √2/ε_min (e.g.
    N = 3, ε = 0.3, calibrated Geo: ε_min = 0.3·4/19, √2/ε_min = 22.39, Table 3: 22.40), which
    is also what the proof's argument needs, so this returns √2/ε_min.

    Raises:
        InvalidRequestError: if the smallest term is 0.
    """
    _check_finite(sequence)
    n = sequence.length
    eps_min = sequence.minimum
    if eps_min == 0:
        raise InvalidRequestError("the sequence has a zero term; its noise is unbounded")
    return NoiseBoundInterval(
        lower=math.sqrt(2.0) * n / float(sequence.epsilon), upper=math.sqrt(2.0) / float(eps_min)
    )


def compound(
    sequence: FiniteBudgetSequence, *, alpha: Number, name: str | None = None
) -> FiniteBudgetSequence:
    """Mix a sequence with the average: ε^A_i = (α·ε/n + ε_i)/(α + 1) (seed 003 Eq. 30).

    Eq. 30 is written for the proportions of a calibrated sequence; in budgets it is the line
    above. The sum is (α·ε + S)/(α + 1) ≤ ε for any S ≤ ε, and the result needs no further
    calibration when S = ε. Terms are rounded down to the grid.

    Args:
        sequence: the (calibrated) sequence.
        alpha: α ≥ 0; 0 leaves the sequence unchanged, α → ∞ tends to the average.
        name: the label (default ``"AC-" + name``).

    Raises:
        InvalidBudgetError: if α is negative or not finite.
    """
    _check_finite(sequence)
    a = to_decimal(alpha, name="alpha")
    if a.is_infinite() or a < 0:
        raise InvalidBudgetError(f"alpha must be finite and >= 0, got {alpha!r}")
    eps = sequence.epsilon
    n = sequence.length
    mean = FLOOR.divide(eps, n)
    weighted = FLOOR.multiply(a, mean)
    denominator = CEIL.add(a, Decimal(1))
    terms = tuple(
        grid_floor(FLOOR.divide(FLOOR.add(weighted, t), denominator)) for t in sequence.terms
    )
    return FiniteBudgetSequence(epsilon=eps, terms=terms, name=name or f"AC-{sequence.name}")


def blend(sequence: FiniteBudgetSequence) -> FiniteBudgetSequence:
    """The "bl-" form: :func:`compound` with α = 1 (seed 003 §7.1: bl-Ty)."""
    return compound(sequence, alpha=1, name=f"bl-{sequence.name}")


def ac_alpha(sequence: FiniteBudgetSequence, *, u_s: Number) -> Decimal:
    """The smallest α that makes every compounded term acceptable (seed 003 Eq. 28–29).

    α ≥ (√2/(εU_s) − k*_min)/(1/n − √2/(εU_s)), evaluated in budgets on the grid:
    α = (ε' − ε_min)/(⌊ε/n⌋ − ε') with ε' = :func:`acceptable_budget` (U_s), rounded up.
    0 if the sequence is already acceptable.

    Raises:
        InvalidRequestError: if Lemma 2 forbids it (no α works), or the average term equals ε'
            exactly (α would be infinite: use :func:`~blockbudget.series.strategies.average`).
    """
    _check_finite(sequence)
    required = acceptable_budget(u_s)
    eps_min = sequence.minimum
    if eps_min >= required:
        return Decimal(0)
    mean = grid_floor(FLOOR.divide(sequence.epsilon, sequence.length))
    if mean < required:
        raise InvalidRequestError(
            f"U_s = {u_s} is below sqrt(2)*n/epsilon = "
            f"{math.sqrt(2.0) * sequence.length / float(sequence.epsilon):.6g} (Lemma 2): "
            f"no split of epsilon = {sequence.epsilon} over n = {sequence.length} queries "
            "is acceptable"
        )
    if mean == required:
        raise InvalidRequestError(
            f"U_s = {u_s} equals sqrt(2)*n/epsilon exactly: "
            "only the average allocation is acceptable"
        )
    alpha = CEIL.divide(CEIL.subtract(required, eps_min), FLOOR.subtract(mean, required))
    # 30 significant digits, rounded up: keeps α·mean and α + 1 exact at 90 digits.
    return alpha.quantize(
        Decimal(1).scaleb(alpha.adjusted() - 29), rounding=ROUND_CEILING, context=CEIL
    )


def ac_compound(sequence: FiniteBudgetSequence, *, u_s: Number) -> FiniteBudgetSequence:
    """The "AC-" sequence: compounded with the smallest α so all terms are acceptable (Eq. 28–30).

    Every term of the result is ≥ :func:`acceptable_budget` (U_s) whenever
    :func:`lemma2_allows` (with ⌊ε/n⌋ strictly above the acceptable budget; at equality only the
    average works and is returned, named AC-…).

    Raises:
        InvalidRequestError: if Lemma 2 forbids U_s.
    """
    _check_finite(sequence)
    name = f"AC-{sequence.name}"
    required = acceptable_budget(u_s)
    mean = grid_floor(FLOOR.divide(sequence.epsilon, sequence.length))
    if mean == required and sequence.minimum < required:
        return FiniteBudgetSequence(
            epsilon=sequence.epsilon, terms=(mean,) * sequence.length, name=name
        )
    alpha = ac_alpha(sequence, u_s=u_s)
    # compound() divides α·(ε/n) by α + 1; with the grid-floored mean below, each term is
    # ≥ (α·mean + ε_min)/(α + 1) ≥ required, and rounding down to the grid keeps it ≥ required
    # because required is itself on the grid.
    result = _compound_with_mean(sequence, alpha=alpha, mean=mean, name=name)
    if result.minimum < required:  # defensive: arithmetic above guarantees this never happens
        raise InvalidRequestError("internal: AC compounding missed the acceptable budget")
    return result


def _compound_with_mean(
    sequence: FiniteBudgetSequence, *, alpha: Decimal, mean: Decimal, name: str
) -> FiniteBudgetSequence:
    weighted = FLOOR.multiply(alpha, mean)
    denominator = FLOOR.add(alpha, Decimal(1))
    # The numerator α·mean + ε_i and the denominator are exact at 90 digits for α of ≤ 40
    # digits, so the only rounding is the final floor; the sum is ≤ (α·n·mean + S)/(α+1) ≤ ε.
    terms = tuple(
        grid_floor(FLOOR.divide(FLOOR.add(weighted, t), denominator)) for t in sequence.terms
    )
    return FiniteBudgetSequence(epsilon=sequence.epsilon, terms=terms, name=name)


@dataclass(frozen=True)
class Usefulness:
    """A (γ, δ, ε, n)-usefulness statement (seed 003 Definition 5, Eq. 31).

    Attributes:
        gamma: the bound γ on normalized noise.
        delta: the probability δ.
        per_query: True if δ bounds each query's Pr[|N_i| ≤ γ] (what Lemma 4's proof shows);
            False if it bounds the joint Pr[max_i |N_i| ≤ γ] of Eq. 31.
    """

    gamma: float
    delta: float
    per_query: bool


def lemma4_usefulness(sequence: FiniteBudgetSequence) -> Usefulness:
    """Lemma 4: an acceptable sequence is (√2/ε_min, 1 − e^{−√2}, ε, n)-useful.

    The proof (Eq. 33) bounds one query's probability Pr[|N_i| ≤ √2/ε_min] ≥ 1 − e^{−√2}; for
    the maximum over all n queries of Eq. 31 the independent noises multiply, see
    :func:`useful_probability` — so the statement returned is marked ``per_query``.
    """
    _check_finite(sequence)
    if sequence.minimum == 0:
        raise InvalidRequestError("the sequence has a zero term; it is useful for no gamma")
    return Usefulness(
        gamma=math.sqrt(2.0) / float(sequence.minimum),
        delta=1.0 - math.exp(-math.sqrt(2.0)),
        per_query=True,
    )


def useful_probability(sequence: FiniteBudgetSequence, *, gamma: float) -> float:
    """Pr[max_i |N_i| ≤ γ] for independent normalized Laplace noise N_i ~ Lap(1/ε_i) (Eq. 31).

    Each |N_i| ≤ γ with probability 1 − e^{−ε_i γ}; the noises are independent, so the joint
    probability is their product.

    Raises:
        InvalidRequestError: if γ is not finite and ≥ 0.
    """
    _check_finite(sequence)
    gamma = plain_number(gamma)
    if (
        isinstance(gamma, bool)
        or not isinstance(gamma, int | float)
        or not (math.isfinite(gamma) and gamma >= 0)
    ):
        raise InvalidRequestError(f"gamma must be finite and >= 0, got {gamma!r}")
    log_p = 0.0
    for t in sequence.terms:
        log_p += math.log1p(-math.exp(-float(t) * gamma)) if t > 0 and gamma > 0 else -math.inf
        if log_p == -math.inf:
            return 0.0
    return math.exp(log_p)


def is_useful(sequence: FiniteBudgetSequence, *, gamma: float, delta: float) -> bool:
    """Whether the allocation is (γ, δ, ε, n)-useful in the joint sense of Definition 5."""
    delta = plain_number(delta)
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not (0.0 <= delta <= 1.0):
        raise InvalidRequestError(f"delta must be in [0, 1], got {delta!r}")
    return useful_probability(sequence, gamma=gamma) >= delta

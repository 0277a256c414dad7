"""Protecting the budget sequence against collusion (seed 003 §6).

Source: seed ``003_a7fa9cb9080a05af.txt``, §6.1–6.4, Eq. 34–36.

§6.1: a series strategy depends only on n, so users who know n and the strategy know every
ε_i and can pool their answers to the i-th query. Three countermeasures:

* :func:`random_arrangement` — a uniformly random order of the terms (§6.2);
* :func:`probabilistic_perturbation` — terms drawn without replacement, the x-th query taking
  the term with original index i with probability ∝ q = (N − i)·e^{x−i} (§6.3, Eq. 34–35);
* :func:`noisy_n` — the strategy built for n_s = n + Lap(1/ε_n) instead of n (§6.4, Eq. 36).

What is accounted, honestly:

* The first two only reorder the terms: the multiset — hence the sum ≤ ε — is unchanged, and
  they spend no privacy budget. Their randomness hides the order from users, so it must not be
  predictable: by default it comes from the operating system (``secrets``); pass a seeded
  ``numpy.random.Generator`` only for experiments (the order is then known to anyone who knows
  the seed; no data is released by it either way).
* Noisy n releases a differentially private view of n, the *number of queries* — a fact about
  the analyst's plan, not about any row of the data. Its ε_n is therefore a separate guarantee
  about n (the paper's Theorem 3 argument: the query count and the rows are disjoint), and it is
  **not** charged to the data ledger; :class:`NoisyN` reports ε_n and the n_s drawn. The data
  budget is still respected: the n terms actually used are calibrated to sum to at most ε.
  Its Laplace draw uses the project's secure sampler by default. Only the signed form of
  Eq. 36 (the default) is ε_n-DP for n; the positive form the paper advises (n_s = n + |η|) is
  *not* DP at all — n_s ≥ n always, so n_s reveals an upper bound of n, and n_s = n has
  positive probability under n but none under n + 1 — and :attr:`NoisyN.private` says so.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum

import numpy as np

from blockbudget.budget import Number
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource, resolve_noise
from blockbudget.series.plan import Strategy
from blockbudget.series.sequence import FiniteBudgetSequence, check_count, check_epsilon


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    if rng is None:
        return np.random.default_rng(secrets.randbits(128))
    if not isinstance(rng, np.random.Generator):
        raise InvalidRequestError(
            f"rng must be a numpy Generator or None, got {type(rng).__name__}"
        )
    return rng


def _finite(sequence: object) -> FiniteBudgetSequence:
    if not isinstance(sequence, FiniteBudgetSequence):
        raise InvalidRequestError(
            "a protection reorders a finite sequence (take .first(n) of a series), "
            f"got {type(sequence).__name__}"
        )
    return sequence


def _reordered(
    sequence: FiniteBudgetSequence, order: list[int], prefix: str
) -> FiniteBudgetSequence:
    terms = tuple(sequence.terms[i] for i in order)
    return FiniteBudgetSequence(
        epsilon=sequence.epsilon, terms=terms, name=f"{prefix}{sequence.name}"
    )


def random_arrangement(
    sequence: FiniteBudgetSequence, *, rng: np.random.Generator | None = None
) -> FiniteBudgetSequence:
    """The terms in a uniformly random order (seed 003 §6.2). Same multiset, same sum."""
    sequence = _finite(sequence)
    order = [int(i) for i in _rng(rng).permutation(sequence.length)]
    return _reordered(sequence, order, "Shuffled-")


def perturbation_probabilities(remaining: list[int], x: int, n: int) -> list[float]:
    """Pr_j of Eq. 35 for the x-th query over the remaining original indices (1-based).

    Scores q = (N − i)·e^{x−i} (Eq. 34), computed in log space. The last original term
    (i = N) scores 0, so it is chosen only when it is the only one left.
    """
    logs = [math.log(n - i) + (x - i) if i < n else -math.inf for i in remaining]
    top = max(logs)
    if top == -math.inf:  # only i = N remains
        return [1.0 if i == n else 0.0 for i in remaining]
    weights = [math.exp(v - top) for v in logs]
    total = math.fsum(weights)
    return [w / total for w in weights]


def probabilistic_perturbation(
    sequence: FiniteBudgetSequence, *, rng: np.random.Generator | None = None
) -> FiniteBudgetSequence:
    """Terms drawn without replacement with Eq. 34–35's probabilities (seed 003 §6.3).

    Query x (1-based) takes one of the remaining terms; a term with original index i is chosen
    with probability ∝ (N − i)·e^{x−i}, so early terms tend to stay early and the series' trend
    survives (the paper's Figure 8). Same multiset, same sum.
    """
    sequence = _finite(sequence)
    gen = _rng(rng)
    n = sequence.length
    remaining = list(range(1, n + 1))
    order: list[int] = []
    for x in range(1, n + 1):
        probs = perturbation_probabilities(remaining, x, n)
        pick = int(gen.choice(len(remaining), p=np.asarray(probs)))
        order.append(remaining.pop(pick) - 1)
    return _reordered(sequence, order, "Perturbed-")


class NoisySign(Enum):
    """How Eq. 36's Laplace noise enters n_s.

    Attributes:
        SIGNED: n_s = n + η as printed: an ε_n-DP release of n (Laplace mechanism, Δn = 1).
        POSITIVE: n_s = n + |η| — the paper's advice without a U_s constraint (§6.4), so n_s ≥ n
            and the sequence is never more unbalanced than the unprotected one. One-sided noise
            is **not** differentially private (n_s never falls below n); it only blurs n.
    """

    SIGNED = "signed"
    POSITIVE = "positive"


@dataclass(frozen=True)
class NoisyN:
    """The result of the noisy-n protection.

    Attributes:
        sequence: the n terms used (calibrated; sum ≤ ε).
        noisy_n: n_s, the number the strategy's parameter was chosen for.
        epsilon_n: the ε of the Laplace noise on n (protects n, not data rows; not charged to
            the data ledger — see the module docstring).
        private: whether n_s is an ε_n-DP release of n (True only for the signed noise).
        secure_noise: whether η came from the secure sampler (False for a SeededNoise:
            experiments and tests only).
    """

    sequence: FiniteBudgetSequence
    noisy_n: int
    epsilon_n: Decimal
    private: bool = True
    secure_noise: bool = True


def draw_noisy_n(
    n: int,
    *,
    epsilon_n: Number,
    sign: NoisySign = NoisySign.SIGNED,
    noise: NoiseSource | None = None,
    minimum: int = 2,
) -> int:
    """n_s = round(n + η), η ~ Lap(1/ε_n) (seed 003 Eq. 36), at least ``minimum``.

    Rounding and the floor at ``minimum`` are post-processing of n + η; with ``sign`` SIGNED
    (the default) the result is an ε_n-DP release of n; POSITIVE is not DP (see
    :class:`NoisySign`).

    Raises:
        InvalidRequestError: if n < 1.
        InvalidBudgetError: if ε_n is not finite and > 0.
    """
    n = check_count(n)
    eps_n = check_epsilon(epsilon_n)
    minimum = check_count(minimum, name="minimum")
    if not isinstance(sign, NoisySign):  # checked before any noise is drawn
        raise InvalidRequestError(f"sign must be a NoisySign, got {sign!r}")
    eta = float(resolve_noise(noise).laplace_samples(1, scale=1.0 / float(eps_n))[0])
    if sign is NoisySign.POSITIVE:
        eta = abs(eta)
    return max(minimum, round(n + eta))


def noisy_n(
    strategy: Strategy,
    n: int,
    *,
    epsilon: Number,
    epsilon_n: Number,
    sign: NoisySign = NoisySign.SIGNED,
    noise: NoiseSource | None = None,
) -> NoisyN:
    """Build ``strategy`` for n queries with its parameter chosen for a noisy n_s (Eq. 36).

    The base series gets r or t for n_s (e.g. r = (n_s − 1)/n_s), n terms are taken and
    calibrated (Eq. 17), then the strategy's flip / bl- / AC- are applied for the real n.

    Args:
        strategy: a :class:`~blockbudget.series.plan.Strategy`.
        n: the number of queries actually made.
        epsilon: the data budget ε the n terms split.
        epsilon_n: the ε of the Laplace release of n.
        sign: signed (default, ε_n-DP) or positive (the paper's advice, not DP) noise; see
            :class:`NoisySign`.
        noise: the noise source (default: secure).
    """
    if not isinstance(strategy, Strategy):
        raise InvalidRequestError(f"strategy must be a Strategy, got {type(strategy).__name__}")
    eps = check_epsilon(epsilon)
    eps_n = check_epsilon(epsilon_n)
    sampler = resolve_noise(noise)
    n_s = draw_noisy_n(n, epsilon_n=eps_n, sign=sign, noise=sampler)
    base = strategy.base_sequence(n, epsilon=eps, parameter_n=n_s)
    seq = strategy.transform(base).renamed(f"NoisyN-{strategy.name}")
    return NoisyN(
        sequence=seq,
        noisy_n=n_s,
        epsilon_n=eps_n,
        private=sign is NoisySign.SIGNED,
        secure_noise=sampler.secure,
    )

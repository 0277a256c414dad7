"""The budget-source contract and how mechanisms price themselves against it.

A :class:`BudgetSource` is what a mechanism spends from — in the platform, a
:class:`~blockbudget.grant.Grant` over a set of blocks. It states its accounting rule and
durably charges a cost, or refuses
with :class:`~blockbudget.errors.BudgetExceededError` /
:class:`~blockbudget.errors.ReservationError`. Every mechanism in this package validates its
parameters, prices itself for the source's rule, calls :meth:`BudgetSource.draw` and only then
samples noise: a refusal releases nothing.

Pricing (the cost handed to ``draw``): a release is described as data — a
:class:`~blockbudget.accounting.rule.Release` holding the requested (ε, δ) and its
perturbations at their actual scales — and the stream's registered rule prices it
(:meth:`~blockbudget.accounting.rule.AccountingRule.price`). For the rules shipped:

* basic, strong and advanced composition (Sage seed 004 §4.3 Thm 4.3, §A.3 Thm A.2; Whitehouse
  et al. 2023) account (ε, δ) :class:`~blockbudget.budget.Budget` values: the requested ε (and
  δ), exactly as given.
* RDP streams account an :class:`~blockbudget.budget.RdpCurve`: the mechanism's own curve at
  the noise scale actually used — ``RdpCurve.laplace`` for Laplace (Mironov 2017, Prop. 6),
  ``RdpCurve.gaussian`` for Gaussian (Prop. 7) — summed over the parts of a composite
  statistic (RDP composes additively per order, Mironov 2017 Prop. 1).
* GDP streams account μ: Δ/σ per Gaussian part (Dong, Roth & Su 2022, Thm 2.7), composed in
  quadrature.

The Laplace curve is valid for a *vector* of L1 sensitivity Δ, not only a scalar: the curve
f_α(t) of one coordinate whose mean moves by t·b is a log-sum-exp of affine functions of t, hence
convex with f_α(0) = 0, hence superadditive, so spreading Δ over several coordinates never costs
more than moving one coordinate by Δ.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Protocol, runtime_checkable

import numpy as np

from blockbudget.accounting import Accounting
from blockbudget.accounting.rule import Noise, NoisePart, Release, get_rule
from blockbudget.budget import Cost
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import FloatArray, NoiseKind, NoiseSource, Selection
from blockbudget.mechanisms.results import Perturbation


@runtime_checkable
class BudgetSource(Protocol):
    """What a mechanism draws its budget from (the platform's Grant implements it)."""

    @property
    def accounting(self) -> Accounting:
        """The name of the stream's registered rule (whose ``cost_kind`` it takes)."""
        ...

    def draw(self, cost: Cost, *, label: str) -> None:
        """Durably charge ``cost`` or raise BudgetExceededError / ReservationError."""
        ...


def source_accounting(source: BudgetSource) -> Accounting:
    """The source's accounting rule, checked.

    Raises:
        InvalidRequestError: if ``source`` does not implement :class:`BudgetSource`.
    """
    if not isinstance(source, BudgetSource):
        raise InvalidRequestError(
            f"source must be a BudgetSource (accounting + draw), got {type(source).__name__}"
        )
    accounting = source.accounting
    if not isinstance(accounting, Accounting):
        raise InvalidRequestError(f"source.accounting must be an Accounting, got {accounting!r}")
    return accounting


_NOISE = {
    NoiseKind.LAPLACE: Noise.LAPLACE,
    NoiseKind.GAUSSIAN: Noise.GAUSSIAN,
    Selection.GUMBEL: Noise.EXPONENTIAL,
}


def release_of(
    *, epsilon: Decimal, parts: Sequence[Perturbation], delta: Decimal = Decimal(0)
) -> Release:
    """A release described as data for a rule to price: the requested (ε, δ) and each
    perturbation's distribution, scale and sensitivity — a Gumbel top-k of ``picks = k`` as k
    exponential-mechanism selections (its distribution is k peels: Durfee & Rogers 2019,
    Lemma 4.2).

    Example:
        >>> part = Perturbation("v", NoiseKind.GAUSSIAN, 2.0, 1.0, 1, None)
        >>> release_of(epsilon=Decimal(0), parts=[part]).parts[0].noise
        <Noise.GAUSSIAN: 'gaussian'>
    """
    return Release(
        epsilon=epsilon,
        delta=delta,
        parts=tuple(
            NoisePart(_NOISE[p.kind], p.scale, p.sensitivity)
            for p in parts
            for _ in range(p.picks if p.kind is Selection.GUMBEL else 1)
        ),
    )


def price(
    accounting: str,
    *,
    epsilon: Decimal,
    parts: Sequence[Perturbation],
    delta: Decimal = Decimal(0),
) -> Cost:
    """The cost of a release made of ``parts`` under the rule ``accounting``
    (:meth:`~blockbudget.accounting.rule.AccountingRule.price` of :func:`release_of`).

    Args:
        accounting: the source's rule (a registered name).
        epsilon: the exact total ε the caller asked for ((ε, δ) rules charge it as is).
        parts: the perturbations the release will make, with their actual noise scales.
        delta: the exact total δ.

    Returns:
        ``Budget(epsilon, delta)`` under an (ε, δ) rule; under a rule that prices noise
        (``prices_noise``: RDP, GDP), the composition of ``parts`` at their scales.

    Example:
        >>> part = Perturbation("v", NoiseKind.GAUSSIAN, 2.0, 1.0, 1, None)
        >>> price("gdp", epsilon=Decimal(0), parts=[part])
        GaussianDp(mu=Decimal('0.5'))
    """
    return get_rule(accounting).price(release_of(epsilon=epsilon, delta=delta, parts=parts))


def draw_then_perturb(
    source: BudgetSource,
    *,
    cost: Cost,
    label: str,
    noise: NoiseSource,
    jobs: Sequence[tuple[Perturbation, FloatArray]],
) -> list[FloatArray]:
    """Charge ``cost`` to ``source``, then — only if that succeeded — perturb each vector.

    The single place where every mechanism in this package touches its noise output, so the
    order "draw, then noise" holds everywhere: if ``draw`` raises, no noise is sampled and
    nothing is released.

    Args:
        source: the budget source.
        cost: the priced cost (see :func:`price`).
        label: the label recorded with the charge.
        noise: the noise source.
        jobs: (perturbation, exact values) pairs; each vector gets the perturbation's noise.

    Returns:
        The noisy vectors, in the order of ``jobs``.
    """
    source.draw(cost, label=label)
    return [_perturb(noise, part, values) for part, values in jobs]


def _perturb(noise: NoiseSource, part: Perturbation, values: FloatArray) -> FloatArray:
    """One job's release: the noisy vector, or for a Gumbel top-k selection a vector of ranks
    (k for the best index down to 1; 0 for every index not selected)."""
    if isinstance(part.kind, Selection):
        ranks = np.zeros(values.shape, dtype=np.float64)
        chosen = noise.top_k(values, k=part.picks, scale=part.scale)
        ranks[chosen] = np.arange(part.picks, 0, -1, dtype=np.float64)
        return ranks
    return noise.add(part.kind, values, scale=part.scale)

"""Each validator's guarantee by simulation: over ≥ 1,000 seeded trials the wrong decision is
made at most η of the time — at the worst case for the bound (Bernoulli losses, a true value
just on the wrong side of the target). Each test also shows the test can fail: the same
simulation catches "No SLA" (or a missing DP correction) violating η, and the validator has
power (it decides correctly most of the time when the truth is clearly on the right side).

Statistics are simulated directly (sums of Bernoulli draws), not by training 1,000 models.
"""

from __future__ import annotations

import numpy as np

from blockbudget.mechanisms import SeededNoise
from blockbudget.training import (
    AccuracyEvidence,
    AccuracyValidator,
    LossEvidence,
    LossValidator,
    MeteredSource,
    Outcome,
    SlaMode,
    SumStatisticEvidence,
    SumStatisticValidator,
)

TRIALS = 1000
ETA = 0.05


def rate(outcomes: list[Outcome], which: Outcome) -> float:
    return sum(o is which for o in outcomes) / len(outcomes)


def loss_outcomes(
    mode: SlaMode, *, mean: float, n: int, epsilon: float, seed: int, reject: bool = False
) -> list[Outcome]:
    rng = np.random.default_rng(seed)
    v = LossValidator(target=0.1, mode=mode)
    out = []
    for t in range(TRIALS):
        losses = rng.binomial(1, mean, n).astype(float)
        ev = LossEvidence(np.zeros(n) + 1.0, losses) if reject else LossEvidence(losses)
        src = None if mode is SlaMode.NON_PRIVATE else MeteredSource()
        out.append(
            v.validate(src, ev, epsilon=epsilon, eta=ETA, noise=SeededNoise(seed + t)).outcome
        )
    return out


def test_loss_accept_is_wrong_at_most_eta_of_the_time() -> None:
    # expected loss just above the target 0.1: every ACCEPT is a violation
    sage = loss_outcomes(SlaMode.SAGE, mean=0.101, n=4000, epsilon=0.5, seed=100)
    assert rate(sage, Outcome.ACCEPT) <= ETA
    no_sla = loss_outcomes(SlaMode.NO_SLA, mean=0.101, n=4000, epsilon=0.5, seed=100)
    assert rate(no_sla, Outcome.ACCEPT) > 0.3  # the simulation does catch a bad validator
    # power: a model at half the target is accepted almost always
    good = loss_outcomes(SlaMode.SAGE, mean=0.05, n=4000, epsilon=0.5, seed=200)
    assert rate(good, Outcome.ACCEPT) > 0.9


def test_loss_correction_matters_at_small_epsilon() -> None:
    # without the DP correction the Bernstein bound alone is fooled by the Laplace noise
    sage = loss_outcomes(SlaMode.SAGE, mean=0.1005, n=2000, epsilon=0.02, seed=300)
    unc = loss_outcomes(SlaMode.UNCORRECTED, mean=0.1005, n=2000, epsilon=0.02, seed=300)
    assert rate(sage, Outcome.ACCEPT) <= ETA < rate(unc, Outcome.ACCEPT)


def test_loss_reject_is_wrong_at_most_eta_of_the_time() -> None:
    # the best model's loss is just below the target: every REJECT is wrong
    sage = loss_outcomes(SlaMode.SAGE, mean=0.099, n=4000, epsilon=0.5, seed=400, reject=True)
    assert rate(sage, Outcome.REJECT) <= ETA
    hopeless = loss_outcomes(SlaMode.SAGE, mean=0.2, n=4000, epsilon=0.5, seed=500, reject=True)
    assert rate(hopeless, Outcome.REJECT) > 0.9


def accuracy_outcomes(
    mode: SlaMode, *, p: float, n: int, epsilon: float, seed: int, reject: bool = False
) -> list[Outcome]:
    rng = np.random.default_rng(seed)
    v = AccuracyValidator(target=0.8, mode=mode)
    out = []
    for t in range(TRIALS):
        hits = (rng.random(n) < p).astype(float)
        ev = AccuracyEvidence(np.zeros(n), hits) if reject else AccuracyEvidence(hits)
        src = None if mode is SlaMode.NON_PRIVATE else MeteredSource()
        out.append(
            v.validate(src, ev, epsilon=epsilon, eta=ETA, noise=SeededNoise(seed + t)).outcome
        )
    return out


def test_accuracy_accept_and_reject_are_wrong_at_most_eta_of_the_time() -> None:
    accept = accuracy_outcomes(SlaMode.SAGE, p=0.799, n=5000, epsilon=0.5, seed=600)
    assert rate(accept, Outcome.ACCEPT) <= ETA
    assert (
        rate(
            accuracy_outcomes(SlaMode.NO_SLA, p=0.799, n=5000, epsilon=0.5, seed=600),
            Outcome.ACCEPT,
        )
        > 0.3
    )
    reject = accuracy_outcomes(SlaMode.SAGE, p=0.801, n=5000, epsilon=0.5, seed=700, reject=True)
    assert rate(reject, Outcome.REJECT) <= ETA
    # power on both sides
    assert (
        rate(accuracy_outcomes(SlaMode.SAGE, p=0.85, n=5000, epsilon=0.5, seed=800), Outcome.ACCEPT)
        > 0.9
    )
    assert (
        rate(
            accuracy_outcomes(SlaMode.SAGE, p=0.75, n=5000, epsilon=0.5, seed=900, reject=True),
            Outcome.REJECT,
        )
        > 0.9
    )


def test_sum_statistic_accept_bounds_the_released_means_error() -> None:
    """ACCEPT promises every released group mean within τ of its distribution mean."""
    rng = np.random.default_rng(1000)
    means = np.array([0.3, 0.5, 0.9])
    sizes = np.array([10_000, 20_000, 40_000])
    eps_release, b = 1.0, 1.0
    b_sum, b_cnt = 2 * b / eps_release, 2 / eps_release  # dp_group_by_mean's scales
    v = SumStatisticValidator(target=0.05)
    accepted = violated = 0
    for t in range(TRIALS):
        sums = rng.binomial(sizes, means).astype(float)  # Bernoulli values: worst variance
        noisy = (sums + rng.laplace(0, b_sum, 3)) / (sizes + rng.laplace(0, b_cnt, 3))
        ev = SumStatisticEvidence(sizes, value_range=b, sum_scale=b_sum, count_scale=b_cnt)
        result = v.validate(MeteredSource(), ev, epsilon=0.5, eta=ETA, noise=SeededNoise(t))
        if result.outcome is Outcome.ACCEPT:
            accepted += 1
            violated += bool(np.max(np.abs(noisy - means)) > v.target)
    assert accepted > 0.9 * TRIALS  # power: these sizes suffice for τ = 0.05
    assert violated / TRIALS <= ETA
    # and the bound is not vacuous: a target below the realized error is refused
    tight = SumStatisticValidator(target=0.005).validate(
        MeteredSource(), ev, epsilon=0.5, eta=ETA, noise=SeededNoise(0)
    )
    assert tight.outcome is Outcome.RETRY

"""Each DP correction's own failure rate, by simulation (docs/training.md, "DP corrections").

An end-to-end guarantee test cannot see a wrong constant hiding inside the concentration
bound's slack, so each correction a validator applies is tested alone: over T = 20,000 seeded
Laplace draws at the scales the validator's own jobs use, the corrected statistic lands on the
wrong side of the truth at its designed rate (η/3 for the loss tests, η/4 for the empirical
Bernstein loss test, η/6 per side for accuracy, p = η/(3K) or η/(5K) per group for sum
statistics). Laplace corrections are exact, so the count of failures must fall inside the
two-sided binomial interval of that rate at level 2·10⁻⁶; a correction with half the constant
must fail above that interval (detected). The seeds are fixed and the margins come from binomial
tails, so the tests cannot flake.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pytest
from scipy.stats import binom

from blockbudget.mechanisms.results import Perturbation
from blockbudget.training import (
    AccuracyEvidence,
    AccuracyValidator,
    Inequality,
    LossEvidence,
    LossValidator,
    SumStatisticValidator,
)
from blockbudget.training.bounds import empirical_bernstein_margin
from blockbudget.training.sum_statistic import group_corrections
from blockbudget.training.validation import Released

T = 20_000
ETA = 0.05
LEVEL = 1e-6


def interval(rate: float) -> tuple[float, float]:
    """Failure counts a correction failing at exactly ``rate`` stays within (prob. 1 − 2e-6)."""
    return float(binom.ppf(LEVEL, T, rate)), float(binom.isf(LEVEL, T, rate))


Fails = Callable[[dict[str, np.ndarray]], np.ndarray]


def check(
    name: str,
    rate: float,
    fails: Fails,
    fixed: dict[str, np.ndarray],
    halved: dict[str, np.ndarray],
) -> None:
    lo, hi = interval(rate)
    got = int(np.sum(fails(fixed)))
    assert lo <= got <= hi, f"{name}: {got} failures of {T}, designed rate {rate:.5f}"
    wrong = int(np.sum(fails(halved)))
    assert wrong > hi, f"{name}: half the correction failed {wrong} times, not above {hi}"


def draws(jobs: list[tuple[Perturbation, np.ndarray]], seed: int) -> tuple[Released, list[float]]:
    rng = np.random.default_rng(seed)
    truths = [float(values[0]) for _, values in jobs]
    values = tuple(
        t + rng.laplace(0.0, part.scale, T) for t, (part, _) in zip(truths, jobs, strict=True)
    )
    return Released(values, tuple(part.scale for part, _ in jobs), noisy=True), truths


def halve(fixed: dict[str, np.ndarray], noisy: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: noisy[k] + (fixed[k] - noisy[k]) / 2.0 for k in fixed}


@pytest.mark.parametrize("inequality", list(Inequality))
def test_loss_corrections_fail_at_their_designed_rates(inequality: Inequality) -> None:
    rng = np.random.default_rng(5)
    v = LossValidator(target=0.3, inequality=inequality)
    evidence = LossEvidence(rng.beta(2, 5, 3000), rng.beta(2, 5, 2000))
    jobs = v.jobs(evidence, epsilon=Decimal(1))
    released, truth = draws(jobs, seed=11)
    fixed = v.corrections(released, ETA)
    first = 3 if inequality is Inequality.EMPIRICAL_BERNSTEIN else 2
    vals = released.values
    noisy = {"n_lo": vals[0], "s_hi": vals[1], "train_n_lo": vals[first]}
    noisy |= {"train_n_hi": vals[first], "train_s_lo": vals[first + 1]}
    if first == 3:
        noisy["q_hi"] = vals[2]
    halved = halve(fixed, noisy)
    rates = v.correction_rates()
    n, s, nt, st = truth[0], truth[1], truth[first], truth[first + 1]
    check("n_lo", rates["n_lo"] * ETA, lambda f: f["n_lo"] > n, fixed, halved)
    check("s_hi", rates["s_hi"] * ETA, lambda f: f["s_hi"] < s, fixed, halved)
    both = lambda f: (f["train_n_lo"] > nt) | (f["train_n_hi"] < nt)  # noqa: E731
    check("train_n", rates["train_n"] * ETA, both, fixed, halved)
    check("train_s_lo", rates["train_s_lo"] * ETA, lambda f: f["train_s_lo"] > st, fixed, halved)
    accept = [k for k in rates if not k.startswith("train")]
    if first == 3:
        check("q_hi", rates["q_hi"] * ETA, lambda f: f["q_hi"] < truth[2], fixed, halved)
        assert sum(rates[k] for k in accept) + 1 / 4 == pytest.approx(1.0)  # + Maurer–Pontil
    else:
        assert sum(rates[k] for k in accept) + 1 / 3 == pytest.approx(1.0)  # + Bernstein


def test_accuracy_corrections_fail_at_eta_over_six_per_side() -> None:
    rng = np.random.default_rng(6)
    v = AccuracyValidator(target=0.8)
    evidence = AccuracyEvidence(rng.random(3000) < 0.85, rng.random(2000) < 0.85)
    released, truth = draws(v.jobs(evidence, epsilon=Decimal("0.5")), seed=12)
    fixed = v.corrections(released, ETA)
    vals = released.values
    noisy = {"n_hi": vals[0], "k_lo": vals[1], "train_n_lo": vals[2], "train_k_hi": vals[3]}
    halved = halve(fixed, noisy)
    rates = v.correction_rates()
    n, k, nt, kt = truth
    check("k_lo", rates["k_lo"] * ETA, lambda f: f["k_lo"] > k, fixed, halved)
    check("n_hi", rates["n_hi"] * ETA, lambda f: f["n_hi"] < n, fixed, halved)
    check("train_k_hi", rates["train_k_hi"] * ETA, lambda f: f["train_k_hi"] < kt, fixed, halved)
    check("train_n_lo", rates["train_n_lo"] * ETA, lambda f: f["train_n_lo"] > nt, fixed, halved)
    assert all(r == pytest.approx(1 / 6) for r in rates.values())


@pytest.mark.parametrize("inequality", list(Inequality))
def test_sum_statistic_corrections_fail_at_p_per_group(inequality: Inequality) -> None:
    groups = 7
    v = SumStatisticValidator(target=1.0, inequality=inequality)
    p = v.event_probability(groups, ETA)
    per_event = 5 if inequality is Inequality.EMPIRICAL_BERNSTEIN else 3
    assert p * per_event * groups == pytest.approx(ETA)
    rng = np.random.default_rng(13)
    n, s, q = 5000.0, 2000.0, 300.0
    b_c, b_s, b_q = 2.0, 2.0, 1.0  # dp_group_by_mean at ε = 1, B = 1; Q at ε = 1
    noisy = {
        "n": n + rng.laplace(0, b_c, T),
        "s": s + rng.laplace(0, b_s, T),
        "q": q + rng.laplace(0, b_q, T),
    }
    fixed = group_corrections(
        noisy["n"], noisy["s"], noisy["q"], count_scale=b_c, sum_scale=b_s, q_scale=b_q, p=p
    )
    plain = {"n_lo": noisy["n"], "n_hi": noisy["n"], "s_lo": noisy["s"], "s_hi": noisy["s"]}
    halved = halve(fixed, plain | {"q_hi": noisy["q"]})
    check("count", p, lambda f: (f["n_lo"] > n) | (f["n_hi"] < n), fixed, halved)
    check("sum", p, lambda f: (f["s_lo"] > s) | (f["s_hi"] < s), fixed, halved)
    check("q_hi", p, lambda f: f["q_hi"] < q, fixed, halved)


def test_maurer_pontil_margin_fails_at_most_p() -> None:
    """The concentration step alone (no DP): a 0/1 law, n = 50, p = 0.05 — the bound is
    conservative, so its failures stay below p's binomial upper limit."""
    rng = np.random.default_rng(14)
    p, n, mu = 0.05, 50, 0.3
    x = (rng.random((T, n)) < mu).astype(float)
    means, variances = x.mean(axis=1), x.var(axis=1, ddof=1)
    fails = sum(
        mu - m > empirical_bernstein_margin(float(var), n, bound=1.0, p=p)
        for m, var in zip(means, variances, strict=True)
    )
    assert fails <= interval(p)[1]

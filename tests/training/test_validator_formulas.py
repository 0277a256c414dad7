"""The validators' decisions equal seed 004 App. B's formulas, written out here by hand from the
paper (not from ``training/bounds.py``): the DP-noise corrections (2/ε)·ln(3/(2η)) one-sided and
(2/ε)·ln(3/η) two-sided, Bernstein's and Hoeffding's terms, and the Clopper–Pearson bounds. A
wrong constant (η instead of η/3, ln(3/η) for ln(3/(2η)), a missing B) changes these numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta

from blockbudget.training import (
    AccuracyEvidence,
    AccuracyValidator,
    LossEvidence,
    LossValidator,
    Outcome,
    SumStatisticEvidence,
    SumStatisticValidator,
)
from blockbudget.training.validation import Released

EPS, ETA = 0.5, 0.05


def released(values: list[float], scales: list[float]) -> Released:
    return Released(tuple(np.array([v]) for v in values), tuple(scales), noisy=True)


def test_loss_accept_and_reject_follow_app_b1() -> None:
    big_b = 2.0
    b_n, b_s = 2 / EPS, 2 * big_b / EPS  # Lap(2/ε) on counts, Lap(2B/ε) on loss sums
    n, s, nt, st = 1000.0, 300.0, 9000.0, 4000.0
    # ACCEPT (Prop. B.1): n̲ = ñ − (2/ε)ln(3/(2η)); L̄ = (S̃ + (2B/ε)ln(3/(2η)))/n̲
    n_lo = n - b_n * math.log(3 / (2 * ETA))
    mean = (s + b_s * math.log(3 / (2 * ETA))) / n_lo
    log3 = math.log(3 / ETA)
    accept = mean + math.sqrt(2 * big_b * mean * log3 / n_lo) + 4 * big_b * log3 / n_lo
    # REJECT (Prop. B.2): ñ_tr ± (2/ε)ln(3/η); sum lowered by (2B/ε)ln(3/(2η)); Hoeffding at n̲
    n_hi_tr, n_lo_tr = nt + b_n * log3, nt - b_n * log3
    reject = (st - b_s * math.log(3 / (2 * ETA))) / n_hi_tr - big_b * math.sqrt(log3 / n_lo_tr)
    evidence = LossEvidence(np.zeros(1), np.zeros(1))
    for target, want in ((accept + 1e-9, Outcome.ACCEPT), (reject - 1e-9, Outcome.REJECT)):
        v = LossValidator(target=target, bound=big_b)
        outcome, acc, rej = v.decide(
            released([n, s, nt, st], [b_n, b_s, b_n, b_s]), evidence, epsilon=EPS, eta=ETA
        )
        assert acc == pytest.approx(accept, rel=1e-12)
        assert outcome is want
        if want is Outcome.REJECT:
            assert rej == pytest.approx(reject, rel=1e-12)
    # just past either bound: RETRY
    v = LossValidator(target=accept - 1e-9, bound=big_b)
    assert v.decide(released([n, s], [b_n, b_s]), evidence, epsilon=EPS, eta=ETA)[0] is (
        Outcome.RETRY
    )


def test_accuracy_accept_and_reject_follow_app_b2() -> None:
    b = 2 / EPS
    c = b * math.log(3 / ETA)  # App. B.2 corrects both k and n by (2/ε)ln(3/η)
    n, k, nt, kt = 2000.0, 1700.3, 8000.0, 5000.6
    k_lo, n_hi = math.floor(k - c), math.ceil(n + c)  # rounded conservatively
    accept = beta.ppf(ETA / 3, k_lo, n_hi - k_lo + 1)
    k_hi, n_lo = math.ceil(kt + c), math.floor(nt - c)
    reject = beta.ppf(1 - ETA / 3, k_hi + 1, n_lo - k_hi)
    evidence = AccuracyEvidence(np.ones(1), np.ones(1))
    v = AccuracyValidator(target=accept - 1e-9)
    outcome, acc, _ = v.decide(released([n, k, nt, kt], [b] * 4), evidence, epsilon=EPS, eta=ETA)
    assert outcome is Outcome.ACCEPT and acc == pytest.approx(accept, rel=1e-12)
    # a model whose test accuracy is far below the target: REJECT decides (on the train split)
    v = AccuracyValidator(target=reject + 1e-9)
    outcome, acc, rej = v.decide(
        released([n, 1000.0, nt, kt], [b] * 4), evidence, epsilon=EPS, eta=ETA
    )
    assert acc < v.target and outcome is Outcome.REJECT
    assert rej == pytest.approx(reject, rel=1e-12)
    assert 0 < accept < k / n < 1 and kt / nt < reject < 1


def test_sum_statistic_accept_generalizes_app_b3() -> None:
    counts = np.array([5000.0, 8000.0])
    b_c, b_s, big_b = 2 / 1.0, 2 * 30.0 / 1.0, 30.0  # the release's own noise scales
    p = ETA / (4 * len(counts))
    log_p = math.log(1 / p)
    worst = 0.0
    for n in counts:
        n_lo = n - (1 / EPS) * math.log(1 / (2 * p))  # validator's Lap(1/ε) count, one side
        err = (b_s + big_b * b_c) * log_p / (n_lo - b_c * log_p) + big_b * math.sqrt(log_p / n_lo)
        worst = max(worst, err)
    evidence = SumStatisticEvidence(counts, value_range=big_b, sum_scale=b_s, count_scale=b_c)
    release = Released((counts,), (1 / EPS,), noisy=True)
    outcome, bound, _ = SumStatisticValidator(target=worst + 1e-9).decide(
        release, evidence, epsilon=EPS, eta=ETA
    )
    assert outcome is Outcome.ACCEPT and bound == pytest.approx(worst, rel=1e-12)
    outcome, _, _ = SumStatisticValidator(target=worst - 1e-9).decide(
        release, evidence, epsilon=EPS, eta=ETA
    )
    assert outcome is Outcome.RETRY

"""Strategies, calibration, flips, acceptable budgets, usefulness and protections (seed 003)."""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms import SeededNoise
from blockbudget.series import (
    Base,
    FiniteBudgetSequence,
    Flip,
    NoisySign,
    SensitivityNormalization,
    Strategy,
    TaylorCentre,
    ac_alpha,
    ac_compound,
    acceptable_budget,
    average,
    bisection,
    blend,
    calibrate,
    compound,
    cormode,
    flip_horizontal,
    flip_vertical,
    geometric,
    ideal_initial_term,
    ideal_ratio,
    is_useful,
    lemma2_allows,
    lemma4_usefulness,
    noisy_n,
    parse_strategy,
    perturbation_probabilities,
    probabilistic_perturbation,
    random_arrangement,
    taylor,
    us_interval,
    useful_probability,
)

NAMES = [
    "AVG",
    "Geo",
    "Ty",
    "Bisection",
    "Cormode",
    "Flip-Geo",
    "Flip-Ty",
    "bl-Ty",
    "bl-Geo",
    "Flip-Bisection",
]
EPS = st.decimals(min_value=Decimal("0.001"), max_value=Decimal("100"), places=4).filter(
    lambda d: d > 0
)


def _ok(seq: FiniteBudgetSequence, n: int, eps: Decimal) -> None:
    assert seq.length == n
    assert sum(seq.terms, Decimal(0)) <= eps
    # calibrated strategies use ε up to a few grid units per term
    assert sum(seq.terms, Decimal(0)) >= eps - n * Decimal("4e-18")


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(NAMES), n=st.integers(min_value=4, max_value=120), eps=EPS)
def test_every_named_strategy_sums_to_at_most_epsilon(name: str, n: int, eps: Decimal) -> None:
    seq = parse_strategy(name).build(n, epsilon=eps)
    _ok(seq, n, eps)
    # Ideal parameters keep every term positive; raw Ty's first term is ε·e^{(1−n)/2}, below
    # the 1e-18 grid for large n, and bisection/Cormode decay geometrically.
    if not name.endswith(("Bisection", "Cormode")) and (name != "Ty" or n <= 40):
        assert all(t > 0 for t in seq.terms)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["Geo", "Flip-Geo", "bl-Ty", "Flip-Ty", "Ty", "Cormode"]),
    n=st.integers(min_value=3, max_value=80),
    eps=EPS,
    slack=st.floats(min_value=0.0, max_value=3.0),
)
def test_ac_meets_the_noise_bound_whenever_lemma2_allows(
    name: str, n: int, eps: Decimal, slack: float
) -> None:
    lower = math.sqrt(2) * n / float(eps)
    u_s = Decimal(repr(lower * (1 + slack))) + Decimal("1e-9")
    base = parse_strategy(name).build(n, epsilon=eps)
    assert lemma2_allows(n, epsilon=eps, u_s=u_s)
    ac = ac_compound(base, u_s=u_s)
    assert min(ac.terms) >= acceptable_budget(u_s)
    assert math.sqrt(2) / float(min(ac.terms)) <= float(u_s) * (1 + 1e-12)
    _ok(ac, n, eps)
    # …and nothing when the sequence is already acceptable (α = 0)
    if min(base.terms) >= acceptable_budget(u_s):
        assert ac.terms == base.terms


def test_lemma2_refusal() -> None:
    base = parse_strategy("Geo").build(10, epsilon=1)
    too_low = math.sqrt(2) * 10 / 1 * 0.99
    assert not lemma2_allows(10, epsilon=1, u_s=too_low)
    with pytest.raises(InvalidRequestError, match="Lemma 2"):
        ac_compound(base, u_s=too_low)


def test_ac_alpha_is_the_smallest_that_works() -> None:
    base = parse_strategy("Geo").build(20, epsilon=1)
    alpha = ac_alpha(base, u_s=30)
    a = float(alpha)
    # Eq. 29 in proportions
    need = math.sqrt(2) / 30
    kmin = float(min(base.terms))
    assert a == pytest.approx((need - kmin) / (1 / 20 - need), rel=1e-9)
    worse = compound(base, alpha=a * 0.999)
    assert min(worse.terms) < acceptable_budget(30)


def test_average_and_special_geometric_cases() -> None:
    avg = average(3, epsilon=1)
    assert avg.terms == (Decimal("0.333333333333333333"),) * 3
    b = bisection(epsilon=1, n=4)
    assert b.prefix(4) == tuple(Decimal(1) / 2**i for i in range(1, 5))
    c = calibrate(cormode(epsilon=1, n=6))
    paper = [2 ** ((6 - i) / 3) * (2 ** (1 / 3) - 1) / (2 ** (7 / 3) - 1) for i in range(1, 7)]
    # §7.2.2's formula, calibrated, is the same sequence
    scale = sum(paper)
    for got, want in zip(c.terms, paper, strict=True):
        assert float(got) == pytest.approx(want / scale, rel=1e-12)


def test_ideal_ratio_maximizes_the_last_term() -> None:
    for n in (2, 5, 20, 50, 100):
        r = float(ideal_ratio(n))
        assert r == pytest.approx((n - 1) / n)
        grid = np.linspace(0.001, 0.999, 9999)
        values = (1 - grid) * grid ** (n - 1)
        assert (1 - r) * r ** (n - 1) >= values.max() * (1 - 1e-9)


@pytest.mark.parametrize("centre", list(TaylorCentre))
def test_ideal_initial_term_maximizes_the_centre_term(centre: TaylorCentre) -> None:
    for n in (4, 7, 20, 51):
        t = float(ideal_initial_term(n, centre=centre))
        m = n // 2 if centre is TaylorCentre.FLOOR else (n + 1) / 2

        def k(x: float, m: float = m) -> float:
            return float(x * math.log(1 / x) ** (m - 1) / math.gamma(m))

        grid = np.exp(np.linspace(-3 * n, -1e-6, 20001))
        assert k(t) >= max(k(float(x)) for x in grid) * (1 - 1e-9)
    with pytest.raises(InvalidRequestError):
        ideal_initial_term(3, centre=TaylorCentre.FLOOR)


def test_middle_centre_reproduces_the_papers_table4() -> None:
    # Table 4 (ε = 0.3): upper U_s boundary of bl-Ty for N = 3…14.
    table4 = [17.67, 24.53, 31.93, 39.88, 48.50, 60.42, 72.62, 84.70, 96.46, 107.79, 118.70, 129.25]
    for n, want in zip(range(3, 15), table4, strict=True):
        got = us_interval(parse_strategy("bl-Ty").build(n, epsilon="0.3")).upper
        assert got == pytest.approx(want, abs=0.011)


def test_table3_geometric_boundaries() -> None:
    table3 = [22.40, 30.56, 38.70, 46.81, 54.93, 63.04, 71.14, 79.30, 87.36, 95.46, 103.56, 111.67]
    for n, want in zip(range(3, 15), table3, strict=True):
        interval = us_interval(parse_strategy("Geo").build(n, epsilon="0.3"))
        assert interval.lower == pytest.approx(math.sqrt(2) * n / 0.3)
        assert interval.upper == pytest.approx(want, abs=0.06)  # the paper prints 79.30 for 79.25


def test_calibration_and_flips() -> None:
    raw = geometric(epsilon=2, ratio="0.8", n=10)
    assert isinstance(raw, FiniteBudgetSequence)
    cal = calibrate(raw)
    s = sum(float(t) for t in raw.terms)
    for a, b in zip(raw.terms, cal.terms, strict=True):
        assert float(b) == pytest.approx(2 * float(a) / s, rel=1e-15)  # Eq. 17
    h = flip_horizontal(cal)
    assert h.terms == cal.terms[::-1] and h.name == "Flip-Geo"
    v = flip_vertical(cal)
    for a, b in zip(cal.terms, v.terms, strict=True):
        assert float(b) == pytest.approx((2 - float(a)) / 9, rel=1e-12)  # Eq. 21
    assert sum(v.terms, Decimal(0)) <= 2
    with pytest.raises(InvalidRequestError, match="n"):
        calibrate(geometric(epsilon=1, ratio="0.5"))
    with pytest.raises(InvalidRequestError, match=">= 2"):
        flip_vertical(average(1, epsilon=1))


def test_blend_is_alpha_one() -> None:
    ty = parse_strategy("Ty").build(10, epsilon=1)
    bl = blend(ty)
    for a, b in zip(ty.terms, bl.terms, strict=True):
        assert float(b) == pytest.approx((0.1 + float(a)) / 2, rel=1e-15)
    assert bl.name == "bl-Ty"


def test_usefulness() -> None:
    seq = parse_strategy("AC-Geo", noise_bound=30).build(20, epsilon=1)
    u = lemma4_usefulness(seq)
    assert u.gamma == pytest.approx(math.sqrt(2) / float(min(seq.terms)))
    assert u.delta == pytest.approx(1 - math.exp(-math.sqrt(2)))
    assert u.gamma <= 30 * (1 + 1e-12)
    p = useful_probability(seq, gamma=u.gamma)
    assert p == pytest.approx(math.prod(1 - math.exp(-float(t) * u.gamma) for t in seq.terms))
    # per query ≥ 1 − e^{−√2} (Lemma 4); jointly the product of the per-query probabilities
    assert p < u.delta
    assert is_useful(seq, gamma=200.0, delta=0.99)
    assert not is_useful(seq, gamma=5.0, delta=0.5)
    # Monte Carlo check of the joint probability
    rng = np.random.default_rng(5)
    scales = 1 / np.array([float(t) for t in seq.terms])
    noise = rng.laplace(0, scales, size=(200_000, 20))
    freq = float(np.mean(np.abs(noise).max(axis=1) <= u.gamma))
    assert abs(freq - p) < 5 * math.sqrt(p * (1 - p) / 200_000) + 1e-3


@settings(max_examples=30, deadline=None)
@given(n=st.integers(min_value=2, max_value=60), seed=st.integers(0, 2**32 - 1))
def test_protections_keep_the_multiset(n: int, seed: int) -> None:
    seq = parse_strategy("Flip-Geo").build(n, epsilon=1)
    rng = np.random.default_rng(seed)
    for protected in (random_arrangement(seq, rng=rng), probabilistic_perturbation(seq, rng=rng)):
        assert Counter(protected.terms) == Counter(seq.terms)
        assert protected.total == seq.total


def test_perturbation_probabilities_follow_eq34() -> None:
    n = 10
    remaining = [2, 3, 5, 10]
    x = 3
    probs = perturbation_probabilities(remaining, x, n)
    scores = [(n - i) * math.exp(x - i) for i in remaining]
    assert probs == pytest.approx([s / sum(scores) for s in scores])
    assert perturbation_probabilities([10], 10, 10) == [1.0]
    # empirical frequency of the first pick (x = 1, all remaining) matches Eq. 35
    seq = parse_strategy("Geo").build(6, epsilon=1)
    rng = np.random.default_rng(11)
    firsts = Counter(probabilistic_perturbation(seq, rng=rng).terms[0] for _ in range(20_000))
    want = perturbation_probabilities(list(range(1, 7)), 1, 6)
    for i, p in enumerate(want):
        got = firsts[seq.terms[i]] / 20_000
        assert abs(got - p) < 5 * math.sqrt(p * (1 - p) / 20_000) + 1e-4


def test_random_arrangement_is_uniform_enough() -> None:
    seq = parse_strategy("Geo").build(4, epsilon=1)
    rng = np.random.default_rng(3)
    counts = Counter(random_arrangement(seq, rng=rng).terms for _ in range(24_000))
    assert len(counts) == 24
    assert all(abs(c - 1000) < 5 * math.sqrt(1000) for c in counts.values())


def test_noisy_n() -> None:
    strategy = parse_strategy("Flip-Geo")
    positive = NoisySign.POSITIVE
    out = noisy_n(strategy, 10, epsilon=1, epsilon_n=1, sign=positive, noise=SeededNoise(4))
    assert out.noisy_n >= 10 and out.epsilon_n == 1
    assert not out.private  # one-sided noise is not DP
    assert out.sequence.length == 10 and out.sequence.total <= 1
    # the sequence is the strategy built with r for n_s
    ratio = Decimal(out.noisy_n - 1) / out.noisy_n
    raw = geometric(epsilon=1, ratio=ratio, n=10)
    assert isinstance(raw, FiniteBudgetSequence)
    assert out.sequence.terms == flip_horizontal(calibrate(raw)).terms
    # Eq. 36's noise has scale 1/ε_n: mean |η| ≈ 1/ε_n (positive form)
    draws = [
        noisy_n(strategy, 50, epsilon=1, epsilon_n=0.5, sign=positive, noise=SeededNoise(s))
        for s in range(400)
    ]
    assert np.mean([d.noisy_n - 50 for d in draws]) == pytest.approx(2.0, abs=0.3)


def test_noisy_n_default_is_the_signed_dp_release() -> None:
    strategy = parse_strategy("Flip-Geo")
    outs = [
        noisy_n(strategy, 50, epsilon=1, epsilon_n=0.5, noise=SeededNoise(s)) for s in range(400)
    ]
    assert all(o.private for o in outs)
    shifts = np.array([o.noisy_n - 50 for o in outs])
    # symmetric Laplace(2) rounded: mean ≈ 0, mean |shift| ≈ 2, and n_s falls below n too
    assert abs(float(np.mean(shifts))) < 0.4
    assert float(np.mean(np.abs(shifts))) == pytest.approx(2.0, abs=0.3)
    assert (shifts < 0).mean() > 0.3 and (shifts > 0).mean() > 0.3
    assert all(o.sequence.total <= 1 and o.sequence.length == 50 for o in outs)
    with pytest.raises(InvalidRequestError, match="NoisySign"):
        noisy_n(strategy, 5, epsilon=1, epsilon_n=1, sign="signed")  # type: ignore[arg-type]


def test_strategy_names_and_errors() -> None:
    assert parse_strategy("ac-flip-geo", noise_bound=50).name == "AC-Flip-Geo"
    assert parse_strategy("Flip-Ty").flip is Flip.VERTICAL
    assert parse_strategy("Flip-Geo").flip is Flip.HORIZONTAL
    assert Strategy(base=Base.TY, blended=True, noise_bound=Decimal(30)).name == "AC-bl-Ty"
    with pytest.raises(InvalidRequestError, match="unknown strategy"):
        parse_strategy("Fibonacci")
    with pytest.raises(InvalidRequestError, match="noise_bound"):
        parse_strategy("AC-Geo")
    with pytest.raises(InvalidRequestError, match="no AC- prefix"):
        parse_strategy("Geo", noise_bound=3)
    with pytest.raises(InvalidRequestError, match="cannot be flipped"):
        Strategy(base=Base.AVG, flip=Flip.HORIZONTAL)


def test_taylor_flip_is_high_at_both_ends() -> None:
    seq = parse_strategy("Flip-Ty").build(20, epsilon=1)
    mid = seq.terms[9]
    assert seq.terms[0] > mid and seq.terms[-1] > mid
    raw = taylor(epsilon=1, initial=ideal_initial_term(20), n=20)
    assert isinstance(raw, FiniteBudgetSequence)
    peak = max(range(20), key=lambda i: raw.terms[i])
    # the ⌊n/2⌋-th term is the largest (Eq. 15–16); with ln(1/t) = 9 it ties with the 9th
    assert peak + 1 in (9, 10)
    assert float(raw.terms[9]) == pytest.approx(float(raw.terms[peak]), rel=1e-12)


def test_sensitivity_normalization_keeps_the_noise_to_result_ratio() -> None:
    norm = SensitivityNormalization(sensitivity=5000.0)
    true_result = 1_234_567.0
    eps = 0.2
    ratio_original = true_result / norm.original_noise_std(eps)  # Eq. 24
    ratio_normalized = norm.normalize(true_result) / (math.sqrt(2) / eps)  # Eq. 25
    assert ratio_original == pytest.approx(ratio_normalized, rel=1e-15)
    assert norm.denormalize(norm.normalize(3.5)) == pytest.approx(3.5)
    with pytest.raises(InvalidRequestError, match="sensitivity"):
        SensitivityNormalization(sensitivity=0.0)


def test_functions_of_finite_sequences_refuse_series_and_lists() -> None:
    series = geometric(epsilon=1, ratio=0.5)
    for call in (
        lambda s: random_arrangement(s),
        lambda s: probabilistic_perturbation(s),
        lambda s: compound(s, alpha=1),
        lambda s: ac_compound(s, u_s=100),
        lambda s: us_interval(s),
        lambda s: lemma4_usefulness(s),
        lambda s: useful_probability(s, gamma=1.0),
    ):
        for bad in (series, [0.5, 0.5]):
            with pytest.raises(InvalidRequestError, match="finite"):
                call(bad)
    with pytest.raises(InvalidRequestError, match="gamma"):
        useful_probability(average(2, epsilon=1), gamma="1")  # type: ignore[arg-type]

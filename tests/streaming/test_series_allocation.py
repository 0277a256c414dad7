"""Li₂ and its inverse against mpmath; Thm 5.4's series; Alg. 3/4; the accountant."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from blockbudget.errors import BudgetExceededError, InvalidRequestError
from blockbudget.streaming import (
    DPISeries,
    RandomBudgetAllocation,
    RangeBudgetAllocation,
    StreamAccountant,
    alpha_for_cost,
    alpha_from_eta,
    dilog,
    dilog_inverse,
    direction_cost,
    eta_from_alpha,
)


@pytest.mark.parametrize("x", [0.0, 1e-8, 0.1, 0.5, 0.9, 0.999, 0.999999, 1.0, -0.5])
def test_dilog_matches_mpmath(x: float) -> None:
    assert dilog(x) == pytest.approx(float(mpmath.polylog(2, x)), rel=1e-13, abs=1e-15)


@pytest.mark.parametrize("y", [1e-9, 1e-3, 0.3, 1.0, 1.5, 1.64, math.pi**2 / 6 - 1e-9])
def test_dilog_inverse_matches_mpmath(y: float) -> None:
    x = dilog_inverse(y)
    assert 0.0 <= x <= 1.0
    assert float(mpmath.polylog(2, x)) == pytest.approx(y, rel=1e-10, abs=1e-14)
    # an independent mpmath root agrees
    root = mpmath.findroot(lambda z: mpmath.polylog(2, z) - y, (0.0, 1.0), solver="anderson")
    assert x == pytest.approx(float(root), rel=1e-7, abs=1e-9)


def test_dilog_inverse_rejects_out_of_range() -> None:
    with pytest.raises(InvalidRequestError, match="pi"):
        dilog_inverse(2.0)
    with pytest.raises(InvalidRequestError):
        dilog(1.5)


def test_alpha_eta_and_thm51_cost_are_consistent() -> None:
    eta = 0.3
    alpha = alpha_from_eta(eta)
    assert alpha == pytest.approx(0.5 * math.log((1 + 2 * eta) / (1 - 2 * eta)))
    assert eta_from_alpha(alpha) == pytest.approx(eta)
    # Thm 5.1 with Δ_Q = 2: one direction costs (4/μ)·ln((1+2η)/(1−2η)).
    mu = 0.1
    assert direction_cost(alpha=alpha, sensitivity=2.0, mu=mu) == pytest.approx(
        4 / mu * math.log((1 + 2 * eta) / (1 - 2 * eta))
    )
    assert alpha_for_cost(
        epsilon=direction_cost(alpha=alpha, sensitivity=2.0, mu=mu), sensitivity=2.0, mu=mu
    ) == pytest.approx(alpha)


@pytest.mark.parametrize(
    ("eps", "mu", "zeta"), [(2.0, 0.1, 0.2), (0.1, 0.05, 0.5), (10.0, 0.3, 0.1)]
)
def test_series_sums_to_epsilon_and_decreases(eps: float, mu: float, zeta: float) -> None:
    s = DPISeries(epsilon=eps, mu=mu, zeta=zeta)
    c = 2.0 / (mu * zeta)
    r = s.ratio
    # Eq. 12: r = Li2^-1(π²/6 − ε/C), checked with mpmath.
    assert float(mpmath.polylog(2, r)) == pytest.approx(math.pi**2 / 6 - eps / c, abs=1e-12)
    assert s.total <= eps
    assert s.total == pytest.approx(eps, rel=1e-9)
    t = np.arange(1, 200_001)
    terms = s.terms(t)
    assert np.all(np.diff(terms) < 0)
    tail = c / 200_000  # Σ_{t>T} 1/t² < 1/T
    assert terms.sum() <= eps
    assert terms.sum() >= eps - tail - 1e-9
    # Thm 5.4 / B.4: each direction's η_t with ε_t/2: ln((1+2η)/(1−2η)) = (1 − r^t)/(4ζt²).
    for k in (1, 7, 1000):
        eta = s.eta(k)
        assert math.log((1 + 2 * eta) / (1 - 2 * eta)) == pytest.approx(
            (1 - r**k) / (4 * zeta * k * k), rel=1e-9
        )


def test_series_caps_at_c_pi2_over_6() -> None:
    s = DPISeries(epsilon=1000.0, mu=0.5, zeta=0.5)  # C·π²/6 ≈ 13 < 1000
    assert s.ratio == 0.0
    assert s.total == pytest.approx(s.scale * math.pi**2 / 6)


def test_rba_picks_the_nearest_unused_term() -> None:
    s = DPISeries(epsilon=2.0, mu=0.1, zeta=0.2)
    rba = RandomBudgetAllocation(s, rate=1.0, rng=np.random.default_rng(0))
    target = s.term(50)
    first = rba.pick(target)
    assert first.index == 50
    second = rba.pick(target)  # 50 is used: the nearer of 49 and 51
    expected = 49 if s.term(49) - target < target - s.term(51) else 51
    assert second.index == expected
    third = rba.pick(target)
    assert third.index in (48, 49, 51, 52) and third.index != second.index
    assert rba.used == 3


def test_accounted_epsilon_never_exceeds_target_over_200k_slots() -> None:
    for rate, eps, slots in ((1e8, 2.0, 200_000), (50.0, 1.0, 200_000), (1e3, 0.1, 20_000)):
        s = DPISeries(epsilon=eps, mu=0.1, zeta=0.2)
        rba = RandomBudgetAllocation(s, rate=rate, rng=np.random.default_rng(1))
        acc = StreamAccountant(epsilon=eps)
        seen: set[int] = set()
        for _ in range(slots):
            a = rba.next()
            assert a.index not in seen
            seen.add(a.index)
            acc.try_charge(a.epsilon)
        assert acc.spent <= acc.target
        assert acc.spent_units <= acc.capacity_units
        assert acc.slots + acc.refused == slots


def test_range_allocation_never_reuses_a_term() -> None:
    s = DPISeries(epsilon=1.0, mu=0.1, zeta=0.2)
    alg4 = RangeBudgetAllocation(s, medium_from=5, small_from=20, rng=np.random.default_rng(2))
    picks = [alg4.next().index for _ in range(5000)]
    assert len(set(picks)) == len(picks)
    assert set(range(1, 20)) <= set(picks)  # large and medium queues drain first
    assert sum(s.term(i) for i in picks) <= 1.0


def test_accountant_is_conservative_and_refuses_without_charging() -> None:
    acc = StreamAccountant(epsilon=1.0)
    for _ in range(10):
        acc.charge(0.1)
    # ten charges of 0.1 fit in 1.0; an eleventh of 1e-9 does not (DESIGN invariant 3)
    with pytest.raises(BudgetExceededError, match="Nothing was charged"):
        acc.charge(1e-9)
    spent = acc.spent
    assert not acc.try_charge(0.5)
    assert acc.spent == spent
    assert acc.refused == 2
    assert acc.remaining >= 0


def test_rba_over_a_seed_003_sequence_stays_within_its_total() -> None:
    from decimal import Decimal

    from blockbudget.series import GeometricSeries, InfiniteBudgetSequence
    from blockbudget.streaming.allocation import SequenceTerms

    seq = InfiniteBudgetSequence(epsilon=Decimal("1"), series=GeometricSeries(ratio=Decimal("0.9")))
    terms = SequenceTerms(seq, limit=400)
    assert terms.term(1) == float(seq.term(1)) or terms.term(1) < float(seq.term(1))
    assert all(terms.term(t) > terms.term(t + 1) for t in range(1, len(terms)))
    rba = RandomBudgetAllocation(terms, rate=100.0, rng=np.random.default_rng(5))
    acc = StreamAccountant(epsilon=1.0)
    picks = [rba.next() for _ in range(len(terms))]
    assert len({p.index for p in picks}) == len(terms)  # every term once, none twice
    for p in picks:
        assert acc.try_charge(p.epsilon)
    assert acc.spent <= Decimal(1)
    with pytest.raises(InvalidRequestError, match="used"):
        rba.next()


@pytest.mark.parametrize(("epsilon", "slots"), [(0.5, 102), (2.0, 365), (10.0, 365)])
def test_for_horizon_spends_most_of_epsilon_within_the_horizon(epsilon: float, slots: int) -> None:
    """DPIConfig.for_horizon (ζ with the series' knee at T, Λ = T/(4ε)) spends most of ε in T
    slots, far more than the paper's ζ = 0.2 with Λ = 2T/ε, and never more than ε."""
    from blockbudget.streaming import DPIConfig

    config = DPIConfig.for_horizon(epsilon=epsilon, slots=slots)
    assert config.rate == slots / (4 * epsilon)
    series = DPISeries(epsilon=epsilon, mu=config.mu, zeta=config.zeta)
    assert series.ratio == pytest.approx(1 - 1 / slots, rel=1e-9)  # the knee at T
    assert series.total <= epsilon
    spent, paper = [], []
    for seed in range(3):
        alloc = RandomBudgetAllocation(series, rate=config.rate, rng=np.random.default_rng(seed))
        spent.append(sum(alloc.next().epsilon for _ in range(slots)))
        base = RandomBudgetAllocation(
            DPISeries(epsilon=epsilon, mu=0.5, zeta=0.2),
            rate=2 * slots / epsilon,
            rng=np.random.default_rng(seed),
        )
        paper.append(sum(base.next().epsilon for _ in range(slots)))
    assert all(0.6 * epsilon < s <= epsilon for s in spent)
    assert min(spent) > 1.5 * max(paper)


def test_for_horizon_rejects_bad_input_and_keeps_overrides() -> None:
    from blockbudget.streaming import DPIConfig, Horizon
    from blockbudget.streaming.series import zeta_for_horizon

    for bad in (1, 365.0, True):
        with pytest.raises(InvalidRequestError, match="horizon"):
            DPIConfig.for_horizon(epsilon=2.0, slots=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="epsilon"):
        zeta_for_horizon(epsilon=0.0, slots=10, mu=0.5)
    c = DPIConfig.for_horizon(epsilon=2.0, slots=100, zeta=0.3, horizon=Horizon.ACCUMULATIVE)
    assert c.zeta == 0.3 and c.rate == 12.5 and c.horizon is Horizon.ACCUMULATIVE
    with pytest.raises(InvalidRequestError, match="Horizon"):
        DPIConfig(epsilon=1.0, horizon="accumulative")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="AllocationKind"):
        DPIConfig(epsilon=1.0, allocation="ranges")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        DPIConfig(1.0)  # type: ignore[misc]


def test_accountant_refuses_exactly_when_a_term_would_cross_epsilon() -> None:
    """A series that offers more than the accountant's ε (here 2 against a cap of 1): the cap is
    reached, every later slot whose term does not fit is refused with nothing charged, and the
    spent total never passes ε."""
    s = DPISeries(epsilon=2.0, mu=0.5, zeta=0.2)
    rba = RandomBudgetAllocation(s, rate=5.0, rng=np.random.default_rng(3))
    acc = StreamAccountant(epsilon=1.0)
    for _ in range(5_000):
        a = rba.next()
        before = acc.spent_units
        fits = before + StreamAccountant.units(a.epsilon) <= acc.capacity_units
        assert acc.try_charge(a.epsilon) is fits
        assert acc.spent_units == (before + StreamAccountant.units(a.epsilon) if fits else before)
        assert acc.spent <= acc.target
    assert acc.refused > 0 and acc.slots > 0
    assert float(acc.remaining) < 0.05  # the cap was used, not merely respected
    with pytest.raises(BudgetExceededError, match="Nothing was charged"):
        acc.charge(1.0)

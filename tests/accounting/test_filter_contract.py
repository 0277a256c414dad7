"""The contract every per-block filter satisfies, run against each implementation, plus the
exact numbers of each composition rule."""

from __future__ import annotations

import math
from collections.abc import Callable

import mpmath
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbudget.accounting import (
    BasicFilter,
    Filter,
    Noise,
    NoisePart,
    RdpFilter,
    Release,
    StrongFilter,
    add_vectors,
    get_rule,
    rule_names,
)
from blockbudget.budget import ALPHAS, Budget, Cost, RdpCurve
from blockbudget.errors import InvalidBudgetError

CAPACITY = Budget(epsilon=1.0, delta=1e-6)


CostFn = Callable[[float], Cost]


def _cost_of(name: str) -> CostFn:
    """A release of size x priced by rule ``name``: (ε, δ) rules charge the requested
    (x, x·1e-7); rules that price noise charge a Gaussian of σ = 1 and sensitivity x (RDP:
    α·x²/2 per order; GDP: μ = x). x = 0 costs nothing."""
    rule = get_rule(name)

    def cost(x: float) -> Cost:
        delta = x * 1e-7 if x >= 1e-90 else 0.0
        part = NoisePart(Noise.GAUSSIAN, 1.0, x)
        return rule.price(Release.of(epsilon=x, delta=delta, parts=(part,)))

    return cost


def _maker(name: str) -> Callable[[], Filter]:
    return lambda: get_rule(name).filter(capacity=CAPACITY)


# Every registered rule runs the contract: a new rule joins by registering, with no edit here.
FILTERS: list[tuple[str, Callable[[], Filter], CostFn]] = [
    (name, _maker(name), _cost_of(name)) for name in rule_names()
]


def test_every_registered_rule_runs_the_contract() -> None:
    assert [f[0] for f in FILTERS] == list(rule_names())
    assert {"basic", "strong", "rdp", "gdp", "whitehouse"} <= set(rule_names())


# Budgets are 0 or of magnitude 1e-100 … 1e30 (budget.MIN_MAGNITUDE / MAX_MAGNITUDE).
amount = st.one_of(st.just(0.0), st.floats(min_value=1e-100, max_value=0.4))
amounts = st.lists(amount, min_size=0, max_size=25)


@pytest.fixture(params=FILTERS, ids=[f[0] for f in FILTERS])
def case(request: pytest.FixtureRequest) -> tuple[Filter, CostFn]:
    _, make, cost = request.param
    return make(), cost


def test_empty_history_fits_and_is_full(case: tuple[Filter, CostFn]) -> None:
    f, cost = case
    assert f.fits(f.zero())
    assert f.remaining_fraction(f.zero()) == pytest.approx(1.0)
    assert f.accepts([], cost(0.0))
    assert f.describe_remaining(f.zero())


def test_repeated_charges_are_eventually_refused(
    case: tuple[Filter, CostFn],
) -> None:
    f, cost = case
    history: list[Cost] = []
    while f.accepts(history, cost(0.05)):
        history.append(cost(0.05))
        assert len(history) < 10_000, "a filter must not hand out unbounded budget"
    assert history, "a small charge must fit an empty block"
    used = f.total(history)
    assert f.fits(used)
    assert not f.fits_with(used, f.features(cost(0.05)))
    assert f.shortfall(used, f.features(cost(0.05)))
    assert 0.0 <= f.remaining_fraction(used) < 1.0


@given(data=st.data())
def test_accepts_equals_fits_of_summed_features_and_is_pure(data: st.DataObject) -> None:
    for _, make, cost in FILTERS:
        f = make()
        xs = data.draw(amounts)
        cand = data.draw(amount)
        history = [cost(x) for x in xs]
        before = list(history)
        verdict = f.accepts(history, cost(cand))
        assert verdict == f.fits(add_vectors(f.total(history), f.features(cost(cand))))
        assert history == before
        assert f.accepts(history, cost(cand)) == verdict


@given(data=st.data())
def test_monotone_more_charges_never_help(data: st.DataObject) -> None:
    for _, make, cost in FILTERS:
        f = make()
        xs = data.draw(amounts)
        used = f.zero()
        refused = False
        previous_fraction = 1.0
        for x in xs:
            used = add_vectors(used, f.features(cost(x)))
            if refused:
                assert not f.fits(used), "a refused history cannot become valid again"
            refused = refused or not f.fits(used)
            fraction = f.remaining_fraction(used)
            assert 0.0 <= fraction <= previous_fraction + 1e-12
            previous_fraction = fraction


@given(a=amount, b=amount)
def test_features_are_superadditive_so_reservations_cover_their_draws(a: float, b: float) -> None:
    """A reservation of a+b may be spent as a then b: the parts never cost more than the whole."""
    for _, make, cost in FILTERS:
        f = make()
        ca, cb = cost(a), cost(b)
        whole = f.features(ca + cb)  # type: ignore[operator]
        parts = add_vectors(f.features(cost(a)), f.features(cost(b)))
        # Each rounded-up part may gain at most one unit per component over the exact whole.
        assert all(p <= w + 2 for p, w in zip(parts, whole, strict=True))


# ---- exact numbers of each rule ---------------------------------------------------------------


def test_basic_composition_is_exact() -> None:
    f = BasicFilter(capacity=Budget(epsilon=1.0, delta=1e-6))
    tenths = [Budget(epsilon=0.1)] * 10
    assert f.accepts(tenths[:9], tenths[9])
    assert not f.accepts(tenths, Budget(epsilon=1e-9))
    assert not f.accepts([], Budget(epsilon=0.5, delta=2e-6))
    assert f.accepts([], Budget(epsilon=1.0, delta=1e-6))
    with pytest.raises(InvalidBudgetError):
        f.features(RdpCurve.gaussian(sigma=1.0))


def _sage_a2(eps_g: float, delta_g: float, epsilons: list[float]) -> float:
    """Left side of Sage Thm A.2 as printed (seed 004 §A.3), δ̃ = δ_g/2, in 50-digit mpmath —
    written from the paper, not from the implementation."""
    import mpmath

    mpmath.mp.dps = 50
    eg = mpmath.mpf(eps_g)
    dt = mpmath.mpf(delta_g) / 2
    s2 = mpmath.fsum(mpmath.mpf(e) ** 2 for e in epsilons)
    g = mpmath.fsum((mpmath.exp(e) - 1) * e / 2 for e in epsilons)
    log_dt = mpmath.log(1 / dt)
    first = 2 * (s2 + eg**2 / (28.04 * log_dt))
    second = 1 + mpmath.log(28.04 * log_dt * s2 / eg**2 + 1) / 2
    return float(g + mpmath.sqrt(first * second * log_dt))


@pytest.mark.parametrize(
    ("eps_g", "charge", "expected"),
    # Pinned counts; a reviewer's independent implementation of the printed Thm A.2 agrees.
    [(1.0, 0.001, 14_751), (3.0, 0.01, 1_292), (1.0, 0.01, 147)],
)
def test_strong_composition_matches_sage_theorem_a2(
    eps_g: float, charge: float, expected: int
) -> None:
    f = StrongFilter(capacity=Budget(epsilon=eps_g, delta=1e-6))
    used = f.zero()
    step = f.features(Budget(epsilon=charge))
    n = 0
    while f.fits_with(used, step):
        used = add_vectors(used, step)
        n += 1
    assert n == expected
    assert _sage_a2(eps_g, 1e-6, [charge] * n) <= eps_g
    assert _sage_a2(eps_g, 1e-6, [charge] * (n + 1)) > eps_g * (1 - 1e-6)


def test_strong_composition_beats_basic_for_small_charges_and_keeps_its_slack() -> None:
    f = StrongFilter(capacity=Budget(epsilon=1.0, delta=1e-6))
    history: list[Cost] = []
    while f.accepts(history, Budget(epsilon=0.01)):
        history.append(Budget(epsilon=0.01))
    assert len(history) > 100  # basic composition fits exactly 100 charges of 0.01
    # δ: the slack δ̃ = δ_g/2 is kept back from the charges.
    assert f.accepts([], Budget(epsilon=0.01, delta=5e-7))
    assert not f.accepts([], Budget(epsilon=0.01, delta=6e-7))
    with pytest.raises(InvalidBudgetError):
        StrongFilter(capacity=Budget(epsilon=1.0, delta=0.0))
    with pytest.raises(InvalidBudgetError, match="1/e"):
        StrongFilter(capacity=Budget(epsilon=1.0, delta=0.5))  # 2δ̃ = 0.5 > 1/e
    # A huge single charge is refused without computing e^ε.
    assert not f.accepts([], Budget(epsilon=1e6))


def test_rdp_capacity_per_order_and_exists_alpha_rule() -> None:
    f = RdpFilter(capacity=Budget(epsilon=1.0, delta=1e-6))
    for alpha, cap in zip(ALPHAS, f.order_capacity, strict=True):
        expected = 1.0 - math.log(1e6) / (alpha - 1)
        assert cap / 1e18 == pytest.approx(expected, rel=1e-9, abs=1e-12)
        # Exactly (a float comparison is off by the float formula's own rounding).
        with mpmath.workdps(50):
            exact = 1 - mpmath.log(mpmath.mpf(10) ** 6) / (mpmath.mpf(repr(alpha)) - 1)
            assert cap <= exact * 10**18
    # Gaussian σ=10 costs α/200 per order; count how many fit and compare with the formula.
    curve = RdpCurve.gaussian(sigma=10.0)
    history: list[Cost] = []
    while f.accepts(history, curve):
        history.append(curve)
    best = max(
        math.floor((1.0 - math.log(1e6) / (a - 1)) / (a / 200.0) * (1 - 1e-9))
        for a in ALPHAS
        if a > 1 + math.log(1e6)
    )
    assert len(history) == best
    # A pure budget is converted; an approximate one is refused.
    assert f.accepts([], Budget(epsilon=0.1))
    with pytest.raises(InvalidBudgetError):
        f.features(Budget(epsilon=0.1, delta=1e-9))
    with pytest.raises(InvalidBudgetError):
        RdpFilter(capacity=Budget(epsilon=1.0))


def test_rdp_allocates_more_gaussians_than_basic_composition() -> None:
    """PrivateKube's observation: RDP packs many more Gaussian charges than basic composition."""
    sigma = 10.0
    rdp = RdpFilter(capacity=CAPACITY)
    basic = BasicFilter(capacity=CAPACITY)
    per_query = RdpCurve.gaussian(sigma=sigma).to_dp(delta=1e-8)
    n_rdp = 0
    used = rdp.zero()
    while rdp.fits_with(used, rdp.features(RdpCurve.gaussian(sigma=sigma))):
        used = add_vectors(used, rdp.features(RdpCurve.gaussian(sigma=sigma)))
        n_rdp += 1
    n_basic = 0
    used = basic.zero()
    while basic.fits_with(used, basic.features(per_query)):
        used = add_vectors(used, basic.features(per_query))
        n_basic += 1
    assert n_rdp > 2 * n_basic


def test_strong_features_round_up_the_square_of_a_many_digit_epsilon() -> None:
    """ε = 1 + 1e-70: ε² = 1 + 2e-70 + 1e-140 rounded to nearest at 60 digits is exactly 1, so
    the ε² feature undercounted by one unit; every operation now rounds up."""
    from decimal import Decimal

    eps = Decimal("1." + "0" * 69 + "1")  # 1 + 1e-70, exactly
    features = StrongFilter(capacity=Budget(epsilon=10.0, delta=1e-6)).features(Budget(epsilon=eps))
    assert features[0] == 10**18 + 1
    assert features[1] == 10**18 + 1  # ⌈(1 + 2e-70 + 1e-140)·1e18⌉
    assert features[2] >= 10**18 * (math.e - 1) / 2


@pytest.mark.parametrize("sigma", [1e200, 1e170, 1e160])
def test_rdp_filter_charges_a_huge_sigma_gaussian_at_least_one_unit(sigma: float) -> None:
    rdp = RdpFilter(capacity=CAPACITY)
    assert all(u >= 1 for u in rdp.features(RdpCurve.gaussian(sigma=sigma)))

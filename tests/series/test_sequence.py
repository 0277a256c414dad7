"""The value types: every prefix of every sequence sums to at most ε, exactly."""

from __future__ import annotations

import math
from decimal import Decimal
from itertools import accumulate

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbudget.errors import InvalidBudgetError, InvalidRequestError
from blockbudget.series import (
    FiniteBudgetSequence,
    GeometricSeries,
    InfiniteBudgetSequence,
    TaylorSeries,
    geometric,
    taylor,
)
from blockbudget.series._exact import GRID

EPSILONS = st.decimals(min_value=Decimal("1e-6"), max_value=Decimal("1e6"), places=9).filter(
    lambda d: d > 0
)
RATIOS = st.decimals(min_value=Decimal("0.001"), max_value=Decimal("0.9999"), places=6)
INITIALS = st.floats(min_value=1e-40, max_value=0.999)


def _prefix_sums_ok(seq: InfiniteBudgetSequence, n: int) -> None:
    terms = seq.prefix(n)
    assert all(t >= 0 and t == t.quantize(GRID) for t in terms)
    running = list(accumulate(terms))
    assert max(running) <= seq.epsilon  # exact decimal sums, every prefix
    assert running == sorted(running)


@settings(max_examples=40, deadline=None)
@given(epsilon=EPSILONS, ratio=RATIOS)
def test_geometric_every_prefix_at_most_epsilon(epsilon: Decimal, ratio: Decimal) -> None:
    seq = geometric(epsilon=epsilon, ratio=ratio)
    assert isinstance(seq, InfiniteBudgetSequence) and seq.is_infinite and seq.length is None
    _prefix_sums_ok(seq, 400)
    assert seq.total == epsilon


@settings(max_examples=40, deadline=None)
@given(epsilon=EPSILONS, initial=INITIALS)
def test_taylor_every_prefix_at_most_epsilon(epsilon: Decimal, initial: float) -> None:
    seq = taylor(epsilon=epsilon, initial=initial)
    assert isinstance(seq, InfiniteBudgetSequence)
    n = seq.positive_length() + 20
    _prefix_sums_ok(seq, n)
    assert all(t == 0 for t in seq.prefix(n)[n - 20 :])


def test_large_prefixes_stay_below_epsilon_and_use_almost_all_of_it() -> None:
    # r close to 1: tens of thousands of positive terms; the sum approaches ε from below.
    seq = geometric(epsilon=1, ratio="0.9995")
    assert isinstance(seq, InfiniteBudgetSequence)
    n = 60_000
    total = sum(seq.prefix(n), Decimal(0))
    assert total <= 1
    assert total > Decimal(1) - Decimal("0.9995") ** n - Decimal("1e-12")
    t = taylor(epsilon=1, initial=math.exp(-400))
    assert isinstance(t, InfiniteBudgetSequence)
    m = t.positive_length()
    assert 400 < m < 2000
    assert Decimal("0.999999") < sum(t.prefix(m), Decimal(0)) <= 1


def test_terms_match_the_formulas() -> None:
    g = GeometricSeries(Decimal("0.75"))
    for i in (1, 2, 10, 50):
        exact = 0.25 * 0.75 ** (i - 1)
        assert float(g.proportion(i)) == pytest.approx(exact, rel=1e-15)
        assert g.proportion(i) <= Decimal("0.25") * Decimal("0.75") ** (i - 1)
    t = TaylorSeries(Decimal("0.01"))
    big_l = math.log(100)
    for i in (1, 2, 5, 20):
        exact = 0.01 * big_l ** (i - 1) / math.factorial(i - 1)
        assert float(t.proportion(i)) == pytest.approx(exact, rel=1e-13)
    mpmath.mp.dps = 120
    assert mpmath.mpf(str(t.log_inverse)) <= mpmath.log(100)
    assert mpmath.log(100) - mpmath.mpf(str(t.log_inverse)) < mpmath.mpf("1e-85")


def test_term_and_prefix_agree_and_random_access_works() -> None:
    for seq in (geometric(epsilon=2, ratio="0.9"), taylor(epsilon=2, initial=1e-5)):
        pre = seq.prefix(60)
        assert [seq.term(i) for i in (60, 1, 30)] == [pre[59], pre[0], pre[29]]
        assert list(zip(range(5), seq, strict=False)) == list(enumerate(pre[:5]))
        assert seq.budget(3).epsilon == pre[2]


def test_positive_length_is_the_last_positive_term() -> None:
    seq = geometric(epsilon=1, ratio="0.5")
    assert isinstance(seq, InfiniteBudgetSequence)
    m = seq.positive_length()
    assert seq.term(m) > 0 and seq.term(m + 1) == 0
    assert m == 59  # 2^-59 ≈ 1.7e-18 ≥ 1e-18 > 2^-60


def test_positive_length_when_every_term_rounds_to_zero() -> None:
    seq = taylor(epsilon="1e-6", initial=math.exp(-200))
    assert isinstance(seq, InfiniteBudgetSequence)
    # the peak term is about ε/sqrt(2π·200) ≈ 3e-8 > 0: positive terms exist
    assert seq.positive_length() > 200
    tiny = geometric(epsilon="1e-17", ratio="0.95")
    assert isinstance(tiny, InfiniteBudgetSequence)
    assert tiny.positive_length() == 0  # (1 − r)·ε < 1e-18 already for the first term


def test_finite_sequence_validation() -> None:
    s = FiniteBudgetSequence(epsilon=Decimal(1), terms=(Decimal("0.5"), Decimal("0.5")))
    assert s.total == 1 and s.length == 2 and s.minimum == Decimal("0.5")
    with pytest.raises(InvalidBudgetError, match=r"sum to 1\.1"):
        FiniteBudgetSequence(epsilon=Decimal(1), terms=(Decimal("0.6"), Decimal("0.5")))
    with pytest.raises(InvalidBudgetError, match="multiple of"):
        FiniteBudgetSequence(epsilon=Decimal(1), terms=(Decimal("1e-20"),))
    with pytest.raises(InvalidBudgetError, match=">= 0"):
        FiniteBudgetSequence(epsilon=Decimal(1), terms=(Decimal("-0.1"),))
    with pytest.raises(InvalidRequestError, match="at least one"):
        FiniteBudgetSequence(epsilon=Decimal(1), terms=())
    with pytest.raises(InvalidBudgetError, match="epsilon must be finite and > 0"):
        FiniteBudgetSequence(epsilon=Decimal(0), terms=(Decimal(0),))
    with pytest.raises(InvalidRequestError, match="<= 2"):
        s.term(3)
    with pytest.raises(InvalidRequestError, match=">= 1"):
        s.term(0)
    with pytest.raises(InvalidRequestError, match="<= the sequence length"):
        s.prefix(3)


@pytest.mark.parametrize("bad", ["0", "1", "1.5", "-0.2"])
def test_bad_parameters_are_refused(bad: str) -> None:
    with pytest.raises(InvalidBudgetError, match="0 < r < 1"):
        GeometricSeries(Decimal(bad))
    with pytest.raises(InvalidBudgetError, match="0 < t < 1"):
        TaylorSeries(Decimal(bad))
    with pytest.raises(InvalidRequestError, match="integer"):
        geometric(epsilon=1, ratio="0.5").term(1.0)  # type: ignore[arg-type]

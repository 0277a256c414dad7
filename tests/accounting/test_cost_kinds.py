"""The Cost contract (``meet``, ``minus``, ``add_up``, ``<=``) over every registered cost kind,
and :meth:`AccountingRule.own_kind` for every rule.

Each kind is checked against an exact *measure*: the numbers its composition adds exactly
(ε and δ; ε(α) per order; μ²). A kind registered without a measure and samples here fails
:func:`test_every_registered_kind_is_covered`, so a new rule's cost kind joins this contract.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Context, Decimal
from fractions import Fraction

import pytest

from blockbudget.accounting import AccountingRule, GaussianDp, get_rule, rules
from blockbudget.budget import ALPHAS, Budget, Cost, RdpCurve
from blockbudget.errors import InvalidBudgetError
from blockbudget.tasks.bridge import smallest

Measure = Callable[[Cost], tuple[Fraction, ...]]


def _budget(c: Cost) -> tuple[Fraction, ...]:
    assert isinstance(c, Budget)
    return Fraction(c.epsilon), Fraction(c.delta)


def _rdp(c: Cost) -> tuple[Fraction, ...]:
    assert isinstance(c, RdpCurve)
    return tuple(Fraction(v) for v in c.epsilons)


def _gdp(c: Cost) -> tuple[Fraction, ...]:
    assert isinstance(c, GaussianDp)
    return (Fraction(c.mu) ** 2,)


#: kind → (exact measure, samples). Samples include zero, equal and incomparable pairs.
KINDS: dict[str, tuple[Measure, list[Cost]]] = {
    "budget": (
        _budget,
        [
            Budget.zero(),
            Budget(epsilon="0.5", delta="1e-6"),
            Budget(epsilon="0.2", delta="1e-5"),
            Budget(epsilon=1, delta="1e-6"),
            Budget(epsilon="0." + "1" * 200),  # 200 digits: sums with it are not exact
        ],
    ),
    "rdp": (
        _rdp,
        [
            RdpCurve.zero(),
            RdpCurve.gaussian(sigma=3.0),
            RdpCurve.from_pure_dp("0.7"),
            RdpCurve.laplace(scale=2.0),
            RdpCurve([Decimal("1.0000000000000002220446")] * len(ALPHAS)),
            RdpCurve([1] * len(ALPHAS)),
        ],
    ),
    "gdp": (
        _gdp,
        [
            GaussianDp.zero(),
            GaussianDp(mu="0.3"),
            GaussianDp(mu="0.4"),
            GaussianDp.gaussian(sigma=7),
            GaussianDp.from_pure_dp(1),
        ],
    ),
}


def _le(a: tuple[Fraction, ...], b: tuple[Fraction, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True))


def _pairs() -> list[tuple[str, Cost, Cost]]:
    return [(k, a, b) for k, (_, samples) in KINDS.items() for a in samples for b in samples]


def test_every_registered_kind_is_covered() -> None:
    kinds = set(Cost._kinds) | {r.cost_kind.kind for r in rules()}
    assert kinds <= set(KINDS), f"add a measure and samples for {kinds - set(KINDS)}"


@pytest.mark.parametrize(("kind", "a", "b"), _pairs())
def test_le_agrees_with_the_exact_measure(kind: str, a: Cost, b: Cost) -> None:
    measure = KINDS[kind][0]
    assert (a <= b) is _le(measure(a), measure(b))


@pytest.mark.parametrize(("kind", "a", "b"), _pairs())
def test_meet_is_the_largest_cost_below_both(kind: str, a: Cost, b: Cost) -> None:
    measure = KINDS[kind][0]
    met = a.meet(b)
    assert type(met) is type(a)
    assert met <= a and met <= b
    expected = tuple(min(x, y) for x, y in zip(measure(a), measure(b), strict=True))
    assert measure(met) == expected


@pytest.mark.parametrize(("kind", "a", "b"), _pairs())
def test_minus_never_overstates_what_is_left(kind: str, a: Cost, b: Cost) -> None:
    measure = KINDS[kind][0]
    rest = a.minus(b)
    ma, mb = measure(a), measure(b)
    if rest is None:
        assert not b <= a  # refused only when b exceeds a
        return
    assert type(rest) is type(a) and rest <= a
    for left, x, y in zip(measure(rest), ma, mb, strict=True):
        assert left <= max(x - y, Fraction(0))  # never above the exact remainder
    if b == a:
        assert rest.is_zero


@pytest.mark.parametrize(("kind", "a", "b"), _pairs())
def test_add_up_is_at_least_the_exact_sum(kind: str, a: Cost, b: Cost) -> None:
    measure = KINDS[kind][0]
    total = a.add_up(b)
    assert type(total) is type(a)
    exact = tuple(x + y for x, y in zip(measure(a), measure(b), strict=True))
    assert _le(exact, measure(total))
    try:
        composed = a + b
    except ArithmeticError:  # Inexact at 200 digits: add_up rounded up instead
        return
    assert total == composed  # exact where the kind's composition is


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_binary_operations_refuse_another_kind(kind: str) -> None:
    a = KINDS[kind][1][1]
    other = next(samples[1] for k, (_, samples) in KINDS.items() if k != kind)
    for op in (a.meet, a.minus, a.add_up):
        with pytest.raises(InvalidBudgetError, match=f"kind {kind} with one of kind {other.kind}"):
            op(other)


def test_exact_numbers_budget() -> None:
    a, b = Budget(epsilon="0.5", delta="1e-6"), Budget(epsilon="0.2", delta="1e-5")
    assert a.meet(b) == Budget(epsilon="0.2", delta="1e-6")
    assert Budget(epsilon=1, delta="1e-5").minus(b) == Budget(epsilon="0.8")
    assert a.minus(b) is None  # b's δ exceeds a's
    assert a.add_up(b) == Budget(epsilon="0.7", delta="0.000011")
    long = Budget(epsilon="0." + "1" * 200)
    # 201 digits: the next double above the float sum (what Sage reserved before)
    assert long.add_up(Budget(epsilon=1)).epsilon == Decimal("1.1111111111111114")


def test_exact_numbers_rdp() -> None:
    n = len(ALPHAS)
    left = RdpCurve([1] * n).minus(RdpCurve([Decimal("0.25")] * n))
    assert left == RdpCurve([Decimal("0.7499999999999999")] * n)  # one double below 0.75
    mixed = RdpCurve([1] * 6 + [3] * 6)
    assert mixed.minus(RdpCurve([2] * n)) == RdpCurve([0] * 6 + [Decimal("0.9999999999999999")] * 6)
    assert RdpCurve([1] * n).minus(RdpCurve([2] * n)) is None
    assert mixed.meet(RdpCurve([2] * n)) == RdpCurve([1] * 6 + [2] * 6)
    # the float difference of these is 2.2204460492503128e-16, above the exact 2.220446e-16
    tricky = RdpCurve([Decimal("1.0000000000000002220446")] * n).minus(RdpCurve([1] * n))
    assert tricky is not None
    assert all(v <= Decimal("2.220446e-16") for v in tricky.epsilons)
    assert all(v > Decimal("2.2204e-16") for v in tricky.epsilons)


def test_exact_numbers_gdp() -> None:
    a, b = GaussianDp(mu="0.5"), GaussianDp(mu="0.3")
    assert a <= a and b <= a and not a <= b
    assert a.meet(b) is b
    assert a.minus(b) == GaussianDp(mu=Decimal("0.4").next_minus(Context(prec=40)))
    assert a.minus(a) == GaussianDp.zero()
    assert b.minus(a) is None
    assert GaussianDp(mu="0.3").add_up(GaussianDp(mu="0.4")) == GaussianDp(mu="0.5")


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r.name)
def test_own_kind_reads_a_pure_budget_in_the_rule_kind(rule: AccountingRule) -> None:
    mine = rule.pure("0.5")
    assert type(mine) is rule.cost_kind
    assert rule.own_kind(mine) is mine
    assert rule.own_kind(Budget(epsilon="0.5")) == mine
    impure = Budget(epsilon="0.5", delta="1e-6")
    if rule.cost_kind is Budget:
        assert rule.own_kind(impure) is impure
    else:
        with pytest.raises(InvalidBudgetError, match=f"{rule.name} accounting cannot read an"):
            rule.own_kind(impure)
    for kind, (_, samples) in KINDS.items():
        foreign = samples[1]
        if kind in ("budget", rule.cost_kind.kind):
            continue
        with pytest.raises(InvalidBudgetError, match=f"{rule.name} .* kind {kind} .* kind"):
            rule.own_kind(foreign)


def test_smallest_reads_mixed_kinds_in_the_rule_kind() -> None:
    curve = RdpCurve.gaussian(sigma=2.0)
    pure = Budget(epsilon="0.1")
    expected = curve.meet(RdpCurve.from_pure_dp("0.1"))
    assert smallest([curve, pure], rule=get_rule("rdp")) == expected
    gdp = get_rule("gdp")
    assert smallest([GaussianDp(mu=2), pure], rule=gdp) == GaussianDp.from_pure_dp("0.1")
    with pytest.raises(InvalidBudgetError, match="rdp accounting cannot read"):
        smallest([curve, Budget(epsilon="0.1", delta="1e-9")], rule=get_rule("rdp"))
    # all budgets stay budgets under any rule
    both = [Budget(epsilon="0.5"), Budget(epsilon="0.2", delta="1e-9")]
    assert smallest(both, rule=get_rule("rdp")) == Budget(epsilon="0.2")

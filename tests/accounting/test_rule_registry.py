"""The accounting-rule contract, run against every registered rule, and the registry itself.

A rule owns its name, its filter, the pricing of releases, group privacy, the JSON of its
costs, and the shape of its fit test; the scheduler pool's vectorised test relies on that
shape, so for linear rules it is checked here against the exact ``fits`` on random histories.
"""

from __future__ import annotations

import pickle
import random
from decimal import Decimal, localcontext

import pytest

from blockbudget.accounting import (
    Accounting,
    AccountingRule,
    Combine,
    Filter,
    GaussianDp,
    Noise,
    NoisePart,
    Release,
    get_rule,
    register_rule,
    rule_names,
    rules,
)
from blockbudget.accounting.basic import BasicRule
from blockbudget.budget import Budget, Cost, RdpCurve, cost_from_json
from blockbudget.errors import InvalidBudgetError, InvalidRequestError

CAPACITY = Budget(epsilon=1, delta="1e-6")
RULES = rule_names()


@pytest.fixture(params=RULES)
def rule(request: pytest.FixtureRequest) -> AccountingRule:
    return get_rule(request.param)


# --- the registry -------------------------------------------------------------------------


def test_registry_lists_every_rule_once_in_module_order() -> None:
    assert RULES[:5] == ("basic", "strong", "rdp", "gdp", "whitehouse")
    assert len(set(RULES)) == len(RULES)
    assert [r.name for r in rules()] == list(RULES)


def test_unknown_rule_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(
        InvalidRequestError, match=r"unknown accounting rule .nope.; registered: basic, strong"
    ):
        get_rule("nope")
    with pytest.raises(ValueError, match="registered: basic"):  # still a ValueError, as the enum
        Accounting("nope")


def test_a_name_cannot_be_taken_by_another_rule_class() -> None:
    class Impostor(BasicRule):
        pass

    with pytest.raises(TypeError, match="already BasicRule"):
        register_rule(Impostor())
    assert type(get_rule("basic")) is BasicRule


def test_accounting_is_an_interned_validated_name(rule: AccountingRule) -> None:
    acc = Accounting(rule.name)
    assert acc is Accounting(str(rule.name)) and acc == rule.name and acc.value == rule.name
    assert acc.rule is rule
    assert pickle.loads(pickle.dumps(acc)) is acc
    assert acc in list(Accounting)
    assert repr(acc) == f"Accounting({rule.name!r})"


def test_the_old_enum_constants_are_the_stored_names() -> None:
    assert (Accounting.BASIC, Accounting.STRONG, Accounting.RDP) == ("basic", "strong", "rdp")
    assert Accounting("basic") is Accounting.BASIC


# --- each rule ----------------------------------------------------------------------------


def test_the_filter_is_the_rules(rule: AccountingRule) -> None:
    f = rule.filter(capacity=CAPACITY)
    assert isinstance(f, Filter)
    assert f.accounting == rule.name and f.rule is rule and f.combine is rule.combine
    assert f.fits(f.zero())
    assert rule.title and rule.name in type(rule).__module__.rsplit(".", 1)[-1]


def test_capacity_units_exist_exactly_for_linear_rules(rule: AccountingRule) -> None:
    caps = rule.filter(capacity=CAPACITY).capacity_units()
    assert (caps is None) == (rule.combine is Combine.FILTER)


def test_linear_fit_is_the_exact_fit_on_random_histories(rule: AccountingRule) -> None:
    """What the pool's vectorised test assumes: ALL ⇔ every feature within its capacity, ANY ⇔
    some feature within it — the same verdict as ``fits`` on every vector, at the boundary too."""
    f = rule.filter(capacity=CAPACITY)
    caps = f.capacity_units()
    if caps is None:
        pytest.skip("a non-linear rule: the filter decides")
    rng = random.Random(16)
    for _ in range(2000):
        used = tuple(
            max(0, c + rng.choice((-1, 0, 1)) * rng.choice((1, 10 ** rng.randrange(1, 18))))
            if c < 10**50
            else rng.randrange(10**20)
            for c in caps
        )
        within = [u <= c for u, c in zip(used, caps, strict=True)]
        expected = all(within) if rule.combine is Combine.ALL else any(within)
        assert f.fits(used) is expected, (used, caps)


def test_a_share_fits_and_its_whole_nearly_fills_the_block(rule: AccountingRule) -> None:
    f = rule.filter(capacity=CAPACITY)
    if f.capacity_units() is None:  # strong composition is not linear: a share may not fit
        assert f.fits(f.features(f.share(0.01)))
        return
    for fraction in (0.01, 0.25, 0.5, 1.0):
        share = f.share(fraction * (1 - 1e-6))
        assert f.fits(f.features(share)), (rule.name, fraction)
    half = f.features(f.share(0.5 * (1 - 1e-6)))  # two halves fit a linear block, three do not
    assert f.fits(tuple(2 * h for h in half)) and not f.fits(tuple(3 * h for h in half))


def test_pricing_a_pure_release_is_pure_dp(rule: AccountingRule) -> None:
    cost = rule.pure("0.5")
    assert isinstance(cost, rule.accepts)
    expected = {
        "basic": Budget(epsilon="0.5"),
        "strong": Budget(epsilon="0.5"),
        "whitehouse": Budget(epsilon="0.5"),
        "rdp": RdpCurve.from_pure_dp("0.5"),
        "gdp": GaussianDp.from_pure_dp("0.5"),
    }.get(rule.name)
    if expected is not None:
        assert cost == expected


def test_rules_that_price_noise_read_sigma_and_others_the_request(rule: AccountingRule) -> None:
    release = Release.of(epsilon="0.3", delta="1e-7", parts=(NoisePart(Noise.GAUSSIAN, 4.0, 2.0),))
    cost = rule.price(release)
    if not rule.prices_noise:
        assert cost == Budget(epsilon="0.3", delta="1e-7")
    elif rule.name == "rdp":
        assert cost == RdpCurve.gaussian(sigma=4.0, sensitivity=2.0)
    elif rule.name == "gdp":
        assert cost == GaussianDp(mu="0.5")  # Δ/σ exactly


def test_gdp_prices_laplace_by_the_pure_dp_conversion_and_composes_in_quadrature() -> None:
    gdp = get_rule("gdp")
    lap = gdp.price(Release.of(epsilon=1, parts=(NoisePart(Noise.LAPLACE, 2.0, 1.0),)))
    assert lap == GaussianDp.from_pure_dp("0.5")
    both = gdp.price(
        Release.of(
            epsilon=1,
            parts=(NoisePart(Noise.GAUSSIAN, 5.0, 3.0), NoisePart(Noise.GAUSSIAN, 5.0, 4.0)),
        )
    )
    assert both == GaussianDp(mu=1)  # √(0.6² + 0.8²)


def test_rules_that_price_noise_refuse_an_approximate_release_without_noise() -> None:
    for name in ("rdp", "gdp"):
        with pytest.raises(InvalidBudgetError, match=r"δ=1E-7 > 0"):
            get_rule(name).price(Release.of(epsilon=1, delta="1e-7"))


def test_group_privacy(rule: AccountingRule) -> None:
    one = rule.pure("0.1")
    assert rule.group_cost(one, 1) == one
    with pytest.raises(InvalidBudgetError, match="at least one row"):
        rule.group_cost(one, 0)
    if rule.name == "rdp":
        with pytest.raises(InvalidBudgetError, match="RDP curves is not supported"):
            rule.group_cost(one, 2)
    elif rule.name == "gdp":
        g = rule.group_cost(GaussianDp(mu="0.25"), 3)  # kμ (Dong, Roth & Su 2022, Thm 2.14)
        assert g == GaussianDp(mu="0.75")
    elif not rule.prices_noise:
        k3 = rule.group_cost(Budget(epsilon="0.1", delta="1e-9"), 3)
        assert isinstance(k3, Budget) and k3.epsilon == Decimal("0.3")
        assert float(k3.delta) == pytest.approx(3 * 2.718281828459045**0.2 * 1e-9, rel=1e-9)
        assert float(k3.delta) >= 3 * 2.718281828459045**0.2 * 1e-9  # rounded up


def test_costs_round_trip_through_versioned_json(rule: AccountingRule) -> None:
    cost = rule.price(Release.of(epsilon="0.2", parts=(NoisePart(Noise.GAUSSIAN, 3.0, 1.0),)))
    doc = cost.to_json()
    assert cost_from_json(doc) == cost and rule.cost_from_json(doc) == cost
    assert doc.get("kind", "budget") == cost.kind


def test_a_rule_refuses_a_stored_cost_of_a_kind_it_never_charges() -> None:
    with pytest.raises(InvalidBudgetError, match="basic accounting takes costs of kind budget"):
        get_rule("basic").cost_from_json(GaussianDp(mu=1).to_json())
    with pytest.raises(InvalidBudgetError, match="unknown cost kind 'no-such-kind'"):
        cost_from_json({"v": 2, "kind": "no-such-kind", "rho": "1"})


def test_rdp_json_names_its_grid_and_reads_version_1() -> None:
    curve = RdpCurve.gaussian(sigma=2.0)
    doc = curve.to_json()
    assert doc["v"] == 2 and doc["kind"] == "rdp" and doc["alphas"][0] == "1.5"
    v1 = {"rdp": doc["rdp"]}  # what every audit log written before version 2 holds
    assert cost_from_json(v1) == curve
    other = {**doc, "alphas": [*doc["alphas"][:-1], "128"]}
    with pytest.raises(InvalidBudgetError, match=r"order grid \[.*, 128\] cannot be read"):
        cost_from_json(other)


def test_every_cost_kind_is_a_cost() -> None:
    for cost in (Budget(epsilon=1), RdpCurve.zero(), GaussianDp(mu=1)):
        assert isinstance(cost, Cost)
        assert (cost + cost).is_zero is False or cost.is_zero


def test_the_cost_of_a_feature_vector_never_understates_it(rule: AccountingRule) -> None:
    """What the live task pool logs for a vector copied from the ledger: a cost of the rule's
    kind whose features cover the vector."""
    f = rule.filter(capacity=CAPACITY)
    for cost in (rule.pure("0.05"), rule.pure("0.3"), f.share(0.2)):
        feats = f.features(cost)
        back = rule.cost_of_features(feats)
        assert isinstance(back, rule.cost_kind)
        again = f.features(back)
        if rule.combine is Combine.FILTER:  # strong: (ε, δ) are the features it keeps
            assert (again[0], again[-1]) == (feats[0], feats[-1])
        else:
            assert all(a >= b for a, b in zip(again, feats, strict=True)), (again, feats)


def test_a_same_named_class_from_another_module_cannot_replace_a_rule() -> None:
    impostor = type("BasicRule", (BasicRule,), {"__module__": "somewhere.else"})
    with pytest.raises(TypeError, match="already BasicRule"):
        register_rule(impostor())
    assert type(get_rule("basic")).__module__ == "blockbudget.accounting.basic"


def test_a_declared_name_is_no_rule_until_registered() -> None:
    Accounting.declare("declared-only")
    with pytest.raises(InvalidRequestError, match="unknown accounting rule"):
        Accounting("declared-only")


def test_gdp_group_privacy_refuses_an_approximate_budget_for_every_group_size() -> None:
    """(ε, δ>0) implies no GDP bound: refused at k = 1 by the filter, and at k > 1 by the rule
    (it must never be read as a pure ε and lose its δ)."""
    gdp = get_rule("gdp")
    for k in (1, 2, 3):
        with pytest.raises(InvalidBudgetError, match="δ > 0"):
            f = gdp.filter(capacity=CAPACITY)
            f.features(gdp.group_cost(Budget(epsilon="0.01", delta="0.5"), k))
    one = GaussianDp.from_pure_dp("0.5").mu
    two = gdp.group_cost(Budget(epsilon="0.5"), 2)
    with localcontext() as ctx:
        ctx.prec = 100
        assert isinstance(two, GaussianDp) and two.mu == one + one  # exact: ≤ 41 digits


def test_gdp_group_cost_rounds_k_mu_up() -> None:
    mu = Decimal("0.1851851835185185178425925865092592032757")
    g = get_rule("gdp").group_cost(GaussianDp(mu=mu), 2)
    assert isinstance(g, GaussianDp) and g.mu >= 2 * mu

"""What the platform calibrates to a block's whole budget fits that block when it is empty.

One conversion everywhere: a Gaussian release, a DP query of several Gaussian parts and a DP-SGD
plan, each calibrated to (ε_g, δ_g) for the stream's rule, are priced by that rule and must fit
an empty (ε_g, δ_g) block of it — for every rule that can price them with one charge. ``strong``
and ``whitehouse`` cannot: they keep a slack δ̃ of δ_g for the composition itself, and their
first charge is capped below ε_g (the point of those filters is many small charges), which the
last test states.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from mechanisms.fakes import FakeSource, NoNoise

from blockbudget.accounting import Accounting, get_rule
from blockbudget.budget import Budget
from blockbudget.errors import InvalidBudgetError
from blockbudget.mechanisms import gaussian_mechanism
from blockbudget.mechanisms.source import price
from blockbudget.query import Query
from blockbudget.query.parts import perturbations
from blockbudget.training.dpsgd import PLAN_COSTS, plan_cost, plan_dpsgd, pld_epsilon
from blockbudget.training.sources import MeteredSource

EPSILONS = ("0.5", "1", "3", "10")
DELTAS = ("1e-7", "1e-6", "1e-5")
ONE_CHARGE_RULES = ("basic", "rdp", "rdp2", "gdp")
CASES = [(e, d) for e in EPSILONS for d in DELTAS]


def _fits_empty(rule: str, cost: object, eps: str, delta: str) -> bool:
    f = get_rule(rule).filter(capacity=Budget(epsilon=eps, delta=delta))
    return f.fits(f.features(cost))  # type: ignore[arg-type]


@pytest.mark.parametrize("rule", ONE_CHARGE_RULES)
@pytest.mark.parametrize(("eps", "delta"), CASES)
def test_a_gaussian_calibrated_to_the_block_fits_it(rule: str, eps: str, delta: str) -> None:
    source = FakeSource(Accounting(rule))
    result = gaussian_mechanism(
        source, 0.0, epsilon=eps, delta=delta, sensitivity=1.0, noise=NoNoise()
    )
    ((cost, _),) = source.draws
    assert _fits_empty(rule, cost, eps, delta)
    if get_rule(rule).prices_noise:
        # and tightly: 1e-9 less noise no longer fits
        tighter = price(
            rule,
            epsilon=Decimal(eps),
            delta=Decimal(delta),
            parts=[result.perturbations[0].__class__(
                "value", result.perturbations[0].kind, result.noise_scale * (1 - 1e-9), 1.0, 1,
                None)],
        )  # fmt: skip
        assert not _fits_empty(rule, tighter, eps, delta)


@pytest.mark.parametrize("rule", ONE_CHARGE_RULES)
@pytest.mark.parametrize(("eps", "delta"), [("1", "1e-6"), ("10", "1e-5")])
def test_a_query_of_several_gaussian_parts_fits_the_block(rule: str, eps: str, delta: str) -> None:
    query = Query.variance(
        "v", epsilon=Decimal(eps), delta=Decimal(delta), lower=0, upper=8, mechanism="gaussian"
    )
    parts = perturbations(query, Accounting(rule))
    assert len(parts) == 3
    cost = price(rule, epsilon=Decimal(eps), delta=Decimal(delta), parts=parts)
    assert _fits_empty(rule, cost, eps, delta)


@pytest.mark.parametrize("rule", ("rdp", "rdp2"))
@pytest.mark.parametrize(("eps", "delta"), CASES)
def test_a_dpsgd_plan_for_the_block_fits_it_under_rdp(rule: str, eps: str, delta: str) -> None:
    plan = plan_dpsgd(n=1000, batch_size=100, epochs=2, epsilon=eps, delta=delta, accounting=rule)
    cost = plan_cost(MeteredSource(Accounting(rule)), plan, epsilon=Decimal(eps),
                     delta=Decimal(delta))  # fmt: skip
    assert cost == PLAN_COSTS[type(cost)](plan)
    assert _fits_empty(rule, cost, eps, delta)


@pytest.mark.parametrize(("eps", "delta"), [("0.5", "1e-7"), ("1", "1e-6"), ("10", "1e-5")])
def test_a_dpsgd_plan_on_an_epsilon_delta_rule_is_priced_by_its_pld(eps: str, delta: str) -> None:
    plan = plan_dpsgd(n=1000, batch_size=100, epochs=2, epsilon=eps, delta=delta)
    assert pld_epsilon(plan.noise_multiplier, plan.sample_rate, plan.steps, float(delta)) <= float(
        eps
    )
    # tight: 1% less noise breaks the target
    less = pld_epsilon(plan.noise_multiplier * 0.99, plan.sample_rate, plan.steps, float(delta))
    assert less > float(eps)
    cost = plan_cost(MeteredSource(Accounting("basic")), plan, epsilon=Decimal(eps),
                     delta=Decimal(delta))  # fmt: skip
    assert cost == Budget(epsilon=eps, delta=delta)
    assert _fits_empty("basic", cost, eps, delta)


def test_gdp_refuses_to_price_a_dpsgd_plan() -> None:
    with pytest.raises(InvalidBudgetError):
        plan_cost(MeteredSource(Accounting("gdp")), None, epsilon=Decimal(1), delta=Decimal("1e-6"))


@pytest.mark.parametrize("rule", ("strong", "whitehouse"))
def test_slack_rules_admit_no_single_charge_of_the_whole_budget(rule: str) -> None:
    for eps, delta in CASES:
        assert not _fits_empty(rule, Budget(epsilon=eps, delta=delta), eps, delta)


def test_a_plan_too_large_for_the_pld_is_priced_by_its_rdp_curve() -> None:
    # 625,000 steps on a 1e-6 grid took 8 minutes and then 156 GiB; beyond MAX_PLD_WORK the
    # plan's curve, converted at its best order (one fixed plan), prices it instead.
    plan = plan_dpsgd(n=10**6, batch_size=16, epochs=10, epsilon="0.5", delta="1e-6")
    assert plan.steps == 625_000
    curve = plan.rdp_curve()
    assert curve.to_dp(delta=1e-6).epsilon <= Decimal("0.5")
    # and tightly, to the search's precision: 1% less noise no longer meets it
    less = type(plan)(plan.noise_multiplier * 0.99, plan.sample_rate, plan.steps).rdp_curve()
    assert less.to_dp(delta=1e-6).epsilon > Decimal("0.5")

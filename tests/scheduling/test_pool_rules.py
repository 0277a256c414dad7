"""The pool's vectorised fit test is its filter's, exactly, under every registered rule.

The pool never asks which rule it holds (only the shape of its test and the filter's
capacities); these tests hold it to the filter's own integer test on random histories that
run blocks to their last unit, for every rule in the registry (a rule registered later runs
them too)."""

from __future__ import annotations

import numpy as np
import pytest

from blockbudget.accounting import (
    Accounting,
    Combine,
    Noise,
    NoisePart,
    Release,
    add_vectors,
    get_rule,
    rule_names,
)
from blockbudget.budget import Budget, Cost
from blockbudget.scheduling import BlockSpec, Pool, TaskSpec
from blockbudget.scheduling.threshold import demand_share, epsilon_floor

CAPACITY = Budget(epsilon=1.0, delta=1e-6)
BLOCKS = ("b0", "b1", "b2", "b3")
#: Noise scales of the random releases (a few, so that pricing stays cheap: μ(ε) is cached).
SIGMAS = (2.0, 3.0, 5.0, 7.5, 11.0, 16.0, 25.0, 40.0)


def _random_cost(rng: np.random.Generator, pool: Pool) -> Cost:
    """A share of a block (shares add up to the whole: the last unit is tested) or a random
    release priced by the rule (noise parts for rules that price noise, else (ε, δ))."""
    rule = pool.rule
    if rng.random() < 0.4:
        return pool.filters[0].share(float(rng.choice([1.0, 0.5, 1 / 3, 0.25, 0.1, 0.05])))
    if rule.prices_noise:
        part = (
            NoisePart(Noise.GAUSSIAN, scale=float(rng.choice(SIGMAS)), sensitivity=1.0)
            if rng.random() < 0.5
            else NoisePart(Noise.LAPLACE, scale=2 * float(rng.choice(SIGMAS)), sensitivity=1.0)
        )
        return rule.price(Release.of(epsilon=0.1, parts=(part,)))
    delta = float(rng.choice([0.0, 1e-8, 1e-7]))
    return rule.price(Release.of(epsilon=round(float(rng.uniform(0.001, 0.3)), 6), delta=delta))


@pytest.mark.parametrize("rule", rule_names())
def test_the_pool_fit_test_is_the_filters_on_random_histories(rule: str) -> None:
    rng = np.random.default_rng(sum(map(ord, rule)))  # a fixed seed per rule name
    pool = Pool(Accounting(rule))
    for b in BLOCKS:
        pool.add_block(BlockSpec(b, 0.0, CAPACITY))
    filt = get_rule(rule).filter(capacity=CAPACITY)
    pool.submit(TaskSpec("h", 0.0, pool.filters[0].share(0.01)))
    idx = list(range(len(BLOCKS)))
    refused = admitted = 0
    for _ in range(400):
        cost = _random_cost(rng, pool)
        features = filt.features(cost)
        want = [filt.fits(add_vectors(pool.exact_used(b), features)) for b in BLOCKS]
        vec = pool.vector(cost)
        assert pool.fits_many(idx, vec).tolist() == want
        assert [pool.fits(None, b, cost) for b in BLOCKS] == want
        # a float vector of no known cost gets the conservative answer: never more than exact
        loose = pool.fits_many(idx, vec * 1.0)
        assert not np.any(loose & ~np.array(want))
        k = int(rng.integers(len(BLOCKS)))
        assert pool.charge("h", {BLOCKS[k]: cost}) is want[k]
        admitted += want[k]
        refused += not want[k]
    assert admitted > 10 and refused > 10  # the blocks were run to their last budget
    for b in BLOCKS:
        assert filt.fits(pool.exact_used(b))


@pytest.mark.parametrize("rule", rule_names())
def test_capacity_shares_add_up_to_the_whole_block(rule: str) -> None:
    """N shares of 1/N of a block all fit (the pool's margin is below the share's), and the
    used fraction then reads (nearly) 1 under a linear test."""
    pool = Pool(Accounting(rule))
    pool.add_block(BlockSpec("b", 0.0, CAPACITY))
    share = pool.capacity_share("b", 0.1)
    pool.submit(TaskSpec("t", 0.0, share))
    granted = sum(pool.charge("t", {"b": share}) for _ in range(10))
    if pool.combine is Combine.FILTER:  # strong: (ε_g/10, δ_g/10) is not a tenth of it
        assert granted >= 1
        return
    assert granted == 10
    assert float(pool.used_fraction()[0]) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("rule", rule_names())
def test_the_comparison_floor_is_below_what_the_threshold_scheduler_computes(rule: str) -> None:
    """epsilon_floor (what the queue's sensitivity check assumes of ε_j) never exceeds the ε_j
    the threshold schedulers compute on the pool; under basic and strong it is the demand's ε,
    as before rules were objects."""
    rng = np.random.default_rng(sum(map(ord, rule)) + 1)
    pool = Pool(Accounting(rule))
    pool.add_block(BlockSpec("b", 0.0, CAPACITY))
    filt = pool.filters[0]
    for _ in range(60):
        cost = _random_cost(rng, pool)
        eps_j = demand_share(pool, pool.vector(cost), 0) * float(CAPACITY.epsilon)
        floor = epsilon_floor(filt, cost)
        assert 0.0 <= floor <= eps_j
        if rule in ("basic", "strong") and isinstance(cost, Budget):
            assert floor == float(cost.epsilon)
    small = Budget(epsilon="0.001")
    if rule == "whitehouse":  # ε_j = ε²/S·ε_g: far below ε for a small ε
        assert epsilon_floor(filt, small) < 0.001 / 10

"""Seed 003 §6's protections: unpredictable by default (OS entropy), reproducible only when an
experiment passes a seeded generator or noise, and noisy n says when its noise was seeded."""

from __future__ import annotations

import numpy as np

from blockbudget.mechanisms import SeededNoise
from blockbudget.series import (
    noisy_n,
    parse_strategy,
    probabilistic_perturbation,
    random_arrangement,
)


def test_unseeded_protections_differ_between_runs() -> None:
    plan = parse_strategy("Geo").build(40, epsilon=1)
    # 40! orders; the perturbation has fewer likely orders but still far too many to collide.
    assert random_arrangement(plan).terms != random_arrangement(plan).terms
    draws = {probabilistic_perturbation(plan).terms for _ in range(5)}
    assert len(draws) > 1


def test_seeded_protections_reproduce() -> None:
    plan = parse_strategy("Geo").build(40, epsilon=1)
    a = random_arrangement(plan, rng=np.random.default_rng(5))
    b = random_arrangement(plan, rng=np.random.default_rng(5))
    assert a.terms == b.terms


def test_noisy_n_says_whether_its_noise_was_secure() -> None:
    strategy = parse_strategy("Geo")
    secure = noisy_n(strategy, 50, epsilon=1, epsilon_n=0.5)
    assert secure.secure_noise is True
    seeded = [noisy_n(strategy, 50, epsilon=1, epsilon_n=0.5, noise=SeededNoise(9)) for _ in "ab"]
    assert seeded[0].noisy_n == seeded[1].noisy_n
    assert seeded[0].secure_noise is False and seeded[1].secure_noise is False

"""The randomness rule in the mechanisms: no seed means fresh OS entropy / OpenDP's secure
samplers; a seed is an explicit experiment-only choice and the result says secure_noise=False."""

from __future__ import annotations

import numpy as np

from blockbudget.mechanisms import AboveThreshold, SeededNoise
from blockbudget.series import parse_strategy
from blockbudget.series.kmeans import dp_kmeans

from .fakes import FakeSource


def _points() -> np.ndarray:
    rng = np.random.default_rng(0)  # the data, not the mechanism's randomness
    return rng.uniform(0.0, 10.0, size=(200, 2))


def _kmeans(**kwargs: object) -> object:
    plan = parse_strategy("Geo").build(3, epsilon=1)
    return dp_kmeans(FakeSource(), _points(), k=3, budgets=plan, lower=0.0, upper=10.0, **kwargs)


def test_unseeded_kmeans_runs_differ_and_are_secure() -> None:
    first, second = _kmeans(), _kmeans()
    assert first.secure_noise and second.secure_noise  # type: ignore[attr-defined]
    assert not np.array_equal(first.history[0], second.history[0])  # type: ignore[attr-defined]


def test_seeded_kmeans_reproduces_and_says_secure_noise_false() -> None:
    runs = [_kmeans(seed=7, noise=SeededNoise(7)) for _ in range(2)]
    assert np.array_equal(runs[0].centroids, runs[1].centroids)  # type: ignore[attr-defined]
    assert all(r.secure_noise is False for r in runs)  # type: ignore[attr-defined]
    # ``seed`` alone draws the (public, data-independent) initial centroids; the noise stays
    # OpenDP's, so the result stays secure.
    assert _kmeans(seed=7).secure_noise is True  # type: ignore[attr-defined]


def test_above_threshold_is_secure_unless_seeded_and_seeded_runs_reproduce() -> None:
    unseeded = [AboveThreshold(FakeSource(), epsilon=0.1, threshold=0.0) for _ in range(2)]
    assert all(a.secure_noise for a in unseeded)
    # Lap(20) around 0: two secure draws of the noisy threshold coincide with probability 0.
    assert unseeded[0]._noisy_threshold != unseeded[1]._noisy_threshold
    seeded = [
        AboveThreshold(FakeSource(), epsilon=0.1, threshold=0.0, noise=SeededNoise(3))
        for _ in range(2)
    ]
    assert not any(a.secure_noise for a in seeded)

    def run(at: AboveThreshold) -> list[bool]:
        answers: list[bool] = []
        while not at.halted:
            answers.append(at.query(-30.0))
        return answers

    assert run(seeded[0]) == run(seeded[1])

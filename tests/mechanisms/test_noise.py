"""Noise sources: secure by default, seeded only on request and labelled insecure."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pytest

from blockbudget.errors import DataError, InvalidBudgetError, InvalidRequestError
from blockbudget.mechanisms.calibration import laplace_scale
from blockbudget.mechanisms.noise import (
    NoiseKind,
    NoiseSource,
    SecureNoise,
    SeededNoise,
    resolve_noise,
)


def test_default_noise_is_the_secure_opendp_source() -> None:
    noise = resolve_noise(None)
    assert isinstance(noise, SecureNoise)
    assert noise.secure is True
    assert resolve_noise(None) is noise  # shared


def test_seeded_noise_says_it_is_for_experiments_and_tests_only() -> None:
    noise = SeededNoise(7)
    assert noise.secure is False
    assert SeededNoise.__doc__ is not None
    assert "EXPERIMENTS AND TESTS ONLY" in SeededNoise.__doc__
    assert "INSECURE" in repr(noise)


def test_seeded_noise_is_reproducible_and_secure_noise_is_not() -> None:
    a = SeededNoise(42).laplace_samples(5, scale=1.0)
    b = SeededNoise(42).laplace_samples(5, scale=1.0)
    assert np.array_equal(a, b)
    c = SecureNoise().laplace_samples(5, scale=1.0)
    d = SecureNoise().laplace_samples(5, scale=1.0)
    assert not np.array_equal(c, d)  # equal only with probability 0


def test_resolve_noise_rejects_other_objects() -> None:
    with pytest.raises(InvalidRequestError):
        resolve_noise(np.random.default_rng(0))  # type: ignore[arg-type]


@pytest.mark.parametrize("noise", [SecureNoise(), SeededNoise(1)])
@pytest.mark.parametrize("kind", list(NoiseKind))
def test_noise_keeps_shape_and_is_tiny_at_tiny_scale(noise: NoiseSource, kind: NoiseKind) -> None:
    values = np.array([1.5, -2.0, 1e6, 0.0])
    out = noise.add(kind, values, scale=1e-9)
    assert out.shape == values.shape
    assert np.allclose(out, values, rtol=0, atol=1e-6)
    assert not np.array_equal(out, values)


@pytest.mark.parametrize("noise", [SecureNoise(), SeededNoise(1)])
def test_noise_of_an_empty_vector_is_empty(noise: NoiseSource) -> None:
    assert noise.add_laplace(np.array([]), scale=1.0).size == 0
    assert noise.add_gaussian(np.array([]), sigma=1.0).size == 0


@pytest.mark.parametrize("noise", [SecureNoise(), SeededNoise(1)])
@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_noise_rejects_bad_scales(noise: NoiseSource, bad: float) -> None:
    with pytest.raises(InvalidBudgetError):
        noise.add_laplace(np.zeros(2), scale=bad)
    with pytest.raises(InvalidBudgetError):
        noise.add_gaussian(np.zeros(2), sigma=bad)


@pytest.mark.parametrize("noise", [SecureNoise(), SeededNoise(1)])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_noise_rejects_non_finite_values(noise: NoiseSource, bad: float) -> None:
    # OpenDP itself returns a number for a NaN input; the wrapper must refuse it.
    with pytest.raises(DataError):
        noise.add_laplace(np.array([1.0, bad]), scale=1.0)


def test_noise_rejects_two_dimensional_values() -> None:
    with pytest.raises(DataError):
        SecureNoise().add_laplace(np.zeros((2, 2)), scale=1.0)


def test_seed_must_be_an_int() -> None:
    with pytest.raises(InvalidRequestError):
        SeededNoise(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1.0, 1.5), (1.0, 0.1), (3.0, 0.7)])
def test_opendp_own_privacy_map_agrees_with_the_calibrated_scale(
    sensitivity: float, epsilon: float
) -> None:
    """Cross-check with OpenDP's privacy map: the measurement SecureNoise builds at the
    calibrated scale is ε-DP for the stated sensitivity, up to the map's own upward float
    rounding (at most one ulp)."""
    dp.enable_features("contrib")
    scale = laplace_scale(sensitivity=sensitivity, epsilon=epsilon)
    meas = dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float), scale=scale
    )
    assert meas.map(sensitivity) <= math.nextafter(epsilon, math.inf)  # type: ignore[no-untyped-call]

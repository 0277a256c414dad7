"""Large-sample distribution tests of the noise (the third layer of the
project's randomized tests, after exact results at zero noise and checked noise parameters).

Each test draws N = 50,000 samples and runs a one-sample Kolmogorov–Smirnov test
(``scipy.stats.kstest``) against the intended distribution — it must *not* reject at
p > 1e-6 — and against the same family with a ±30% wrong scale — it must reject at p < 1e-6.

Why this is not flaky, for the truly random SecureNoise samples:

* Right scale: under the null hypothesis the KS p-value is uniform (continuous distribution;
  OpenDP rounds each exact sample once to a double, ties have probability ~0), so a test fails
  with probability 1e-6.
* Wrong scale: the test fails only if the empirical CDF stays within the critical distance
  c_N = ``kstwo.isf(1e-6, N)`` ≈ 0.012 of the wrong CDF, although the true and wrong CDFs are
  D ≥ 0.045 apart somewhere; that needs sup|F_N − F| ≥ D − c_N ≥ 0.03, which by the
  Dvoretzky–Kiefer–Wolfowitz inequality (Massart 1990) has probability ≤ 2·exp(−2N·0.03²)
  < 1e-38. :func:`test_the_sample_size_makes_wrong_scale_rejection_certain` computes these
  numbers for every distribution and scale used here.

SeededNoise tests use a fixed seed and are deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from blockbudget.accounting import Accounting
from blockbudget.mechanisms import (
    SeededNoise,
    dp_histogram,
    gaussian_mechanism,
    laplace_mechanism,
)
from blockbudget.mechanisms.noise import FloatArray, NoiseSource, SecureNoise

from .fakes import FakeSource

N = 50_000
P_ACCEPT = 1e-6
WRONG = (0.7, 1.3)
FAMILIES = {"laplace": stats.laplace, "norm": stats.norm}

pytestmark = pytest.mark.slow


def sup_distance(family: str, factor: float) -> float:
    """sup_x |F_1(x) − F_factor(x)| for the zero-centred family, on a fine grid."""
    dist = FAMILIES[family]
    x = np.linspace(-20, 20, 400_001)
    return float(np.max(np.abs(dist.cdf(x) - dist.cdf(x, scale=factor))))


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("factor", WRONG)
def test_the_sample_size_makes_wrong_scale_rejection_certain(family: str, factor: float) -> None:
    critical = float(stats.kstwo.isf(P_ACCEPT, N))
    gap = sup_distance(family, factor)
    assert critical < 0.0125
    assert gap > 0.045
    failure = 2 * math.exp(-2 * N * (gap - critical) ** 2)  # DKW–Massart
    assert failure < 1e-38


def assert_fits_only_the_right_scale(samples: FloatArray, family: str, scale: float) -> None:
    assert samples.size == N
    right = stats.kstest(samples, family, args=(0.0, scale))
    assert right.pvalue > P_ACCEPT, f"right scale rejected: {right}"
    for factor in WRONG:
        wrong = stats.kstest(samples, family, args=(0.0, scale * factor))
        assert wrong.pvalue < P_ACCEPT, f"scale x{factor} not rejected: {wrong}"


def test_secure_laplace_mechanism_output_has_the_calibrated_distribution() -> None:
    result = laplace_mechanism(FakeSource(), np.zeros(N), epsilon=0.5, sensitivity=1.0)
    assert result.secure_noise is True
    assert result.noise_scale == 2.0
    assert_fits_only_the_right_scale(np.asarray(result.value), "laplace", 2.0)


def test_secure_laplace_with_a_value_offset_and_small_scale() -> None:
    # values far from zero: OpenDP perturbs x exactly and rounds once
    noise = SecureNoise()
    out = noise.add_laplace(np.full(N, 1000.0), scale=0.003)
    assert_fits_only_the_right_scale(out - 1000.0, "laplace", 0.003)


def test_secure_gaussian_mechanism_output_has_the_requested_sigma() -> None:
    source = FakeSource(Accounting.RDP)
    result = gaussian_mechanism(source, np.zeros(N), sigma=1.7, sensitivity=1.0)
    assert result.secure_noise is True
    assert_fits_only_the_right_scale(np.asarray(result.value), "norm", 1.7)


def test_secure_histogram_counts_carry_laplace_one_over_epsilon() -> None:
    # 50,000 empty public categories: the released counts are pure Laplace(1/ε) noise
    result = dp_histogram(FakeSource(), [], categories=range(N), epsilon=4.0)
    assert result.noise_scale == 0.25
    assert_fits_only_the_right_scale(np.asarray(result.value.counts), "laplace", 0.25)


@pytest.mark.parametrize("seed", [0, 1])
def test_seeded_noise_has_the_right_distributions(seed: int) -> None:
    noise: NoiseSource = SeededNoise(seed)
    assert_fits_only_the_right_scale(noise.laplace_samples(N, scale=3.0), "laplace", 3.0)
    assert_fits_only_the_right_scale(noise.gaussian_samples(N, sigma=0.4), "norm", 0.4)

"""RDP of the subsampled mechanisms against dp-accounting and closed forms; the (ε, δ)
conversion against dp-accounting; the calibration lands in [0.9ε, ε]."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dpa

from blockbudget.budget import ALPHAS, RdpCurve
from blockbudget.scheduling.mechanism_rdp import (
    best_normalized_demand,
    calibrate_noise,
    rdp_to_epsilon,
    subsampled_gaussian_rdp,
    subsampled_laplace_rdp,
)

INTEGER = [k for k, a in enumerate(ALPHAS) if float(a).is_integer()]


@pytest.mark.parametrize(("q", "sigma", "steps"), [(0.01, 1.1, 100), (0.064, 0.7, 10), (0.5, 3, 1)])
def test_subsampled_gaussian_equals_dp_accounting_at_integer_orders(
    q: float, sigma: float, steps: int
) -> None:
    ours = subsampled_gaussian_rdp(sample_rate=q, sigma=sigma, steps=steps)
    orders = [ALPHAS[k] for k in INTEGER]
    ref = dpa._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders) * steps
    assert ours[INTEGER] == pytest.approx(ref, rel=1e-9)
    # a fractional order takes the next integer's value (an upper bound)
    assert ours[0] == ours[1] == ours[ALPHAS.index(2.0)]
    assert ours[ALPHAS.index(2.5)] == ours[ALPHAS.index(3.0)]


def test_subsampled_gaussian_without_sampling_is_the_gaussian() -> None:
    ours = subsampled_gaussian_rdp(sample_rate=1.0, sigma=2.0, steps=3)
    assert ours[INTEGER] == pytest.approx([3 * ALPHAS[k] / 8 for k in INTEGER])


def test_subsampled_laplace_closed_form_at_order_two() -> None:
    g, b = 0.05, 0.5
    t = 1 / b
    eps2 = t + math.log(2 / 3 + 1 / 3 * math.exp(-3 * t))  # Laplace at α = 2
    want = math.log(1 - g * g + g * g * math.exp(eps2))
    got = subsampled_laplace_rdp(sample_rate=g, scale=b, steps=1)
    assert got[ALPHAS.index(2.0)] == pytest.approx(want, rel=1e-12)
    assert 5 * got[ALPHAS.index(2.0)] == pytest.approx(
        subsampled_laplace_rdp(sample_rate=g, scale=b, steps=5)[ALPHAS.index(2.0)]
    )


def test_subsampled_laplace_is_bounded_and_monotone() -> None:
    for g, b in [(0.01, 0.1), (0.1, 1.0), (0.3, 5.0)]:
        r = subsampled_laplace_rdp(sample_rate=g, scale=b, steps=1)
        assert np.all(np.diff(r) >= -1e-15)
        # never above amplified pure DP, never above the Laplace itself
        assert np.all(r <= math.log1p(g * math.expm1(1 / b)) + 1e-15)
        full = np.array(RdpCurve.laplace(scale=b).as_floats())
        assert np.all(r[INTEGER] <= full[INTEGER] + 1e-12)


@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-7])
def test_conversion_equals_dp_accounting(delta: float) -> None:
    for scale in (0.001, 0.05, 1.0):
        curve = np.array(ALPHAS) * scale
        assert rdp_to_epsilon(curve, delta=delta) == pytest.approx(
            dpa.compute_epsilon(list(ALPHAS), list(curve), delta)[0], rel=1e-12
        )


def test_calibration_lands_in_band() -> None:
    q, steps, delta = 64 / 5000, 5 * 5000 // 64, 1 / 5000
    for target in (0.3, 1.0, 4.0):

        def at(sigma: float) -> np.ndarray:
            return subsampled_gaussian_rdp(sample_rate=q, sigma=sigma, steps=steps)

        sigma = calibrate_noise(at, epsilon=target, delta=delta)
        assert 0.9 * target <= rdp_to_epsilon(at(sigma), delta=delta) <= target


def test_best_normalized_demand_by_hand() -> None:
    # Gaussian σ = 10: ε(α) = α/200; capacity 10 − ln(1e7)/(α−1); best at α = 6
    c = RdpCurve.gaussian(sigma=10.0)
    hand = min(
        a / 200 / (10 - math.log(1e7) / (a - 1)) for a in ALPHAS if 10 - math.log(1e7) / (a - 1) > 0
    )
    assert best_normalized_demand(c, epsilon_g=10.0, delta_g=1e-7) == pytest.approx(hand)
    assert best_normalized_demand(c, epsilon_g=0.01, delta_g=1e-7) == math.inf

"""Laplace and Gaussian mechanisms: exact at zero noise, parameters, costs, draw-before-noise."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Number, RdpCurve
from blockbudget.errors import (
    BudgetExceededError,
    DataError,
    InvalidBudgetError,
    InvalidRequestError,
)
from blockbudget.mechanisms import (
    SecureNoise,
    SeededNoise,
    analytic_gaussian_sigma,
    gaussian_mechanism,
    laplace_mechanism,
    rdp_gaussian_sigma,
)
from blockbudget.mechanisms.noise import NoiseKind

from .fakes import FakeSource, NoNoise, RecordingNoise

# ---------------------------------------------------------------- layer 1: exact at zero noise


@pytest.mark.parametrize(
    "vector",
    [
        [1.0, 2.5, -3.0],
        np.array([1.0, 2.5, -3.0]),
        pd.Series([1.0, 2.5, -3.0]),
        pa.array([1.0, 2.5, -3.0]),
        pa.chunked_array([[1.0], [2.5, -3.0]]),
    ],
)
def test_laplace_returns_the_values_with_zero_noise(vector: object) -> None:
    result = laplace_mechanism(
        FakeSource(),
        vector,
        epsilon=1.0,
        sensitivity=1.0,
        noise=NoNoise(),  # type: ignore[call-overload]
    )
    assert result.value == (1.0, 2.5, -3.0)


def test_laplace_scalar_in_scalar_out() -> None:
    result = laplace_mechanism(FakeSource(), 4.25, epsilon=1.0, sensitivity=1.0, noise=NoNoise())
    assert result.value == 4.25
    assert isinstance(result.value, float)


def test_secure_laplace_at_huge_epsilon_is_exact_to_1e9() -> None:
    result = laplace_mechanism(FakeSource(), [3.0, -7.5], epsilon=1e12, sensitivity=1.0)
    assert result.secure_noise is True
    assert np.allclose(result.value, [3.0, -7.5], rtol=0, atol=1e-9)


def test_secure_gaussian_at_huge_epsilon_is_nearly_exact() -> None:
    # the analytic σ at ε = 1e12 is about 1/√(2ε) ≈ 7e-7 (the classical formula is invalid there)
    result = gaussian_mechanism(FakeSource(), [3.0], epsilon=1e12, delta=1e-6, sensitivity=1.0)
    assert result.noise_scale < 1e-6
    assert np.allclose(result.value, [3.0], rtol=0, atol=1e-4)


def test_gaussian_returns_the_values_with_zero_noise() -> None:
    result = gaussian_mechanism(
        FakeSource(), [1.0, 2.0], epsilon=1.0, delta=1e-5, sensitivity=1.0, noise=NoNoise()
    )
    assert result.value == (1.0, 2.0)


# ------------------------------------------------- layer 2: noise parameters, costs, draw order


@pytest.mark.parametrize(
    ("epsilon", "sensitivity"), [(1.0, 1.0), ("0.3", 2.0), (Decimal("0.7"), 0.1), (3, 1.0)]
)
def test_laplace_passes_sensitivity_over_epsilon_rounded_up(
    epsilon: Number, sensitivity: float
) -> None:
    noise = NoNoise()
    result = laplace_mechanism(
        FakeSource(),
        [0.0, 0.0],
        epsilon=epsilon,
        sensitivity=sensitivity,
        noise=noise,
    )
    (call,) = noise.calls
    exact = Fraction(sensitivity) / Fraction(Decimal(str(epsilon)))
    assert call.kind is NoiseKind.LAPLACE
    assert Fraction(call.scale) >= exact
    assert Fraction(np.nextafter(call.scale, 0.0)) < exact
    assert result.noise_scale == call.scale
    assert result.sensitivity == sensitivity
    assert len(call.values) == 2  # a vector is perturbed in one call


@pytest.mark.parametrize("rule", [Accounting.BASIC, Accounting.STRONG])
def test_laplace_draws_the_exact_budget_on_epsilon_delta_streams(rule: Accounting) -> None:
    source = FakeSource(rule)
    laplace_mechanism(source, 1.0, epsilon="0.1", sensitivity=1.0, noise=NoNoise(), label="q1")
    assert source.draws == [(Budget(epsilon="0.1"), "q1")]


def test_laplace_draws_its_rdp_curve_on_rdp_streams() -> None:
    source = FakeSource(Accounting.RDP)
    result = laplace_mechanism(source, [1.0, 2.0], epsilon=0.5, sensitivity=2.0, noise=NoNoise())
    (cost, label), *_ = source.draws
    assert label == "laplace"
    assert cost == RdpCurve.laplace(scale=result.noise_scale, sensitivity=2.0)
    assert result.cost == cost
    assert cost <= RdpCurve.from_pure_dp(0.5)


def test_gaussian_calibrates_with_the_analytic_mechanism_on_basic_streams() -> None:
    source = FakeSource(Accounting.BASIC)
    noise = NoNoise()
    result = gaussian_mechanism(
        source, [0.0], epsilon=0.5, delta=1e-6, sensitivity=3.0, noise=noise
    )
    sigma = analytic_gaussian_sigma(epsilon=0.5, delta=1e-6, sensitivity=3.0)
    assert noise.calls[0].kind is NoiseKind.GAUSSIAN
    assert noise.calls[0].scale == sigma == result.noise_scale
    assert source.draws == [(Budget(epsilon=0.5, delta=1e-6), "gaussian")]


def test_gaussian_with_sigma_draws_the_gaussian_curve_on_rdp_streams() -> None:
    source = FakeSource(Accounting.RDP)
    noise = NoNoise()
    gaussian_mechanism(source, [0.0, 1.0], sigma=2.5, sensitivity=1.5, noise=noise)
    assert noise.calls[0].scale == 2.5
    assert source.draws[0][0] == RdpCurve.gaussian(sigma=2.5, sensitivity=1.5)


@pytest.mark.parametrize("rule", ["rdp", "rdp2"])
def test_gaussian_with_a_target_on_rdp_streams_uses_the_rules_calibration(rule: str) -> None:
    source = FakeSource(Accounting(rule))
    result = gaussian_mechanism(
        source, 0.0, epsilon=1.0, delta=1e-5, sensitivity=1.0, noise=NoNoise()
    )
    sigma = rdp_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0, accounting=rule)
    assert result.noise_scale == sigma
    cost = source.draws[0][0]
    assert cost == RdpCurve.gaussian(sigma=sigma, sensitivity=1.0)
    assert isinstance(cost, RdpCurve)
    # the curve fits an empty (1, 1e-5) block of the rule: one conversion for both
    f = Accounting(rule).rule.filter(capacity=Budget(epsilon=1, delta="1e-5"))
    assert f.fits(f.features(cost))
    # and dp-accounting's conversion (no union bound over orders) agrees it is (1, 1e-5)-DP
    assert cost.to_dp(delta=1e-5).epsilon <= 1


def test_gaussian_parametrization_rules() -> None:
    with pytest.raises(InvalidRequestError, match="RDP"):
        gaussian_mechanism(FakeSource(), 1.0, sigma=1.0, sensitivity=1.0)
    with pytest.raises(InvalidRequestError, match="not both"):
        gaussian_mechanism(
            FakeSource(Accounting.RDP), 1.0, sigma=1.0, epsilon=1.0, delta=1e-5, sensitivity=1.0
        )
    with pytest.raises(InvalidRequestError):
        gaussian_mechanism(FakeSource(), 1.0, epsilon=1.0, sensitivity=1.0)
    with pytest.raises(InvalidBudgetError):
        gaussian_mechanism(FakeSource(), 1.0, epsilon=1.0, delta=0, sensitivity=1.0)
    with pytest.raises(InvalidBudgetError):
        gaussian_mechanism(FakeSource(Accounting.RDP), 1.0, sigma=-1.0, sensitivity=1.0)


def test_draw_happens_before_any_noise() -> None:
    events: list[str] = []
    source = FakeSource(events=events)
    laplace_mechanism(source, 1.0, epsilon=1.0, sensitivity=1.0, noise=NoNoise(events))
    gaussian_mechanism(source, 1.0, epsilon=1.0, delta=1e-5, sensitivity=1.0, noise=NoNoise(events))
    assert events == ["draw:laplace", "noise:laplace", "draw:gaussian", "noise:gaussian"]


def test_a_refused_draw_releases_nothing() -> None:
    source = FakeSource(refuse=True)
    noise = NoNoise()
    with pytest.raises(BudgetExceededError):
        laplace_mechanism(source, 1.0, epsilon=1.0, sensitivity=1.0, noise=noise)
    with pytest.raises(BudgetExceededError):
        gaussian_mechanism(source, 1.0, epsilon=1.0, delta=1e-5, sensitivity=1.0, noise=noise)
    assert noise.calls == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"epsilon": 0}, InvalidBudgetError),
        ({"epsilon": -1.0}, InvalidBudgetError),
        ({"epsilon": float("nan")}, InvalidBudgetError),
        ({"epsilon": float("inf")}, InvalidBudgetError),
        ({"sensitivity": 0.0}, InvalidBudgetError),
        ({"sensitivity": float("inf")}, InvalidBudgetError),
    ],
)
def test_invalid_parameters_draw_nothing(kwargs: dict[str, float], error: type[Exception]) -> None:
    source = FakeSource()
    params: dict[str, float] = {"epsilon": 1.0, "sensitivity": 1.0} | kwargs
    with pytest.raises(error):
        laplace_mechanism(source, 1.0, noise=NoNoise(), **params)  # type: ignore[call-overload]
    assert source.events == []


@pytest.mark.parametrize("value", [float("nan"), [1.0, float("inf")], ["a"], [[1.0, 2.0]], True])
def test_non_finite_or_non_numeric_values_are_rejected_before_drawing(value: object) -> None:
    source = FakeSource()
    with pytest.raises(DataError):
        laplace_mechanism(source, value, epsilon=1.0, sensitivity=1.0)  # type: ignore[call-overload]
    assert source.events == []


def test_a_source_without_the_contract_is_refused() -> None:
    with pytest.raises(InvalidRequestError):
        laplace_mechanism(object(), 1.0, epsilon=1.0, sensitivity=1.0)  # type: ignore[call-overload]


def test_results_are_frozen_and_flag_insecure_noise() -> None:
    result = laplace_mechanism(
        FakeSource(), [1.0], epsilon=1.0, sensitivity=1.0, noise=SeededNoise(3)
    )
    assert result.secure_noise is False
    with pytest.raises(AttributeError):
        result.value = (0.0,)  # type: ignore[misc]
    secure = laplace_mechanism(
        FakeSource(), [1.0], epsilon=1.0, sensitivity=1.0, noise=RecordingNoise(SecureNoise())
    )
    assert secure.secure_noise is True

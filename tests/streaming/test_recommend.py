"""The configuration-time recommender: forecasts from public parameters, and its warnings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blockbudget.errors import InvalidRequestError
from blockbudget.streaming import Compression, HistogramConfig, HistogramStream, Horizon
from blockbudget.streaming.recommend import dpi_contrast_threshold, recommend


def test_flights_like_stream_prefers_windowed_and_warns_about_dpi() -> None:
    r = recommend(domain_size=105, min_users=400, epsilon=10.0, horizon=365)
    by = {f.mode: f for f in r.forecasts}
    assert r.best == "windowed" and r.horizon == 365
    assert by["dpi"].only_uniform and not by["windowed"].warned
    # hand computation: the warm-up windows of 1, 2, 4, 8, 15 slots share ε·6/π² in proportion
    # to their lengths, then 11 full windows of 30 slots take ε_j = 10·6/(π²j²), j = 2…12;
    # Laplace std √2·Δ/ε_j
    first = 10 * 6 / math.pi**2
    eps = [first * n / 30 for n in (1, 2, 4, 8, 15)]
    eps += [10 * 6 / (math.pi**2 * j * j) for j in range(2, 13)]
    expected = math.sqrt(2) * (2 / 400) / math.sqrt(sum(e * e for e in eps))
    assert by["windowed"].accumulative_noise == pytest.approx(expected, rel=1e-9)
    assert by["windowed"].instantaneous_noise == pytest.approx(
        math.sqrt(2) * (2 / 400) / eps[-1], rel=1e-9
    )
    assert [w.split(":")[0] for w in r.warnings] == ["dpi"]


def test_a_tiny_budget_warns_that_every_mode_releases_the_uniform_pdf() -> None:
    r = recommend(domain_size=105, min_users=5, epsilon=0.1, horizon=None)
    assert r.horizon == 365 and all(f.only_uniform for f in r.forecasts)
    assert len(r.warnings) == 3 and all("uniform PDF" in w for w in r.warnings)


def test_a_large_population_needs_no_warning_and_gaussian_is_forecast() -> None:
    r = recommend(domain_size=105, min_users=50_000, epsilon=10.0, horizon=365)
    assert r.warnings == ()
    g = recommend(domain_size=105, min_users=400, epsilon=10.0, horizon=365, delta=1e-6)
    assert {f.mode for f in g.forecasts} == {"windowed", "per-slot", "dpi"}
    assert all(math.isfinite(f.accumulative_noise) for f in g.forecasts[:2])


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="horizon"):
        recommend(domain_size=10, min_users=1, epsilon=1.0, horizon=1)
    with pytest.raises(InvalidRequestError, match="domain_size"):
        recommend(domain_size=0, min_users=1, epsilon=1.0, horizon=10)
    with pytest.raises(InvalidRequestError, match="epsilon"):
        recommend(domain_size=10, min_users=1, epsilon=-1.0, horizon=10)


@pytest.mark.parametrize("slots", [10, 30, 40, 365])
def test_the_windowed_forecast_is_the_noise_of_the_windows_a_release_really_runs(
    slots: int,
) -> None:
    r = recommend(domain_size=2, min_users=50, epsilon=1.0, horizon=slots)
    (windowed,) = [f for f in r.forecasts if f.mode == "windowed"]
    s = HistogramStream(config=HistogramConfig(epsilon=1.0), compression=Compression(2, 50), seed=0)
    released = [s.step_pdf(np.array([0.5, 0.5])) for _ in range(slots)]
    budgets = [x.cost for x in released if x.released]
    actual = math.sqrt(2) * (2 / 50) / math.sqrt(sum(b * b for b in budgets))
    assert windowed.accumulative_noise == pytest.approx(actual, rel=1e-9)
    assert windowed.instantaneous_noise == pytest.approx(
        math.sqrt(2) * (2 / 50) / budgets[-1], rel=1e-9
    )


def test_flights_at_a_small_budget_is_warned_with_the_warm_up_counted() -> None:
    # ε = 1.5: 12 equal-share windows forecast 0.78·(1/k); the real windows give 1.25·(1/k)
    r = recommend(domain_size=105, min_users=400, epsilon=1.5, horizon=365)
    (windowed,) = [f for f in r.forecasts if f.mode == "windowed"]
    assert windowed.resolution == pytest.approx(1.247, abs=1e-3) and windowed.coarse


def test_an_instantaneous_answer_is_judged_by_the_latest_release_alone() -> None:
    acc = recommend(domain_size=105, min_users=400, epsilon=10.0, horizon=365)
    inst = recommend(
        domain_size=105, min_users=400, epsilon=10.0, horizon=365, answer=Horizon.INSTANTANEOUS
    )
    assert not any(f.warned for f in acc.forecasts[:2])
    assert all(f.warned for f in inst.forecasts[:2])
    assert [w.split(":")[0] for w in inst.warnings] == ["windowed", "per-slot", "dpi"]
    assert "instantaneous" in inst.forecasts[0].note


def test_the_dpi_warning_is_stricter_at_short_horizons() -> None:
    assert dpi_contrast_threshold(365) == 2.0 and dpi_contrast_threshold(10_000) == 2.0
    assert dpi_contrast_threshold(40) == pytest.approx(1 + math.sqrt(365 / 40))
    # flights at ε = 10 over 40 slots: contrast 2.3, where DPI's MSE was 0.995× uniform's
    r = recommend(domain_size=105, min_users=400, epsilon=10.0, horizon=40)
    (dpi,) = [f for f in r.forecasts if f.mode == "dpi"]
    assert dpi.resolution == pytest.approx(2.3, abs=0.05) and dpi.coarse

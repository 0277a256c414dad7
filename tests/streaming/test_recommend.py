"""The configuration-time recommender: forecasts from public parameters, and its warnings."""

from __future__ import annotations

import math

import pytest

from blockbudget.errors import InvalidRequestError
from blockbudget.streaming.recommend import recommend


def test_flights_like_stream_prefers_windowed_and_warns_about_dpi() -> None:
    r = recommend(domain_size=105, min_users=400, epsilon=10.0, horizon=365)
    by = {f.mode: f for f in r.forecasts}
    assert r.best == "windowed" and r.horizon == 365
    assert by["dpi"].only_uniform and not by["windowed"].warned
    # hand computation: 12 windows of 30 slots, ε_j = 10·6/(π²j²), Laplace std √2·Δ/ε_j
    eps = [10 * 6 / (math.pi**2 * j * j) for j in range(1, 13)]
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

"""DP k-means (seed 003 Algorithm 1): exact at zero noise, noise scales and ledger charges."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mechanisms.fakes import FakeSource, NoNoise, RecordingNoise

from blockbudget import Budget
from blockbudget.errors import BudgetExceededError, DataError, InvalidRequestError, ReservationError
from blockbudget.ledger.types import EventKind
from blockbudget.mechanisms import NoiseKind, SeededNoise
from blockbudget.mechanisms.statistics import sum_sensitivity
from blockbudget.platform import Last, Platform
from blockbudget.series import parse_strategy
from blockbudget.series.kmeans import (
    assign,
    dp_kmeans,
    from_unit_cube,
    lloyd_step,
    to_unit_cube,
)
from blockbudget.store import Blocking, Unit

DAY = Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1))


def _blobs(seed: int = 0, n: int = 300) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.array([[2.0, 2.0], [8.0, 3.0], [5.0, 8.0]])
    return np.vstack([c + rng.normal(0, 0.7, size=(n // 3, 2)) for c in centres])


INITIAL = np.array([[1.0, 1.0], [9.0, 1.0], [5.0, 9.5]])


def _lloyd(points: np.ndarray, initial: np.ndarray, steps: int) -> list[np.ndarray]:
    lo, hi = np.zeros(2), np.full(2, 10.0)
    unit = to_unit_cube(points, lo, hi)
    c = to_unit_cube(initial, lo, hi)
    out = []
    for _ in range(steps):
        c = lloyd_step(unit, c)
        out.append(from_unit_cube(c, lo, hi))
    return out


def test_zero_noise_is_exactly_lloyd() -> None:
    points = _blobs()
    plan = parse_strategy("Flip-Geo").build(5, epsilon=1)
    result = dp_kmeans(
        FakeSource(), points, k=3, budgets=plan, lower=0, upper=10, initial=INITIAL, noise=NoNoise()
    )
    for got, want in zip(result.history, _lloyd(points, INITIAL, 5), strict=True):
        np.testing.assert_array_equal(got, want)
    # and Lloyd's recovers the three centres
    labels = assign(points, result.centroids)
    assert sorted(np.bincount(labels).tolist()) == [100, 100, 100]


def test_huge_epsilon_seeded_noise_is_lloyd_to_numerical_precision() -> None:
    points = _blobs(1)
    plan = parse_strategy("AVG").build(4, epsilon="1e12")
    result = dp_kmeans(
        FakeSource(),
        points,
        k=3,
        budgets=plan,
        lower=0,
        upper=10,
        initial=INITIAL,
        noise=SeededNoise(0),
    )
    for got, want in zip(result.history, _lloyd(points, INITIAL, 4), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-9)


def test_noise_scales_and_draws_follow_the_sequence() -> None:
    points = _blobs(2)
    plan = parse_strategy("AC-Flip-Geo", noise_bound=40).build(4, epsilon="0.8")
    source = FakeSource()
    noise = RecordingNoise(SeededNoise(7))
    result = dp_kmeans(
        source,
        points,
        k=3,
        budgets=plan,
        lower=0,
        upper=10,
        initial=INITIAL,
        noise=noise,
        count_fraction=0.25,
    )
    assert result.epsilons == plan.terms and not result.secure_noise
    assert [cost for cost, _ in source.draws] == [Budget(epsilon=t) for t in plan.terms]
    assert len(noise.calls) == 8
    for j, eps in enumerate(plan.terms):
        (k1, s1, n1), (k2, s2, n2) = noise.calls[2 * j], noise.calls[2 * j + 1]
        assert (k1, n1, k2, n2) == (NoiseKind.LAPLACE, 3, NoiseKind.LAPLACE, 6)
        assert s1 == pytest.approx(1 / (float(eps) * 0.25), rel=1e-12)
        assert s2 == pytest.approx(sum_sensitivity(2.0) / (float(eps) * 0.75), rel=1e-12)
        assert s1 >= 1 / (float(eps) * 0.25) * (1 - 1e-15)  # scale rounded up, never down


def test_refused_draw_releases_nothing() -> None:
    noise = NoNoise()
    with pytest.raises(BudgetExceededError):
        dp_kmeans(
            FakeSource(refuse=True),
            _blobs(),
            k=3,
            budgets=parse_strategy("AVG").build(2, epsilon=1),
            lower=0,
            upper=10,
            seed=1,
            noise=noise,
        )
    assert noise.calls == []


def test_bad_input() -> None:
    plan = parse_strategy("AVG").build(2, epsilon=1)
    with pytest.raises(DataError, match="n × d"):
        dp_kmeans(FakeSource(), np.zeros(3), k=2, budgets=plan, lower=0, upper=1)
    with pytest.raises(DataError, match="finite"):
        dp_kmeans(FakeSource(), np.array([[np.nan, 0.0]]), k=2, budgets=plan, lower=0, upper=1)
    with pytest.raises(InvalidRequestError, match="lower < upper"):
        dp_kmeans(FakeSource(), np.zeros((3, 2)), k=2, budgets=plan, lower=1, upper=1)
    with pytest.raises(InvalidRequestError, match="k must"):
        dp_kmeans(FakeSource(), np.zeros((3, 2)), k=0, budgets=plan, lower=0, upper=1)
    with pytest.raises(InvalidRequestError, match="exceeds the 2 budget terms"):
        dp_kmeans(FakeSource(), np.zeros((3, 2)), k=2, budgets=plan, lower=0, upper=1, iterations=3)
    with pytest.raises(InvalidRequestError, match="initial"):
        dp_kmeans(
            FakeSource(), np.zeros((3, 2)), k=2, budgets=plan, lower=0, upper=1, initial=[[0, 0]]
        )
    pts = np.zeros((3, 2))
    with pytest.raises(DataError, match="numeric"):
        dp_kmeans(FakeSource(), "abc", k=2, budgets=plan, lower=0, upper=1)
    with pytest.raises(InvalidRequestError, match="bounds"):
        dp_kmeans(FakeSource(), pts, k=2, budgets=plan, lower="a", upper=1)
    with pytest.raises(InvalidRequestError, match="count_fraction"):
        dp_kmeans(FakeSource(), pts, k=2, budgets=plan, lower=0, upper=1, count_fraction="0.5")
    with pytest.raises(InvalidRequestError, match="BudgetSequence"):
        dp_kmeans(FakeSource(), pts, k=2, budgets=[0.5, 0.5], lower=0, upper=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="initial"):
        dp_kmeans(FakeSource(), pts, k=2, budgets=plan, lower=0, upper=1, initial="x")


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    p = Platform(tmp_path / "home")
    p.add_context("analytics")
    p.create_stream("points", policy=Budget(epsilon=1.0), blocking=DAY)
    pts = _blobs(3)
    rng = np.random.default_rng(0)
    for d in range(2):
        start = pd.Timestamp("2024-05-01") + pd.Timedelta(days=d)
        part = pts[d::2]
        p.ingest(
            "points",
            pd.DataFrame(
                {
                    "ts": start + pd.to_timedelta(rng.integers(0, 86_400, len(part)), unit="s"),
                    "x": part[:, 0],
                    "y": part[:, 1],
                }
            ),
        )
    yield p
    p.close()


def test_kmeans_on_a_grant_charges_the_ledger_per_iteration(platform: Platform) -> None:
    plan = parse_strategy("Flip-Geo").build(5, epsilon="0.5")
    with platform.request(
        "points", blocks=Last(2), budget=Budget(epsilon="0.5"), context="analytics"
    ) as grant:
        frame = grant.frame()
        result = dp_kmeans(
            grant,
            frame[["x", "y"]].to_numpy(),
            k=3,
            budgets=plan,
            lower=0,
            upper=10,
            initial=INITIAL,
            noise=SeededNoise(5),
        )
        assert len(result.history) == 5
        assert [cost for _, cost in grant.draws] == [Budget(epsilon=t) for t in plan.terms]
        blocks = grant.blocks
    f = platform.filter("points")
    for block in blocks:
        state = platform.ledger.state(block, "analytics")
        assert state.charged == f.features(Budget(epsilon=plan.total))
    charged = [e for e in platform.ledger.events() if e.kind is EventKind.CHARGED]
    assert len(charged) == 5
    # a second run does not fit what is left: refused before any noise
    with platform.request(
        "points", blocks=Last(2), budget=Budget(epsilon="0.4"), context="analytics"
    ) as grant:
        too_much = parse_strategy("AVG").build(2, epsilon="0.5")
        noise = NoNoise()
        with pytest.raises(ReservationError):
            dp_kmeans(
                grant,
                grant.frame()[["x", "y"]].to_numpy(),
                k=3,
                budgets=too_much,
                lower=0,
                upper=10,
                seed=0,
                noise=noise,
            )
        assert len(noise.calls) == 2  # iteration 1 (0.25) fit; iteration 2 was refused
        assert grant.spent == Budget(epsilon=too_much.terms[0])
    assert platform.verify().ok

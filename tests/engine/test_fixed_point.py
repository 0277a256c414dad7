"""The fixed-point encoding: its bound holds for every value, and DuckDB's SQL writes the same
integers as the reference (numpy) for extreme bounds, ties and tiny ranges."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from blockbudget.engine import FIXED_POINT_BITS, Bins, FixedPoint
from blockbudget.engine.duckdb_sql import Columns, Params, _encode
from blockbudget.mechanisms.inputs import MAX_BOUND

bound = st.floats(min_value=-MAX_BOUND, max_value=MAX_BOUND, allow_nan=False)
anything = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def fixed_points(draw: st.DrawFn) -> FixedPoint:
    """Bounds anywhere in ±2**960, often a tiny range (a few ulps wide), any centre."""
    lower = draw(bound)
    if draw(st.booleans()):
        upper = lower
        for _ in range(draw(st.integers(1, 4))):
            upper = math.nextafter(upper, math.inf)
    else:
        upper = draw(bound.filter(lambda u: u > lower))
    centre = draw(st.one_of(st.just(0.0), st.just((lower + upper) / 2), bound))
    return FixedPoint(lower, upper, centre)


@given(fixed_points(), st.lists(anything, max_size=20))
def test_encode_never_exceeds_max_units(fixed: FixedPoint, values: list[float]) -> None:
    assert 1 <= fixed.max_units <= 2**FIXED_POINT_BITS or fixed.radius == 0.0
    assert fixed.quantum > 0.0 and math.frexp(fixed.quantum)[0] == 0.5  # a power of two
    extremes = [fixed.lower, fixed.upper, fixed.centre, -math.inf, math.inf]
    units = fixed.encode(np.array(values + extremes, dtype=np.float64))
    assert int(np.abs(units).max()) <= fixed.max_units


def test_tiny_range_has_a_positive_quantum() -> None:
    fixed = FixedPoint(0.0, 5e-324)  # the smallest subnormal: q would round to 0
    assert fixed.quantum == 5e-324
    assert fixed.encode(np.array([1.0, -1.0, 5e-324]))[0] == fixed.max_units == 1


def test_sql_encoding_equals_the_reference_bit_for_bit() -> None:
    import duckdb

    rng = np.random.default_rng(961)
    cases = [
        FixedPoint(-4.0, 4.0),
        FixedPoint(-2.5, 7.0, centre=2.25),
        FixedPoint(0.0, 5e-324),
        FixedPoint(-(2.0**960), 2.0**960, centre=2.0**959),
        FixedPoint(1e-310, 3e-310, centre=2e-310),  # subnormal: q = 2**-1074, 1/q overflows
        FixedPoint(1.0, math.nextafter(1.0, 2.0)),
        FixedPoint(-3.0, 1e300),
    ]
    con = duckdb.connect()
    for fixed in cases:
        q = fixed.quantum
        ties = (np.arange(-50, 50) + 0.5) * q + fixed.centre  # exact halves: round half up
        values = np.concatenate(
            [
                ties,
                rng.uniform(fixed.lower, fixed.upper, 500),
                fixed.lower + rng.standard_normal(100) * q,
                [fixed.lower, fixed.upper, fixed.centre, -1e308, 1e308, 0.0, -0.0],
            ]
        )
        values = values[np.isfinite(values)]
        params = Params()
        sql = _encode(params, "x", Columns(frozenset({"x"}), frozenset({"x"})), fixed)
        con.register("vals", pa.table({"x": values}))
        got = con.execute(f"SELECT {sql} AS v FROM vals", params.values).fetchnumpy()["v"]
        np.testing.assert_array_equal(got, fixed.encode(values), err_msg=repr(fixed))


def test_bins_cover_the_range() -> None:
    bins = Bins(-1.0, 2.0, 3)
    idx = bins.index(np.array([-5.0, -1.0, -0.5, 0.0, 1.999, 2.0, 9.0]))
    assert idx.tolist() == [0, 0, 0, 1, 2, 2, 2]


def test_importing_the_engine_package_is_light() -> None:
    code = (
        "import sys, blockbudget.engine as e; e.engine_names(); "
        "print(sorted(m for m in ('duckdb', 'ray', 'fsspec') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

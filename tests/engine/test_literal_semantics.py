"""Engine-level literal semantics: -0.0 equals 0.0 in every engine, DuckDB maps declared values
to their indexes in SQL (never failing on what the rows hold) and compares in UTC; a data root
refuses credentials in its URI."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from engine_support import write_source

from blockbudget.engine import AggKind, Aggregate, GroupKey, Op, Plan, Predicate
from blockbudget.engine.arrow_engine import ArrowEngine
from blockbudget.engine.duckdb_engine import DuckDBEngine
from blockbudget.errors import InvalidRequestError
from blockbudget.store.files import DataFiles, refuse_credentials

UTC = dt.UTC


def test_minus_zero_equals_zero_in_every_engine(tmp_path: Path) -> None:
    table = pa.table({"x": pa.array([-0.0, 0.0, 1.0, -0.0, None], pa.float64())})
    source = write_source(str(tmp_path), [[table]])
    plan = Plan(
        source,
        (
            Aggregate("n", AggKind.COUNT),
            Aggregate("h", AggKind.CATEGORIES, "x", categories=(0.0,)),
        ),
        predicates=(Predicate("x", Op.IN, (0.0, 1.0)),),
        group_by=(GroupKey("x", (0.0, 1.0)),),
    )
    duck = DuckDBEngine(threads=1)
    try:
        for engine in (ArrowEngine(), duck):
            parts = engine.aggregate(plan)
            assert parts.of("n") == (3, 1), engine.name
            assert parts.of("h") == (3, 0), engine.name
    finally:
        duck.close()


@pytest.mark.parametrize("minute", [0, 30])  # 05:00 is a row, 05:30 is not
def test_duckdb_maps_declared_values_in_sql_whatever_the_rows_hold(
    tmp_path: Path, minute: int
) -> None:
    """A plan built by hand with literals of another type than the column's (the query layer
    converts them first): DuckDB may match them after a conversion, and the engine must not
    fail depending on whether a row matched (it did, on group keys and categories)."""
    hours = [dt.datetime(2024, 3, 1, h) for h in range(8)]
    table = pa.table(
        {
            "t": pa.array(hours, pa.timestamp("us")),
            "d": pa.array([Decimal("0.10")] * 8, pa.decimal128(5, 2)),
        }
    )
    source = write_source(str(tmp_path), [[table]])
    when = dt.datetime(2024, 3, 1, 5, minute, tzinfo=UTC)
    engine = DuckDBEngine(threads=1)
    try:
        by_time = Plan(source, (Aggregate("n", AggKind.COUNT),), group_by=(GroupKey("t", (when,)),))
        assert engine.aggregate(by_time).of("n") in ((0,), (1,))
        by_decimal = Plan(
            source,
            (Aggregate("h", AggKind.CATEGORIES, "d", categories=(0.1, 0.2)),),
            group_by=(GroupKey("d", (0.1,)),),
        )
        assert engine.aggregate(by_decimal).of("h") in ((8, 0), (0, 0))
    finally:
        engine.close()


def test_duckdb_compares_timestamps_in_utc(tmp_path: Path) -> None:
    table = pa.table({"t": pa.array([dt.datetime(2024, 3, 1, 12)], pa.timestamp("us", tz="UTC"))})
    source = write_source(str(tmp_path), [[table]])
    engine = DuckDBEngine(threads=1)
    try:
        cursor, _ = engine._cursor(source)
        assert cursor.execute("SELECT current_setting('TimeZone')").fetchone() == ("UTC",)
        cursor.close()
        noon = dt.datetime(2024, 3, 1, 12, tzinfo=UTC)
        plan = Plan(source, (Aggregate("n", AggKind.COUNT),), (Predicate("t", Op.EQ, noon),))
        assert engine.aggregate(plan).of("n") == (1,)
    finally:
        engine.close()


@pytest.mark.parametrize(
    "uri",
    [
        "s3://AKIAEXAMPLE:wJalrSECRET@bucket/blocks",
        "s3://bucket/blocks?access_key=AKIAEXAMPLE&secret_key=wJalrSECRET",
        "s3://bucket/blocks?region=eu-west-1&SESSION_TOKEN=tok",
    ],
)
def test_a_data_root_uri_with_credentials_is_refused(uri: str) -> None:
    with pytest.raises(InvalidRequestError, match="must not carry credentials") as err:
        DataFiles(uri)
    assert "wJalr" not in str(err.value) and "AKIAEXAMPLE" not in str(err.value)
    refuse_credentials("s3://bucket/blocks?region=eu-west-1&endpoint_override=127.0.0.1:9000")


def test_a_uint64_comparison_does_not_depend_on_the_rows(tmp_path: Path) -> None:
    """``u < 5`` with a Python int: Arrow cast the uint64 column to int64 and failed only when
    a row held ``2**63`` or more (an exact, noise-free bit about the data)."""
    table = pa.table({"u": pa.array([1, 2**63, 7], pa.uint64())})
    source = write_source(str(tmp_path), [[table]])
    plan = Plan(source, (Aggregate("n", AggKind.COUNT),), (Predicate("u", Op.LT, 5),))
    duck = DuckDBEngine(threads=1)
    try:
        for engine in (ArrowEngine(), duck):
            assert engine.aggregate(plan).of("n") == (1,), engine.name
    finally:
        duck.close()

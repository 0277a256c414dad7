"""Literals are converted to their columns' types before anything is reserved or sealed, so no
engine fails (or answers differently) depending on the data; a failure after the engine has
touched rows is paid for."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from mechanisms.fakes import NoNoise

from blockbudget.budget import Budget
from blockbudget.errors import DataError, InvalidRequestError, ReservationError
from blockbudget.ledger import EventKind
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, run
from blockbudget.query.checks import MAX_SUM_ROWS, check_rows
from blockbudget.query.jsonform import from_dict, to_dict
from blockbudget.store import Blocking
from query.support import platform, state

UTC = dt.UTC

ENGINES = ["arrow", "duckdb"]


def typed_platform(home: Path, engine: str) -> Platform:
    """Stream ``s``: one hourly block of five rows over columns of many types."""
    p = Platform(home, engine=engine)
    p.create_stream("s", policy=Budget(epsilon=1e6), blocking=Blocking.by_time("t"))
    p.add_context("a")
    hours = [dt.datetime(2024, 1, 1, 0, m) for m in range(5)]
    table = pa.table(
        {
            "t": pa.array(hours, pa.timestamp("us")),
            "n": pa.array([1, 2, 2, 3, 4], pa.int64()),
            "f": pa.array([0.5, 0.25, 0.5, 0.1, None], pa.float32()),
            "x": pa.array([-0.0, 0.0, 1.0, -0.0, None], pa.float64()),
            "d": pa.array(
                [Decimal(v) for v in ("0.10", "0.25", "0.10", "1.00", "2.50")], pa.decimal128(5, 2)
            ),
        }
    )
    p.ingest("s", table.to_pandas())
    return p


def answer(p: Platform, q: Query) -> list[Any]:
    out = run(p, "s", q, blocks=Last(1), context="a", noise=NoNoise())
    return [g.value for g in out.groups]


#: (query, the exact answer by hand) — each literal converts exactly to its column's type.
AGREED = [
    (Query.count(epsilon=1).group_by("n", [1.0, 2]), [1.0, 2.0]),  # 1.0 is the int 1
    (Query.count(epsilon=1).where("n", "<", 2.5), [3.0]),  # n < 3
    (Query.count(epsilon=1).where("n", ">", 1.5), [4.0]),  # n > 1
    (Query.count(epsilon=1).where("f", "==", 0.5), [2.0]),  # 0.5 is a float32
    (Query.count(epsilon=1).group_by("f", [0.5, 0.25]), [2.0, 1.0]),
    (Query.count(epsilon=1).group_by("x", [0.0, 1.0]), [3.0, 1.0]),  # -0.0 is 0.0
    (Query.count(epsilon=1).where("x", "in", [-0.0]), [3.0]),
    (Query.histogram("x", [0.0], epsilon=1), [{0.0: 3.0}]),
    (Query.count(epsilon=1).group_by("d", [0.1, 2.5]), [2.0, 1.0]),  # Decimal('0.1')
    (Query.count(epsilon=1).where("d", "==", 0.25), [1.0]),
    (Query.histogram("d", [0.1, 1], epsilon=1), [{0.1: 2.0, 1: 1.0}]),
]


@pytest.mark.parametrize("engine", ENGINES)
def test_engines_agree_on_literals_converted_to_the_column_type(
    tmp_path: Path, engine: str
) -> None:
    p = typed_platform(tmp_path, engine)
    try:
        for q, expected in AGREED:
            assert answer(p, q) == expected, (engine, q)
    finally:
        p.close()


#: Literals that do not convert exactly: refused by the checks, whatever the rows hold.
REFUSED = [
    Query.count(epsilon=1).group_by("n", [1.5, 2]),
    Query.histogram("n", [1.5, 3], epsilon=1),
    Query.count(epsilon=1).where("n", "==", 2**64),
    Query.count(epsilon=1).where("n", "<", float("inf")),
    Query.count(epsilon=1).where("f", "==", 0.1),  # not a float32
    Query.count(epsilon=1).group_by("f", [0.1]),
    Query.count(epsilon=1).group_by("d", [0.105]),  # more digits than the scale
    Query.count(epsilon=1).where("t", "<", dt.datetime(2024, 1, 1, tzinfo=UTC)),  # aware/naive
    Query.count(epsilon=1).group_by("t", [dt.datetime(2024, 1, 1, 0, 1, tzinfo=UTC)]),
]


@pytest.mark.parametrize("engine", ENGINES)
def test_literals_that_do_not_fit_exactly_are_refused_before_anything_changes(
    tmp_path: Path, engine: str
) -> None:
    p = typed_platform(tmp_path, engine)
    try:
        before = state(p)
        for q in REFUSED:
            with pytest.raises(InvalidRequestError, match="does not fit column"):
                run(p, "s", q, blocks=Last(1), context="a")
            assert state(p) == before, q  # nothing sealed, reserved or charged
    finally:
        p.close()


def test_an_aware_domain_value_is_no_membership_oracle(tmp_path: Path) -> None:
    """The review's probe: on a naive timestamp column, a present and an absent value of an
    aware domain were told apart by whether the DuckDB engine failed, at no cost."""
    p = platform(tmp_path, engine="duckdb")
    try:
        before = state(p)
        outcomes = []
        for minute in (0, 30):  # 05:00 is a row of the stream, 05:30 is not
            when = dt.datetime(2024, 3, 1, 5, minute, tzinfo=UTC)
            q = Query.count(epsilon=1).group_by("time", [when])
            with pytest.raises(InvalidRequestError) as err:
                run(p, "s", q, blocks=Last(2), context="a")
            outcomes.append(str(err.value).replace("5, 30,", "5, 0,"))
        assert outcomes[0] == outcomes[1]
        assert state(p) == before
    finally:
        p.close()


@pytest.mark.parametrize(
    ("engine", "query"),
    [
        ("arrow", Query.count(epsilon=1).where("time", "<", dt.datetime(2024, 3, 2, tzinfo=UTC))),
        ("arrow", Query.count(epsilon=1).where("n", "==", 2**64)),
        (
            "duckdb",
            Query.count(epsilon=1).group_by("time", [dt.datetime(2024, 3, 1, 5, tzinfo=UTC)]),
        ),
    ],
)
def test_a_refused_query_leaves_the_blocks_unsealed(
    tmp_path: Path, engine: str, query: Query
) -> None:
    p = platform(tmp_path, engine=engine)
    try:
        before = state(p)
        assert before[1] == (False, False)
        with pytest.raises(InvalidRequestError):
            run(p, "s", query, blocks=Last(2), context="a")
        assert state(p) == before
    finally:
        p.close()


def test_a_failure_after_the_engine_touched_rows_is_charged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = platform(tmp_path, engine="arrow")
    try:

        def failing(self: object, plan: object) -> None:
            raise DataError("a part file is missing")

        monkeypatch.setattr(type(p.engine), "aggregate", failing)
        before = len(p.ledger.events())
        with pytest.raises(DataError):
            run(p, "s", Query.count(epsilon=0.5), blocks=Last(2), context="a")
        kinds = [e.kind for e in p.ledger.events()[before:]]
        assert kinds == [EventKind.RESERVED, EventKind.CHARGED, EventKind.RELEASED]
    finally:
        p.close()


def test_a_sum_over_too_many_rows_is_refused() -> None:
    q = Query.sum("v", epsilon=1, lower=0, upper=1)
    check_rows(q, MAX_SUM_ROWS - 1)
    check_rows(Query.count(epsilon=1), MAX_SUM_ROWS)
    for statistic in (q, Query.mean("v", epsilon=1, lower=0, upper=1)):
        with pytest.raises(InvalidRequestError, match="fewer than 4500000000 rows"):
            check_rows(statistic, MAX_SUM_ROWS)


def test_a_grant_generator_stops_after_close(tmp_path: Path) -> None:
    p = platform(tmp_path)
    try:
        grant = p.request("s", blocks=Last(2), budget=Budget(epsilon=1), context="a")
        batches = grant.batches(batch_rows=5)
        assert next(batches).num_rows == 5
        grant.close()
        with pytest.raises(ReservationError, match="closed"):
            next(batches)
    finally:
        p.close()


def test_a_decimal_literal_survives_the_json_form(tmp_path: Path) -> None:
    q = Query.count(epsilon=1).where("d", "==", Decimal("0.25")).group_by("d", [Decimal("0.10")])
    assert from_dict(to_dict(q)) == q
    p = typed_platform(tmp_path, "duckdb")
    try:
        assert answer(p, Query.count(epsilon=1).where("d", "in", [Decimal("0.1"), 2.5])) == [3.0]
    finally:
        p.close()


def test_values_distinct_in_python_but_one_timestamp_are_refused(tmp_path: Path) -> None:
    """``fold=1`` in New York and its UTC instant are unequal in Python but one Arrow timestamp:
    as two groups, DuckDB counted one row in both (parallel composition broken)."""
    import zoneinfo

    q = Platform(tmp_path, engine="duckdb")
    q.create_stream("s", policy=Budget(epsilon=1e6), blocking=Blocking.by_time("t"))
    q.add_context("a")
    instant = dt.datetime(2024, 11, 3, 6, 30, tzinfo=UTC)
    q.ingest("s", pa.table({"t": pa.array([instant], pa.timestamp("us", tz="UTC"))}))
    folded = dt.datetime(2024, 11, 3, 1, 30, tzinfo=zoneinfo.ZoneInfo("America/New_York"), fold=1)
    assert folded != instant
    before = state(q)
    for query in (
        Query.count(epsilon=1).group_by("t", [folded, instant]),
        Query.histogram("t", [folded, instant], epsilon=1),
        Query.count(epsilon=1).where("t", "in", [folded, instant]),
    ):
        with pytest.raises(InvalidRequestError, match="not distinct"):
            run(q, "s", query, blocks=Last(1), context="a", noise=NoNoise())
    assert state(q) == before
    one = run(
        q,
        "s",
        Query.count(epsilon=1).where("t", "==", folded),
        blocks=Last(1),
        context="a",
        noise=NoNoise(),
    )
    assert [g.value for g in one.groups] == [1.0]
    q.close()


def test_a_nanosecond_literal_is_refused(tmp_path: Path) -> None:
    import pandas as pd

    p = typed_platform(tmp_path, "duckdb")
    t0 = pd.Timestamp("2024-01-01 00:00:00")
    with pytest.raises(InvalidRequestError, match="nanosecond part"):
        run(
            p,
            "s",
            Query.count(epsilon=1).group_by("t", [t0, t0 + pd.Timedelta(1, "ns")]),
            blocks=Last(1),
            context="a",
            noise=NoNoise(),
        )
    p.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_decimal_literal_is_written_at_the_column_scale(tmp_path: Path, engine: str) -> None:
    """``Decimal('1.0')`` on ``decimal(38, 0)``: DuckDB bound DECIMAL(2,1), and the common type
    of 39 digits failed on a row of 38 digits (the failure depended on the data)."""
    p = Platform(tmp_path, engine=engine)
    p.create_stream("s", policy=Budget(epsilon=1e6), blocking=Blocking.by_time("t"))
    p.add_context("a")
    hours = [dt.datetime(2024, 1, 1, h) for h in range(2)]
    big = Decimal(10**37 + 3)
    p.ingest(
        "s",
        pa.table(
            {
                "t": pa.array(hours, pa.timestamp("us")),
                "d": pa.array([Decimal(1), big], pa.decimal128(38, 0)),
            }
        ),
    )
    for query, expected in (
        (Query.count(epsilon=1).where("d", "<", Decimal("5.0")), [1.0]),
        (Query.count(epsilon=1).where("d", "==", Decimal("1.0")), [1.0]),
        (Query.count(epsilon=1).where("d", "in", [Decimal("1.00")]), [1.0]),
        (Query.count(epsilon=1).group_by("d", [Decimal("1.0"), Decimal("7.00")]), [1.0, 0.0]),
    ):
        out = run(p, "s", query, blocks=Last(2), context="a", noise=NoNoise())
        assert [g.value for g in out.groups] == expected, (engine, query)
    p.close()

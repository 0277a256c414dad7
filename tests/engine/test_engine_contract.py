"""One contract for every engine: exact integers by hand, null/NaN semantics, bounding, errors.

Every test runs once per engine (``engine`` fixture); a new engine registered in
:mod:`blockbudget.engine.builtin` is checked by this file without a line changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from engine_support import reference_aggregate, reference_rows, write_source

from blockbudget.engine import (
    AggKind,
    Aggregate,
    Bins,
    BlockFiles,
    Engine,
    FixedPoint,
    GroupKey,
    Op,
    Plan,
    Predicate,
    ScanSource,
    engine_names,
    get_engine,
    zero_partials,
)
from blockbudget.errors import DataError, InvalidRequestError

NAN = float("nan")
ENGINES = engine_names()


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """Each registered engine, once per module (Ray: one local cluster of 2 CPUs, started after
    the S3 server has set its credentials in the environment the workers inherit)."""
    if request.param == "ray":
        request.getfixturevalue("s3_server")
        from blockbudget.engine.ray_engine import RayEngine

        eng: Engine = RayEngine(num_cpus=2)
    else:
        eng = get_engine(request.param)
    yield eng
    eng.close()


def _table() -> pa.Table:
    """Six rows with a null and a NaN: the hand-computed cases below refer to them."""
    return pa.table(
        {
            "k": pa.array(["a", "b", "a", None, "c", "b"]),
            "n": pa.array([1, 2, 3, 4, None, 6], type=pa.int64()),
            "x": pa.array([1.0, 2.0, None, NAN, 4.0, -3.0]),
        }
    )


@pytest.fixture
def src(tmp_path: Path) -> ScanSource:
    """The six rows split over two blocks (the first of two part files)."""
    t = _table()
    return write_source(str(tmp_path), [[t.slice(0, 2), t.slice(2, 1)], [t.slice(3)]])


def _count(engine: Engine, source: ScanSource, *preds: Predicate) -> int:
    plan = Plan(source, (Aggregate("n", AggKind.COUNT),), predicates=preds)
    (value,) = engine.aggregate(plan).of("n")
    return value


Q = 2.0**-18  # the quantum of [0, 4] and of [-4, 4]: radius 4 = 2**2, 2**2 / 2**20


def test_value_aggregates_by_hand(engine: Engine, src: ScanSource) -> None:
    fixed = FixedPoint(0.0, 4.0)
    assert fixed.quantum == Q
    plan = Plan(
        src,
        (
            Aggregate("rows", AggKind.COUNT),
            Aggregate("xs", AggKind.COUNT, "x"),  # null and NaN are not values
            Aggregate("sum", AggKind.SUM, "x", fixed=fixed),  # -3 clips to 0
            Aggregate("sq", AggKind.SUM_SQUARES, "x", fixed=fixed),
            Aggregate("csum", AggKind.SUM, "x", fixed=FixedPoint(-4.0, 4.0, centre=0.5)),
            Aggregate("cats", AggKind.CATEGORIES, "k", categories=("a", "b"), other=True),
            Aggregate("cats_only", AggKind.CATEGORIES, "k", categories=("b", "zz")),
            Aggregate("bins", AggKind.BINS, "x", bins=Bins(0.0, 4.0, 4)),  # 4.0 → last bin
            Aggregate("nsum", AggKind.SUM, "n", fixed=FixedPoint(0.0, 4.0)),
        ),
    )
    got = engine.aggregate(plan)
    assert got.of("rows") == (6,)
    assert got.of("xs") == (4,)
    assert got.of("sum") == ((1 + 2 + 4) * 2**18,)
    assert got.of("sq") == (2**36 + 2**38 + 2**40,)
    # centre 0.5: 0.5 + 1.5 + 3.5 - 3.5 = 2, quantum 2**-17 (radius 4.5 → 8 · 2**-20)
    assert got.of("csum") == (2 * 2**17,)
    assert got.of("cats") == (2, 2, 1)
    assert got.of("cats_only") == (2, 0)
    assert got.of("bins") == (1, 1, 1, 1)
    assert got.of("nsum") == ((1 + 2 + 3 + 4 + 4) * 2**18,)  # 6 clips to 4


@pytest.mark.parametrize(
    ("column", "op", "value", "expected"),
    [
        ("n", Op.EQ, 2, 1),
        ("n", Op.NE, 2, 4),  # the null n is not "!= 2"
        ("n", Op.LT, 3, 2),
        ("n", Op.LE, 3, 3),
        ("n", Op.GT, 3, 2),
        ("n", Op.GE, 3, 3),
        ("n", Op.IN, (1, 6, 99), 2),
        ("n", Op.NOT_IN, (1, 6), 3),  # null excluded
        ("n", Op.IS_NULL, None, 1),
        ("n", Op.NOT_NULL, None, 5),
        ("x", Op.NE, 1.0, 3),  # neither null nor NaN
        ("x", Op.LT, 100.0, 4),  # NaN is not < 100
        ("x", Op.GT, -100.0, 4),  # NaN is not > -100 (no NaN ordering)
        ("x", Op.NOT_IN, (1.0,), 3),
        ("x", Op.IN, (1.0, 4.0), 2),
        ("x", Op.IS_NULL, None, 2),  # NaN reads as null
        ("x", Op.NOT_NULL, None, 4),
        ("k", Op.EQ, "a", 2),
        ("k", Op.NE, "a", 3),
        ("k", Op.GE, "b", 3),
        ("k", Op.IS_NULL, None, 1),
    ],
)
def test_predicates_with_nulls_and_nan(
    engine: Engine, src: ScanSource, column: str, op: Op, value: Any, expected: int
) -> None:
    assert _count(engine, src, Predicate(column, op, value)) == expected


def test_predicates_combine_with_and(engine: Engine, src: ScanSource) -> None:
    both = (Predicate("k", Op.EQ, "b"), Predicate("n", Op.GT, 2))
    assert _count(engine, src, *both) == 1


def test_group_by_declared_domain(engine: Engine, src: ScanSource) -> None:
    plan = Plan(
        src,
        (Aggregate("c", AggKind.COUNT), Aggregate("b", AggKind.BINS, "x", bins=Bins(0, 4, 2))),
        group_by=(GroupKey("k", ("b", "a", "zz")),),  # "c" and null are dropped
    )
    got = engine.aggregate(plan)
    assert got.of("c") == (2, 2, 0)
    # b: x 2.0 (bin 1), -3 (bin 0); a: x 1.0 (bin 0), null; zz: nothing
    assert got.of("b") == (1, 1, 1, 0, 0, 0)


def test_group_by_two_keys_row_major(engine: Engine, src: ScanSource) -> None:
    plan = Plan(
        src,
        (Aggregate("c", AggKind.COUNT),),
        group_by=(GroupKey("k", ("a", "b")), GroupKey("n", (1, 2, 3, 6))),
    )
    # rows (a,1) (b,2) (a,3) (b,6); (None,4) and (c,None) dropped
    assert engine.aggregate(plan).of("c") == (1, 0, 1, 0, 0, 1, 0, 1)


def test_nan_group_value_is_dropped(engine: Engine, src: ScanSource) -> None:
    plan = Plan(src, (Aggregate("c", AggKind.COUNT),), group_by=(GroupKey("x", (1.0, 4.0)),))
    assert engine.aggregate(plan).of("c") == (1, 1)


def _user_blocks() -> list[list[pa.Table]]:
    """Block 0: users 1, 2, 3 spread over two files; block 1: users 7, 8."""

    def t(users: list[int], xs: list[float]) -> pa.Table:
        return pa.table({"u": pa.array(users, pa.int64()), "x": pa.array(xs)})

    return [
        [t([1, 2, 1, 1], [1.0, 2.0, 3.0, 4.0]), t([2, 1, 3], [5.0, 6.0, 7.0])],
        [t([8, 7, 8], [8.0, 9.0, 10.0]), t([8], [11.0])],
    ]


@pytest.mark.parametrize(
    ("k", "kept"),
    [(1, [1.0, 2.0, 7.0, 8.0, 9.0]), (2, [1.0, 2.0, 3.0, 5.0, 7.0, 8.0, 9.0, 10.0])],
)
def test_user_level_bounding_keeps_first_rows_in_stored_order(
    engine: Engine, tmp_path: Path, k: int, kept: list[float]
) -> None:
    source = write_source(str(tmp_path), _user_blocks(), user="u", rows_per_user=k)
    fixed = FixedPoint(0.0, 16.0)
    plan = Plan(
        source, (Aggregate("c", AggKind.COUNT), Aggregate("s", AggKind.SUM, "x", fixed=fixed))
    )
    got = engine.aggregate(plan)
    assert got.of("c") == (len(kept),)
    assert got.of("s") == (int(sum(kept) / fixed.quantum),)
    rows = [r for b in engine.batches(source, columns=["x"], batch_rows=1) for r in b.to_pylist()]
    assert rows == [{"x": x} for x in kept]


def test_bounding_comes_before_predicates(engine: Engine, tmp_path: Path) -> None:
    source = write_source(str(tmp_path), _user_blocks(), user="u", rows_per_user=1)
    # user 1's first row (x=1) fails the filter; its later rows must not take its place
    assert _count(engine, source, Predicate("x", Op.GT, 1.5)) == 4


def test_empty_sources(engine: Engine, tmp_path: Path) -> None:
    plan_aggs = (
        Aggregate("c", AggKind.COUNT),
        Aggregate("b", AggKind.BINS, "x", bins=Bins(0, 1, 3)),
    )
    nothing = ScanSource(blocks=(), base=str(tmp_path), columns=("k", "x"))
    plan = Plan(nothing, plan_aggs, group_by=(GroupKey("k", ("a", "b")),))
    assert engine.aggregate(plan).values == zero_partials(plan).values
    assert list(engine.batches(nothing)) == []
    empty = write_source(str(tmp_path / "e"), [[_table().slice(0, 0)]])
    plan = Plan(empty, plan_aggs, group_by=(GroupKey("k", ("a", "b")),))
    assert engine.aggregate(plan).values == zero_partials(plan).values
    assert sum(b.num_rows for b in engine.batches(empty)) == 0
    # every row filtered out
    assert _count(engine, empty, Predicate("x", Op.GT, 0.0)) == 0


def test_batches_bounded_filtered_projected_in_order(engine: Engine, tmp_path: Path) -> None:
    source = write_source(str(tmp_path), _user_blocks(), user="u", rows_per_user=2)
    got = list(
        engine.batches(source, columns=["x"], predicates=[Predicate("u", Op.NE, 2)], batch_rows=2)
    )
    assert all(b.num_rows <= 2 and b.schema.names == ["x"] for b in got)
    xs = [r["x"] for b in got for r in b.to_pylist()]
    assert xs == [1.0, 3.0, 7.0, 8.0, 9.0, 10.0]
    every = pa.Table.from_batches(list(engine.batches(source)))
    assert every.column_names == ["u", "x"]
    assert every.num_rows == 8


@pytest.mark.parametrize(
    ("columns", "predicates", "batch_rows"),
    [
        ([], (), 10),
        (["x", "x"], (), 10),
        (["nope"], (), 10),
        (["x"], (Predicate("zz", Op.EQ, 1),), 10),
        (["x"], (), 0),
    ],
)
def test_bad_batches_arguments_are_refused_at_the_call(
    engine: Engine,
    src: ScanSource,
    columns: list[str],
    predicates: tuple[Predicate, ...],
    batch_rows: int,
) -> None:
    with pytest.raises(InvalidRequestError):
        engine.batches(src, columns=columns, predicates=predicates, batch_rows=batch_rows)


def _random_blocks() -> list[list[pa.Table]]:
    """Three blocks of three part files of 300 random rows (nulls, NaN, 40 users a block)."""
    rng = np.random.default_rng(20261123)

    def random_table(rows: int, first_user: int) -> pa.Table:
        x = rng.normal(0.0, 3.0, rows)
        x[rng.random(rows) < 0.05] = np.nan
        return pa.table(
            {
                "u": pa.array(rng.integers(first_user, first_user + 40, rows)),
                "g": pa.array(rng.choice(["p", "q", "r", "s"], rows)),
                "n": pa.array(rng.integers(-5, 50, rows), mask=rng.random(rows) < 0.1),
                "x": pa.array(x, mask=rng.random(rows) < 0.1),
            }
        )

    return [[random_table(300, 100 * b) for _ in range(3)] for b in range(3)]


def _random_plan(source: ScanSource) -> Plan:
    fixed = FixedPoint(-2.5, 7.0, centre=2.25)
    return Plan(
        source,
        (
            Aggregate("c", AggKind.COUNT),
            Aggregate("s", AggKind.SUM, "x", fixed=fixed),
            Aggregate("q", AggKind.SUM_SQUARES, "x", fixed=fixed),
            Aggregate("ns", AggKind.SUM, "n", fixed=FixedPoint(0.0, 30.0)),
            Aggregate("b", AggKind.BINS, "x", bins=Bins(-5.0, 5.0, 7)),
            Aggregate("cat", AggKind.CATEGORIES, "n", categories=(1, 2, 3), other=True),
        ),
        predicates=(
            Predicate("n", Op.NE, 7),
            Predicate("x", Op.LT, 6.0),
            Predicate("g", Op.NOT_IN, ("q",)),
            Predicate("n", Op.GE, -3.5),
        ),
        group_by=(GroupKey("g", ("s", "p", "q", "zz")),),
    )


def test_agrees_with_a_row_by_row_reference(engine: Engine, tmp_path: Path) -> None:
    tables = _random_blocks()
    source = write_source(str(tmp_path), tables, user="u", rows_per_user=3)
    plan = _random_plan(source)
    expected = reference_aggregate(plan, reference_rows(source, tables))
    assert dict(engine.aggregate(plan).values) == expected


def test_agrees_with_the_reference_on_s3(engine: Engine, s3_root: str) -> None:
    fs, base = pafs.FileSystem.from_uri(s3_root)
    tables = _random_blocks()
    for user, k in ((None, None), ("u", 2)):
        source = write_source(base, tables, filesystem=fs, uri=s3_root, user=user, rows_per_user=k)
        plan = _random_plan(source)
        expected = reference_aggregate(plan, reference_rows(source, tables))
        assert dict(engine.aggregate(plan).values) == expected


def test_missing_or_damaged_part_file_is_a_data_error(engine: Engine, tmp_path: Path) -> None:
    source = write_source(str(tmp_path), [[_table()], [_table()]])
    (tmp_path / "b1" / "part-0.parquet").write_bytes(b"PAR1 SECRET-CONTENT 12345 PAR1")
    with pytest.raises(DataError) as err:
        engine.aggregate(Plan(source, (Aggregate("c", AggKind.COUNT, "x"),)))
    assert "SECRET" not in str(err.value)
    (tmp_path / "b1" / "part-0.parquet").unlink()
    with pytest.raises(DataError, match="part-0"):
        engine.aggregate(Plan(source, (Aggregate("c", AggKind.COUNT, "x"),)))
    with pytest.raises(DataError):
        list(engine.batches(source))


def test_missing_file_among_many_blocks_is_a_data_error(engine: Engine, tmp_path: Path) -> None:
    source = write_source(str(tmp_path), [[_table()], [_table()]])
    gone = ScanSource(
        blocks=(*source.blocks, BlockFiles("s/9", ("b9/part-0.parquet",), 6)),
        base=source.base,
        columns=source.columns,
        uri=source.uri,
    )
    with pytest.raises(DataError):
        engine.aggregate(Plan(gone, (Aggregate("c", AggKind.COUNT),)))


def test_s3_source(engine: Engine, s3_root: str) -> None:
    fs, base = pafs.FileSystem.from_uri(s3_root)
    t = _table()
    source = write_source(base, [[t.slice(0, 3), t.slice(3)]], filesystem=fs, uri=s3_root)
    plan = Plan(
        source,
        (Aggregate("c", AggKind.COUNT), Aggregate("s", AggKind.SUM, "x", fixed=FixedPoint(0, 4))),
        predicates=(Predicate("k", Op.NE, "c"),),
    )
    got = engine.aggregate(plan)
    assert got.of("c") == (4,)  # rows a, b, a, b (null k and "c" dropped)
    assert got.of("s") == ((1 + 2) * 2**18,)
    rows = pa.Table.from_batches(list(engine.batches(source, columns=["n"])))
    assert rows.column("n").to_pylist() == [1, 2, 3, 4, None, 6]
    fs.delete_file(f"{base}/b0/part-1.parquet")
    with pytest.raises(DataError, match="part-1"):
        engine.aggregate(plan)
    with pytest.raises(DataError, match="part-1"):
        list(engine.batches(source, columns=["n"]))

"""Engines on a real block store: a user-level stream ingested in several batches (so a block
has several part files and a user's rows are spread over them), local and on S3."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from blockbudget import Budget
from blockbudget.engine import AggKind, Aggregate, Engine, FixedPoint, Op, Plan, Predicate
from blockbudget.engine.arrow_engine import ArrowEngine
from blockbudget.engine.duckdb_engine import DuckDBEngine
from blockbudget.platform import Platform
from blockbudget.store import Blocking, LatePolicy

K = 2


def _platform(home: Path, data_root: str | None = None) -> Platform:
    p = Platform(home, data_root=data_root)
    p.create_stream(
        "visits",
        policy=Budget(epsilon=1.0, delta=1e-6),
        blocking=Blocking.by_user("uid", ids_per_block=20, rows_per_user=K),
        late_policy=LatePolicy.DROP,
    )
    rng = np.random.default_rng(5)
    for batch in range(3):  # three ingests: three part files per block
        uids = rng.integers(0, 60, 120)
        v = rng.normal(1.0, 2.0, 120)
        v[::17] = np.nan
        p.ingest("visits", pd.DataFrame({"uid": uids, "v": v, "batch": batch}))
    return p


def _first_rows_per_user(table: pa.Table, column: str, k: int) -> pa.Table:
    """The first ``k`` rows of each user, in stored order (plain Python)."""
    seen: dict[object, int] = {}
    keep = []
    for user in table.column(column).to_pylist():
        seen[user] = seen.get(user, 0) + 1
        keep.append(seen[user] <= k)
    return table.filter(pa.array(keep))


def _check(p: Platform, engine: Engine) -> None:
    blocks = [b.block_id for b in p.blocks("visits")]
    source = p.store.source(blocks)
    assert source.user_column == "uid" and source.rows_per_user == K
    assert any(len(b.paths) > 1 for b in source.blocks)
    expected = _first_rows_per_user(p.store.read(blocks), "uid", K)
    got = pa.Table.from_batches(list(engine.batches(source, batch_rows=7)))
    assert got.select(expected.column_names).to_pylist() == expected.to_pylist()
    fixed = FixedPoint(-3.0, 5.0)
    plan = Plan(
        source,
        (Aggregate("n", AggKind.COUNT, "v"), Aggregate("s", AggKind.SUM, "v", fixed=fixed)),
        predicates=(Predicate("batch", Op.NE, 1),),
    )
    kept = expected.filter(pc.not_equal(expected.column("batch"), 1))
    values = kept.column("v").to_numpy(zero_copy_only=False)
    values = values[~np.isnan(values)]
    assert engine.aggregate(plan).values == {
        "n": (len(values),),
        "s": (int(fixed.encode(values).sum()),),
    }


@pytest.mark.parametrize("engine_type", [ArrowEngine, DuckDBEngine])
def test_engines_read_a_user_level_store(tmp_path: Path, engine_type: type[Engine]) -> None:
    engine = engine_type()
    try:
        _check(_platform(tmp_path), engine)
    finally:
        engine.close()


def test_duckdb_reads_a_user_level_store_on_s3(tmp_path: Path, s3_root: str) -> None:
    engine = DuckDBEngine(threads=2, memory_limit="512MB")
    try:
        _check(_platform(tmp_path, data_root=s3_root), engine)
    finally:
        engine.close()


def test_one_duckdb_engine_serves_several_threads(tmp_path: Path) -> None:
    p = _platform(tmp_path)
    source = p.store.source([b.block_id for b in p.blocks("visits")])
    plan = Plan(source, (Aggregate("s", AggKind.SUM, "v", fixed=FixedPoint(-3.0, 5.0)),))
    engine = DuckDBEngine(threads=1)
    expected = ArrowEngine().aggregate(plan)
    results: list[object] = []

    def work() -> None:
        for _ in range(5):
            results.append(engine.aggregate(plan))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.close()
    assert results == [expected] * 30

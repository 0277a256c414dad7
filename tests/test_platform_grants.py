"""Lazy grants: a request reserves and seals but reads no row; the grant reads its part files
through the platform's engine only when asked, keeps what it materialised until it closes, and
a read error leaves the reservation as it was."""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from userids_support import make_known

from blockbudget import Budget
from blockbudget.engine import Engine, Op, Partials, Plan, Predicate, ScanSource, get_engine
from blockbudget.errors import DataError, ReservationError, UnknownColumnError
from blockbudget.mechanisms import statistics as stats
from blockbudget.platform import Last, Platform
from blockbudget.store import Blocking, LatePolicy

USERS = Blocking.by_user("uid", ids_per_block=1000, rows_per_user=2)


class CountingEngine(Engine):
    """Delegates to a real engine and counts what it is asked to read."""

    name = "counting"

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.batch_calls = 0
        self.aggregate_calls = 0

    def aggregate(self, plan: Plan) -> Partials:
        self.aggregate_calls += 1
        return self.inner.aggregate(plan)

    def batches(
        self,
        source: ScanSource,
        *,
        columns: Sequence[str] | None = None,
        predicates: Sequence[Predicate] = (),
        batch_rows: int = 65_536,
    ) -> Iterator[pa.RecordBatch]:
        self.batch_calls += 1
        return self.inner.batches(
            source, columns=columns, predicates=predicates, batch_rows=batch_rows
        )


def user_platform(home: Path, uids: list[int], **kwargs: Any) -> Platform:
    """A user-level stream ``visits`` (k = 2 rows per user) holding one row per uid given,
    ``v`` numbering the rows in ingest order."""
    p = Platform(home, **kwargs)
    p.add_context("a")
    p.create_stream(
        "visits",
        policy=Budget(epsilon=1.0, delta=1e-6),
        blocking=USERS,
        late_policy=LatePolicy.DROP,
    )
    p.ingest("visits", pd.DataFrame({"uid": uids, "v": np.arange(len(uids), dtype=float)}))
    make_known(p, "visits")  # a user stream is gated until its maximum id is released
    return p


def part_files(p: Platform, stream: str) -> list[Path]:
    return sorted((p.home / "blocks" / stream).rglob("*.parquet"))


@pytest.fixture
def visits(tmp_path: Path) -> Iterator[Platform]:
    # user 7 has 5 rows (k = 2 kept: v = 0, 1); users 10..19 one row each (v = 5..14);
    # users 1000..1002 are in the second block (v = 15, 16, 17).
    p = user_platform(tmp_path / "h", [7] * 5 + list(range(10, 20)) + [1000, 1001, 1002])
    yield p
    p.close()


def test_request_reads_no_part_file_and_a_missing_one_fails_at_read(visits: Platform) -> None:
    for path in part_files(visits, "visits"):
        path.unlink()  # the store was damaged outside blockbudget
    grant = visits.request("visits", blocks=Last(2), budget=Budget(epsilon=0.5), context="a")
    for read in (lambda: grant.frame(), lambda: grant.data, lambda: list(grant.batches())):
        with pytest.raises(DataError):
            read()
    with pytest.raises(DataError):
        _ = grant.num_rows
    # Reading after the request returned releases nothing: the reservation stays open.
    state = visits.ledger.state("visits/u000000-000999", "a")
    assert any(state.reserved) and not any(state.charged)
    grant.close()
    assert not any(visits.ledger.state("visits/u000000-000999", "a").reserved)
    assert visits.verify().ok


def test_the_grant_reads_once_and_keeps_what_it_read_until_it_closes(tmp_path: Path) -> None:
    engine = CountingEngine(get_engine("arrow"))
    p = user_platform(tmp_path / "h", [7] * 5 + list(range(10, 20)), engine=engine)
    try:
        grant = p.request("visits", blocks=Last(1), budget=Budget(epsilon=0.5), context="a")
        assert (engine.batch_calls, engine.aggregate_calls) == (0, 0)  # nothing read yet
        table = grant.data
        frame = grant.frame()
        assert grant.num_rows == 2 + 10  # user 7 keeps k = 2 rows
        assert grant.frame()["v"].tolist() == frame["v"].tolist()
        assert engine.batch_calls == 1 and engine.aggregate_calls == 0  # one read, then cached
        assert frame["v"].tolist() == [0.0, 1.0, *[float(v) for v in range(5, 15)]]
        frame["w"] = 1.0  # a caller's change does not reach the next call
        assert "w" not in grant.frame().columns
        ref = weakref.ref(table)
        del table
        grant.close()
        gc.collect()
        assert ref() is None  # closing dropped the cache
        with pytest.raises(ReservationError, match="closed"):
            grant.frame()
        with pytest.raises(ReservationError, match="closed"):
            grant.batches()
    finally:
        p.close()


def test_num_rows_counts_after_bounding_without_keeping_rows(tmp_path: Path) -> None:
    engine = CountingEngine(get_engine("arrow"))
    p = user_platform(tmp_path / "h", [7] * 5 + list(range(10, 20)), engine=engine)
    try:
        with p.request("visits", blocks=Last(1), budget=Budget(epsilon=0.5), context="a") as g:
            assert g.num_rows == 12 and g.num_rows == 12
            assert engine.aggregate_calls == 1 and engine.batch_calls == 0
    finally:
        p.close()


def test_batches_project_and_filter_within_the_grants_columns(visits: Platform) -> None:
    with visits.request(
        "visits", blocks=Last(2), budget=Budget(epsilon=0.5), context="a", columns=["v"]
    ) as g:
        assert g.columns == ("v",)
        assert g.data.column_names == ["v"]  # the user column bounded the rows, then went
        assert g.frame()["v"].tolist() == [0.0, 1.0, *[float(v) for v in range(5, 18)]]
        rows = pa.Table.from_batches(
            list(g.batches(predicates=[Predicate("v", Op.GE, 14.0)], batch_rows=2))
        )
        assert rows.column("v").to_pylist() == [14.0, 15.0, 16.0, 17.0]
        with pytest.raises(UnknownColumnError):
            g.batches(columns=["uid"])  # outside the grant's projection
        with pytest.raises(UnknownColumnError):
            g.batches(predicates=[Predicate("uid", Op.EQ, 7)])
        result = stats.dp_count(g, g.frame(), epsilon=0.1)
        assert result.cost == Budget(epsilon=0.1) and g.spent == Budget(epsilon=0.2)


def test_an_empty_read_keeps_the_streams_types(visits: Platform) -> None:
    with visits.request("visits", blocks=Last(1), budget=Budget(epsilon=0.1), context="a") as g:
        none = list(g.batches(predicates=[Predicate("v", Op.LT, -1.0)]))
        assert sum(b.num_rows for b in none) == 0
        assert g.schema is not None and g.data.schema.equals(g.schema)


def test_request_allocates_nothing_proportional_to_rows(tmp_path: Path) -> None:
    """The request over 400,000 rows (6.4 MB as int64 + float64 columns, bounding needed)
    neither reads nor bounds rows: its Python/numpy peak and the Arrow memory it keeps are
    tiny next to the data (the former request read, bounded and kept all of them)."""
    rows = 400_000
    uids = np.random.default_rng(5).integers(0, 1000, rows).tolist()
    p = user_platform(tmp_path / "h", uids)
    data_bytes = rows * 16
    try:
        gc.collect()
        arrow_before = pa.total_allocated_bytes()
        tracemalloc.start()
        grant = p.request("visits", blocks=Last(1), budget=Budget(epsilon=0.5), context="a")
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        kept = pa.total_allocated_bytes() - arrow_before
        assert peak < data_bytes / 10, (peak, data_bytes)
        assert kept < data_bytes / 100, (kept, data_bytes)
        assert grant.source.rows == rows
        assert grant.num_rows == 2000  # 1000 users × k = 2 (each has ~400 rows)
        grant.close()
    finally:
        p.close()

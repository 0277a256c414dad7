"""Orphaned part files (issue 30, item 5): an ingest killed with SIGKILL leaves Parquet files
the catalog does not list. The first ingest into the stream after a restart removes those
older than the grace (never a file the catalog lists, never a young one an ingest in flight
may still commit), and :meth:`BlockStore.check_files` compares the data root with the catalog
both ways (orphans, and listed parts whose file is missing, as after a restore)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from store_helpers import part_files, time_spec

import blockbudget
from blockbudget.errors import UnknownBlockError
from blockbudget.store import BlockStore, catalog
from blockbudget.store import blockstore as blockstore_module

SCHEMA = pa.schema([("time_hour", pa.timestamp("us")), ("x", pa.float64())])
SRC = str(Path(blockbudget.__file__).resolve().parent.parent)
TWO_DAYS = 2 * 86_400


def _day(day: int, rows: int = 100) -> pa.Table:
    return pa.table(
        [pa.array([datetime(2013, 1, day)] * rows, pa.timestamp("us")), pa.array([1.0] * rows)],
        schema=SCHEMA,
    )


def _plant(root: Path, rel: str, *, age_seconds: float = 0.0) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"x": [1]}), path)
    _age(root, rel, age_seconds)
    return rel


def _age(root: Path, rel: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(root / rel, (then, then))


def _listed(store: BlockStore) -> set[str]:
    with store.engine.connect() as conn:
        return catalog.select_part_paths(conn)


def test_the_first_ingest_after_a_restart_sweeps_old_orphans_of_its_stream(
    db_url: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with BlockStore(db_url, root) as store:
        store.create_stream(time_spec())
        store.create_stream(time_spec("other"))
        store.ingest("flights", _day(1))
    (listed,) = part_files(root)
    _age(root, listed, TWO_DAYS)  # an old file the catalog lists is never an orphan
    old = _plant(root, "flights/2013-01-09/1/part-dead.parquet", age_seconds=TWO_DAYS)
    young = _plant(root, "flights/2013-01-08/1/part-young.parquet")  # an ingest in flight?
    elsewhere = _plant(root, "other/2013-01-09/1/part-dead.parquet", age_seconds=TWO_DAYS)
    with BlockStore(db_url, root) as store:  # a restart
        store.ingest("flights", _day(2))
        assert old not in part_files(root)
        assert {listed, young, elsewhere} <= set(part_files(root))
        assert set(part_files(root)) - {young, elsewhere} == _listed(store)
        assert [store.read(m.block_id).num_rows for m in store.blocks("flights")] == [100, 100]
        # once per grace in a process: a later ingest does not list the directory again
        again = _plant(root, "flights/2013-01-07/1/part-dead.parquet", age_seconds=TWO_DAYS)
        store.ingest("flights", _day(3))
        assert again in part_files(root)
        later = time.monotonic() + blockstore_module.ORPHAN_GRACE.total_seconds() + 1
        monkeypatch.setattr(blockstore_module.time, "monotonic", lambda: later)
        store.ingest("flights", _day(4))  # a long-running server, a day later
        assert again not in part_files(root) and young in part_files(root)


def test_no_sweep_when_disabled_and_a_failed_sweep_fails_no_ingest(
    db_url: str, root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    old = _plant(root, "flights/2013-01-09/1/part-dead.parquet", age_seconds=TWO_DAYS)
    with BlockStore(db_url, root, orphan_grace=None) as store:
        store.create_stream(time_spec())
        store.ingest("flights", _day(1))
        assert old in part_files(root)
    with BlockStore(db_url, root) as store:

        def broken(*args: object, **kwargs: object) -> list[str]:
            raise OSError("the object store is unreachable")

        monkeypatch.setattr(store, "vacuum", broken)
        with caplog.at_level(logging.WARNING, logger="blockbudget.store"):
            report = store.ingest("flights", _day(2))
        assert report.rows == 100 and len(store.blocks("flights")) == 2
        assert "sweeping orphaned part files of stream 'flights' failed" in caplog.text
        assert old in part_files(root)


def test_check_files_reports_orphans_and_missing_files(store: BlockStore, root: Path) -> None:
    store.create_stream(time_spec())
    store.create_stream(time_spec("other"))
    store.ingest("flights", pa.concat_tables([_day(1), _day(2)]))
    store.ingest("other", _day(1))
    clean = store.check_files("flights")
    assert clean.ok and clean.files == clean.parts == 2 and clean.stream == "flights"
    orphan = _plant(root, "flights/2013-01-09/1/part-dead.parquet", age_seconds=TWO_DAYS)
    young = _plant(root, "flights/2013-01-08/1/part-young.parquet")
    stray = _plant(root, "gone/2013-01-01/1/part-beef.parquet")  # under no stream
    lost = next(p for p in part_files(root) if p.startswith("flights/2013-01-02/"))
    (root / lost).unlink()  # as after restoring the files from an older backup
    check = store.check_files("flights")
    assert not check.ok
    assert [p for p, _ in check.orphans] == [young, orphan]
    assert all(m is not None and m.tzinfo is not None for _, m in check.orphans)
    assert check.missing == (lost,) and (check.files, check.parts) == (3, 2)
    assert check.orphans_older_than(timedelta(hours=1)) == [orphan]
    assert check.orphans_older_than(timedelta(0)) == [young, orphan]
    everything = store.check_files()
    assert everything.stream is None and everything.parts == 3
    assert {p for p, _ in everything.orphans} == {orphan, young, stray}
    assert everything.missing == (lost,)
    assert store.check_files("other").ok
    with pytest.raises(UnknownBlockError):
        store.check_files("nope")
    # removing the old orphans never touches a listed file; the missing one stays reported
    assert store.vacuum("flights", older_than=timedelta(hours=1)) == [orphan]
    after = store.check_files("flights")
    assert [p for p, _ in after.orphans] == [young] and after.missing == (lost,)
    assert _listed(store) - {lost} <= set(part_files(root))


#: Ingests day after day with small batches into the store at argv[1] (catalog) / argv[2]
#: (root), writing each batch's part file at once, and says "staged" once two days' files are
#: on disk — then waits to be killed before its commit.
KILLED = """
import sys, time
from datetime import datetime
import pyarrow as pa
from blockbudget.store import BlockStore
sys.path.insert(0, sys.argv[3])
from store_helpers import time_spec

SCHEMA = pa.schema([("time_hour", pa.timestamp("us")), ("x", pa.float64())])

def batches():
    for day in (1, 2, 3):
        yield pa.record_batch(
            [pa.array([datetime(2013, 1, day)] * 50, pa.timestamp("us")), pa.array([1.0] * 50)],
            schema=SCHEMA,
        )
        if day == 2:
            print("staged", flush=True)
            time.sleep(600)

store = BlockStore(sys.argv[1], sys.argv[2])
store.create_stream(time_spec())
store.ingest("flights", pa.RecordBatchReader.from_batches(SCHEMA, batches()), buffer_bytes=0)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_an_ingest_killed_with_sigkill_leaves_orphans_the_next_ingest_removes(
    db_url: str, root: Path
) -> None:
    tests_dir = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, tests_dir])}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, db_url, str(root), tests_dir],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "staged", proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    left = part_files(root)
    assert len(left) == 2  # days 1 and 2, staged, never committed
    with BlockStore(db_url, root) as store:
        assert store.blocks("flights") == [] and _listed(store) == set()
        check = store.check_files("flights")
        assert [p for p, _ in check.orphans] == left and check.missing == ()
        store.ingest("flights", _day(5))  # too young for the sweep: kept
        assert set(left) <= set(part_files(root))
    for rel in left:
        _age(root, rel, TWO_DAYS)
    with BlockStore(db_url, root) as store:  # the next restart, a day or more later
        store.ingest("flights", _day(6))
        assert set(part_files(root)) == _listed(store)
        assert not set(left) & set(part_files(root))
        assert store.check_files().ok
        assert [m.key for m in store.blocks("flights")] == ["2013-01-05", "2013-01-06"]

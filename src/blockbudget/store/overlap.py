"""How an ingest's rows overlap the rows a stream already holds, and what to do about it.

Rows overlap *by key* when their block key already has stored rows (a catalog look-up of the
ingest's keys). Rows are *exact duplicates* when every column equals a stored row's (nulls equal
to nulls), counted as multisets: an input row ``r`` present twice against one stored ``r`` is
one duplicate and one new row, the first in input order being the duplicate. Equal rows have
equal blocking columns, hence equal keys, so one comparison covers every key at once.

The comparison reads only the part files of the blocks whose keys the ingest touches (through
a lazy pyarrow dataset, so an object store works as a local directory does) and the ingest's own
staged files, and runs in DuckDB: the stored rows are counted per distinct row (a hash
aggregate), the staged rows numbered within their group of equal rows, and a staged row is a
duplicate when its number is at most the stored count. The cost therefore grows with the rows
of the touched keys, never with the stream's other blocks.

A concurrent ingest may add part files to a touched key between the check and the commit; the
commit compares the key's part files under the stream's lock with those checked and re-plans
when they differ, and the re-check reads only the added files (the staged rows left after the
first check, minus the duplicates in the added files, is exactly the input minus every stored
row, for multisets).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from blockbudget.errors import DuplicateRowsError
from blockbudget.store.files import DataFiles, WrittenPart
from blockbudget.store.model import OnOverlap, OverlapReport
from blockbudget.store.staging import Staged

_PART = "__bb_part"
_POS = "__bb_pos"
_RANK = "__bb_rank"
_COUNT = "__bb_count"


@dataclass
class OverlapCheck:
    """The running overlap check of one ingest (it may re-plan several times).

    Attributes:
        policy: what to do with exact duplicates.
        stored: per touched key, the stored part files compared so far (or, under APPEND,
            seen: APPEND reads none of them).
        keys: input rows per key that already had stored rows (counted once, at first sight).
        duplicates: exact duplicates found per key.
        skipped: duplicates left out (SKIP_DUPLICATES).
    """

    policy: OnOverlap
    stored: dict[str, set[str]] = field(default_factory=dict)
    keys: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    skipped: int = 0

    def report(self) -> OverlapReport:
        """What was found, for the ingest's report."""
        return OverlapReport(
            policy=self.policy,
            rows=sum(self.keys.values()),
            keys=dict(sorted(self.keys.items())),
            checked=self.policy is not OnOverlap.APPEND,
            duplicate_rows=sum(self.duplicates.values()),
            duplicates=dict(sorted(self.duplicates.items())),
            skipped_rows=self.skipped,
        )

    def expected(self) -> dict[str, set[str]] | None:
        """The stored part files the commit must still find per key (None under APPEND, whose
        report does not depend on them)."""
        return None if self.policy is OnOverlap.APPEND else self.stored

    def run(
        self,
        files: DataFiles,
        stream: str,
        staged: Staged,
        current: Mapping[str, Sequence[str]],
    ) -> None:
        """Compare the staged rows with the stored part files in ``current`` (per key, from
        the catalog) not compared yet; act on the duplicates by the policy.

        Raises:
            DuplicateRowsError: under REFUSE, when any row is an exact duplicate.
        """
        added: dict[str, list[str]] = {}
        for key, paths in current.items():
            if key not in staged.parts:
                continue  # rows not written (late under DROP): nothing to compare
            if key not in self.keys:
                self.keys[key] = staged.counts[key]
            seen = self.stored.setdefault(key, set())
            new = [p for p in paths if p not in seen]
            seen.update(new)
            if new:
                added[key] = new
        if not added or self.policy is OnOverlap.APPEND:
            return
        found = duplicate_positions(
            files,
            [p for paths in added.values() for p in paths],
            [(key, part) for key in added for part in staged.parts[key][1]],
        )
        for (key, _), positions in found.items():
            self.duplicates[key] = self.duplicates.get(key, 0) + len(positions)
        if not found:
            return
        if self.policy is OnOverlap.REFUSE:
            raise DuplicateRowsError(
                f"{staged.source}: {sum(self.duplicates.values())} row(s) repeat rows stream "
                f"{stream!r} already holds (every column equal), per block key: "
                f"{dict(sorted(self.duplicates.items()))}; nothing was ingested (on_overlap "
                "refuse). Ingest with on_overlap skip-duplicates to leave them out, or append "
                "to store them again",
                duplicates=self.duplicates,
            )
        self.skipped += skip_rows(files, stream, staged, found)


def duplicate_positions(
    files: DataFiles, stored: Sequence[str], parts: Sequence[tuple[str, WrittenPart]]
) -> dict[tuple[str, WrittenPart], list[int]]:
    """Per staged part (with its key), the positions of its rows that are exact duplicates of
    rows in the ``stored`` part files (multisets; see the module docstring). Parts without
    duplicates are left out."""
    import pyarrow.dataset as ds

    old = ds.dataset([files.full(p) for p in stored], filesystem=files.fs, format="parquet")
    tables = []
    for i, (_, part) in enumerate(parts):
        table = files.read_part(part.path, None)
        n = table.num_rows
        tables.append(
            table.append_column(_PART, pa.array([i] * n, pa.int32())).append_column(
                _POS, pa.array(range(n), pa.int64())
            )
        )
    new = pa.concat_tables(tables)
    cols = [_quote(c) for c in old.schema.names]
    on = " AND ".join(f"n.{c} IS NOT DISTINCT FROM o.{c}" for c in cols)
    sql = f"""
        WITH o AS (SELECT {", ".join(cols)}, count(*) AS {_COUNT} FROM old GROUP BY ALL),
        n AS (
            SELECT *, row_number() OVER (PARTITION BY {", ".join(cols)} ORDER BY {_PART}, {_POS})
                AS {_RANK}
            FROM new
        )
        SELECT n.{_PART}, n.{_POS} FROM n JOIN o ON {on} WHERE n.{_RANK} <= o.{_COUNT}
        ORDER BY 1, 2
    """
    con = _duckdb().cursor()  # a connection of its own (thread-safe), ~1 ms, not ~50
    try:
        con.register("old", old)
        con.register("new", new)
        rows = con.execute(sql).fetchall()
    finally:
        con.close()
    out: dict[tuple[str, WrittenPart], list[int]] = {}
    for index, pos in rows:
        out.setdefault(parts[index], []).append(int(pos))
    return out


def skip_rows(
    files: DataFiles,
    stream: str,
    staged: Staged,
    found: Mapping[tuple[str, WrittenPart], list[int]],
) -> int:
    """Rewrite the staged parts in ``found`` without those rows (a part left empty is removed,
    a key left without rows leaves the ingest); returns how many rows were left out."""
    skipped = 0
    for (key, part), positions in found.items():
        seq, parts = staged.parts[key]
        table = files.read_part(part.path, None)
        keep = sorted(set(range(table.num_rows)) - set(positions))
        rest = [p for p in parts if p.path != part.path]
        if keep:
            rewritten = files.write_part(stream, key, seq, table.take(pa.array(keep)))
            staged.paths.append(rewritten.path)
            rest.append(rewritten)
        files.remove_parts([part.path])
        removed = table.num_rows - len(keep)
        skipped += removed
        staged.counts[key] -= removed
        if rest:
            staged.parts[key] = (seq, rest)
        else:
            del staged.parts[key]
            if staged.counts[key] == 0:
                del staged.counts[key]
                del staged.keys[key]
    staged.skipped += skipped
    return skipped


_DB: list[Any] = []  # one in-memory DuckDB database per process, made on first use
_DB_LOCK = threading.Lock()


def _duckdb() -> Any:
    """The process's in-memory DuckDB database (its registered views are per cursor)."""
    with _DB_LOCK:
        if not _DB:
            import duckdb

            _DB.append(duckdb.connect())
        return _DB[0]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'

"""Helpers for the engine tests: part files written by hand, and a row-by-row Python reference."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from blockbudget.engine import AggKind, BlockFiles, Op, Plan, ScanSource


def write_source(
    root: str,
    blocks: Sequence[Sequence[pa.Table]],
    *,
    user: str | None = None,
    rows_per_user: int | None = None,
    filesystem: pafs.FileSystem | None = None,
    uri: str = "",
    schema: pa.Schema | None = None,
) -> ScanSource:
    """Write block ``i``'s tables as part files ``b{i}/part-{j}.parquet`` under ``root``."""
    fs = filesystem if filesystem is not None else pafs.LocalFileSystem()
    out = []
    for i, tables in enumerate(blocks):
        paths = []
        for j, table in enumerate(tables):
            rel = f"b{i}/part-{j}.parquet"
            fs.create_dir(f"{root}/b{i}", recursive=True)
            with fs.open_output_stream(f"{root}/{rel}") as sink:
                pq.write_table(table, sink)
            paths.append(rel)
        out.append(BlockFiles(f"s/{i}", tuple(paths), sum(t.num_rows for t in tables)))
    if schema is None:
        schema = next(t.schema for tables in blocks for t in tables)
    return ScanSource(
        blocks=tuple(out),
        base=root,
        columns=tuple(schema.names),
        filesystem=filesystem,
        uri=uri or root,
        user_column=user,
        rows_per_user=rows_per_user,
    )


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _passes(row: dict[str, Any], column: str, op: Op, value: Any) -> bool:
    cell = row[column]
    if op is Op.IS_NULL:
        return _missing(cell)
    if _missing(cell):
        return False
    if op is Op.NOT_NULL:
        return True
    if op is Op.IN:
        return bool(cell in value)
    if op is Op.NOT_IN:
        return bool(cell not in value)
    compare = {
        Op.EQ: cell == value,
        Op.NE: cell != value,
        Op.LT: cell < value,
        Op.LE: cell <= value,
        Op.GT: cell > value,
        Op.GE: cell >= value,
    }
    return bool(compare[op])


def reference_rows(
    source: ScanSource, tables: Sequence[Sequence[pa.Table]]
) -> list[dict[str, Any]]:
    """The rows a plan reads after contribution bounding, in stored order (pure Python)."""
    rows = []
    for block in tables:
        seen: dict[Any, int] = {}
        for table in block:
            for row in table.to_pylist():
                if source.user_column is not None:
                    assert source.rows_per_user is not None
                    user = row[source.user_column]
                    seen[user] = seen.get(user, 0) + 1
                    if seen[user] > source.rows_per_user:
                        continue
                rows.append(row)
    return rows


def reference_aggregate(plan: Plan, rows: Sequence[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    """A plan's partials computed one row at a time, in plain Python (the test oracle)."""
    out = {a.name: [0] * (plan.groups * a.width) for a in plan.aggregates}
    for row in rows:
        if not all(_passes(row, p.column, p.op, p.value) for p in plan.predicates):
            continue
        group = 0
        for key in plan.group_by:
            cell = row[key.column]
            if _missing(cell) or cell not in key.domain:
                break
            group = group * len(key.domain) + key.domain.index(cell)
        else:
            for agg in plan.aggregates:
                cell = row[agg.column] if agg.column is not None else 0
                base = group * agg.width
                if agg.kind is AggKind.CATEGORIES:
                    assert agg.categories is not None
                    if not _missing(cell) and cell in agg.categories:
                        out[agg.name][base + agg.categories.index(cell)] += 1
                    elif not _missing(cell) and agg.other:
                        out[agg.name][base + agg.width - 1] += 1
                    continue
                if _missing(cell):
                    continue
                x = np.array([float(cell)], dtype=np.float64)
                if agg.kind is AggKind.COUNT:
                    out[agg.name][base] += 1
                elif agg.kind is AggKind.BINS:
                    assert agg.bins is not None
                    out[agg.name][base + int(agg.bins.index(x)[0])] += 1
                else:
                    assert agg.fixed is not None
                    v = int(agg.fixed.encode(x)[0])
                    out[agg.name][base] += v if agg.kind is AggKind.SUM else v * v
    return {k: tuple(v) for k, v in out.items()}

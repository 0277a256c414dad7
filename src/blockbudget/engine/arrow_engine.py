"""The reference engine: pyarrow reads each part file in stored order, numpy aggregates.

Every other engine is checked against this one (``tests/engine/test_engine_contract.py``). It
reads one record batch at a time (column projection at the Parquet reader), so its memory is one
batch plus, on a user-level source, one counter per user of the block being read (user ids are
disjoint across blocks, so the counters are dropped at each block boundary).

The steps are those of :mod:`blockbudget.engine.plan`, in order: contribution bounding, then the
predicates, then the group mapping, then the aggregates (:mod:`blockbudget.engine.kernels`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from blockbudget.engine.base import Engine
from blockbudget.engine.kernels import Accumulator, filter_batch, output_columns
from blockbudget.errors import DataError, InvalidRequestError

if TYPE_CHECKING:
    from blockbudget.engine.plan import BlockFiles, Partials, Plan, Predicate, ScanSource

#: Rows per Parquet read batch: small enough for bounded memory, large enough for numpy.
READ_BATCH_ROWS = 65_536


class ArrowEngine(Engine):
    """Computes plans with pyarrow and numpy, one record batch at a time (stateless, so safe
    from several threads).

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
        >>> from blockbudget.engine import (
        ...     AggKind, Aggregate, BlockFiles, FixedPoint, Plan, ScanSource)
        >>> root = tempfile.mkdtemp()
        >>> pq.write_table(pa.table({"x": [1.0, 2.5, None]}), os.path.join(root, "p.parquet"))
        >>> src = ScanSource(blocks=(BlockFiles("s/1", ("p.parquet",), 3),), base=root,
        ...                  columns=("x",))
        >>> plan = Plan(src, (Aggregate("n", AggKind.COUNT),
        ...                   Aggregate("s", AggKind.SUM, "x", fixed=FixedPoint(0.0, 4.0))))
        >>> parts = ArrowEngine().aggregate(plan)
        >>> parts.of("n"), parts.of("s")[0] * FixedPoint(0.0, 4.0).quantum
        ((3,), 3.5)
    """

    name = "arrow"

    def aggregate(self, plan: Plan) -> Partials:
        acc = Accumulator(plan)
        for batch in _bounded_batches(plan.source, plan.columns(), READ_BATCH_ROWS):
            kept = filter_batch(batch, plan.predicates)
            if kept.num_rows:
                acc.add(kept)
        return acc.result()

    def batches(
        self,
        source: ScanSource,
        *,
        columns: Sequence[str] | None = None,
        predicates: Sequence[Predicate] = (),
        batch_rows: int = 65_536,
    ) -> Iterator[pa.RecordBatch]:
        out = output_columns(source, columns, predicates, batch_rows)  # checked at the call
        return _filtered(source, out, tuple(predicates), batch_rows)


def _filtered(
    source: ScanSource, out: list[str], predicates: tuple[Predicate, ...], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    needed = set(out) | {p.column for p in predicates}
    if source.user_column is not None:
        needed.add(source.user_column)
    read = [c for c in source.columns if c in needed]
    for batch in _bounded_batches(source, read, batch_rows):
        kept = filter_batch(batch, predicates)
        if kept.num_rows:
            yield kept.select(out)


def _bounded_batches(
    source: ScanSource, columns: Sequence[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """The source's rows, in stored order, after contribution bounding (projected)."""
    fs = source.filesystem if source.filesystem is not None else pafs.LocalFileSystem()
    user, limit = source.user_column, source.rows_per_user
    for block in source.blocks:
        bound = _UserBound(user, limit) if user is not None and limit is not None else None
        for batch in block_batches(fs, source.base, block, columns, batch_rows):
            if bound is not None:
                batch = bound.apply(batch)
            if batch.num_rows:
                yield batch


def block_batches(
    fs: pafs.FileSystem,
    base: str,
    block: BlockFiles,
    columns: Sequence[str],
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    """One block's rows, file by file in stored order, projected to ``columns``.

    Raises:
        DataError: a part file is missing, unreadable or lacks a column (the message names the
            block and the file, never the file's contents or the reader's error text).
    """
    for rel in block.paths:
        path = f"{base}/{rel}" if base else rel
        try:
            handle = fs.open_input_file(path)
        except (OSError, pa.ArrowException) as exc:
            raise _file_error(block, rel, exc) from None
        with handle:
            try:
                reader = pq.ParquetFile(handle)
                missing = sorted(set(columns) - set(reader.schema_arrow.names))
                if missing:
                    raise DataError(
                        f"part file {rel!r} of block {block.block_id!r} lacks column(s) {missing}"
                    )
                batches = reader.iter_batches(batch_size=batch_rows, columns=list(columns))
                while True:
                    try:
                        batch = next(batches)
                    except StopIteration:
                        break
                    yield batch
            except (OSError, pa.ArrowException) as exc:
                raise _file_error(block, rel, exc) from None


def find_damaged_file(source: ScanSource) -> DataError | None:
    """The error naming the first part file whose footer cannot be read (None: all readable).

    Engines that lose a failure's details (DuckDB's message text, a Ray worker's exception)
    call it on their error path only, to report which file is missing or damaged.
    """
    fs = source.filesystem if source.filesystem is not None else pafs.LocalFileSystem()
    for block in source.blocks:
        for rel in block.paths:
            try:
                pq.read_metadata(f"{source.base}/{rel}" if source.base else rel, filesystem=fs)
            except (OSError, pa.ArrowException) as exc:
                return _file_error(block, rel, exc)
    return None


def _file_error(block: BlockFiles, rel: str, exc: BaseException) -> DataError:
    return DataError(
        f"part file {rel!r} of block {block.block_id!r} is missing or unreadable "
        f"({type(exc).__name__}); the store's files were changed outside blockbudget"
    )


class _UserBound:
    """Keeps the first ``limit`` rows of each user, in the order batches arrive (one block).

    Rows of one user may be spread over several batches and files, so a running count per user
    is kept; within a batch a row's rank among its user's rows is computed by a stable sort.
    """

    def __init__(self, column: str, limit: int) -> None:
        if limit < 1:
            raise InvalidRequestError(f"rows_per_user must be at least 1, got {limit}")
        self._column = column
        self._limit = limit
        self._seen: dict[object, int] = {}

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        encoded = pc.dictionary_encode(batch.column(self._column), null_encoding="encode")
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        users = encoded.dictionary.to_pylist()  # a null user id counts as one user
        counts = np.bincount(codes, minlength=len(users))
        before = np.fromiter((self._seen.get(u, 0) for u in users), np.int64, len(users))
        order = np.argsort(codes, kind="stable")
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        rank = np.empty(len(codes), dtype=np.int64)
        rank[order] = np.arange(len(codes), dtype=np.int64) - np.repeat(starts, counts)
        keep = before[codes] + rank < self._limit
        limit = self._limit
        for user, prev, extra in zip(users, before.tolist(), counts.tolist(), strict=True):
            self._seen[user] = min(limit, prev + extra)
        if bool(keep.all()):
            return batch
        return batch.filter(pa.array(keep))

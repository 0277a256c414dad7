"""The first phase of an ingest: validate an input batch by batch and write its part files.

:func:`stage` reads the input's normalized batches (:func:`~blockbudget.store.inputs.open_batches`),
checks each against the stream's schema (the first batch of a first ingest fixes it for the
rest), validates its blocking column, groups its rows by block key (one ``take`` per key and batch:
compact copies that do not pin the batch) and hands each key's rows to
:class:`~blockbudget.store.writers.PartWriters`. A key's block (seq) is planned from a catalog
snapshot the first time the key appears; rows that are late under ``DROP`` or ``REJECT`` are
not written (lateness never reverts, see :func:`~blockbudget.store.planning.target_for`), and
once a ``REJECT`` ingest is known to fail nothing more is written, but the rest of the input is
still read and validated so that the error is the one a whole-input check would give. Nothing
is committed here: :class:`~blockbudget.store.blockstore.BlockStore` re-plans under the
stream's lock and commits, or deletes every file staged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from blockbudget.store.files import DataFiles, WrittenPart
from blockbudget.store.inputs import conform
from blockbudget.store.keys import KeyInfo, group_rows
from blockbudget.store.model import LatePolicy, StreamSpec
from blockbudget.store.planning import Target, fit_schema, target_for
from blockbudget.store.writers import PartWriters

#: Returns the closed bound and the latest (seq, sealed) of the given keys.
Snapshot = Callable[[Sequence[str]], tuple[int | None, dict[str, tuple[int, bool]]]]


@dataclass
class Staged:
    """An input's rows, validated and written as part files, not yet committed.

    Attributes:
        source: the input's description for messages.
        schema: the schema of every row (None for an empty input of unknown schema).
        keys: every key present, by key.
        counts: rows per key (including rows not written because late).
        rows: rows in the input.
        parts: the part files of each written key, with the seq they were written for.
        paths: every file written (for cleanup).
        skipped: rows left out as exact duplicates of stored rows (not in ``counts``).
    """

    source: str
    schema: pa.Schema | None = None
    keys: dict[str, KeyInfo] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    parts: dict[str, tuple[int, list[WrittenPart]]] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)
    skipped: int = 0

    def ordered(self) -> tuple[list[KeyInfo], list[int]]:
        """The keys in the store's key order (ordinal, then key) and their row counts."""
        keys = sorted(self.keys.values(), key=lambda k: (k.ordinal or 0, k.key))
        return keys, [self.counts[k.key] for k in keys]


@dataclass(frozen=True)
class WriterLimits:
    """Memory bounds of one ingest (see :mod:`blockbudget.store.writers`).

    Attributes:
        max_open: the most part files open for writing at once.
        buffer_bytes: the most bytes of rows buffered, not yet written.
    """

    max_open: int
    buffer_bytes: int


def stage(
    files: DataFiles,
    spec: StreamSpec,
    schema: pa.Schema | None,
    batches: Iterable[pa.Table],
    source: str,
    snapshot: Snapshot,
    limits: WriterLimits,
    on_table: Callable[[pa.Table], None] | None = None,
) -> Staged:
    """Validate ``batches`` and write their rows as part files (see the module docstring);
    ``on_table`` sees every batch as conformed to the stream's schema, in input order (the
    content hash: :mod:`blockbudget.store.content`).

    Raises:
        DataError: for any invalid row (nothing stays written then).
    """
    staged = Staged(source=source, schema=schema)
    planned: dict[str, Target | None] = {}
    writers: PartWriters | None = None
    doomed = False
    try:
        for batch in batches:
            table = fit_schema(
                batch, staged.schema, stream=spec.name, source=source, offset=staged.rows
            )
            staged.schema = table.schema
            if on_table is not None:
                on_table(table)
            grouping = group_rows(table, spec.blocking, source=source, offset=staged.rows)
            staged.rows += table.num_rows
            if table.num_rows == 0:
                continue
            new = [k for k in grouping.keys if k.key not in planned]
            if new:
                closed, latest = snapshot([k.key for k in new])
                for k in new:
                    t = target_for(0, k, latest.get(k.key), closed)
                    staged.keys[k.key] = k
                    staged.counts[k.key] = 0
                    write = not t.late or spec.late_policy is LatePolicy.NEW_BLOCK
                    doomed = doomed or (t.late and spec.late_policy is LatePolicy.REJECT)
                    planned[k.key] = t if write else None
            for k, pos in zip(grouping.keys, grouping.positions, strict=True):
                staged.counts[k.key] += len(pos)
            if doomed:
                continue
            if writers is None:
                writers = PartWriters(
                    files,
                    spec.name,
                    table.schema,
                    max_open=limits.max_open,
                    buffer_bytes=limits.buffer_bytes,
                )
            _route(writers, table, grouping.keys, grouping.positions, planned)
        if writers is not None:
            for (key, seq), parts in writers.finish().items():
                staged.parts[key] = (seq, parts)
            staged.paths = list(writers.paths)
    except BaseException:
        if writers is not None:
            files.remove_parts(writers.abort())
        raise
    return staged


def _route(
    writers: PartWriters,
    table: pa.Table,
    keys: Sequence[KeyInfo],
    positions: Sequence[np.ndarray],
    planned: dict[str, Target | None],
) -> None:
    """Hand each key's rows of one batch to its writer.

    With several keys each key's rows are copied out with their own ``take`` (the batch is one
    chunk, so that is cheap): a zero-copy slice of the batch would keep the whole batch alive
    while the slice waits in a buffer, and memory would grow with the input.
    """
    for k, pos in zip(keys, positions, strict=True):
        t = planned[k.key]
        if t is not None:
            writers.add((k.key, t.seq), table if len(keys) == 1 else table.take(pa.array(pos)))


def restage(
    files: DataFiles, spec: StreamSpec, staged: Staged, schema: pa.Schema, limits: WriterLimits
) -> Staged:
    """Rewrite staged part files conformed to ``schema`` (a concurrent first ingest fixed the
    stream's schema to another than this input's). The old files are removed.

    Raises:
        DataError: when a value does not fit ``schema`` (nothing stays written then).
    """
    writers = PartWriters(
        files, spec.name, schema, max_open=limits.max_open, buffer_bytes=limits.buffer_bytes
    )
    try:
        for key, (seq, parts) in staged.parts.items():
            for part in parts:
                with files.fs.open_input_file(files.full(part.path)) as handle:
                    for batch in pq.ParquetFile(handle).iter_batches():
                        table = pa.Table.from_batches([batch])
                        writers.add(
                            (key, seq),
                            conform(table, schema, stream=spec.name, source=staged.source),
                        )
        written = writers.finish()
    except BaseException:
        files.remove_parts(writers.abort())
        raise
    files.remove_parts(staged.paths)
    return Staged(
        source=staged.source,
        schema=schema,
        keys=staged.keys,
        counts=staged.counts,
        rows=staged.rows,
        skipped=staged.skipped,
        parts={key: (seq, parts) for (key, seq), parts in written.items()},
        paths=list(writers.paths),
    )

"""Streaming rows into block part files with bounded memory.

An ingest hands :class:`PartWriters` the rows of each input batch already split by target block
(a block key and seq). Rows are buffered per block and written as one Parquet row group once a
block has :data:`ROW_GROUP_ROWS` rows waiting, or, when all buffers together exceed
``buffer_bytes``, the largest buffers are written first. Each block being written has one open
:class:`pyarrow.parquet.ParquetWriter`; at most ``max_open`` are open at once, and opening one
more closes the least recently used (that block's later rows then start a second part file of the
same ingest: a *spill*). So the memory an ingest holds is bounded by one input batch, plus
``buffer_bytes`` of buffered rows, plus ``max_open`` writers' encoder state (and, on an object
store, each open writer's upload buffer) — whatever the input's size.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from blockbudget.store.files import DataFiles, WrittenPart

#: Rows per Parquet row group written (a block's buffer is flushed when it has this many).
ROW_GROUP_ROWS = 256 * 1024
#: Default cap on buffered (not yet written) bytes over all blocks of one ingest.
BUFFER_BYTES = 128 * 1024 * 1024
#: Default cap on part files open for writing at once in one ingest.
MAX_OPEN_WRITERS = 64

#: A target block: (block key, seq).
Target = tuple[str, int]


@dataclass
class _Open:
    """A part file being written."""

    rel: str
    sink: pa.NativeFile
    writer: pq.ParquetWriter
    rows: int = 0


class PartWriters:
    """The open part files of one ingest (see the module docstring).

    Args:
        files: where part files go.
        stream: the stream's name.
        schema: the schema every written table has.
        max_open: the most part files open at once (at least 1).
        buffer_bytes: the most bytes of rows buffered over all blocks.
        row_group_rows: rows per row group written.

    Example:
        >>> writers = PartWriters(files, "flights", schema)  # doctest: +SKIP
        >>> writers.add(("2013-01-01", 1), rows)  # doctest: +SKIP
        >>> writers.finish()[("2013-01-01", 1)][0].rows  # doctest: +SKIP
        842
    """

    def __init__(
        self,
        files: DataFiles,
        stream: str,
        schema: pa.Schema,
        *,
        max_open: int = MAX_OPEN_WRITERS,
        buffer_bytes: int = BUFFER_BYTES,
        row_group_rows: int = ROW_GROUP_ROWS,
    ) -> None:
        self._files = files
        self._stream = stream
        self.schema = schema
        self._max_open = max(1, max_open)
        self._buffer_cap = buffer_bytes
        self._group_rows = row_group_rows
        self._open: OrderedDict[Target, _Open] = OrderedDict()
        self._pending: dict[Target, list[pa.Table]] = {}
        self._pending_rows: dict[Target, int] = {}
        self._pending_bytes: dict[Target, int] = {}
        self._buffered = 0
        self.parts: dict[Target, list[WrittenPart]] = {}
        self.paths: list[str] = []
        self.spills = 0

    def add(self, target: Target, rows: pa.Table) -> None:
        """Buffer rows for a block; write when its buffer or the total is full."""
        if rows.num_rows == 0:
            return
        size = rows.nbytes
        self._pending.setdefault(target, []).append(rows)
        self._pending_rows[target] = self._pending_rows.get(target, 0) + rows.num_rows
        self._pending_bytes[target] = self._pending_bytes.get(target, 0) + size
        self._buffered += size
        if self._pending_rows[target] >= self._group_rows:
            self._flush(target)
        while self._buffered > self._buffer_cap and self._pending_bytes:
            self._flush(max(self._pending_bytes, key=self._pending_bytes.__getitem__))

    def finish(self) -> dict[Target, list[WrittenPart]]:
        """Write what is buffered and close every part file.

        Returns:
            Every part file written, by target, in writing order.
        """
        for target in list(self._pending):
            self._flush(target)
        for target in list(self._open):
            self._close(target)
        return self.parts

    def abort(self) -> list[str]:
        """Close everything without finishing it (errors ignored).

        Returns:
            Every path this object created, for the caller to delete.
        """
        for part in self._open.values():
            with contextlib.suppress(OSError, pa.ArrowException):
                part.writer.close()
            with contextlib.suppress(OSError, pa.ArrowException):
                part.sink.close()
        self._open.clear()
        self._pending.clear()
        return list(self.paths)

    def _flush(self, target: Target) -> None:
        tables = self._pending.pop(target)
        self._buffered -= self._pending_bytes.pop(target)
        rows = self._pending_rows.pop(target)
        part = self._open.get(target)
        if part is None:
            if len(self._open) >= self._max_open:
                self._close(next(iter(self._open)))  # least recently used
                self.spills += 1
            part = self._start(target)
        else:
            self._open.move_to_end(target)
        # One call, one row group: the buffered tables are concatenated without copying.
        part.writer.write_table(pa.concat_tables(tables), row_group_size=rows)
        part.rows += rows

    def _start(self, target: Target) -> _Open:
        rel, sink = self._files.open_part(self._stream, target[0], target[1])
        self.paths.append(rel)
        try:
            writer = pq.ParquetWriter(sink, self.schema)
        except BaseException:
            sink.close()
            raise
        part = _Open(rel, sink, writer)
        self._open[target] = part
        return part

    def _close(self, target: Target) -> None:
        part = self._open.pop(target)
        try:
            part.writer.close()
            nbytes = part.sink.tell()
        except BaseException:
            with contextlib.suppress(OSError, pa.ArrowException):
                part.sink.close()
            raise
        part.sink.close()  # on an object store: the upload completes here
        self.parts.setdefault(target, []).append(WrittenPart(part.rel, part.rows, nbytes))

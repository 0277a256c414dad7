"""Reading ingest inputs into Arrow tables and checking them against a stream's schema.

Inputs: a pandas DataFrame, a pyarrow Table, RecordBatch or RecordBatchReader, an iterable of
RecordBatches, or a path to a CSV (optionally compressed, e.g. ``.csv.gz``) or Parquet file.
Files and streams are read batch by batch (:func:`open_batches`). Every batch is *normalized*:
dictionary columns decoded, ``large_string``/``large_binary`` made ``string``/``binary``, second and
millisecond timestamps widened to microseconds, ``date64`` made ``date32``, all fields nullable,
schema metadata dropped — so that equal data gives equal schemas whatever its origin.

The first ingest into a stream fixes its schema. A later input must have the same column names
(in any order) and types that are equal or *safely castable*: integer/float conversions that
change no value (checked per value), ``float32`` to ``float64``, a timestamp unit change that
loses nothing with the same time zone, and an all-null column of any type. Anything else is a
:class:`DataError` that names the column and both types.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeAlias

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from blockbudget.errors import DataError
from blockbudget.store.model import DataFormat

#: What :meth:`BlockStore.ingest` accepts.
IngestData: TypeAlias = (
    pd.DataFrame
    | pa.Table
    | pa.RecordBatch
    | pa.RecordBatchReader
    | Iterable[pa.RecordBatch]
    | str
    | os.PathLike[str]
)

#: Rows per batch read from a Parquet file or cut from an in-memory table.
BATCH_ROWS = 128 * 1024
#: Read buffer of a Parquet file being streamed.
PARQUET_BUFFER_BYTES = 1024 * 1024
#: Bytes per block read from a CSV file (each block is one batch).
CSV_BLOCK_BYTES = 8 * 1024 * 1024

_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst", ".csv.lz4", ".tsv")
_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
_CONVERSION_RE = re.compile(r"In CSV column #(\d+): .*?invalid value '(.*)'", re.DOTALL)


def schema_to_bytes(schema: pa.Schema) -> bytes:
    """Serialize a schema for the catalog (Arrow IPC)."""
    return bytes(schema.serialize().to_pybytes())


def schema_from_bytes(data: bytes) -> pa.Schema:
    """Inverse of :func:`schema_to_bytes`."""
    return pa.ipc.read_schema(pa.py_buffer(data))


def open_batches(
    data: IngestData,
    *,
    fmt: DataFormat | None,
    schema: pa.Schema | None,
    batch_rows: int = BATCH_ROWS,
) -> tuple[Iterator[pa.Table], str]:
    """Read and normalize an input batch by batch.

    Files are streamed (a CSV in blocks of :data:`CSV_BLOCK_BYTES`, a Parquet file in batches
    of ``batch_rows``), so only one batch is in memory at a time; an in-memory input is cut into
    batches of ``batch_rows``. An empty input with a known schema (a CSV header, an empty
    Parquet file or table, a RecordBatchReader) yields one empty table, so that its columns
    are checked like any other input's.

    Args:
        data: the input (see :data:`IngestData`).
        fmt: the file format, or None to infer it from the file's suffix.
        schema: the stream's schema when it has one (used as CSV column types).
        batch_rows: rows per batch.

    Returns:
        The normalized batches, lazily, and a description of the source for error messages.
        Errors are raised as the batches are read.

    Raises:
        DataError: when the input cannot be read, naming the file and, for a broken CSV row,
            its line and column.

    Example:
        >>> batches, source = open_batches(pa.table({"x": [1, 2]}), fmt=None, schema=None)
        >>> [b.num_rows for b in batches], source
        ([2], 'Table input')
    """
    if isinstance(data, pd.DataFrame):
        source = "DataFrame input"
        try:
            table = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise DataError(f"{source}: cannot convert to Arrow: {exc}") from exc
        return _slices(table, batch_rows, source), source
    if isinstance(data, pa.RecordBatch):
        source = "RecordBatch input"
        return _slices(pa.Table.from_batches([data]), batch_rows, source), source
    if isinstance(data, pa.Table):
        source = "Table input"
        return _slices(data, batch_rows, source), source
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        source = f"file {str(path)!r}"
        if not path.is_file():
            raise DataError(f"{source}: no such file")
        kind = fmt if fmt is not None else _infer_format(path, source)
        if kind is DataFormat.CSV:
            return _csv_batches(path, schema, source), source
        return _parquet_batches(path, batch_rows, source), source
    if isinstance(data, pa.RecordBatchReader):
        source = "RecordBatchReader input"
        return _stream_batches(data, data.schema, source), source
    if isinstance(data, Iterable):
        source = "RecordBatch stream input"
        return _stream_batches(data, None, source), source
    raise DataError(
        "ingest accepts a pandas DataFrame, a pyarrow Table, RecordBatch or RecordBatchReader, "
        "an iterable of RecordBatches, or a path to a CSV or Parquet file; got "
        f"{type(data).__name__}"
    )


def _slices(table: pa.Table, batch_rows: int, source: str) -> Iterator[pa.Table]:
    table = normalize(table, source=source)
    if table.num_rows == 0:
        yield table
        return
    for start in range(0, table.num_rows, batch_rows):
        # One chunk per batch: a take on a many-chunk table costs per chunk.
        yield table.slice(start, batch_rows).combine_chunks()


def _stream_batches(
    items: Iterable[object], schema: pa.Schema | None, source: str
) -> Iterator[pa.Table]:
    empty = True
    for i, item in enumerate(items):
        if isinstance(item, pa.RecordBatch):
            table = pa.Table.from_batches([item])
        elif isinstance(item, pa.Table):
            table = item
        else:
            raise DataError(
                f"{source}: item {i} is a {type(item).__name__}, not a pyarrow RecordBatch"
            )
        empty = False
        yield normalize(table, source=source)
    if empty and schema is not None:
        yield normalize(schema.empty_table(), source=source)


def _infer_format(path: Path, source: str) -> DataFormat:
    name = path.name.lower()
    if name.endswith(_CSV_SUFFIXES):
        return DataFormat.CSV
    if name.endswith(_PARQUET_SUFFIXES):
        return DataFormat.PARQUET
    raise DataError(
        f"{source}: cannot infer the format from the suffix (expected one of "
        f"{', '.join(_CSV_SUFFIXES + _PARQUET_SUFFIXES)}); pass format=DataFormat.CSV or PARQUET"
    )


def _parquet_batches(path: Path, batch_rows: int, source: str) -> Iterator[pa.Table]:
    try:
        # No pre-buffering: pyarrow would keep every row group's bytes read so far until the
        # file is closed (memory growing with the file); a buffered stream reads as fast here.
        with pq.ParquetFile(path, pre_buffer=False, buffer_size=PARQUET_BUFFER_BYTES) as handle:
            empty = True
            for batch in handle.iter_batches(batch_size=batch_rows):
                empty = False
                yield normalize(pa.Table.from_batches([batch]), source=source)
            if empty:
                yield normalize(handle.schema_arrow.empty_table(), source=source)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{source}: not a readable Parquet file: {exc}") from exc


def _csv_batches(path: Path, schema: pa.Schema | None, source: str) -> Iterator[pa.Table]:
    types = {f.name: f.type for f in schema} if schema is not None else None
    convert = pacsv.ConvertOptions(column_types=types)
    errors = (pa.ArrowException, OSError, UnicodeDecodeError)
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
            convert_options=convert,
        )
    except errors as exc:
        raise DataError(_diagnose_csv(path, convert, source, exc)) from exc
    with contextlib.closing(reader):
        empty = True
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except errors as exc:
                raise DataError(_diagnose_csv(path, convert, source, exc)) from exc
            empty = False
            yield normalize(pa.Table.from_batches([batch]), source=source)
        if empty:
            yield normalize(reader.schema.empty_table(), source=source)


def _diagnose_csv(
    path: Path, convert: pacsv.ConvertOptions, source: str, exc: BaseException
) -> str:
    """Turn a CSV read failure into a message naming the line and column when possible."""
    text = str(exc)
    invalid: list[Any] = []

    def handler(row: Any) -> str:
        invalid.append(row)
        return "error"

    if "CSV parse error" in text:
        # Re-read on one thread: only then does pyarrow know the physical row number.
        with contextlib.suppress(pa.ArrowException, OSError):
            pacsv.read_csv(
                path,
                read_options=pacsv.ReadOptions(use_threads=False),
                parse_options=pacsv.ParseOptions(invalid_row_handler=handler),
                convert_options=convert,
            )
        if invalid and invalid[0].number is not None:
            row = invalid[0]
            return (
                f"{source}: malformed CSV at line {row.number} (counting the header as line 1): "
                f"expected {row.expected_columns} columns, got {row.actual_columns}: "
                f"{row.text[:200]!r}"
            )
        return f"{source}: malformed CSV: {text}"
    match = _CONVERSION_RE.search(text)
    if match:
        index, value = int(match.group(1)), match.group(2)
        header = _csv_header(path)
        name = header[index] if header and index < len(header) else f"#{index}"
        line = _find_value_line(path, header, index, value)
        where = f" at line {line} (counting the header as line 1)" if line is not None else ""
        expected = (
            f" (the stream's schema says {convert.column_types[name]})"
            if (convert.column_types and name in convert.column_types)
            else ""
        )
        return (
            f"{source}: column {name!r} has a value that does not fit its type{expected}"
            f"{where}: {value!r} ({text.splitlines()[0]})"
        )
    return f"{source}: cannot read CSV: {text}"


def _csv_header(path: Path) -> list[str] | None:
    try:
        with pa.input_stream(str(path), compression="detect") as raw:
            reader = csv.reader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
            return next(reader)
    except (OSError, StopIteration, UnicodeDecodeError, csv.Error, pa.ArrowException):
        return None


def _find_value_line(path: Path, header: list[str] | None, index: int, value: str) -> int | None:
    """The physical line of the first row whose ``index``-th field equals ``value``."""
    if header is None:
        return None
    try:
        table = pacsv.read_csv(
            path,
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in header}, strings_can_be_null=False
            ),
        )
    except (pa.ArrowException, OSError):
        return None
    col = table.column(index).combine_chunks()
    hits = pc.equal(col, pa.scalar(value))
    pos = pc.index(hits, True).as_py()
    return None if pos is None or pos < 0 else int(pos) + 2


def normalize(table: pa.Table, *, source: str) -> pa.Table:
    """Canonical types, nullable fields, no metadata (see the module docstring).

    Raises:
        DataError: on duplicate or empty column names.
    """
    names = table.column_names
    seen: set[str] = set()
    for name in names:
        if not name:
            raise DataError(f"{source}: a column has an empty name")
        if name in seen:
            raise DataError(f"{source}: column {name!r} appears more than once")
        seen.add(name)
    arrays: list[pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    for name, col in zip(names, table.columns, strict=True):
        typ = _canonical_type(col.type)
        if typ != col.type:
            col = _decode(col, typ)
        arrays.append(col)
        fields.append(pa.field(name, typ, nullable=True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _canonical_type(typ: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(typ):
        return _canonical_type(typ.value_type)
    if pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return pa.string()
    if pa.types.is_large_binary(typ) or pa.types.is_binary_view(typ):
        return pa.binary()
    if pa.types.is_timestamp(typ) and typ.unit in ("s", "ms"):
        return pa.timestamp("us", tz=typ.tz)
    if pa.types.is_date64(typ):
        return pa.date32()
    return typ


def _decode(col: pa.ChunkedArray, typ: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_dictionary(col.type):
        col = pa.chunked_array(
            [c.dictionary_decode() for c in col.chunks], type=col.type.value_type
        )
    return col.cast(typ) if col.type != typ else col


def check_first_schema(table: pa.Table, *, stream: str, source: str) -> None:
    """The first ingest fixes the schema: every column needs a concrete type.

    Raises:
        DataError: for an all-null column whose type is unknown (Arrow's ``null`` type).
    """
    for f in table.schema:
        if pa.types.is_null(f.type):
            raise DataError(
                f"{source}: column {f.name!r} has only nulls and no type; the first ingest fixes "
                f"stream {stream!r}'s schema, so give the column a type (e.g. cast it)"
            )


def conform(
    table: pa.Table, schema: pa.Schema, *, stream: str, source: str, offset: int = 0
) -> pa.Table:
    """Reorder and cast a normalized table to a stream's schema.

    ``offset`` is the position of the table's first row in the input (for error messages).

    Raises:
        DataError: for missing or unexpected columns, an incompatible type, or a value that a
            safe cast would change (naming the column, the row and both types).
    """
    names = set(table.column_names)
    missing = [n for n in schema.names if n not in names]
    extra = [n for n in table.column_names if n not in set(schema.names)]
    if missing or extra:
        raise DataError(
            f"{source}: the columns must match stream {stream!r}'s schema (fixed by its first "
            f"ingest): missing {missing}, unexpected {extra}"
        )
    arrays = []
    for f in schema:
        col = table.column(f.name)
        if col.type != f.type:
            col = _cast_column(
                col, f.type, name=f.name, stream=stream, source=source, offset=offset
            )
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)


def _castable(src: pa.DataType, dst: pa.DataType) -> bool:
    if pa.types.is_null(src):
        return True
    numeric = (pa.types.is_integer, pa.types.is_floating)
    if any(p(src) for p in numeric) and any(p(dst) for p in numeric):
        # Narrowing floats can overflow to inf without an error: only widen those.
        return not (pa.types.is_floating(src) and pa.types.is_floating(dst)) or (
            src.bit_width <= dst.bit_width
        )
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        return bool(src.tz == dst.tz)
    return False


def _cast_column(
    col: pa.ChunkedArray, typ: pa.DataType, *, name: str, stream: str, source: str, offset: int
) -> pa.ChunkedArray:
    if not _castable(col.type, typ):
        raise DataError(
            f"{source}: column {name!r} has type {col.type}, but stream {stream!r} has {typ} "
            "(fixed by its first ingest) and the two are not safely castable"
        )
    try:
        return col.cast(typ, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        row = _first_bad_row(col.combine_chunks(), lambda a: a.cast(typ, safe=True))
        raise DataError(
            f"{source}: column {name!r} ({col.type}) cannot be cast to stream {stream!r}'s "
            f"type {typ} without changing a value (first at row {offset + row}: "
            f"{col[row].as_py()!r}): {exc}"
        ) from exc


def _first_bad_row(arr: pa.Array, op: Callable[[pa.Array], object]) -> int:
    """Bisection for the first position at which ``op`` fails (``op`` fails on ``arr``)."""
    lo, hi = 0, len(arr)  # invariant: op fails on arr[lo:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            op(arr.slice(lo, mid - lo))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            hi = mid
        else:
            lo = mid
    return lo

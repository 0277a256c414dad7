"""Ingest ids: the caller's, or by default the content hash of the input's rows.

The content hash is SHA-256 over an Arrow IPC stream of a canonical form of the rows *as the
store keeps them*: read and normalized (:mod:`blockbudget.store.inputs`), conformed to the
stream's schema (so columns in schema order, whatever the input's order), then

* cut into record batches of exactly :data:`HASH_BATCH_ROWS` rows (the last one shorter), so
  the hash does not depend on how the input was batched (CSV blocks, Parquet row groups, an
  iterable of RecordBatches);
* each column ``c`` written as two columns: ``c`` with its null slots set to the type's zero
  (Arrow leaves the value under a null undefined: pandas puts NaN there, the CSV reader 0) —
  a nested column (list, map, struct) as the ``repr`` of each row's Python value instead,
  since Arrow leaves values and validity under a null parent undefined at every level — and
  ``c``'s validity as booleans; IPC writes slices without their offsets and omits empty
  validity bitmaps, so the bytes depend on the values only.

Row order matters: the same rows in another order are another ingest (their rows are then
exact duplicates of the stored ones, which :class:`~blockbudget.store.model.OnOverlap` governs).
Two inputs with the same rows in the same order and the same types hash equal, whatever their
origin — a CSV file, a Parquet file, a DataFrame, a Table. Values compare bitwise (``-0.0`` and
``0.0`` differ).

Example:
    >>> import pyarrow as pa
    >>> a, b = ContentHasher(), ContentHasher()
    >>> a.update(pa.table({"x": [1, 2, 3]}))
    >>> b.update(pa.table({"x": [1]})); b.update(pa.table({"x": [2, 3]}))
    >>> a.hexdigest() == b.hexdigest()
    True
"""

from __future__ import annotations

import hashlib
import re

import pyarrow as pa
import pyarrow.compute as pc

from blockbudget.errors import DataError, InvalidRequestError

#: Rows per canonical record batch.
HASH_BATCH_ROWS = 64 * 1024
#: Caller-chosen ingest ids: 1 to 128 characters of letters, digits and ``._:@/+=-``.
INGEST_ID_RE = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
#: The prefix of a content-hash ingest id.
HASH_PREFIX = "sha256:"


def check_ingest_id(value: object) -> str:
    """Validate a caller's ingest id.

    Raises:
        InvalidRequestError: when it is not 1 to 128 characters of ``[A-Za-z0-9._:@/+=-]``.
    """
    if not isinstance(value, str) or not INGEST_ID_RE.fullmatch(value):
        raise InvalidRequestError(
            "an ingest id must be 1 to 128 characters of letters, digits and ._:@/+=-, "
            f"got {value!r}"
        )
    return value


def hash_ingest_id(content_hash: str) -> str:
    """The default ingest id of an input with this content hash."""
    return HASH_PREFIX + content_hash


class ContentHasher:
    """Hash an input's rows, table by table, into its canonical content hash (module
    docstring). Feed it the conformed batches in input order; :meth:`hexdigest` at the end."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._schema: pa.Schema | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._rows = 0

    @property
    def rows(self) -> int:
        """Rows hashed so far."""
        return self._rows

    def update(self, table: pa.Table) -> None:
        """Add ``table``'s rows (same schema as the tables before it)."""
        if self._schema is None:
            self._schema = table.schema
            self._sha.update(_canonical_schema(table.schema).serialize().to_pybytes())
        if table.num_rows == 0:
            return
        self._rows += table.num_rows
        self._pending.append(table)
        self._pending_rows += table.num_rows
        while self._pending_rows >= HASH_BATCH_ROWS:
            whole = pa.concat_tables(self._pending)
            self._write(whole.slice(0, HASH_BATCH_ROWS))
            rest = whole.slice(HASH_BATCH_ROWS)
            self._pending = [rest] if rest.num_rows else []
            self._pending_rows = rest.num_rows

    def hexdigest(self) -> str:
        """The content hash (hex SHA-256) of every row added; ends the hashing."""
        if self._pending_rows:
            self._write(pa.concat_tables(self._pending))
            self._pending, self._pending_rows = [], 0
        return self._sha.hexdigest()

    def _write(self, table: pa.Table) -> None:
        arrays: list[pa.Array] = []
        whole = table.combine_chunks()
        for name, col in zip(whole.column_names, whole.columns, strict=True):
            arr = col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks)
            arrays.append(_nested_text(arr) if _is_nested(arr.type) else _filled(arr, name))
            arrays.append(pc.is_valid(arr))
        batch = pa.RecordBatch.from_arrays(arrays, schema=_canonical_schema(table.schema))
        self._sha.update(batch.serialize().to_pybytes())


def _canonical_schema(schema: pa.Schema) -> pa.Schema:
    fields: list[pa.Field] = []
    for f in schema:
        fields.append(pa.field(f.name, pa.large_string() if _is_nested(f.type) else f.type))
        fields.append(pa.field(f.name + "\x00valid", pa.bool_()))
    return pa.schema(fields)


def _is_nested(typ: pa.DataType) -> bool:
    return bool(pa.types.is_nested(typ))


def _nested_text(arr: pa.Array) -> pa.Array:
    """A nested column (lists, maps, structs) as the ``repr`` of each row's Python value.

    Arrow leaves the values (and even the validity bitmaps) under a null parent undefined at
    every level, and readers differ there (a Parquet reader marks a null struct's children
    null, a Python list builder does not); the Python value is defined by the content alone.
    A null row is ``""`` (its validity column tells it from any value)."""
    return pa.array(["" if v is None else repr(v) for v in arr.to_pylist()], pa.large_string())


def _filled(arr: pa.Array, name: str) -> pa.Array:
    """``arr`` (column ``name``) with its null slots set to the type's zero (no nulls left)."""
    if arr.null_count == 0:
        return arr
    if pa.types.is_null(arr.type):
        return pa.array([False] * len(arr))
    try:
        return pc.fill_null(arr, _zero(arr.type)[0])
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise DataError(
            f"column {name!r} has nulls of type {arr.type}, which the content hash cannot "
            "canonicalize; give the ingest an ingest_id, or cast the column to a supported "
            "type (numbers, times, strings, binaries, booleans, or nested types of any)"
        ) from exc


def _zero(typ: pa.DataType) -> pa.Array:
    """A one-element array holding ``typ``'s zero: 0 (numbers, times), ``""``, ``b""``,
    False."""
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return pa.array([""], typ)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return pa.array([b""], typ)
    if pa.types.is_fixed_size_binary(typ):
        return pa.array([bytes(typ.byte_width)], typ)
    if pa.types.is_boolean(typ):
        return pa.array([False], typ)
    if pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        return pa.array([0], typ)
    if pa.types.is_temporal(typ):
        return pa.array([0], typ)
    raise DataError(f"no zero for type {typ}")

"""Ingest ids: the caller's, or by default the content hash of the input's rows.

The content hash is SHA-256 over an Arrow IPC stream of a canonical form of the rows *as the
store keeps them*: read and normalized (:mod:`blockbudget.store.inputs`), conformed to the
stream's schema (so columns in schema order, whatever the input's order), then

* cut into record batches of exactly :data:`HASH_BATCH_ROWS` rows (the last one shorter), so
  the hash does not depend on how the input was batched (CSV blocks, Parquet row groups, an
  iterable of RecordBatches);
* each column ``c`` written as two columns: ``c`` with its null slots set to the type's zero
  (Arrow leaves the value under a null undefined: pandas puts NaN there, the CSV reader 0) and
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

from blockbudget.errors import InvalidRequestError

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
        for col in table.combine_chunks().columns:
            arr = col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks)
            arrays.append(_filled(arr))
            arrays.append(pc.is_valid(arr))
        batch = pa.RecordBatch.from_arrays(arrays, schema=_canonical_schema(table.schema))
        self._sha.update(batch.serialize().to_pybytes())


def _canonical_schema(schema: pa.Schema) -> pa.Schema:
    fields: list[pa.Field] = []
    for f in schema:
        fields.append(pa.field(f.name, f.type))
        fields.append(pa.field(f.name + "\x00valid", pa.bool_()))
    return pa.schema(fields)


def _filled(arr: pa.Array) -> pa.Array:
    """``arr`` with its null slots set to the type's zero (no nulls left)."""
    if arr.null_count == 0:
        return arr
    typ = arr.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        zero = pa.scalar("", typ)
    elif pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        zero = pa.scalar(b"", typ)
    elif pa.types.is_boolean(typ):
        zero = pa.scalar(False)
    elif pa.types.is_null(typ):
        return pa.array([False] * len(arr))
    else:
        zero = pa.array([0]).cast(typ)[0]
    return pc.fill_null(arr, zero)

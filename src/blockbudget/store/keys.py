"""Assigning rows to block keys (pure functions of the data and a :class:`Blocking`).

:func:`group_rows` validates a table's blocking column and splits its row positions by block
key. Time windows and user-id ranges carry an *ordinal* — the window start in microseconds since
1970-01-01T00:00, or the first user id of the range — which orders keys and drives window closing
(``close_after`` / ``close_before``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.store.model import MAX_KEY_LENGTH, Blocking, Unit

_EPOCH = datetime(1970, 1, 1)
_US_PER_DAY = 86_400_000_000
_US_PER_MINUTE = 60_000_000
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_UNIT_US = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}


@dataclass(frozen=True)
class KeyInfo:
    """One block key and the public facts it stands for.

    Attributes:
        key: the block key.
        ordinal: order of the key among the stream's keys (None for attribute blocks).
        window_start: TIME — the window's first instant.
        window_end: TIME — the window's end (exclusive).
        id_start: USER — first id of the range.
        id_end: USER — last id of the range (inclusive).
        attribute: ATTRIBUTE — the raw value as text.
    """

    key: str
    ordinal: int | None = None
    window_start: datetime | None = None
    window_end: datetime | None = None
    id_start: int | None = None
    id_end: int | None = None
    attribute: str | None = None


@dataclass(frozen=True)
class Grouping:
    """Rows of one table split by block key.

    Attributes:
        keys: the keys present, ordered by ordinal (time, user) or by key (attribute).
        positions: for each key, the ascending row positions of its rows.
    """

    keys: tuple[KeyInfo, ...]
    positions: tuple[npt.NDArray[np.int64], ...]

    def counts(self) -> dict[str, int]:
        """Rows per key."""
        return {k.key: len(p) for k, p in zip(self.keys, self.positions, strict=True)}


def encode_key(text: str) -> str:
    """Injective, path-safe encoding: characters outside ``[A-Za-z0-9_-]`` become ``%XX``."""
    out: list[str] = []
    for ch in text:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def time_key(blocking: Blocking, start_us: int) -> KeyInfo:
    """The key of the time window starting ``start_us`` microseconds after the epoch."""
    w = blocking.window_us
    start = _EPOCH + timedelta(microseconds=start_us)
    if w % _US_PER_DAY == 0:
        text = start.strftime("%Y-%m-%d")
    elif w % _US_PER_MINUTE == 0:
        text = start.strftime("%Y-%m-%dT%H:%M")
    else:
        text = start.strftime("%Y-%m-%dT%H:%M:%S")
    return KeyInfo(
        key=text,
        ordinal=start_us,
        window_start=start,
        window_end=start + timedelta(microseconds=w),
    )


def user_key(blocking: Blocking, first_id: int) -> KeyInfo:
    """The key of the user-id range that starts at ``first_id``."""
    n = blocking.ids_per_block
    assert n is not None
    last = first_id + n - 1
    width = max(6, len(str(last)))
    return KeyInfo(
        key=f"u{first_id:0{width}d}-{last:0{width}d}",
        ordinal=first_id,
        id_start=first_id,
        id_end=last,
    )


def key_ordinal(blocking: Blocking, point: str | date | datetime | int) -> int:
    """The ordinal of the window or id range that contains ``point``.

    ``point`` may be a block key (``"2013-01-05"``, ``"u001000-001999"``), an ISO date or
    datetime, a ``date``/``datetime`` (TIME) or a user id (USER).

    Raises:
        InvalidRequestError: for attribute blocking (no public order) or a point that cannot be
            read for this unit.
    """
    if blocking.unit is Unit.TIME:
        when: datetime
        if isinstance(point, datetime):
            when = point.replace(tzinfo=None) if point.tzinfo is None else _to_naive_utc(point)
        elif isinstance(point, date):
            when = datetime(point.year, point.month, point.day)
        elif isinstance(point, str):
            try:
                when = datetime.fromisoformat(point)
            except ValueError as exc:
                raise InvalidRequestError(
                    f"{point!r} is not an ISO date or datetime (time blocks are keyed by their "
                    "window start, e.g. '2013-01-05' or '2013-01-05T06:00')"
                ) from exc
            if when.tzinfo is not None:
                when = _to_naive_utc(when)
        else:
            raise InvalidRequestError(f"a time stream needs a date, datetime or key, got {point!r}")
        us = (when - _EPOCH) // timedelta(microseconds=1)
        w = blocking.window_us
        return (us // w) * w
    if blocking.unit is Unit.USER:
        n = blocking.ids_per_block
        assert n is not None
        if isinstance(point, str):
            text = point[1:].split("-")[0] if point.startswith("u") else point
            if not text.isdigit():
                raise InvalidRequestError(
                    f"{point!r} is neither a user id nor a user block key like 'u001000-001999'"
                )
            ident = int(text)
        elif isinstance(point, int) and not isinstance(point, bool) and point >= 0:
            ident = point
        else:
            raise InvalidRequestError(
                f"a user stream needs a non-negative id or key, got {point!r}"
            )
        return (ident // n) * n
    raise InvalidRequestError(
        f"blocks by attribute {blocking.column!r} have no public order; close or seal them by id"
    )


def _to_naive_utc(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None)


def group_rows(table: pa.Table, blocking: Blocking, *, source: str, offset: int = 0) -> Grouping:
    """Validate the blocking column of ``table`` and split its rows by block key.

    ``offset`` is the position of the table's first row in the input: messages count rows
    from the start of the input.

    Raises:
        DataError: when the column is missing, has the wrong type, contains nulls, a negative
            user id, a time outside years 1–9999, or an empty / too long attribute value. The
            message names the source, the column and the first offending row (0-based).
    """
    name = blocking.column
    if name not in table.column_names:
        raise DataError(
            f"{source}: the stream blocks by column {name!r}, which the input lacks "
            f"(columns: {', '.join(table.column_names)})"
        )
    column = table.column(name)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    nulls = column.null_count
    if nulls:
        first = int(pc.index(pc.is_null(column), True).as_py())
        raise DataError(
            f"{source}: the blocking column {name!r} must have no nulls, but {nulls} row(s) "
            f"are null (first at row {offset + first})"
        )
    if blocking.unit is Unit.TIME:
        return _group_ordinals(_time_starts(column, blocking, source, offset), blocking)
    if blocking.unit is Unit.USER:
        return _group_ordinals(_user_starts(column, blocking, source, offset), blocking)
    return _group_attributes(column, blocking, source, offset)


def _time_starts(
    column: pa.Array, blocking: Blocking, source: str, offset: int
) -> npt.NDArray[np.int64]:
    name = blocking.column
    typ = column.type
    if pa.types.is_timestamp(typ):
        if typ.tz is not None:  # windows of tz-aware times are computed in UTC
            column = column.cast(pa.timestamp(typ.unit))
        raw = column.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64)
        per_us = _UNIT_US[typ.unit]
        values = raw // 1000 if per_us is None else raw * per_us
    elif pa.types.is_date32(typ) or pa.types.is_date64(typ):
        days = column.cast(pa.date32()).cast(pa.int32()).to_numpy(zero_copy_only=False)
        values = days.astype(np.int64) * _US_PER_DAY
    else:
        raise DataError(
            f"{source}: time blocking needs column {name!r} to be a timestamp or date, "
            f"but it is {typ}"
        )
    low = (datetime(1, 1, 1) - _EPOCH) // timedelta(microseconds=1)
    high = (datetime(9999, 12, 30) - _EPOCH) // timedelta(microseconds=1)
    bad = np.nonzero((values < low) | (values > high))[0]
    if len(bad):
        raise DataError(
            f"{source}: column {name!r} has times outside years 1-9999 "
            f"(first at row {offset + int(bad[0])})"
        )
    w = blocking.window_us
    result: npt.NDArray[np.int64] = (values // w) * w
    return result


def _user_starts(
    column: pa.Array, blocking: Blocking, source: str, offset: int
) -> npt.NDArray[np.int64]:
    name = blocking.column
    if not pa.types.is_integer(column.type):
        raise DataError(
            f"{source}: user blocking needs column {name!r} to hold integer user ids, "
            f"but it is {column.type}"
        )
    if pa.types.is_unsigned_integer(column.type):
        too_big = pc.greater(column, pa.scalar(2**63 - 1, column.type))
        if pc.any(too_big).as_py():
            first = int(pc.index(too_big, True).as_py())
            raise DataError(f"{source}: user id at row {offset + first} exceeds 2**63-1")
    values = column.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64)
    negative = np.nonzero(values < 0)[0]
    if len(negative):
        first = int(negative[0])
        raise DataError(
            f"{source}: user ids must be non-negative integers, but column {name!r} has "
            f"{len(negative)} negative value(s) (first at row {offset + first}: "
            f"{int(values[first])})"
        )
    n = blocking.ids_per_block
    assert n is not None
    result: npt.NDArray[np.int64] = (values // n) * n
    return result


def _group_ordinals(starts: npt.NDArray[np.int64], blocking: Blocking) -> Grouping:
    make = time_key if blocking.unit is Unit.TIME else user_key
    if len(starts) == 0:
        return Grouping(keys=(), positions=())
    # One stable sort by window index; a narrow index sorts by radix (linear time).
    step = blocking.window_us if blocking.unit is Unit.TIME else blocking.ids_per_block
    assert step is not None
    low = int(starts.min())
    index = (starts - low) // step
    if int(index.max()) < 2**16:
        index = index.astype(np.uint16)
    order = np.argsort(index, kind="stable").astype(np.int64)
    ranked = index[order]
    cuts = np.flatnonzero(ranked[1:] != ranked[:-1]) + 1
    uniq = starts[order[np.concatenate(([0], cuts))]]
    keys = tuple(make(blocking, int(s)) for s in uniq)
    return Grouping(keys=keys, positions=tuple(np.split(order, cuts)))


def _group_attributes(column: pa.Array, blocking: Blocking, source: str, offset: int) -> Grouping:
    name = blocking.column
    typ = column.type
    if not (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_integer(typ)
        or pa.types.is_boolean(typ)
    ):
        raise DataError(
            f"{source}: attribute blocking needs column {name!r} to be a string, integer or "
            f"boolean (a public categorical value), but it is {typ}"
        )
    encoded = column.dictionary_encode()
    values = encoded.dictionary.to_pylist()
    codes = encoded.indices.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64)
    infos: list[KeyInfo] = []
    for code, value in enumerate(values):
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if text == "":
            first = int(np.nonzero(codes == code)[0][0])
            raise DataError(
                f"{source}: attribute values must be non-empty, but column {name!r} has an "
                f"empty string (first at row {offset + first})"
            )
        key = encode_key(text)
        if len(key) > MAX_KEY_LENGTH:
            first = int(np.nonzero(codes == code)[0][0])
            raise DataError(
                f"{source}: attribute value at row {offset + first} of column {name!r} is too "
                f"long for a block key ({len(key)} > {MAX_KEY_LENGTH} characters once encoded)"
            )
        infos.append(KeyInfo(key=key, attribute=text))
    positions = _split(codes, len(values))
    order = sorted(range(len(infos)), key=lambda i: infos[i].key)
    return Grouping(
        keys=tuple(infos[i] for i in order), positions=tuple(positions[i] for i in order)
    )


def _split(codes: npt.NDArray[np.int64], groups: int) -> tuple[npt.NDArray[np.int64], ...]:
    order = np.argsort(codes, kind="stable").astype(np.int64)
    bounds = np.cumsum(np.bincount(codes, minlength=groups))[:-1]
    return tuple(np.split(order, bounds))

"""Ingest planning and request checks for the block store (pure functions of their inputs).

:func:`plan_targets` decides, from the catalog's state, which block each key's rows go to —
the key's open block, a new block, or (late records) a new block with the next seq or a refusal
— and is evaluated twice per ingest: on a snapshot before the part files are written, and again
under the stream's lock in the commit transaction, which goes ahead only if both agree.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
from sqlalchemy.exc import IntegrityError, OperationalError

from blockbudget.errors import DataError, InvalidRequestError, UnknownBlockError
from blockbudget.store.files import WrittenPart
from blockbudget.store.inputs import check_first_schema, conform
from blockbudget.store.keys import KeyInfo
from blockbudget.store.model import (
    BlockMeta,
    DataFormat,
    LatePolicy,
    OnOverlap,
    StreamSpec,
    make_block_id,
    parse_block_id,
)


@dataclass(frozen=True)
class Target:
    """Where the rows of one key go.

    Attributes:
        index: the key's position in the grouping.
        key: the key.
        seq: the block's sequence number for this key.
        new: whether the block is created by this ingest.
        late: whether the rows are late (the key's first block is sealed or its window closed).
    """

    index: int
    key: KeyInfo
    seq: int
    new: bool
    late: bool


def target_for(
    index: int,
    key: KeyInfo,
    prev: tuple[int, bool] | None,
    closed_until: int | None,
) -> Target:
    """The block of one key, given its latest block (seq, sealed) and the closed bound.

    A key that is late here stays late under any later catalog state (blocks are never
    unsealed and the closed bound only grows), which lets an ingest decide early not to write
    rows that its final plan would drop or refuse.
    """
    closed = closed_until is not None and key.ordinal is not None and key.ordinal < closed_until
    if prev is None:
        return Target(index, key, 1, True, closed)
    if prev[1] or closed:
        return Target(index, key, prev[0] + 1, True, True)
    # an open block; it is a late block (seq > 1) when the key's first was sealed
    return Target(index, key, prev[0], False, prev[0] > 1)


def plan_targets(
    spec: StreamSpec,
    keys: Sequence[KeyInfo],
    counts: Sequence[int],
    latest: dict[str, tuple[int, bool]],
    closed_until: int | None,
    source: str,
) -> tuple[Target, ...]:
    """Decide the block of every key (with ``counts[i]`` rows for ``keys[i]``) from the
    catalog's state. Under LatePolicy.DROP the late keys have no target: their rows are not
    written.

    Raises:
        DataError: under LatePolicy.REJECT when some key's block is sealed or window closed.
    """
    targets = [target_for(i, k, latest.get(k.key), closed_until) for i, k in enumerate(keys)]
    if spec.late_policy is LatePolicy.DROP:
        return tuple(t for t in targets if not t.late)
    if spec.late_policy is LatePolicy.REJECT and any(t.late for t in targets):
        refused = []
        for t in targets:
            if t.late:
                prev = latest.get(t.key.key)
                what = (
                    f"sealed block {make_block_id(spec.name, t.key.key, prev[0])}"
                    if prev is not None
                    else f"closed window {t.key.key}"
                )
                refused.append(f"{counts[t.index]} row(s) for {what}")
        total = sum(counts[t.index] for t in targets if t.late)
        raise DataError(
            f"{source}: stream {spec.name!r} rejects late records (late_policy REJECT: rows for "
            f"a sealed block or a closed window are refused); {total} late row(s): "
            f"{'; '.join(refused)}. Nothing was ingested."
        )
    return tuple(targets)


def block_values(
    stream: str, block_id: str, t: Target, parts: Sequence[WrittenPart], now: datetime
) -> dict[str, Any]:
    """The catalog row of a new block holding ``parts``."""
    k = t.key
    return {
        "block_id": block_id,
        "stream": stream,
        "block_key": k.key,
        "seq": t.seq,
        "ordinal": k.ordinal,
        "row_count": sum(p.rows for p in parts),
        "byte_count": sum(p.nbytes for p in parts),
        "sealed": False,
        "created_at": now,
        "sealed_at": None,
        "window_start": k.window_start,
        "window_end": k.window_end,
        "id_start": k.id_start,
        "id_end": k.id_end,
        "attribute": k.attribute,
    }


def fit_schema(
    table: pa.Table, schema: pa.Schema | None, *, stream: str, source: str, offset: int = 0
) -> pa.Table:
    """Check a first ingest's types, or conform a later one (or a later batch of the first
    one) to the stream's schema; ``offset`` is the table's first row's position in the input.

    Raises:
        DataError: see :func:`~blockbudget.store.inputs.conform`.
    """
    if schema is None:
        check_first_schema(table, stream=stream, source=source)
        return table
    return conform(table, schema, stream=stream, source=source, offset=offset)


def coerce_format(value: DataFormat | str | None, data: object) -> DataFormat | None:
    """Read an ingest's ``format`` argument (an enum member or its value).

    Raises:
        InvalidRequestError: for a format given with in-memory data, or an unknown format.
    """
    if value is None:
        return None
    if not isinstance(data, (str, os.PathLike)):
        raise InvalidRequestError("format applies to file paths only, not to in-memory data")
    if isinstance(value, DataFormat):
        return value
    try:
        return DataFormat(str(value).lower())
    except ValueError as exc:
        raise InvalidRequestError(
            f"unknown format {value!r}; use one of {[f.value for f in DataFormat]}"
        ) from exc


def coerce_on_overlap(value: OnOverlap | str) -> OnOverlap:
    """Read an ingest's ``on_overlap`` argument (an enum member or its value).

    Raises:
        InvalidRequestError: for an unknown policy.
    """
    if isinstance(value, OnOverlap):
        return value
    try:
        return OnOverlap(str(value).lower().replace("_", "-"))
    except ValueError as exc:
        raise InvalidRequestError(
            f"unknown on_overlap {value!r}; use one of {[p.value for p in OnOverlap]}"
        ) from exc


def unique_ids(block_ids: Iterable[str], *, allow_duplicates: bool, what: str) -> list[str]:
    """The distinct block ids of a request, in order.

    Raises:
        InvalidRequestError: for no id, or a duplicate when ``allow_duplicates`` is False.
        UnknownBlockError: for text that cannot be a block id.
    """
    ids = list(block_ids)
    if not ids:
        raise InvalidRequestError(f"{what} needs at least one block id")
    unique = list(dict.fromkeys(ids))
    if len(unique) != len(ids) and not allow_duplicates:
        dupes = sorted({b for b in ids if ids.count(b) > 1})
        raise InvalidRequestError(f"{what} got duplicate block id(s) {dupes}")
    for b in unique:
        parse_block_id(b)
    return unique


def require_known(ids: Sequence[str], metas: dict[str, BlockMeta], consequence: str) -> None:
    """Raise UnknownBlockError listing every id missing from ``metas``."""
    missing = [b for b in ids if b not in metas]
    if missing:
        tail = f"; {consequence}" if consequence else ""
        raise UnknownBlockError(f"unknown block(s) {', '.join(missing)}{tail}")


def retryable(exc: OperationalError | IntegrityError) -> bool:
    """Lock contention, serialization failures and lost insert races are worth a retry."""
    if isinstance(exc, IntegrityError):
        return True
    text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
    return any(
        s in text for s in ("locked", "busy", "deadlock", "could not serialize", "serialization")
    )


def backoff(attempt: int) -> None:
    """Sleep a random time that grows with the attempt number (at most 0.2 s)."""
    time.sleep(random.uniform(0, min(0.2, 0.002 * 2 ** min(attempt, 7))))

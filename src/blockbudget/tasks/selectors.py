"""Selectors: which blocks of a stream a task may use, said without naming them.

A task either names its blocks (:class:`Named`) or says how the platform may choose them:
the newest ``n`` (:class:`Newest`, bound when the task enters the scheduler, as PrivateKube
binds a claim to the blocks that exist when it arrives — Luo et al., "Privacy Budget
Scheduling", OSDI'21 §3.2), any ``k`` blocks whose time window starts in a range
(:class:`InRange`), or any blocks of the stream (:class:`AnyBlocks`). Every selector is a
frozen value with a JSON form (:meth:`to_json` / :func:`selector_from_json`) that the task
table stores and the HTTP API accepts.

Example:
    >>> from datetime import datetime, UTC
    >>> sel = InRange(2, datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 2, 1, tzinfo=UTC))
    >>> selector_from_json(sel.to_json()) == sel
    True
    >>> selector_from_json({"kind": "any", "k": 3}).to_json()
    {'kind': 'any', 'k': 3, 'min_k': 1}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError

__all__ = ["AnyBlocks", "InRange", "Named", "Newest", "Selector", "selector_from_json"]


def _count(value: Any, *, name: str, minimum: int = 1) -> int:
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRequestError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _utc(value: Any, *, name: str) -> datetime:
    """A datetime (or ISO text) as an aware UTC datetime; a naive one is taken as UTC."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidRequestError(f"{name} must be an ISO 8601 time, got {value!r}") from None
    if not isinstance(value, datetime):
        raise InvalidRequestError(f"{name} must be a datetime, got {value!r}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True)
class Named:
    """Exactly these blocks (ids or block keys, resolved to ids at submission).

    Args:
        blocks: non-empty, distinct block ids or keys.
    """

    blocks: tuple[str, ...]

    def __post_init__(self) -> None:
        if isinstance(self.blocks, str):
            raise InvalidRequestError("Named(blocks) needs a sequence of ids, not one string")
        blocks = tuple(self.blocks)
        if not blocks or not all(isinstance(b, str) and b for b in blocks):
            raise InvalidRequestError(f"Named needs non-empty block ids, got {list(blocks)[:5]}")
        if len(set(blocks)) != len(blocks):
            raise InvalidRequestError(f"Named needs distinct blocks, got {list(blocks)[:10]}")
        object.__setattr__(self, "blocks", blocks)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "named", "blocks": list(self.blocks)}


@dataclass(frozen=True)
class Newest:
    """The ``n`` newest live blocks of the stream when the task enters the scheduler."""

    n: int

    def __post_init__(self) -> None:
        _count(self.n, name="Newest(n)")

    def to_json(self) -> dict[str, Any]:
        return {"kind": "newest", "n": self.n}


@dataclass(frozen=True)
class InRange:
    """Any ``k`` blocks whose time window starts in ``[start, end)`` (time-blocked streams).

    The eligible blocks are those in the range when the task enters the scheduler.
    """

    k: int
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        _count(self.k, name="InRange(k)")
        start = _utc(self.start, name="InRange start")
        end = _utc(self.end, name="InRange end")
        if not start < end:
            raise InvalidRequestError(f"InRange needs start < end, got [{start}, {end})")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "range",
            "k": self.k,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
        }


@dataclass(frozen=True)
class AnyBlocks:
    """Any blocks of the stream: at least ``min_k`` and at most ``k`` (None: no limit)."""

    k: int | None = None
    min_k: int = 1

    def __post_init__(self) -> None:
        if self.k is not None:
            _count(self.k, name="AnyBlocks(k)")
        _count(self.min_k, name="AnyBlocks(min_k)")
        if self.k is not None and self.min_k > self.k:
            raise InvalidRequestError(
                f"AnyBlocks needs min_k <= k, got min_k={self.min_k}, k={self.k}"
            )

    def to_json(self) -> dict[str, Any]:
        return {"kind": "any", "k": self.k, "min_k": self.min_k}


Selector = Named | Newest | InRange | AnyBlocks


def selector_from_json(data: Mapping[str, Any]) -> Selector:
    """The selector of a JSON object (the form :meth:`to_json` writes).

    Raises:
        InvalidRequestError: an unknown ``kind``, missing or extra fields, bad values.
    """
    if not isinstance(data, Mapping):
        raise InvalidRequestError(f"a selector is a JSON object, got {data!r}")
    kind = data.get("kind")
    fields: dict[str, set[str]] = {
        "named": {"blocks"},
        "newest": {"n"},
        "range": {"k", "start", "end"},
        "any": {"k", "min_k"},
    }
    if kind not in fields:
        raise InvalidRequestError(f"selector kind must be one of {sorted(fields)}, got {kind!r}")
    extra = set(data) - fields[kind] - {"kind"}
    if extra:
        raise InvalidRequestError(f"selector {kind!r} takes no field(s) {sorted(extra)}")
    if kind == "named":
        blocks = data.get("blocks")
        if not isinstance(blocks, list):
            raise InvalidRequestError(f"selector 'named' needs a list of blocks, got {blocks!r}")
        return Named(tuple(blocks))
    if kind == "newest":
        return Newest(data.get("n"))  # type: ignore[arg-type]
    if kind == "range":
        return InRange(data.get("k"), data.get("start"), data.get("end"))  # type: ignore[arg-type]
    return AnyBlocks(data.get("k"), data.get("min_k", 1))

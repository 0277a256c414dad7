"""Value types of the block store: stream specs, blocking rules, block metadata, ingest reports.

A *stream* is one sensitive data source. Its :class:`Blocking` says how records are cut into
disjoint blocks by a public attribute (Sage, seed ``004_2b5d216070ae2ded.txt``, §3.2 and §4.4):

* :attr:`Unit.TIME` — by a timestamp column, one block per time window (event-level privacy).
  Key: the window's start, ISO formatted: ``"2013-01-01"`` when the window is a whole number of
  days, ``"2013-01-01T06:00"`` for minute-aligned windows, ``"2013-01-01T06:00:30"`` otherwise.
  Windows are aligned on 1970-01-01T00:00 (so day windows start at midnight).
* :attr:`Unit.USER` — by a non-negative integer user-id column, one block per range of
  ``ids_per_block`` consecutive ids (user-level privacy with incrementing public ids, §4.4).
  Key: ``"u000000-000999"`` (first and last id of the range, inclusive, zero-padded to at least
  six digits).
* :attr:`Unit.ATTRIBUTE` — by any public categorical column (string, integer or boolean); one
  block per value. Key: the value, with every character outside ``[A-Za-z0-9_-]`` written as
  ``%XX`` (UTF-8 bytes), so distinct values always get distinct keys and keys are path-safe.

Block ids are ``"{stream}/{key}"`` for the first block of a key and ``"{stream}/{key}#2"``,
``"#3"``… for the blocks born from late records (see :class:`LatePolicy`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError, UnknownBlockError

#: Stream names: lower-case letters, digits, ``_`` and ``-``, starting with a letter or digit.
STREAM_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
MAX_STREAM_NAME = 64
#: Longest block key (an encoded attribute value may not exceed it).
MAX_KEY_LENGTH = 200


class Unit(Enum):
    """What a stream's blocks are cut by."""

    TIME = "time"
    USER = "user"
    ATTRIBUTE = "attribute"


class LatePolicy(Enum):
    """What happens to records whose block is already sealed (or whose window is closed).

    ``NEW_BLOCK`` puts them into a fresh block with the same key and the next sequence number
    (``"{stream}/{key}#2"``…); ``REJECT`` refuses the whole ingest with a :class:`DataError`;
    ``DROP`` ingests the other rows and discards the late ones, counting them in
    :attr:`IngestReport.dropped_rows` (the practical choice for user-level streams, where a
    returning user's new records may not join a sealed block nor start a second one).
    """

    NEW_BLOCK = "new_block"
    REJECT = "reject"
    DROP = "drop"


class OnOverlap(Enum):
    """What an ingest does with rows that exactly repeat rows already stored under the same
    block key (every column equal, nulls equal to nulls; counted as multisets, so an input row
    repeated twice against one stored copy is one duplicate and one new row).

    ``REFUSE`` (the default) refuses the whole ingest when any row is such a duplicate, and
    changes nothing: a duplicated record would count its individual twice in a block, which
    doubles that record's privacy loss under a mechanism calibrated for one row.
    ``SKIP_DUPLICATES`` ingests the other rows and leaves the duplicates out (counted in
    :attr:`OverlapReport.skipped_rows`). ``APPEND`` ingests every row as given and does not
    read stored rows at all (the overlap by block key is still reported).
    """

    APPEND = "append"
    SKIP_DUPLICATES = "skip-duplicates"
    REFUSE = "refuse"


class DataFormat(Enum):
    """The format of an input file given to :meth:`BlockStore.ingest`."""

    CSV = "csv"
    PARQUET = "parquet"


@dataclass(frozen=True)
class Blocking:
    """How a stream's records are assigned to blocks. Use the ``by_*`` constructors.

    Attributes:
        unit: what blocks are cut by.
        column: the public column whose value decides a record's block.
        window: TIME only — the window length, a whole number of seconds, at least one second.
        ids_per_block: USER only — how many consecutive user ids share a block.
        rows_per_user: USER only — the contribution bound k: a grant hands out at most k rows
            per user id, and charges each draw for the group of k rows (group privacy), so a
            mechanism calibrated for one row is charged as user-level DP. Default 1.

    Raises:
        InvalidRequestError: when a field is missing, set for the wrong unit, or out of range.
    """

    unit: Unit
    column: str
    window: timedelta | None = None
    ids_per_block: int | None = None
    rows_per_user: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.unit, Unit):
            raise InvalidRequestError(f"blocking unit must be a Unit, got {self.unit!r}")
        if not isinstance(self.column, str) or not self.column:
            raise InvalidRequestError(
                f"the blocking column must be a non-empty string, got {self.column!r}"
            )
        if self.unit is Unit.TIME:
            w = self.window
            if not isinstance(w, timedelta):
                raise InvalidRequestError(
                    f"time blocking needs a window (a datetime.timedelta), got {w!r}"
                )
            if w < timedelta(seconds=1) or w % timedelta(seconds=1) != timedelta(0):
                raise InvalidRequestError(
                    f"a time window must be a whole number of seconds >= 1 s, got {w}"
                )
        elif self.window is not None:
            raise InvalidRequestError(f"a window applies to time blocking only, not {self.unit}")
        if self.unit is Unit.USER:
            n = self.ids_per_block
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise InvalidRequestError(
                    f"user blocking needs ids_per_block, an integer >= 1, got {n!r}"
                )
            k = self.rows_per_user
            if k is None:
                object.__setattr__(self, "rows_per_user", 1)
            elif not isinstance(k, int) or isinstance(k, bool) or k < 1:
                raise InvalidRequestError(
                    f"rows_per_user (the per-user contribution bound) must be an integer >= 1, "
                    f"got {k!r}"
                )
        elif self.ids_per_block is not None or self.rows_per_user is not None:
            raise InvalidRequestError(
                f"ids_per_block and rows_per_user apply to user blocking only, not {self.unit}"
            )

    @classmethod
    def by_time(cls, column: str, window: timedelta = timedelta(days=1)) -> Blocking:
        """Blocks of consecutive time windows over a timestamp or date column."""
        return cls(Unit.TIME, column, window=window)

    @classmethod
    def by_user(cls, column: str, ids_per_block: int = 1000, rows_per_user: int = 1) -> Blocking:
        """Blocks of ``ids_per_block`` consecutive non-negative integer user ids, each user
        contributing at most ``rows_per_user`` rows to any grant."""
        return cls(Unit.USER, column, ids_per_block=ids_per_block, rows_per_user=rows_per_user)

    @classmethod
    def by_attribute(cls, column: str) -> Blocking:
        """One block per value of a public categorical column."""
        return cls(Unit.ATTRIBUTE, column)

    @property
    def ordered(self) -> bool:
        """Whether keys have a public order (time windows and user-id ranges do)."""
        return self.unit is not Unit.ATTRIBUTE

    @property
    def window_us(self) -> int:
        """The window length in microseconds (TIME only)."""
        if self.window is None:
            raise InvalidRequestError(f"{self.unit} blocking has no time window")
        return self.window // timedelta(microseconds=1)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the window in whole seconds)."""
        return {
            "unit": self.unit.value,
            "column": self.column,
            "window_seconds": None if self.window is None else int(self.window.total_seconds()),
            "ids_per_block": self.ids_per_block,
            "rows_per_user": self.rows_per_user,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Blocking:
        """Inverse of :meth:`to_json`."""
        seconds = data.get("window_seconds")
        return cls(
            Unit(data["unit"]),
            str(data["column"]),
            window=None if seconds is None else timedelta(seconds=int(seconds)),
            ids_per_block=data.get("ids_per_block"),
            rows_per_user=data.get("rows_per_user"),
        )


@dataclass(frozen=True)
class StreamSpec:
    """One sensitive stream: its global policy, accounting rule and blocking.

    The store keeps the policy and accounting so that every component reads one definition;
    it is the ledger that enforces them.

    Attributes:
        name: matches ``[a-z0-9][a-z0-9_-]*``, at most 64 characters.
        policy: the global per-block guarantee (ε_g, δ_g).
        accounting: the per-block filter rule (checked to accept ``policy`` now).
        blocking: how records are cut into blocks.
        late_policy: what to do with records whose block is sealed or whose window is closed.
        slack_delta: the slack δ̃ of strong composition (None: δ_g/2).
        description: free text.
        close_after: TIME and USER streams only. When set to N, a block is sealed automatically
            once data for a window (or id range) N windows later has arrived: after each ingest,
            every window whose start is at most ``latest_start - N * window`` is *closed* — its
            open blocks are sealed in the same transaction, and records for it arriving later
            are late. N = 1 closes every window as soon as data for a later one arrives.

    Raises:
        InvalidRequestError: for a bad name, a wrong field type, ``close_after`` on an attribute
            stream, or late policy NEW_BLOCK on a user stream (a late block would put a user's
            records in two blocks, so per-block accounting would no longer bound that user's
            privacy loss — Sage §4.4 needs all of a user's data in one block).
        InvalidBudgetError: when ``accounting`` cannot guard ``policy`` (e.g. strong or RDP
            accounting with δ_g = 0).
    """

    name: str
    policy: Budget
    accounting: Accounting
    blocking: Blocking
    late_policy: LatePolicy
    slack_delta: float | None = None
    description: str = ""
    close_after: int | None = None

    def __post_init__(self) -> None:
        check_stream_name(self.name)
        if not isinstance(self.policy, Budget):
            raise InvalidRequestError(f"a stream policy must be a Budget, got {self.policy!r}")
        if not isinstance(self.accounting, str):
            raise InvalidRequestError(
                f"accounting must be the name of a registered rule, got {self.accounting!r}"
            )
        # a registered rule's name (a plain str is read through the registry; unknown: refused)
        object.__setattr__(self, "accounting", Accounting(self.accounting))
        if not isinstance(self.blocking, Blocking):
            raise InvalidRequestError(f"blocking must be a Blocking, got {self.blocking!r}")
        if not isinstance(self.late_policy, LatePolicy):
            raise InvalidRequestError(f"late_policy must be a LatePolicy, got {self.late_policy!r}")
        if not isinstance(self.description, str):
            raise InvalidRequestError("description must be a string")
        # the rule checks it can guard the policy (the store builds no filter class itself)
        self.accounting.rule.filter(capacity=self.policy, slack_delta=self.slack_delta)
        if self.close_after is not None:
            n = self.close_after
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise InvalidRequestError(f"close_after must be an integer >= 1, got {n!r}")
            if not self.blocking.ordered:
                raise InvalidRequestError(
                    "close_after needs ordered blocks (time windows or user-id ranges); "
                    f"stream {self.name!r} blocks by attribute {self.blocking.column!r}"
                )
        if self.blocking.unit is Unit.USER and self.late_policy is LatePolicy.NEW_BLOCK:
            raise InvalidRequestError(
                f"stream {self.name!r}: user-level blocks must keep each user's records in one "
                "block, so late records cannot go to a new block (late_policy NEW_BLOCK); "
                "use LatePolicy.DROP or LatePolicy.REJECT"
            )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; the catalog stores specs in this form."""
        return {
            "name": self.name,
            "policy": self.policy.to_json(),
            "accounting": self.accounting.value,
            "blocking": self.blocking.to_json(),
            "late_policy": self.late_policy.value,
            "slack_delta": self.slack_delta,
            "description": self.description,
            "close_after": self.close_after,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamSpec:
        """Inverse of :meth:`to_json` (validated again on construction)."""
        return cls(
            name=str(data["name"]),
            policy=Budget.from_json(data["policy"]),
            accounting=Accounting(data["accounting"]),
            blocking=Blocking.from_json(data["blocking"]),
            late_policy=LatePolicy(data["late_policy"]),
            slack_delta=data.get("slack_delta"),
            description=str(data.get("description", "")),
            close_after=data.get("close_after"),
        )


@dataclass(frozen=True)
class BlockMeta:
    """What the catalog knows about one block.

    Attributes:
        block_id: ``"{stream}/{key}"`` or ``"{stream}/{key}#{seq}"``.
        stream: the stream's name.
        key: the block key (see the module docstring).
        seq: 1 for a key's first block, 2, 3… for blocks born from late records.
        rows: number of rows.
        nbytes: total size of its Parquet part files.
        parts: number of part files.
        sealed: a sealed block never changes again.
        created_at: when its first rows were committed (UTC).
        sealed_at: when it was sealed (UTC), or None.
        window_start: TIME — first instant of the window (inclusive).
        window_end: TIME — end of the window (exclusive).
        id_start: USER — first user id of the range.
        id_end: USER — last user id of the range (inclusive).
        attribute: ATTRIBUTE — the attribute value as text.
    """

    block_id: str
    stream: str
    key: str
    seq: int
    rows: int
    nbytes: int
    parts: int
    sealed: bool
    created_at: datetime
    sealed_at: datetime | None = None
    window_start: datetime | None = None
    window_end: datetime | None = None
    id_start: int | None = None
    id_end: int | None = None
    attribute: str | None = None

    @property
    def late(self) -> bool:
        """Whether the block was born from late records (seq > 1)."""
        return self.seq > 1


@dataclass(frozen=True)
class OverlapReport:
    """How an ingest's rows overlap the rows its stream already held.

    Attributes:
        policy: the :class:`OnOverlap` the ingest ran under.
        rows: input rows whose block key already had stored rows (in any of the key's blocks,
            late ones included); normal for an ingest that extends an open block.
        keys: those rows per block key.
        checked: whether stored rows were read to find exact duplicates (not under APPEND).
        duplicate_rows: input rows equal in every column to a stored row of the same key
            (multiset count); 0 when not ``checked``.
        duplicates: those rows per block key.
        skipped_rows: duplicates left out (SKIP_DUPLICATES); not in the report's ``rows``.
    """

    policy: OnOverlap = OnOverlap.REFUSE
    rows: int = 0
    keys: Mapping[str, int] = field(default_factory=dict, hash=False)
    checked: bool = False
    duplicate_rows: int = 0
    duplicates: Mapping[str, int] = field(default_factory=dict, hash=False)
    skipped_rows: int = 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "policy": self.policy.value,
            "rows": self.rows,
            "keys": dict(self.keys),
            "checked": self.checked,
            "duplicate_rows": self.duplicate_rows,
            "duplicates": dict(self.duplicates),
            "skipped_rows": self.skipped_rows,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OverlapReport:
        """Inverse of :meth:`to_json`."""
        return cls(
            policy=OnOverlap(data["policy"]),
            rows=int(data["rows"]),
            keys={str(k): int(v) for k, v in data["keys"].items()},
            checked=bool(data["checked"]),
            duplicate_rows=int(data["duplicate_rows"]),
            duplicates={str(k): int(v) for k, v in data["duplicates"].items()},
            skipped_rows=int(data["skipped_rows"]),
        )


@dataclass(frozen=True)
class IngestReport:
    """What one ingest did. Every count is exact.

    Attributes:
        stream: the stream ingested into.
        source: a description of the input (file path or in-memory type).
        rows: rows ingested.
        new_blocks: blocks created by this ingest, in key order.
        appended_blocks: existing open blocks that received a new part file, in key order.
        late_rows: rows whose key's first block was already sealed, or whose window was closed,
            when the ingest began: under LatePolicy.NEW_BLOCK they went to a late block (a new
            one, or the key's open block with seq > 1).
        block_rows: rows added per block id (one entry per new or appended block).
        sealed_blocks: blocks sealed automatically (``close_after``) at the end of this ingest.
        dropped_rows: late rows discarded under LatePolicy.DROP (not in ``rows``).
        ingest_id: the ingest's id: the caller's, or ``"sha256:<hex>"``, the content hash
            (see :mod:`blockbudget.store.content`). Unique within the stream.
        content_hash: the hex SHA-256 of the input's canonical form.
        repeat: True when this ingest had already been done: nothing changed, and the other
            fields describe the original ingest.
        overlap: how the rows overlapped stored rows (see :class:`OverlapReport`).
        ingested_at: when the (original) ingest committed (UTC); None for an empty input.
    """

    stream: str
    source: str
    rows: int
    new_blocks: tuple[str, ...] = ()
    appended_blocks: tuple[str, ...] = ()
    late_rows: int = 0
    block_rows: Mapping[str, int] = field(default_factory=dict, hash=False)
    sealed_blocks: tuple[str, ...] = ()
    dropped_rows: int = 0
    ingest_id: str = ""
    content_hash: str = ""
    repeat: bool = False
    overlap: OverlapReport = field(default_factory=OverlapReport)
    ingested_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the catalog keeps each ingest's report in this form)."""
        return {
            "stream": self.stream,
            "source": self.source,
            "rows": self.rows,
            "new_blocks": list(self.new_blocks),
            "appended_blocks": list(self.appended_blocks),
            "late_rows": self.late_rows,
            "block_rows": dict(self.block_rows),
            "sealed_blocks": list(self.sealed_blocks),
            "dropped_rows": self.dropped_rows,
            "ingest_id": self.ingest_id,
            "content_hash": self.content_hash,
            "repeat": self.repeat,
            "overlap": self.overlap.to_json(),
            "ingested_at": None if self.ingested_at is None else self.ingested_at.isoformat(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IngestReport:
        """Inverse of :meth:`to_json`."""
        at = data.get("ingested_at")
        return cls(
            stream=str(data["stream"]),
            source=str(data["source"]),
            rows=int(data["rows"]),
            new_blocks=tuple(data["new_blocks"]),
            appended_blocks=tuple(data["appended_blocks"]),
            late_rows=int(data["late_rows"]),
            block_rows={str(k): int(v) for k, v in data["block_rows"].items()},
            sealed_blocks=tuple(data["sealed_blocks"]),
            dropped_rows=int(data["dropped_rows"]),
            ingest_id=str(data["ingest_id"]),
            content_hash=str(data["content_hash"]),
            repeat=bool(data["repeat"]),
            overlap=OverlapReport.from_json(data["overlap"]),
            ingested_at=None if at is None else datetime.fromisoformat(at),
        )


def check_stream_name(name: object) -> str:
    """Validate a stream name.

    Raises:
        InvalidRequestError: when it is not a string matching ``[a-z0-9][a-z0-9_-]*`` of at most
            64 characters.
    """
    if not isinstance(name, str) or not STREAM_NAME_RE.fullmatch(name):
        raise InvalidRequestError(
            f"a stream name must match [a-z0-9][a-z0-9_-]* (lower-case letters, digits, _ and -, "
            f"starting with a letter or digit), got {name!r}"
        )
    if len(name) > MAX_STREAM_NAME:
        raise InvalidRequestError(
            f"a stream name must have at most {MAX_STREAM_NAME} characters, got {len(name)}"
        )
    return name


def make_block_id(stream: str, key: str, seq: int) -> str:
    """The id of a stream's ``seq``-th block for ``key``."""
    return f"{stream}/{key}" if seq == 1 else f"{stream}/{key}#{seq}"


def parse_block_id(block_id: object) -> tuple[str, str, int]:
    """Split a block id into (stream, key, seq).

    Raises:
        UnknownBlockError: when the text cannot be a block id (so no such block exists).
    """
    if not isinstance(block_id, str) or "/" not in block_id:
        raise UnknownBlockError(f"no block {block_id!r}: a block id is 'stream/key[#seq]'")
    stream, _, rest = block_id.partition("/")
    key, sep, seq_text = rest.partition("#")
    seq = 1
    if sep:
        if not seq_text.isdigit() or int(seq_text) < 2:
            raise UnknownBlockError(f"no block {block_id!r}: its '#seq' suffix must be >= 2")
        seq = int(seq_text)
    if not STREAM_NAME_RE.fullmatch(stream) or not key:
        raise UnknownBlockError(f"no block {block_id!r}: a block id is 'stream/key[#seq]'")
    return stream, key, seq


def utc_now() -> datetime:
    """The current time in UTC, without tzinfo (the catalog stores naive UTC)."""
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class FileCheck:
    """The part files under the data root compared with the catalog
    (:meth:`~blockbudget.store.blockstore.BlockStore.check_files`).

    Attributes:
        stream: the stream whose directory was checked; None for the whole data root.
        files: Parquet part files found.
        parts: part files the catalog lists.
        orphans: ``(path, modified)`` of each part file that no catalog entry lists, by path
            (root-relative; ``modified`` in UTC, None when the filesystem does not say): left
            by an ingest that was killed before its commit — or staged by an ingest still
            running, when it is recent. Never read; safe to delete once no ingest can commit
            it (:meth:`~blockbudget.store.blockstore.BlockStore.vacuum`).
        missing: catalog parts whose file is gone, by path (a store restored from a backup
            older than its catalog, or files removed by hand): reading their blocks fails.
    """

    stream: str | None
    files: int
    parts: int
    orphans: tuple[tuple[str, datetime | None], ...] = ()
    missing: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every listed part has its file and no file is unlisted."""
        return not self.orphans and not self.missing

    def orphans_older_than(self, age: timedelta, *, now: datetime | None = None) -> list[str]:
        """The orphans modified more than ``age`` before ``now`` (default: the current time),
        as :meth:`~blockbudget.store.blockstore.BlockStore.vacuum` picks them: one of unknown
        age only when ``age`` is 0."""
        at = now if now is not None else datetime.now(UTC)
        return [
            path
            for path, modified in self.orphans
            if age <= timedelta(0) or (modified is not None and _utc(modified) < at - age)
        ]


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

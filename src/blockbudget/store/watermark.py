"""The audit log's high-water mark: what it is and how a database is judged against it (pure
logic; the files are :mod:`blockbudget.store.markfiles`, the guard that keeps it
:mod:`blockbudget.store.rollback`).

A DP ledger must never forget spending: an answer released to an analyst stays released, so a
database restored to a point before its charge would let the same budget be spent twice. The
database cannot notice that by itself — a restored database is a consistent, verifiable past.
So the platform keeps a **high-water mark** of its audit log *outside* the database, beside the
block files (a local directory or an object store): the seq and hash of the last audit event it
has acknowledged, the identity of the database's history (the hash of its first event) and the
event's time. A database whose log does not reach the mark is refused until it is reconciled.

Marks are files named by an ordered key and their event,
``mark-{epoch:010d}-{seq:020d}-{hash}.json`` under ``_blockbudget/marks/`` of the data root (a
name no stream can take: stream names start with a letter or digit); the mark is the one with
the largest (epoch, seq). Writers never overwrite each other — each writes its own name, the
event's hash included — so concurrent servers need no lock and the mark can only move forward:
the largest name stays the largest. Two copies of one database on the same block files (a
restore onto a second database beside the live one, a stale replica) cannot both spend: every
mark of the current epoch must name an event of the log that writes or judges, and a writer
checks the marks written since it last looked before its answer leaves, so of two histories
that mark the same block files, at least one is refused at its first mark after they parted.
The ``epoch`` grows by one at each
reconciliation (``blockbudget db reconcile``), whose new mark names a *shorter* log (the
restored one, plus the reconciliation) that must nevertheless win over the marks of the lost
history.

Example:
    >>> m = Mark(epoch=0, seq=81, hash="ab" * 32, database="cd" * 32, ts=1.0)
    >>> mark_name(m)[:40]
    'mark-0000000000-00000000000000000081-aba'
    >>> parse_mark_name(mark_name(m))
    (0, 81)
    >>> judge(m, Head(seq=78, hash="ef" * 32, first_hash="cd" * 32), at_mark=None)
    <MarkState.BEHIND: 'behind'>
    >>> judge(m, Head(seq=90, hash="ef" * 32, first_hash="cd" * 32), at_mark="ab" * 32)
    <MarkState.OK: 'ok'>
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from blockbudget.errors import InvalidRequestError

#: Where marks live, relative to the data root.
MARK_DIR = "_blockbudget/marks"
#: Where a reconciliation keeps its tombstones (:meth:`MarkFiles.record_tombstones
#: <blockbudget.store.markfiles.MarkFiles.record_tombstones>`), relative to the data root.
TOMBSTONE_DIR = "_blockbudget/tombstones"
#: The mark files' format version.
MARK_FORMAT = 1
#: The environment variable a platform reads its :class:`MarkPolicy` from (``serve
#: --mark-every`` sets it for its worker processes).
MARK_ENV = "BLOCKBUDGET_MARK_EVERY"

_NAME = re.compile(r"^mark-(\d{10})-(\d{20})(?:-([0-9a-f]{64}))?\.json$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Mark:
    """One high-water mark.

    Attributes:
        epoch: 0 until the first reconciliation; each reconciliation adds one.
        seq: the audit seq the log reached when the mark was written.
        hash: the hash of the event at ``seq``.
        database: the hash of the log's first event: the identity of the database's history
            (a restored copy keeps it; another database has another).
        ts: when the mark was written (Unix seconds), after the event at ``seq`` committed:
            the mark's time.
        writer: which process wrote it (``host:pid``; informative).
    """

    epoch: int
    seq: int
    hash: str
    database: str
    ts: float
    writer: str = ""

    @property
    def key(self) -> tuple[int, int]:
        """The order of marks: (epoch, seq)."""
        return (self.epoch, self.seq)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MARK_FORMAT,
            "epoch": self.epoch,
            "seq": self.seq,
            "hash": self.hash,
            "database": self.database,
            "ts": self.ts,
            "writer": self.writer,
        }

    def identity(self) -> dict[str, Any]:
        """What names the mark in an audit event (its key, event and history; not who wrote
        it, nor when)."""
        return {"epoch": self.epoch, "seq": self.seq, "hash": self.hash, "database": self.database}

    @staticmethod
    def from_json(data: Any) -> Mark:
        """Parse a mark file's JSON.

        Raises:
            InvalidRequestError: not a mark of a known format.
        """
        try:
            if data["format"] != MARK_FORMAT:
                raise ValueError(f"format {data['format']!r}")
            mark = Mark(
                epoch=int(data["epoch"]),
                seq=int(data["seq"]),
                hash=str(data["hash"]),
                database=str(data["database"]),
                ts=float(data["ts"]),
                writer=str(data.get("writer", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidRequestError(f"not a high-water mark: {exc}") from None
        if mark.epoch < 0 or mark.seq < 1 or not _HEX64.match(mark.hash):
            raise InvalidRequestError("not a high-water mark: bad epoch, seq or hash")
        if not _HEX64.match(mark.database):
            raise InvalidRequestError("not a high-water mark: bad database identity")
        return mark

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()


def mark_name(mark: Mark) -> str:
    """The file name of a mark: its order key, zero-padded so that names sort as keys do, and
    the hash of its event — so that two databases that share a history up to some point (a
    restored copy beside the live one) never overwrite each other's mark at the same key: each
    leaves its own, and each can see the other's."""
    return f"mark-{mark.epoch:010d}-{mark.seq:020d}-{mark.hash}.json"


def parse_mark_name(name: str) -> tuple[int, int] | None:
    """(epoch, seq) of a mark file's name; None for any other name."""
    entry = parse_mark_entry(name)
    return None if entry is None else (entry[0], entry[1])


def parse_mark_entry(name: str) -> tuple[int, int, str | None] | None:
    """(epoch, seq, hash) of a mark file's name (hash None for a name without it, as the
    first marks were named); None for any other name."""
    m = _NAME.match(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)), m.group(3))


@dataclass(frozen=True)
class Head:
    """What the judge needs of the database: its log's last seq and hash, and its first
    event's hash (None for an empty log)."""

    seq: int
    hash: str
    first_hash: str | None


class MarkState(Enum):
    """How a database stands against the mark (:func:`judge`)."""

    #: no mark yet (a new data root, or one written before marks were kept): nothing to
    #: compare; the first write sets it
    NONE = "none"
    #: the log reaches the mark and has the mark's event at the mark's seq
    OK = "ok"
    #: the same history, shorter than the mark: restored to an older point
    BEHIND = "behind"
    #: the same history up to some point, another event at the mark's seq: restored to an older
    #: point and written to since
    DIVERGED = "diverged"
    #: another database than the mark's (or an empty one where the mark names a history)
    FOREIGN = "foreign"
    #: the mark could not be read (the block store did not answer)
    UNREADABLE = "unreadable"

    @property
    def refuses(self) -> bool:
        """Whether budgets are refused in this state."""
        return self not in (MarkState.NONE, MarkState.OK)


def judge(mark: Mark | None, head: Head, *, at_mark: str | None) -> MarkState:
    """How ``head`` stands against ``mark``; ``at_mark`` is the hash of the database's event at
    ``mark.seq`` (None when it has none).

    A database is OK when its log holds the mark's event: the same hash at the same seq. A
    hash names the whole chain before it, so this says the database's history includes
    everything the mark acknowledged, whatever came after.
    """
    if mark is None:
        return MarkState.NONE
    if head.first_hash is None or head.first_hash != mark.database:
        return MarkState.FOREIGN
    if head.seq < mark.seq:
        return MarkState.BEHIND
    if at_mark != mark.hash:
        return MarkState.DIVERGED
    return MarkState.OK


@dataclass(frozen=True)
class MarkPolicy:
    """When the mark advances after a write (the trade between the cost of a write and the
    window a restore could hide; docs/operations.md, "The high-water mark").

    Attributes:
        events: advance once the log is at least this many events past the mark (1: after
            every write that appends events).
        seconds: advance once the mark is at least this old (None: never for age alone); a
            background thread also advances an idle mark this often.
        on_charge: advance after every write that charges, before its result — after which a
            DP answer may leave the process — is handed out.
        enabled: False writes no mark (for benchmarks); a mark the block files already hold
            is still checked, so a restored database is refused all the same.
    """

    events: int = 2**62
    seconds: float | None = 1.0
    on_charge: bool = True
    enabled: bool = True

    @property
    def every_commit(self) -> bool:
        return self.enabled and self.events <= 1

    @property
    def before_answers(self) -> bool:
        """Whether no DP answer can leave before the mark covers its charge."""
        return self.enabled and (self.on_charge or self.events <= 1)

    def due(self, *, behind_events: int, age_seconds: float, charged: bool = False) -> bool:
        """Whether the mark must advance now, ``behind_events`` events short of the log and
        written ``age_seconds`` ago; ``charged``: the commit being reported charged."""
        if not self.enabled or behind_events <= 0:
            return False
        if behind_events >= self.events or (charged and self.on_charge):
            return True
        return self.seconds is not None and age_seconds >= self.seconds

    def describe(self) -> str:
        if not self.enabled:
            return "off"
        if self.every_commit:
            return "commit"
        parts = ["charge"] if self.on_charge else []
        if self.events < 2**62:
            parts.append(str(self.events))
        if self.seconds is not None:
            parts.append(f"{self.seconds:g}s")
        return ",".join(parts)


#: The default: the mark advances after every write that charges, before its answer leaves
#: (so a restore can never hide a released answer), and within about a second after any other write.
BEFORE_ANSWERS = MarkPolicy()
#: After every write that appends events, before its result is handed out.
EVERY_COMMIT = MarkPolicy(events=1, seconds=None)


def parse_policy(text: str | MarkPolicy | None) -> MarkPolicy:
    """A :class:`MarkPolicy` from its text (``serve --mark-every``, ``BLOCKBUDGET_MARK_EVERY``):

    * ``charge`` (the default) — after every write that charges, before its answer leaves;
      any other write within about a second (``charge,Ts``: T to 1.5 T seconds);
    * ``commit`` — after every write that appends audit events, before its result leaves;
    * ``N`` / ``Ts`` / ``N,Ts`` — batched: every N events and/or T seconds, whichever first
      (answers may leave before the mark covers them: the window a restore could hide);
    * ``off`` — no mark written (a mark already there is still checked).

    Example:
        >>> parse_policy("100,5s")
        MarkPolicy(events=100, seconds=5.0, on_charge=False, enabled=True)
        >>> parse_policy(None) == parse_policy("charge") == BEFORE_ANSWERS
        True

    Raises:
        InvalidRequestError: other text.
    """
    if isinstance(text, MarkPolicy):
        return text
    value = "charge" if text is None or not text.strip() else text.strip().lower()
    if value == "off":
        return MarkPolicy(enabled=False)
    if value == "commit":
        return EVERY_COMMIT
    events: int | None = None
    seconds: float | None = None
    on_charge = False
    try:
        for part in value.split(","):
            part = part.strip()
            if part == "charge" and not on_charge:
                on_charge = True
            elif part.endswith("s") and part[:-1].replace(".", "", 1).isdigit():
                if seconds is not None:
                    raise ValueError
                seconds = float(part[:-1])
                if not seconds > 0:
                    raise ValueError
            else:
                if events is not None:
                    raise ValueError
                events = int(part)
                if events < 1:
                    raise ValueError
    except ValueError:
        raise InvalidRequestError(
            "the mark policy is 'charge' (the default), 'charge,Ts', 'commit', 'N' (events), "
            f"'Ts' (seconds), 'N,Ts' or 'off'; got {text!r}"
        ) from None
    if on_charge and events is not None:
        raise InvalidRequestError(
            f"the mark policy 'charge' takes an age ('charge,Ts'), not a count; got {text!r}"
        )
    if on_charge:
        return MarkPolicy(seconds=1.0 if seconds is None else seconds)
    return MarkPolicy(events=2**62 if events is None else events, seconds=seconds, on_charge=False)

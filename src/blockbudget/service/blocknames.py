"""Block names as each principal may see them: real keys, or opaque ids on user and attribute
streams.

A user-blocked stream's block key names a range of user ids (``u004242000-004242999``), so
seeing it tells that some user in that range exists (docs/architecture.md, "exact counts"); an
attribute-blocked stream's key is a value of its attribute (``RAREDIAGNOSIS``), so seeing it
tells that some record has that value. On both, owners and admins see the real keys; every
other reader — analysts — sees and names the blocks by **opaque ids** only. Time-blocked
streams keep their keys (days are public).

* The id of block ``B`` is ``{stream}/b{h}``, ``h`` the first 24 hex digits (96 bits) of
  HMAC-SHA256(secret, ``B``), where the secret is 256 random bits stored once per service in
  the table ``service_secrets`` (so every process, and every restart, gives a block the same
  id). Without the secret nothing about the key can be computed from the id, and ids cannot be
  forged or guessed. The ledger's internal numbering was not used: a sequence number would tell
  how many ranges exist and in which order they appeared, and it is not stable across streams.
* Analysts name blocks by these ids (the full id or its ``b…`` part) wherever blocks are named
  — queries, reservations, draws, charges, tasks and their significance; the service maps them
  back before it calls the platform. A name that is not an opaque id of the stream (a real key
  included) is refused *without echoing it*, the same way whether or not such a block exists,
  so the refusal is no oracle for which ranges exist.
* Everything shown to an analyst carries opaque ids: block lists, query answers, reservations,
  charge receipts, tasks, the dashboard (blocks, heatmap, retiring blocks). In free text
  (refusals, task notes) any hidden block's key is replaced by ``(a block)``; only the blocks of
  a budget refusal (:class:`BudgetExceededError`, :class:`RetiredBlockError`), which the ledger
  names from the request itself, are rewritten to their opaque ids.
* Hidden blocks are listed **sorted by opaque id** everywhere (block lists, the dashboard's
  tables and heatmap rows, tasks, query answers, reservations, receipts, refusals): the key
  order would tell between which existing ranges (or values) a new block's key lies.

Analysts still learn how many blocks a stream has, not which keys they have nor their order;
they pick the newest blocks with ``last``, which the service resolves. On a user stream they
learn only what its DP maximum-id release made known (:meth:`BlockNames.known`,
:mod:`blockbudget.userids`): before the first release they see no block at all (the list is
empty, the count 0, and naming any block is refused saying that the release must run first);
afterwards exactly the blocks whose ids lie at or below its ``safe_max``, a number that follows
from the released value (``⌊(safe_max + 1) / ids_per_block⌋`` when ids are incrementing), and
still by opaque ids, since a key would show a gap in the ids or a late ``#2`` block.

The service's error mapping (:meth:`BlockNames.describe`) also words an unknown column for a
principal that does not own the stream as ``unknown column 'x'``, without the stream's columns.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import sqlalchemy as sa

from blockbudget.dbrevision import ensure_current
from blockbudget.errors import (
    BlockBudgetError,
    BudgetExceededError,
    RetiredBlockError,
    UnknownBlockError,
    UnknownColumnError,
)
from blockbudget.platform import Platform
from blockbudget.service.auth import Permission, Principal, Role, service_metadata
from blockbudget.store import Unit

__all__ = ["BlockNames", "Naming"]

secrets_table = sa.Table(
    "service_secrets",
    service_metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(128), nullable=False),
)

_SECRET_NAME = "block-names"
_TOKEN = re.compile(r"b[0-9a-f]{24}")
#: A user-block key (``u000000-000999``, late blocks ``#2``…), with its stream prefix if any.
_USER_KEY = re.compile(r"(?<![A-Za-z0-9_.-])(?:[a-z0-9][a-z0-9_-]*/)?u\d{6,}-\d{6,}(?:#\d+)?")
_PLACEHOLDER = "(a block)"
#: The units whose block keys are data (a user id range, an attribute value): hidden from
#: analysts. Time windows are public.
_HIDDEN_UNITS = (Unit.USER, Unit.ATTRIBUTE)
_T = TypeVar("_T")


def _sees_schema(me: Principal | None, stream: str) -> bool:
    """Whether ``me`` may read the column names of ``stream`` (its owners and admins)."""
    return me is not None and (me.role is Role.ADMIN or me.permission(stream) is Permission.OWN)


def _load_secret(engine: sa.Engine) -> bytes:
    """The service's block-name secret, created on first use (the first writer wins)."""
    ensure_current(engine)
    secrets_table.create(engine, checkfirst=True)
    query = sa.select(secrets_table.c.value).where(secrets_table.c.name == _SECRET_NAME)
    with engine.connect() as conn:
        row = conn.execute(query).first()
    if row is None:
        try:
            with engine.begin() as conn:
                conn.execute(
                    secrets_table.insert().values(name=_SECRET_NAME, value=secrets.token_hex(32))
                )
        except sa.exc.IntegrityError:
            pass  # another process created it first: use theirs
        with engine.connect() as conn:
            row = conn.execute(query).first()
    assert row is not None
    return bytes.fromhex(row[0])


@dataclass
class _StreamIds:
    """Opaque token ↔ block id for one stream (grows as blocks appear; ids never change),
    current up to audit seq ``seq`` of the ledger (every block registered by then is in)."""

    by_token: dict[str, str] = field(default_factory=dict)
    seq: int = 0


@dataclass(frozen=True)
class Naming:
    """How one principal names the blocks of one stream.

    Attributes:
        stream: the stream.
        hidden: True when the principal sees opaque ids (else every method is the identity).
    """

    stream: str
    hidden: bool
    _names: BlockNames | None = None

    def show(self, block_id: str) -> str:
        """The id the principal sees for ``block_id``."""
        if not self.hidden or self._names is None:
            return block_id
        return self._names.opaque(block_id)

    def show_all(self, block_ids: Iterable[str]) -> list[str]:
        """The ids the principal sees, in the order it may see them: sorted by opaque id when
        hidden (the key order would tell where a block's range lies among the others)."""
        shown = [self.show(b) for b in block_ids]
        return sorted(shown) if self.hidden else shown

    def arrange(self, items: Iterable[_T], block_id: Callable[[_T], str]) -> list[_T]:
        """``items`` (one per block) in the order the principal may see them (as
        :meth:`show_all`)."""
        out = list(items)
        if self.hidden:
            out.sort(key=lambda item: self.show(block_id(item)))
        return out

    def key(self, block_id: str, key: str) -> str:
        """The key the principal sees for a block (the opaque token when hidden)."""
        return self.show(block_id).partition("/")[2] if self.hidden else key

    def resolve(self, names: Sequence[str]) -> list[str]:
        """The block ids the principal's names stand for (unchanged when not hidden: the
        platform resolves ids and keys itself).

        Raises:
            UnknownBlockError: a name that is not an opaque id of a block of this stream (not
                echoed unless it has the shape of an opaque id).
        """
        if not self.hidden or self._names is None:
            return list(names)
        return [self._names.resolve(self.stream, name) for name in names]

    def text(self, message: str) -> str:
        """``message`` with every hidden block key replaced (see the module docstring)."""
        if not self.hidden or self._names is None:
            return message
        return self._names.redact(message, [self.stream])


def redact_keys(message: str) -> str:
    """``message`` with every user-block key (and block id) replaced by a placeholder."""
    return _USER_KEY.sub(_PLACEHOLDER, message)


class BlockNames:
    """The service's block naming (see the module docstring).

    Args:
        platform: the platform (its streams and blocks).
        engine: the service's database (holds the secret).
    """

    def __init__(self, platform: Platform, engine: sa.Engine) -> None:
        self._platform = platform
        self._secret = _load_secret(engine)
        self._lock = threading.Lock()
        self._units: dict[str, Unit] = {}
        self._ids: dict[str, _StreamIds] = {}
        self._opaque: dict[str, str] = {}

    def opaque(self, block_id: str) -> str:
        """The opaque id of ``block_id``: ``{stream}/b{24 hex digits of an HMAC}``."""
        out = self._opaque.get(block_id)
        if out is None:
            digest = hmac.new(self._secret, block_id.encode("utf-8"), hashlib.sha256)
            stream = block_id.partition("/")[0]
            out = f"{stream}/b{digest.hexdigest()[:24]}"
            with self._lock:
                if len(self._opaque) > 1_000_000:
                    self._opaque.clear()
                self._opaque[block_id] = out
        return out

    def hides(self, me: Principal, stream: str) -> bool:
        """Whether ``me`` sees opaque ids on ``stream``: a user or attribute stream it reads
        but does not own (admins and owners see the keys; time streams keep theirs)."""
        if me.role is Role.ADMIN or me.permission(stream) is not Permission.READ:
            return False
        return self._unit(stream) in _HIDDEN_UNITS

    def naming(self, me: Principal, stream: str) -> Naming:
        """How ``me`` names the blocks of ``stream``."""
        return Naming(stream, self.hides(me, stream), self)

    def known(
        self, me: Principal, stream: str, items: list[_T], block_id: Callable[[_T], str]
    ) -> list[_T]:
        """The items (one per block of ``stream``) whose block ``me`` may know of: on a user
        stream where ``me`` sees opaque ids, only blocks a DP maximum-id release made known
        (:func:`blockbudget.userids.visible_blocks`), so neither the list nor its length tells
        more than the release; all of them otherwise."""
        if not self.hides(me, stream) or self._unit(stream) is not Unit.USER:
            return items
        from blockbudget.userids import visible_blocks

        shown = set(visible_blocks(self._platform, stream, [block_id(i) for i in items]))
        return [i for i in items if block_id(i) in shown]

    def hidden_streams(self, me: Principal) -> list[str]:
        """The streams on which ``me`` sees opaque ids."""
        return [s for s, _ in me.streams if self.hides(me, s)]

    def resolve(self, stream: str, name: str) -> str:
        """The block id of an opaque name on ``stream`` (see :meth:`Naming.resolve`).

        Raises:
            UnreleasedIdsError: ``stream`` is a user stream with no maximum-id release yet
                (whatever the name: the refusal tells nothing about it).
            UnknownBlockError: see :meth:`Naming.resolve`.
        """
        if self._unit(stream) is Unit.USER:
            from blockbudget.userids import require_release

            require_release(self._platform, stream)
        token = name[len(stream) + 1 :] if name.startswith(f"{stream}/") else name
        if _TOKEN.fullmatch(token):
            known = self._ids.get(stream)
            found = None if known is None else known.by_token.get(token)
            if found is None:
                found = self._refresh(stream).by_token.get(token)
            if found is not None and self._known(stream, found):
                return found
            # a block beyond the stream's released maximum id is refused as if it did not exist
            raise UnknownBlockError(f"stream {stream!r} has no block {name!r}")
        raise UnknownBlockError(
            f"stream {stream!r} has no block by that name: on this stream blocks are named "
            f"only by the opaque ids that GET /v1/streams/{stream}/blocks lists"
        )

    def describe(self, me: Principal | None, exc: BlockBudgetError) -> str:
        """The message of ``exc`` as ``me`` may read it (see the module docstring)."""
        if isinstance(exc, UnknownColumnError) and not _sees_schema(me, exc.stream):
            # The stream's columns are its owners' business: an analyst learns only that the
            # column it named does not exist.
            return ", ".join(f"unknown column {c!r}" for c in exc.columns)
        hidden = set() if me is None else set(self.hidden_streams(me))
        if not hidden:
            return str(exc)

        def show(block: str) -> str:
            return self.opaque(block) if block.partition("/")[0] in hidden else block

        if isinstance(exc, BudgetExceededError):
            rows = sorted(zip(map(show, exc.blocks), exc.remaining, exc.difference, strict=True))
            exc = BudgetExceededError(
                blocks=[b for b, _, _ in rows],
                requested=exc.requested,
                remaining=[r for _, r, _ in rows],
                difference=[d for _, _, d in rows],
                context=exc.context,
                rule=exc.rule,
            )
        elif isinstance(exc, RetiredBlockError):
            exc = RetiredBlockError(sorted(show(b) for b in exc.blocks))
        return self.redact(str(exc), hidden)

    def redact(self, message: str, streams: Iterable[str]) -> str:
        """``message`` with every user-block key, and every block id of the given attribute
        streams, replaced by a placeholder (an opaque id in free text would keep the key order
        of a list)."""
        message = redact_keys(message)
        for stream in streams:
            if f"{stream}/" not in message or self._unit(stream) is not Unit.ATTRIBUTE:
                continue
            ids = sorted(self._refresh(stream).by_token.values(), key=len, reverse=True)
            if ids:
                pattern = "|".join(re.escape(b) for b in ids)
                message = re.sub(
                    rf"(?<![A-Za-z0-9_.-])(?:{pattern})(?![A-Za-z0-9_])",
                    _PLACEHOLDER,
                    message,
                )
        return message

    def describer(self, me: Principal | None) -> Callable[[BlockBudgetError], str]:
        """:meth:`describe` for one principal."""
        return lambda exc: self.describe(me, exc)

    # --- internals ----------------------------------------------------------------------------

    def _known(self, stream: str, block_id: str) -> bool:
        """Whether selection may offer ``block_id`` (:mod:`blockbudget.userids`)."""
        if self._unit(stream) is not Unit.USER:
            return True
        from blockbudget.userids import visible_blocks

        return bool(visible_blocks(self._platform, stream, [block_id]))

    def _unit(self, stream: str) -> Unit | None:
        unit = self._units.get(stream)
        if unit is None:
            try:
                unit = self._platform.stream(stream).blocking.unit
            except UnknownBlockError:
                return None  # an ACL entry for a stream that does not exist (yet)
            self._units[stream] = unit  # a stream's blocking never changes
        return unit

    def _refresh(self, stream: str) -> _StreamIds:
        """The stream's tokens, brought up to date: the first time, from a listing of its
        blocks (once per process and stream); then from the blocks the ledger registered
        since (:meth:`Ledger.added_blocks`, a range of the audit log's key), so an unknown
        token costs what is new, not what the stream holds. A block exists for analysts once
        the ledger registered it (it cannot serve before)."""
        platform = self._platform
        known = self._ids.get(stream)
        if known is None:
            seq = platform.audit_seq()  # before listing: what registers later is read next time
            ids = {m.block_id for m in platform.block_metas(stream)}
            ids.update(b.block_id for b in platform.registered_blocks(stream))
            fresh = _StreamIds({self.opaque(b).partition("/")[2]: b for b in ids}, seq)
        else:
            added, seq = platform.added_blocks(known.seq)
            new = {self.opaque(b).partition("/")[2]: b for b, s in added if s == stream}
            with self._lock:  # grows in place: a token, once known, always means its block
                known.by_token.update(new)
                known.seq = max(known.seq, seq)
            return known
        with self._lock:
            self._ids[stream] = fresh
        return fresh

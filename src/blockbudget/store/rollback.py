"""Rollback-proof budgets: the guard that keeps the audit log's high-water mark beside the block
files, refuses budgets while the database is behind it, and reconciles.

:class:`Watermark` is the ledger's :class:`~blockbudget.ledger.guard.WriteGuard`:

* **before every write** it knows how the database stands against the mark
  (:func:`~blockbudget.store.watermark.judge`): checked on the first write, again every
  ``recheck_seconds`` while all is well and every second while it refuses. A database that is
  ``behind``, ``diverged`` or ``foreign`` — or a mark that cannot be read — refuses every write
  with :class:`~blockbudget.errors.LedgerBehindMarkError` (or
  :class:`~blockbudget.errors.MarkUnavailableError`), whose message names ``blockbudget db
  reconcile``. Reads that spend nothing are left alone.
* **after every commit** that appended audit events it advances the mark to the new chain tip
  (with the default policy: before the write's result is handed out, so no answer leaves the
  process before the mark covers its charge; a failed mark write withholds the answer, and the
  next write first catches the mark up). A commit whose seq is not above the mark this process
  knows, in a log that no longer holds the mark's event, means the log went backwards
  underneath a running process (a restore while it ran): the answer is withheld and budgets
  are refused from then on. (Concurrent commits report in any order: a report below the mark
  in a log that holds it is just late.)

:meth:`Watermark.reconcile` (``blockbudget db reconcile``) brings a refused database back,
conservatively. The events the restore lost cannot be known — they are exactly what the restore
removed — so *any* block that existed in the lost history could have been charged by them, in
any context, up to its whole budget. Such a block is either

1. registered in the restored database (it existed at the restore point, which is older than
   the mark): every live block is retired — retired blocks never reserve or charge again, in
   any context, which is "all its budget consumed everywhere"; or
2. created after the restore point, in the lost history: the restored database does not know
   it, but its part files were written to the block store before its catalog commit, and the
   restored catalog names none of them — they are orphans. Their blocks are registered now,
   retired (*tombstones*), so that re-ingesting their data later gives them no budget (the
   ledger keeps a retired block retired whatever it is re-registered with). So are the
   blocks the restored catalog names and the restored ledger does not know (a backup taken
   between an ingest's catalog commit and its ledger registration): the repair of a crashed
   ingest would otherwise register them with a fresh budget.

Blocks the restored database created after the restore point (after a ``diverged`` restore)
are retired too: a re-ingest of lost data gets the lost block's id back, so creation time does
not tell them apart. The retirement, the tombstones and a ``reconciled`` audit event are one
ledger transaction, idempotent by a request id derived from the mark; only after it committed
is the mark re-based — a new epoch, at the log's new head — so a crash in between is repaired
by running the command again, and ``audit verify`` replays it all.

What this cannot see: a restore of the block store too (its marks and the orphan part files go
with it — never restore ``_blockbudget/`` and never mirror a copy back with deletion), and, with
a batched mark policy, the events after the last mark (docs/operations.md, "The high-water
mark").
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import (
    HighWaterMarkError,
    LedgerBehindMarkError,
    MarkUnavailableError,
    UnknownBlockError,
)
from blockbudget.ledger import BlockInfo, Ledger
from blockbudget.ledger.types import ChainHead
from blockbudget.store.markfiles import MarkFiles
from blockbudget.store.model import STREAM_NAME_RE, Unit, make_block_id, parse_block_id
from blockbudget.store.watermark import Head, Mark, MarkPolicy, MarkState, judge, mark_name

if TYPE_CHECKING:
    from blockbudget.store.blockstore import BlockStore
    from blockbudget.store.model import StreamSpec

log = logging.getLogger("blockbudget.watermark")

#: Re-check a refusing database this often (seconds): another process may have reconciled.
REFUSING_RECHECK_SECONDS = 1.0
#: Prune older mark files after this many writes of this process.
PRUNE_EVERY = 64
#: Tries of one mark write before the write's answer is withheld.
WRITE_TRIES = 3
#: How many of the newest marks a process's first judgment checks its log holds (later ones
#: check every mark written since they last looked).
FIRST_SCAN = 256
#: The command a refusal names.
RECONCILE_COMMAND = "blockbudget db reconcile"

_STORE_ERRORS = (OSError, pa.ArrowException)


@dataclass(frozen=True)
class MarkStatus:
    """How this platform's database stands against its high-water mark.

    Attributes:
        state: the judged state (``none``, ``ok``, ``behind``, ``diverged``, ``foreign``,
            ``unreadable``).
        mark: the mark (None when there is none, or it could not be read).
        ledger_seq: the database's last audit seq.
        where: where the marks live (data root, no query string).
        policy: when the mark advances (``commit``, ``N``, ``Ts``, ``N,Ts``).
        message: why budgets are refused (None when they are not).
    """

    state: MarkState
    mark: Mark | None
    ledger_seq: int
    where: str
    policy: str
    message: str | None

    @property
    def refusing(self) -> bool:
        return self.state.refuses

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "refusing": self.refusing,
            "mark": None if self.mark is None else self.mark.to_json(),
            "ledger_seq": self.ledger_seq,
            "where": self.where,
            "policy": self.policy,
            "message": self.message,
        }


@dataclass(frozen=True)
class ReconcileReport:
    """What :meth:`Watermark.reconcile` did.

    Attributes:
        state: how the database stood before (``ok``/``none``: nothing was done).
        before: the mark the log did not reach (None when there was none).
        after: the re-based mark (None when nothing was done).
        retired: the blocks retired now, sorted.
        tombstones: the blocks registered now, retired, from orphan part files.
        seq: the ``reconciled`` event's seq (None when nothing was done).
        replayed: a rerun that found the reconciliation already committed (it only re-based
            the mark).
    """

    state: MarkState
    before: Mark | None
    after: Mark | None
    retired: tuple[str, ...] = ()
    tombstones: tuple[str, ...] = ()
    seq: int | None = None
    replayed: bool = False

    @property
    def changed(self) -> bool:
        return self.after is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "reconciled": self.changed,
            "before": None if self.before is None else self.before.to_json(),
            "after": None if self.after is None else self.after.to_json(),
            "retired": list(self.retired),
            "tombstones": list(self.tombstones),
            "seq": self.seq,
            "replayed": self.replayed,
        }


class Watermark:
    """The platform's guard of its ledger (see the module docstring).

    Args:
        ledger: the ledger to guard (its guard is set here).
        files: the marks beside the block files.
        policy: when the mark advances.
        recheck_seconds: how often a well database is judged again before a write (a restore
            underneath a running process is noticed within this time, or at its next commit).
        clock: Unix time (for the marks' times and ages).
    """

    def __init__(
        self,
        ledger: Ledger,
        files: MarkFiles,
        *,
        policy: MarkPolicy,
        recheck_seconds: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.files = files
        self.policy = policy
        self._recheck = recheck_seconds
        self._clock = clock
        self._lock = threading.RLock()
        self._reconciling = threading.Lock()
        self._state: MarkState | None = None  # None: not judged yet
        self._mark: Mark | None = None  # the largest mark this process knows
        # every mark file up to this key (in its epoch) names an event this log holds
        self._verified: tuple[int, int] | None = None
        self._refusal: HighWaterMarkError | None = None
        self._ledger_seq = 0
        self._checked_at = -float("inf")  # monotonic
        self._identity: str | None = None  # this database's first event hash
        self._pending: tuple[int, str] | None = None  # committed, not yet under the mark
        self._overdue = False  # ... and a mark that was due for it could not be written
        self._writes = 0
        self._writer = f"{socket.gethostname()}:{os.getpid()}"
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        ledger.set_guard(self)

    # --- the ledger's guard --------------------------------------------------------------------

    def before_write(self) -> None:
        """Refuse the write while the database is behind its mark; first catch the mark up
        with a commit it does not cover yet (a failed mark write)."""
        with self._lock:
            now = time.monotonic()
            if self._state is None:
                self._check()
            elif self._state.refuses:
                if now - self._checked_at >= REFUSING_RECHECK_SECONDS:
                    self._check()
            elif now - self._checked_at >= self._recheck:
                self._check()
            if self._refusal is not None:
                raise self._refusal
            if self._pending is not None and (self._overdue or self._due()):
                self._advance()

    def committed(self, seq: int, hash_: str, *, charged: bool = True) -> None:
        """Advance the mark to a commit's last event (as the policy says: with the default,
        at once when it charged); refuse when the commit shows the log went backwards."""
        with self._lock:
            if self._refusal is not None:
                # judged refusing while this write was under way: never let a mark name it
                raise self._refusal
            known = self._mark
            if known is not None and seq <= known.seq:
                # Already under the mark: either a concurrent commit's report arriving after a
                # later one's (threads report in any order), or the log went backwards
                # underneath this process (a restore while it ran) and this commit reused a
                # seq. The log still holding the mark's event tells them apart.
                if self.ledger.chain_hash(known.seq) == known.hash:
                    return
                self._check()
                if self._refusal is None:  # pragma: no cover - the store's mark moved on
                    return
                raise self._refusal
            if self._pending is None or seq > self._pending[0]:
                self._pending = (seq, hash_)
            if self._due(charged=charged):
                try:
                    self._advance()
                except HighWaterMarkError:
                    self._overdue = True  # the next write first tries again
                    raise
            elif self._pending is not None:
                self._start_flusher()

    # --- status --------------------------------------------------------------------------------

    def status(self, *, refresh: bool = False) -> MarkStatus:
        """How the database stands now (judged again with ``refresh``, or when never judged;
        otherwise as last judged)."""
        with self._lock:
            if refresh or self._state is None:
                self._check()
            assert self._state is not None
            return MarkStatus(
                state=self._state,
                mark=self._mark,
                ledger_seq=self._ledger_seq,
                where=self.files.where,
                policy=self.policy.describe(),
                message=None if self._refusal is None else str(self._refusal),
            )

    def refusal(self) -> HighWaterMarkError | None:
        """The error every write gets now (None when writes go through), judged as
        :meth:`before_write` would, without writing anything."""
        with self._lock:
            now = time.monotonic()
            stale = self._recheck if not (self._state and self._state.refuses) else 1.0
            if self._state is None or now - self._checked_at >= stale:
                self._check()
            return self._refusal

    # --- reconcile -----------------------------------------------------------------------------

    def reconcile(self, store: BlockStore, *, adopt: bool = False) -> ReconcileReport:
        """Count every block the lost events could have touched as spent and re-base the mark
        (see the module docstring). Nothing to do (the database reaches its mark, or there is
        no mark) is answered as such.

        Args:
            store: the block store (its orphan part files name the blocks the lost history
                created).
            adopt: reconcile a database that is not the mark's (``foreign``): make the block
                store's mark this database's from now on. Without it a foreign database is
                refused (usually a wrong ``BLOCKBUDGET_DATABASE``).

        Raises:
            LedgerBehindMarkError: a foreign database without ``adopt``.
            MarkUnavailableError: the mark could not be read or written.
        """
        with self._reconciling:  # one at a time in this process (others: by request id)
            with self._lock:
                self._check()
                state, mark, refusal = self._state, self._mark, self._refusal
            assert state is not None
            if state is MarkState.UNREADABLE:
                assert refusal is not None
                raise refusal
            if not state.refuses or mark is None:
                return ReconcileReport(state=state, before=mark, after=None)
            if state is MarkState.FOREIGN and not adopt:
                raise LedgerBehindMarkError(
                    f"{refusal} — `{RECONCILE_COMMAND}` reconciles a foreign database only "
                    "with --adopt: check first that BLOCKBUDGET_DATABASE names the database of "
                    "these block files",
                    state=state.value,
                    ledger_seq=self._ledger_seq,
                    mark_seq=mark.seq,
                )
            epoch = mark.epoch + 1
            tombstones = orphan_tombstones(store) + unregistered_tombstones(store, self.ledger)
            recorded = {t.block_id for t in tombstones}
            # an earlier reconciliation's tombstones (their database may be the one lost now,
            # their orphan part files removed since): kept beside the marks
            specs = {s.name: s for s in store.list_streams()}
            tombstones += [
                _tombstone(specs, block, stream)
                for block, stream in self.files.recorded_tombstones()
                if block not in recorded
            ]
            # before the ledger's transaction: a crash in between leaves a record of more
            # tombstones than were registered, which only retires them again
            self.files.record_tombstones(
                epoch, [(t.block_id, t.stream) for t in tombstones if t.block_id in recorded]
            )
            # Not under the guard's lock: with group commit the batch's other writes report
            # their commit to this guard from the committer thread.
            done = self.ledger.reconcile(
                epoch=epoch,
                mark=mark.identity(),
                state=state.value,
                tombstones=tombstones,
                request_id=f"reconcile/{epoch}/{mark.seq}/{mark.hash[:16]}",
            )
            identity = self.ledger.chain_hash(1)
            assert identity is not None  # the reconciliation wrote at least one event
            after = Mark(
                epoch=epoch,
                seq=done.seq,
                hash=done.hash,
                database=identity,
                ts=self._clock(),
                writer=self._writer,
            )
            with self._lock:
                self._write(after)  # only after the ledger committed: a crash here is rerun
                self._identity = identity
                self._mark = after
                self._pending = None
                self._overdue = False
                self._check()
            log.info(
                "reconciled the ledger with its high-water mark: %d block(s) retired, %d "
                "tombstone(s); mark re-based at epoch %d, seq %d",
                len(done.retired),
                len(done.tombstones),
                after.epoch,
                after.seq,
            )
            return ReconcileReport(
                state=state,
                before=mark,
                after=after,
                retired=done.retired,
                tombstones=done.tombstones,
                seq=done.seq,
                replayed=done.replayed,
            )

    # --- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Advance the mark over what is still pending (batched policies) and stop."""
        self._stop.set()
        with self._lock:
            if self._pending is not None and self._refusal is None and self.policy.enabled:
                try:
                    self._advance()
                except Exception:  # a close never fails on this (the database may be gone)
                    log.warning("could not advance the high-water mark on close", exc_info=True)
        flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join(timeout=5)

    # --- internals (under the lock) ------------------------------------------------------------

    def _check(self) -> None:
        """Judge the database against the largest mark (the store's or this process's)."""
        self._checked_at = time.monotonic()
        try:
            stored = self.files.read()
        except _STORE_ERRORS as exc:
            log.warning(
                "the high-water mark at %s could not be read: %s", self.files.where, _cause(exc)
            )
            self._state = MarkState.UNREADABLE
            self._refusal = MarkUnavailableError(
                "the audit log's high-water mark beside the block files could not be read (the "
                "block store did not answer; the server log says why): budgets are refused "
                "until it can be"
            )
            return
        mark = stored
        if self._mark is not None and (mark is None or self._mark.key > mark.key):
            mark = self._mark  # ours, if the store lost it (never forget a mark we wrote)
        head: ChainHead = self.ledger.chain_head()
        at = self.ledger.chain_hash(mark.seq) if mark is not None and head.seq >= mark.seq else None
        state = judge(mark, Head(head.seq, head.hash, head.first_hash), at_mark=at)
        self._state, self._mark, self._ledger_seq = state, mark, head.seq
        self._identity = head.first_hash
        if state.refuses:
            self._refusal = self._refusal_for(state, mark, head.seq, head.first_hash)
            self._pending = None
            self._overdue = False
            return
        if mark is not None:
            # The largest mark is held; so must be every other mark of its epoch written since
            # the last check: a copy of this database beside it (a restore onto another
            # database, a stale replica) leaves its own marks, which this log does not hold.
            try:
                unheld = self._unheld(since=self._verified, epoch=mark.epoch)
            except _STORE_ERRORS as exc:
                log.warning(
                    "the high-water marks at %s could not be listed: %s",
                    self.files.where,
                    _cause(exc),
                )
                self._state = MarkState.UNREADABLE
                self._refusal = MarkUnavailableError(
                    "the audit log's high-water mark beside the block files could not be read "
                    "(the block store did not answer; the server log says why): budgets are "
                    "refused until it can be"
                )
                return
            if unheld is not None:
                self._refuse(*unheld, head.seq)
                return
            self._verified = max(mark.key, self._verified or mark.key)
        self._refusal = None
        # Committed and not under the mark (a withheld answer, a batched window): the next
        # write, or a policy that finds it due, advances the mark over it.
        unmarked = head.seq > (0 if mark is None else mark.seq)
        if unmarked and (self._pending is None or head.seq > self._pending[0]):
            self._pending = (head.seq, head.hash)
            # not known why (a withheld answer?): a policy that marks answers marks it first
            self._overdue = self.policy.before_answers

    def _refuse(self, state: MarkState, mark: Mark, seq: int) -> None:
        self._state = state
        self._refusal = self._refusal_for(state, mark, seq, self._identity)
        self._pending = None
        self._overdue = False

    def _unheld(
        self,
        *,
        since: tuple[int, int] | None,
        epoch: int,
        skip: frozenset[str] | set[str] = frozenset(),
    ) -> tuple[MarkState, Mark] | None:
        """The first mark file at or above ``since`` (in ``epoch`` or later) whose event this
        database's log does not hold, with how the log stands against it; None when there is
        none. A mark is written only after its event committed, so a log that lacks it is
        behind it or diverged from it — never merely late.

        Raises:
            OSError, pyarrow.ArrowException: the store did not answer.
        """
        for i, (key, hash_, name) in enumerate(self.files.entries()):
            if key[0] < epoch or (since is not None and key < since):
                break
            if since is None and i >= FIRST_SCAN:
                break  # a first look: the newest ones (a refused history writes no more)
            if name in skip:  # known to be held
                continue
            loaded = None
            if hash_ is None:  # a name without its hash: read the file
                loaded = self.files.load(name)
                if loaded is None:
                    continue
                hash_ = loaded.hash
            held = self.ledger.chain_hash(key[1])
            if held == hash_:
                continue
            state = MarkState.BEHIND if held is None else MarkState.DIVERGED
            mark = loaded or self.files.load(name)
            if mark is None:  # pruned or damaged meanwhile: its name is what we know
                mark = Mark(
                    epoch=key[0],
                    seq=key[1],
                    hash=hash_,
                    database=self._identity or "0" * 64,
                    ts=0.0,
                )
            if mark.database != self._identity:
                state = MarkState.FOREIGN
            return state, mark
        return None

    def _refusal_for(
        self, state: MarkState, mark: Mark | None, seq: int, first: str | None = None
    ) -> LedgerBehindMarkError:
        assert mark is not None
        then = f"Budgets are refused until an administrator runs `{RECONCILE_COMMAND}`"
        if state is MarkState.BEHIND:
            why = (
                f"the ledger's audit log ends at seq {seq}, behind its high-water mark at seq "
                f"{mark.seq} kept beside the block files: the database was restored to an older "
                "point, and budget spent after that point may already have been released"
            )
        elif state is MarkState.DIVERGED:
            why = (
                f"the ledger's audit log holds another event at seq {mark.seq} than its "
                "high-water mark kept beside the block files: the database was restored to an "
                "older point and written to since, and budget spent in the lost history may "
                "already have been released"
            )
        else:
            this = "is empty" if first is None else f"starts with event {first[:12]}…"
            why = (
                "the high-water mark beside the block files belongs to another database "
                f"(history {mark.database[:12]}…, seq {mark.seq}); this database's log {this}"
            )
            then = (
                "Budgets are refused: point BLOCKBUDGET_DATABASE at the database of these block "
                f"files, or adopt this one for them with `{RECONCILE_COMMAND} --adopt` (which "
                "counts every block as spent)"
            )
        return LedgerBehindMarkError(
            f'{why}. {then} (docs/operations.md, "Restore"); reads that spend nothing still answer',
            state=state.value,
            ledger_seq=seq,
            mark_seq=mark.seq,
        )

    def _due(self, *, charged: bool = False) -> bool:
        if self._pending is None:
            return False
        marked = 0 if self._mark is None else self._mark.seq
        age = self._clock() - (0.0 if self._mark is None else self._mark.ts)
        return self.policy.due(
            behind_events=self._pending[0] - marked, age_seconds=age, charged=charged
        )

    def _advance(self) -> None:
        """Write the mark for the pending tip (raises MarkUnavailableError; the tip stays
        pending)."""
        assert self._pending is not None
        seq, hash_ = self._pending
        if self._identity is None:
            self._identity = self.ledger.chain_hash(1)
        if self._identity is None:  # pragma: no cover - a commit wrote seq >= 1
            return
        epoch = 0 if self._mark is None else self._mark.epoch
        mark = Mark(
            epoch=epoch,
            seq=seq,
            hash=hash_,
            database=self._identity,
            ts=self._clock(),
            writer=self._writer,
        )
        since = self._verified
        known = self._mark  # held by this log: judged, or written by this process
        skip = {mark_name(mark)} | (set() if known is None else {mark_name(known)})
        self._write(mark)
        self._mark = mark
        self._pending = None
        self._overdue = False
        # Before the write's result leaves: no other history has marked since this process
        # last looked (a copy of this database on the same block files, written to by another
        # process) — else the two would spend the same budget.
        try:
            unheld = self._unheld(since=since, epoch=epoch, skip=skip)
        except _STORE_ERRORS as exc:
            log.warning(
                "the high-water marks at %s could not be listed: %s", self.files.where, _cause(exc)
            )
            raise MarkUnavailableError(
                "the audit log's high-water mark beside the block files could not be checked "
                "after it advanced (the block store did not answer; the server log says why): "
                "the answer is withheld (its budget stays spent)"
            ) from None
        if unheld is not None:
            self._refuse(*unheld, seq)
            assert self._refusal is not None
            raise self._refusal
        self._verified = mark.key if since is None else max(since, mark.key)
        if self._state is MarkState.NONE:
            self._state = MarkState.OK
        self._writes += 1
        if self._writes % PRUNE_EVERY == 0:
            self.files.prune(mark.key)

    def _write(self, mark: Mark) -> None:
        for attempt in range(WRITE_TRIES):
            try:
                self.files.write(mark)
                return
            except _STORE_ERRORS as exc:
                if attempt + 1 == WRITE_TRIES:
                    log.warning(
                        "the high-water mark at %s could not be advanced to seq %d: %s",
                        self.files.where,
                        mark.seq,
                        _cause(exc),
                    )
                    raise MarkUnavailableError(
                        "the audit log's high-water mark beside the block files could not be "
                        f"advanced to seq {mark.seq} (the block store did not answer; the "
                        "server log says why): the answer is withheld (its budget stays spent); "
                        "the next write tries again"
                    ) from None
                time.sleep(0.05 * (attempt + 1))

    def _start_flusher(self) -> None:
        """In a batched policy with an age, advance an idle mark in the background."""
        if (
            not self.policy.enabled
            or self.policy.seconds is None
            or self._flusher is not None
            or self._stop.is_set()
        ):
            return
        self._flusher = threading.Thread(
            target=self._flush_loop, name="blockbudget-mark", daemon=True
        )
        self._flusher.start()

    def _flush_loop(self) -> None:
        """Advance the mark once the pending events are old enough; exit once nothing is
        pending (the next commit that leaves something pending starts a new one)."""
        assert self.policy.seconds is not None
        while not self._stop.wait(self.policy.seconds / 2):
            with self._lock:
                if self._pending is None or self._refusal is not None:
                    self._flusher = None
                    return
                if not self._due():
                    continue
                try:
                    self._advance()
                except Exception:  # logged; the next write, or the next flusher, tries again
                    log.warning("could not advance the high-water mark", exc_info=True)
                    self._flusher = None
                    return
        with self._lock:
            self._flusher = None


def orphan_tombstones(store: BlockStore) -> list[BlockInfo]:
    """The blocks the block store holds part files of that its catalog does not name (a lost
    history's blocks, after a restore of the database), each as a registration: with its
    stream's parameters when the catalog knows the stream, else placeholders (the block is
    retired at once, and a retired block keeps its registration whatever it is re-added with).

    A key directory's name is the key with some characters percent-encoded
    (:func:`~blockbudget.store.files.path_segment`); a literal ``%`` is not encoded, so where a
    key may hold one (an attribute stream's, or an unknown stream's) a name that decodes
    differently also yields the undecoded reading (an extra tombstone of an id that may not
    exist costs nothing)."""
    specs = {s.name: s for s in store.list_streams()}
    found: dict[str, BlockInfo] = {}
    for path, _ in store.check_files().orphans:
        parts = path.split("/")
        if len(parts) != 4 or not STREAM_NAME_RE.fullmatch(parts[0]):
            continue
        stream, segment, seq_text = parts[0], parts[1], parts[2]
        if not seq_text.isdigit() or int(seq_text) < 1:
            continue
        spec = specs.get(stream)
        readings = [unquote(segment)]
        if spec is None or spec.blocking.unit is Unit.ATTRIBUTE:  # a key may hold a '%'
            readings.append(segment)
        for key in dict.fromkeys(readings):
            block = make_block_id(stream, key, int(seq_text))
            try:
                parse_block_id(block)
            except UnknownBlockError:  # not a block id: no block to retire
                continue
            if spec is not None:
                found[block] = BlockInfo(
                    block_id=block,
                    stream=stream,
                    accounting=spec.accounting,
                    capacity=spec.policy,
                    slack_delta=spec.slack_delta,
                )
            else:
                found[block] = BlockInfo(
                    block_id=block,
                    stream=stream,
                    accounting=Accounting.BASIC,
                    capacity=Budget(epsilon=1),
                    slack_delta=None,
                )
    return [found[b] for b in sorted(found)]


def unregistered_tombstones(store: BlockStore, ledger: Ledger) -> list[BlockInfo]:
    """The blocks the store's catalog names that the ledger does not know, each as a
    registration with its stream's parameters. A consistent backup can fall between an ingest's
    catalog commit and its ledger registration: the lost history registered and spent the
    block, the restored ledger does not know it, and its part files are no orphans — the
    repair of a crashed ingest (:meth:`Platform.reconcile
    <blockbudget.platform.Platform.reconcile>`, the ingest's retry) would give it a fresh
    budget unless it is tombstoned too."""
    known = {b.block_id for b in ledger.blocks()}
    found: list[BlockInfo] = []
    for spec in store.list_streams():
        for meta in store.blocks(spec.name):
            if meta.block_id not in known:
                found.append(
                    BlockInfo(
                        block_id=meta.block_id,
                        stream=spec.name,
                        accounting=spec.accounting,
                        capacity=spec.policy,
                        slack_delta=spec.slack_delta,
                    )
                )
    return found


def _tombstone(specs: dict[str, StreamSpec], block: str, stream: str) -> BlockInfo:
    """A recorded tombstone as a registration (its stream's parameters when the catalog knows
    the stream, else placeholders: it is retired at once)."""
    spec = specs.get(stream)
    if spec is None:
        return BlockInfo(
            block_id=block,
            stream=stream,
            accounting=Accounting.BASIC,
            capacity=Budget(epsilon=1),
            slack_delta=None,
        )
    return BlockInfo(
        block_id=block,
        stream=stream,
        accounting=spec.accounting,
        capacity=spec.policy,
        slack_delta=spec.slack_delta,
    )


def _cause(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


__all__ = [
    "RECONCILE_COMMAND",
    "MarkStatus",
    "ReconcileReport",
    "Watermark",
    "orphan_tombstones",
    "unregistered_tombstones",
]

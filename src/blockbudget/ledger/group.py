"""Group commit: many concurrent ledger writes in one durable transaction.

A durable commit costs one ``fsync`` (SQLite ``synchronous=FULL``; PostgreSQL's WAL flush), and
the ledger's writes are serial anyway (one hash chain, one writer lock; see
:mod:`blockbudget.ledger.schema`). So under concurrency the commit, not the work, bounds the
rate. A :class:`GroupCommitter` removes that bound the way database engines do (group commit):

* callers hand their write (the same body :meth:`Ledger._write` would run) to one committer
  thread and block;
* the committer takes every request waiting (up to ``max_batch``), opens **one** write
  transaction, takes the writers' lock once, and runs the requests **in arrival order**, each
  inside its own ``SAVEPOINT``: a request refused by its filter (or malformed, or a duplicate
  id) is rolled back to its savepoint alone, so each request stays all-or-nothing, and each
  later request is checked against the ledger *including* every earlier request of the batch
  (no overspend: it is the same serial order as without batching);
* each request appends its own audit events after the chain tip it sees, so the hash chain is
  exactly the one a serial run in that order would write;
* only after the transaction **committed** (durably) is any caller answered. If the commit
  fails, nothing of the batch happened and every caller gets the error (retryable database
  errors rerun the whole batch first, as :func:`~blockbudget.ledger.db.run_transaction` does for
  one request).

Acknowledged therefore still means durable, and the audit log cannot tell a grouped run from a
serial one in the same order.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine

from blockbudget.errors import BlockBudgetError, InternalError, InvalidRequestError
from blockbudget.ledger.db import AfterCommit, run_transaction

#: The body of one write, run inside the batch's transaction on its connection; returns the
#: request's result or raises (a BlockBudgetError or a duplicate id is that request's outcome).
#: A result wrapped in :class:`~blockbudget.ledger.db.AfterCommit` has its hook called after
#: the batch committed (never for a request rolled back to its savepoint, nor for a batch that
#: failed) and its value handed to the caller.
Work = Callable[[Connection], Any]

#: Exceptions that belong to one request of a batch, not to the batch.
PerRequestError = (BlockBudgetError,)


@dataclass
class _Pending:
    work: Work
    future: Future[Any] = field(default_factory=Future)
    result: Any = None
    error: BaseException | None = None


class GroupCommitter:
    """One committer thread batching concurrent writes into single durable transactions.

    Args:
        engine: the ledger's engine.
        attempts: tries per batch on transient database errors.
        max_batch: most requests per transaction.
        per_request_errors: exception classes that are one request's outcome (its savepoint is
            rolled back; the rest of the batch goes on).

    Raises:
        InvalidRequestError: for ``max_batch < 1``.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        attempts: int,
        max_batch: int = 256,
        per_request_errors: tuple[type[BaseException], ...] = PerRequestError,
    ) -> None:
        if max_batch < 1:
            raise InvalidRequestError(f"max_batch must be >= 1, got {max_batch!r}")
        self._engine = engine
        self._attempts = attempts
        self._max_batch = max_batch
        self._per_request = per_request_errors
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._closed = False
        #: Called once per committed batch with the (seq, hash) of its last audit event from
        #: the requests that carry a tip (:attr:`AfterCommit.tip`) and whether any of them
        #: charged, before any of them is answered; an exception there is the answer of each
        #: of those requests.
        self.on_commit: Callable[[int, str, bool], None] | None = None
        #: Batches committed and requests in them (for benchmarks and tests).
        self.batches = 0
        self.requests = 0

    # --- callers -------------------------------------------------------------------------------

    def submit(self, work: Work) -> Any:
        """Run ``work`` in the next batch; return its result once the batch has committed.

        Raises:
            whatever ``work`` raised for this request (nothing of it was written), or the
            batch's error (nothing of the batch was written).
        """
        return self.submit_nowait(work).result()

    def submit_nowait(self, work: Work) -> Future[Any]:
        """Queue ``work`` for the next batch; the future resolves once the batch committed
        (or holds the request's or the batch's error). Lets an event loop await a durable
        write without holding a thread."""
        item = _Pending(work)
        self._ensure_thread()
        self._queue.put(item)
        return item.future

    def close(self) -> None:
        """Stop the committer thread after the requests already queued."""
        with self._lock:
            self._closed = True
            thread = self._thread
            self._thread = None
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            self._queue.put(None)
            thread.join(timeout=30)

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._pid == os.getpid():
            return
        with self._lock:
            if self._closed:
                raise InternalError("the ledger's group committer is closed")
            if self._pid != os.getpid():  # forked: the parent's thread does not exist here
                self._pid = os.getpid()
                self._queue = queue.SimpleQueue()
                self._thread = None
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="blockbudget-group-commit", daemon=True
                )
                self._thread.start()

    # --- the committer -------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < self._max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[_Pending]) -> None:
        def fn(conn: Connection) -> None:
            for item in batch:  # a rerun of the batch starts every request afresh
                item.result, item.error = None, None
            dbapi = conn.connection.dbapi_connection
            if dbapi is None:  # pragma: no cover - a begun connection always has one
                raise InternalError("the connection has no DBAPI connection")
            cursor = dbapi.cursor()
            try:
                for item in batch:
                    cursor.execute("SAVEPOINT bb_group")
                    try:
                        item.result = item.work(conn)
                    except self._per_request as exc:
                        cursor.execute("ROLLBACK TO SAVEPOINT bb_group")
                        item.error = exc
                    cursor.execute("RELEASE SAVEPOINT bb_group")
            finally:
                cursor.close()

        try:
            run_transaction(self._engine, fn, write=True, attempts=self._attempts)
        except BaseException as exc:  # nothing of the batch was committed: tell everyone
            for item in batch:
                item.result, item.error = None, exc
        else:
            self.batches += 1
            self.requests += len(batch)
            tips: list[tuple[tuple[int, str, bool], _Pending]] = []
            for item in batch:  # committed: only now may process memory change
                if item.error is None and isinstance(item.result, AfterCommit):
                    if item.result.tip is not None:
                        tips.append((item.result.tip, item))
                    try:
                        item.result.hook()
                    except BaseException as exc:  # pragma: no cover - hooks only fill caches
                        item.error = exc
                    item.result = item.result.value
            if tips and self.on_commit is not None:
                seq, hash_, _ = max(tip for tip, _ in tips)
                try:
                    self.on_commit(seq, hash_, any(tip[2] for tip, _ in tips))
                except BaseException as exc:  # the answers that needed it are withheld
                    for _, item in tips:
                        item.error = exc
        finally:  # answered only now, after the commit returned (or failed)
            for item in batch:
                if item.error is not None:
                    item.future.set_exception(item.error)
                else:
                    item.future.set_result(item.result)

"""How a ledger write runs: one serialized transaction (or a place in a group commit), the
request recorded in the same transaction, and replays of a known request id answered from the
stored result.

:class:`WriteRunner` is the part of :class:`~blockbudget.ledger.Ledger` that executes writes;
the ledger's public methods validate their arguments and build the transaction body. With group
commit (:mod:`blockbudget.ledger.group`) the body runs in the committer thread's batch, each in
its own savepoint; :meth:`WriteRunner._write_async` lets an event loop await that commit
without holding a thread.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TypeVar, cast

from sqlalchemy import Connection, Engine

from blockbudget.errors import BlockBudgetError, HighWaterMarkError, InternalError
from blockbudget.ledger.audit import chain_tip
from blockbudget.ledger.catalog import BlockCatalog
from blockbudget.ledger.db import AfterCommit, run_committed, run_transaction
from blockbudget.ledger.group import GroupCommitter
from blockbudget.ledger.guard import WriteGuard
from blockbudget.ledger.requests import name_of, replay
from blockbudget.ledger.txn import DuplicateRequest, WriteTx
from blockbudget.ledger.types import Operation, RequestRecord

T = TypeVar("T")


class WriteRunner:
    """Runs a ledger's writes (see the module docstring); the ledger sets the attributes."""

    _engine: Engine
    _catalog: BlockCatalog
    _clock: Callable[[], float]
    _attempts: int
    _group: GroupCommitter | None
    _guard: WriteGuard | None = None

    def request(self, request_id: str) -> RequestRecord | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _now(self, now: float | None = None) -> float:
        return float(self._clock() if now is None else now)

    def _run(self, fn: Callable[[Connection], T], *, write: bool) -> T:
        return run_transaction(self._engine, fn, write=write, attempts=self._attempts)

    def _write_fn(
        self,
        operation: Operation,
        rid: str,
        given: bool,
        fingerprint: str,
        body: Callable[[WriteTx], tuple[T, str]],
        *,
        guarded: bool = True,
    ) -> Callable[[Connection], AfterCommit[T]]:
        """The transaction function of one write: lock, run ``body``, record the request.

        Its result carries the transaction's after-commit step (publishing the block
        registrations it read or wrote to the shared catalog), run only once it committed,
        and — when ``guarded`` — the chain tip it wrote, for the guard's
        :meth:`~blockbudget.ledger.guard.WriteGuard.committed`.
        """

        def fn(conn: Connection) -> AfterCommit[T]:
            tx = WriteTx(conn, self._catalog, now=self._now(), request_id=rid)
            try:
                tx.lock_head()
                result, result_json = body(tx)
                if tx.events:
                    raise InternalError("an operation queued events it did not flush")
                if tx.last_seq is not None or given:
                    seq = tx.last_seq if tx.last_seq is not None else chain_tip(tx.sql)[0]
                    tx.record_request(rid, operation, fingerprint, result_json, seq)
                tip = None
                if guarded and tx.last_seq is not None and tx.last_hash is not None:
                    tip = (tx.last_seq, tx.last_hash, tx.charged)
                return AfterCommit(result, tx.after_commit, tip)
            finally:
                tx.sql.close()

        return fn

    def _write(
        self,
        operation: Operation,
        request_id: str | None,
        fingerprint: str,
        body: Callable[[WriteTx], tuple[T, str]],
        *,
        guarded: bool = True,
    ) -> T:
        """Run ``body`` in a write transaction, record the request, handle replays.

        The request row is inserted last, in the same transaction: a duplicate id makes the
        insert fail, the transaction roll back, and the stored result is returned (same
        arguments) or InvalidRequestError raised (other arguments). When the body itself
        refuses, a caller-given id is looked up too, so that replaying an acknowledged request
        returns its result even if it would not fit any more.

        A ``guarded`` write (every write but a reconciliation's) is first let through by the
        ledger's guard, and its result is handed out only after the guard saw its commit
        (:mod:`blockbudget.ledger.guard`); the guard's refusals are never answered from a
        stored result.
        """
        given = request_id is not None
        rid = name_of(request_id, what="request_id") if given else f"req-{uuid.uuid4().hex}"
        if guarded:
            self._before_write()
        fn = self._write_fn(operation, rid, given, fingerprint, body, guarded=guarded)
        try:
            if self._group is not None:
                return cast(T, self._group.submit(fn))
            return run_committed(
                self._engine, fn, write=True, attempts=self._attempts, on_commit=self._committed
            )
        except HighWaterMarkError:
            raise  # never answered from the request table: the write may have just committed
        except DuplicateRequest:
            record = self.request(rid)
            if record is None:  # pragma: no cover - the row existed a moment ago
                raise InternalError(f"request {rid!r} vanished after a duplicate insert") from None
            return cast(T, replay(record, operation, fingerprint))
        except BlockBudgetError:
            if given:
                record = self.request(rid)
                if record is not None:
                    return cast(T, replay(record, operation, fingerprint))
            raise

    def _before_write(self) -> None:
        if self._guard is not None:
            self._guard.before_write()

    def _committed(self, seq: int, hash_: str, charged: bool) -> None:
        if self._guard is not None:
            self._guard.committed(seq, hash_, charged=charged)

    async def _write_async(
        self,
        operation: Operation,
        request_id: str | None,
        fingerprint: str,
        body: Callable[[WriteTx], tuple[T, str]],
    ) -> T:
        """:meth:`_write` for an event loop: with group commit, await the batch's commit
        without holding a thread; without it, run :meth:`_write` in a worker thread."""
        if self._group is None:
            return await asyncio.to_thread(self._write, operation, request_id, fingerprint, body)
        given = request_id is not None
        rid = name_of(request_id, what="request_id") if given else f"req-{uuid.uuid4().hex}"
        if self._guard is not None:
            await asyncio.to_thread(self._before_write)
        fn = self._write_fn(operation, rid, given, fingerprint, body)
        try:
            return cast(T, await asyncio.wrap_future(self._group.submit_nowait(fn)))
        except HighWaterMarkError:
            raise
        except DuplicateRequest:
            record = await asyncio.to_thread(self.request, rid)
            if record is None:  # pragma: no cover - the row existed a moment ago
                raise InternalError(f"request {rid!r} vanished after a duplicate insert") from None
            return cast(T, replay(record, operation, fingerprint))
        except BlockBudgetError:
            if given:
                record = await asyncio.to_thread(self.request, rid)
                if record is not None:
                    return cast(T, replay(record, operation, fingerprint))
            raise

"""The persistent per-block privacy ledger (Sage block composition, seed
``004_2b5d216070ae2ded.txt`` §3.2, §4.3, Appendix A; PrivateKube's two-phase claims).

Each block has a capacity (ε_g, δ_g) and a filter (:mod:`blockbudget.accounting.filters`); per
(block, context) the ledger stores two feature vectors, ``charged`` and ``reserved``. A request
fits a block iff ``filter.fits(charged + reserved + features(cost))``; reservations count as
spent until drawn (moved to charged) or released. Per block and context:
capacity = unallocated + reserved + charged.

Contexts are administrative: each gives a group of non-colluding principals its own full
per-block budget (Sage §3.2), so a request may only name a context that an administrator
registered with :meth:`Ledger.add_context` and has not closed with :meth:`Ledger.close_context`;
any other raises :class:`~blockbudget.errors.UnknownContextError` (or its subclass
:class:`~blockbudget.errors.ClosedContextError`). A new ledger has no context: methods that take
a context name ``"default"`` when given none, which must be registered like any other (ledgers
created before schema version 3 registered it automatically, and keep it).

Every write is one serialized database transaction over any number of blocks (atomic, safe
across threads and processes), idempotent by request id, and appends hash-chained audit events
in the same transaction; :meth:`Ledger.verify` replays the log (from its last verified
checkpoint, or from scratch with ``full=True``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterable

from sqlalchemy import Connection, Engine

from blockbudget.accounting import Accounting, make_filter, rules
from blockbudget.budget import Budget, Cost
from blockbudget.errors import (
    BlockBudgetError,
    InvalidBudgetError,
    InvalidRequestError,
    SchemaRevisionError,
)
from blockbudget.ledger import operations as ops
from blockbudget.ledger.catalog import BlockCatalog
from blockbudget.ledger.db import AfterCommit, open_engine, run_committed
from blockbudget.ledger.group import GroupCommitter
from blockbudget.ledger.guard import WriteGuard
from blockbudget.ledger.reading import LedgerReads
from blockbudget.ledger.requests import (
    block_ids,
    check_cost,
    cost_key,
    fingerprint_of,
    name_of,
    ttl_of,
)
from blockbudget.ledger.retiring import RetireWrites
from blockbudget.ledger.schema import MIGRATABLE_VERSIONS, SCHEMA_VERSION, create_schema
from blockbudget.ledger.txn import DuplicateRequest, WriteTx
from blockbudget.ledger.types import (
    DEFAULT_CONTEXT,
    DEFAULT_TTL_SECONDS,
    MAX_CONTEXT_DESCRIPTION,
    BlockInfo,
    Charge,
    ContextInfo,
    Operation,
    Reservation,
    decimal_text,
    validate_context_name,
)


class Ledger(RetireWrites, LedgerReads):
    """Durable per-block, per-context privacy budgets with reservations and an audit log.

    Args:
        target: a database URL — ``"sqlite:////abs/path/ledger.db"`` (the embedded default;
            WAL, ``synchronous=FULL``) or ``"postgresql+psycopg://user@host/db"`` — or an
            existing :class:`sqlalchemy.Engine`.
        clock: the time source for reservations' TTLs and events' timestamps (Unix seconds).
        busy_timeout_seconds: how long a SQLite writer waits for the write lock.
        attempts: how many times a transaction is tried on transient database errors.
        group_commit: batch concurrent writes (from threads of this process) into one durable
            transaction each, every request in its own savepoint and acknowledged only after
            the commit (see :mod:`blockbudget.ledger.group`). Same results, same audit chain
            as serial writes in arrival order; more writes per second under concurrency.
        max_batch: the most requests one group commit holds.

    Raises:
        InvalidRequestError: for an unsupported target.

    Example:
        >>> ledger = Ledger("sqlite://")
        >>> ledger.contexts()
        []
        >>> _ = ledger.add_context("ml", description="the ML team")
        >>> _ = ledger.add_blocks(["d1"], stream="s", capacity=Budget(epsilon=1),
        ...                       accounting=Accounting.BASIC)
        >>> _ = ledger.charge(["d1"], Budget(epsilon=0.4), context="ml", request_id="q1")
        >>> ledger.state("d1", "ml").remaining
        '(ε=0.6, δ=0)'
        >>> ledger.contexts()
        ['ml']
    """

    def __init__(
        self,
        target: str | Engine,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout_seconds: float = 60.0,
        attempts: int = 8,
        group_commit: bool = False,
        max_batch: int = 256,
    ) -> None:
        if attempts < 1:
            raise InvalidRequestError(f"attempts must be >= 1, got {attempts!r}")
        self._engine, self._owned = open_engine(target, busy_timeout_seconds=busy_timeout_seconds)
        self._group: GroupCommitter | None = (
            GroupCommitter(
                self._engine,
                attempts=attempts,
                max_batch=max_batch,
                per_request_errors=(BlockBudgetError, DuplicateRequest),
            )
            if group_commit
            else None
        )
        self._clock = clock
        self._attempts = attempts
        self._catalog = BlockCatalog()
        try:
            version = create_schema(self._engine)
        except BaseException:
            self.dispose()
            raise
        if version != SCHEMA_VERSION:
            self.dispose()
            upgradable = version in MIGRATABLE_VERSIONS
            error = SchemaRevisionError if upgradable else InvalidRequestError
            raise error(
                f"the database holds ledger schema version {version}; this blockbudget reads "
                f"version {SCHEMA_VERSION} and upgrades version(s) "
                f"{', '.join(map(str, MIGRATABLE_VERSIONS))} with `blockbudget db upgrade` "
                "(version 2 added registered contexts, version 3 closed ones, version 4 "
                "retirement sweeps and verified checkpoints)"
                + ("; run it first" if upgradable else "")
            )

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine the ledger writes through."""
        return self._engine

    def set_guard(self, guard: WriteGuard | None) -> None:
        """Let ``guard`` gate every write and see every commit (:mod:`blockbudget.ledger.guard`;
        None removes it). The platform's guard keeps the audit log's high-water mark."""
        self._guard = guard
        if self._group is not None:
            self._group.on_commit = None if guard is None else self._committed

    @property
    def guard(self) -> WriteGuard | None:
        """The write guard set by :meth:`set_guard`, if any."""
        return self._guard

    @property
    def group_committer(self) -> GroupCommitter | None:
        """The group committer when ``group_commit=True`` (its counters show batch sizes)."""
        return self._group

    def dispose(self) -> None:
        """Close the ledger's pooled connections (and the engine, if the ledger created it)."""
        if self._group is not None:
            self._group.close()
        if self._owned:
            self._engine.dispose()

    close = dispose

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    # --- writes ------------------------------------------------------------------------------

    def add_context(
        self, name: str, *, description: str = "", request_id: str | None = None
    ) -> ContextInfo:
        """Register a context: a group of principals assumed not to collude, which gets its own
        full budget on every block (Sage §3.2). An administrative act: requests may only name
        registered contexts, so that no caller can mint fresh budget by naming a new one.

        Idempotent: re-adding a context with the same description changes nothing and returns
        the registration as it is (closed or not: a closed context is never reopened). A
        context is never changed or removed.

        Args:
            name: 1–64 characters of letters, digits and ``_ . : -``, the first a letter or
                digit.
            description: whom the context stands for (free text, at most
                :data:`~blockbudget.ledger.types.MAX_CONTEXT_DESCRIPTION` characters).
            request_id: idempotency key (generated when None).

        Returns:
            The context's registration (for an existing context: its original one).

        Raises:
            InvalidRequestError: a malformed name or description, or a context that exists
                with another description.
        """
        name = validate_context_name(name)
        if not isinstance(description, str):
            raise InvalidRequestError(f"description must be a string, got {description!r}")
        if len(description) > MAX_CONTEXT_DESCRIPTION:
            raise InvalidRequestError(
                f"a context's description is at most {MAX_CONTEXT_DESCRIPTION} characters, "
                f"got {len(description)}"
            )
        fp = fingerprint_of(Operation.ADD_CONTEXT, name=name, description=description)

        def body(tx: WriteTx) -> tuple[ContextInfo, str]:
            info = ops.add_context(tx, name, description)
            return info, json.dumps(info.to_json())

        return self._write(Operation.ADD_CONTEXT, request_id, fp, body)

    def close_context(self, name: str, *, request_id: str | None = None) -> ContextInfo:
        """Close a context for good: an audited administrative act (event ``context_closed``,
        replayed by :meth:`verify`). A closed context never reserves or charges again
        (:class:`~blockbudget.errors.ClosedContextError`), is left out of :meth:`contexts` (so
        it no longer keeps exhausted blocks from retiring) and counts in the coalition bound
        only if it ever charged a block (:meth:`coalition_contexts`). Its history stays
        readable (:meth:`state`, :meth:`context_infos`).

        Meant for a context that is no longer used — e.g. the ``default`` context that ledgers
        created before schema version 3 registered by themselves. Open reservations of the
        context past their TTL are expired first; a live one refuses the close. Idempotent:
        closing a closed context changes nothing and returns it as it is.

        Returns:
            The context's registration, closed.

        Raises:
            UnknownContextError: the context is not registered.
            ReservationError: the context still holds a live open reservation.
            InvalidRequestError: a malformed name.
        """
        name = validate_context_name(name)
        fp = fingerprint_of(Operation.CLOSE_CONTEXT, name=name)

        def body(tx: WriteTx) -> tuple[ContextInfo, str]:
            info = ops.close_context(tx, name)
            return info, json.dumps(info.to_json())

        return self._write(Operation.CLOSE_CONTEXT, request_id, fp, body)

    def add_blocks(
        self,
        blocks: Iterable[str],
        *,
        stream: str,
        capacity: Budget,
        accounting: Accounting,
        slack_delta: float | None = None,
        request_id: str | None = None,
    ) -> tuple[BlockInfo, ...]:
        """Register blocks of a stream, each with the full ``capacity`` in every context.

        Idempotent per block: re-adding a block with the same parameters changes nothing.

        Args:
            blocks: block ids (non-empty, distinct).
            stream: the stream the blocks belong to.
            capacity: the global budget (ε_g, δ_g) of each block.
            accounting: the filter guarding each block.
            slack_delta: δ̃ for STRONG accounting (default δ_g/2); only for STRONG.
            request_id: idempotency key (generated when None).

        Returns:
            The blocks' registrations, in the order given.

        Raises:
            InvalidRequestError: bad ids, or a block already registered with other parameters.
            InvalidBudgetError: a capacity the accounting rule cannot use.
        """
        ids = block_ids(blocks, sort=False)
        stream = name_of(stream, what="stream")
        if not isinstance(accounting, Accounting):
            raise InvalidRequestError(f"accounting must be an Accounting, got {accounting!r}")
        if not isinstance(capacity, Budget):
            raise InvalidBudgetError(f"capacity must be a Budget (ε_g, δ_g), got {capacity!r}")
        if slack_delta is not None:
            if not accounting.rule.takes_slack:
                slackers = "/".join(r.name.upper() for r in rules() if r.takes_slack)
                raise InvalidRequestError(
                    f"slack_delta applies to {slackers} accounting only (the rules that take a "
                    f"slack), got it with {accounting.value}"
                )
            slack_delta = float(slack_delta)
        make_filter(accounting, capacity=capacity, slack_delta=slack_delta)  # validates
        infos = [
            BlockInfo(
                block_id=b,
                stream=stream,
                accounting=accounting,
                capacity=capacity,
                slack_delta=slack_delta,
            )
            for b in ids
        ]
        fp = fingerprint_of(
            Operation.ADD_BLOCKS,
            blocks=sorted(ids),
            stream=stream,
            accounting=accounting.value,
            capacity=[decimal_text(capacity.epsilon), decimal_text(capacity.delta)],
            slack_delta=slack_delta,
        )

        def body(tx: WriteTx) -> tuple[tuple[BlockInfo, ...], str]:
            out = ops.add_blocks(tx, infos)
            return out, json.dumps([i.to_json() for i in out])

        return self._write(Operation.ADD_BLOCKS, request_id, fp, body)

    def reserve(
        self,
        blocks: Iterable[str],
        cost: Cost,
        *,
        context: str = DEFAULT_CONTEXT,
        request_id: str | None = None,
        holder: str | None = None,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> Reservation:
        """Reserve ``cost`` on every block in ``context``, all-or-nothing.

        Stale reservations (past their TTL) on these blocks in this context are expired first.

        Returns:
            The open reservation (blocks sorted; ``remaining`` = the full features). A replay
            of ``request_id`` returns that reservation's current row (state, remaining) with
            ``replayed=True``.

        Raises:
            BudgetExceededError: a block cannot fit the cost (nothing is reserved).
            UnknownContextError: the context is not registered (see :meth:`add_context`).
            UnknownBlockError / RetiredBlockError: a block is unknown / retired.
            InvalidRequestError: empty or duplicate blocks, a malformed context name,
                ttl <= 0, or a request id already used with other arguments.
            InvalidBudgetError: a cost kind that a block's filter cannot account.
        """
        ids = block_ids(blocks)
        check_cost(cost)
        context = validate_context_name(context)
        if holder is not None and not isinstance(holder, str):
            raise InvalidRequestError(f"holder must be a string or None, got {holder!r}")
        ttl = ttl_of(ttl_seconds)
        fp = fingerprint_of(
            Operation.RESERVE,
            blocks=list(ids),
            cost=cost_key(cost),
            context=context,
            holder=holder,
            ttl=repr(ttl),
        )

        def body(tx: WriteTx) -> tuple[Reservation, str]:
            res = ops.reserve(tx, ids, cost, context=context, holder=holder, ttl_seconds=ttl)
            return res, json.dumps(res.to_json())

        res = self._write(Operation.RESERVE, request_id, fp, body)
        if not res.replayed:
            return res
        # A replay answers with the reservation as it is NOW (it may have been drawn on,
        # released or expired since), flagged replayed.
        return dataclasses.replace(self.reservation(res.id), replayed=True)

    def charge(
        self,
        blocks: Iterable[str],
        cost: Cost,
        *,
        context: str | None = None,
        request_id: str | None = None,
        reservation_id: str | None = None,
    ) -> Charge:
        """Charge ``cost`` to every block, durably and all-or-nothing.

        Without ``reservation_id`` the charge is direct and must fit
        (``charged + reserved + features ≤`` the filter). With it, the features move from the
        reservation to charged on the named blocks (a subset of the reservation's); per block,
        the draws may not exceed what the reservation reserved.

        Args:
            blocks: the blocks to charge.
            cost: what to charge on each block.
            context: a registered context (default: the reservation's, or ``"default"``).
            request_id: idempotency key (generated when None — then a retry charges twice).
            reservation_id: the reservation to draw from, or None for a direct charge.

        Returns:
            The receipt.

        Raises:
            BudgetExceededError: a direct charge does not fit (nothing is charged).
            ReservationError: the reservation is closed or expired, or the draw exceeds it.
            UnknownContextError / UnknownBlockError / RetiredBlockError / InvalidRequestError /
                InvalidBudgetError: as for :meth:`reserve`; a context other than the
                reservation's is refused.
        """
        fp, body = self._charge_parts(blocks, cost, context, reservation_id)
        return self._write(Operation.CHARGE, request_id, fp, body)

    async def charge_async(
        self,
        blocks: Iterable[str],
        cost: Cost,
        *,
        context: str | None = None,
        request_id: str | None = None,
        reservation_id: str | None = None,
    ) -> Charge:
        """:meth:`charge` for an asyncio event loop: with group commit the loop awaits the
        batch's commit without holding a thread; without it the charge runs in a worker
        thread. Same checks, same guarantees, same errors."""
        fp, body = self._charge_parts(blocks, cost, context, reservation_id)
        return await self._write_async(Operation.CHARGE, request_id, fp, body)

    def _charge_parts(
        self,
        blocks: Iterable[str],
        cost: Cost,
        context: str | None,
        reservation_id: str | None,
    ) -> tuple[str, Callable[[WriteTx], tuple[Charge, str]]]:
        """Validate a charge's arguments; its fingerprint and transaction body."""
        ids = block_ids(blocks)
        check_cost(cost)
        if context is not None:
            context = validate_context_name(context)
        if reservation_id is not None:
            reservation_id = name_of(reservation_id, what="reservation_id")
        fp = fingerprint_of(
            Operation.CHARGE,
            blocks=list(ids),
            cost=cost_key(cost),
            context=context,
            reservation_id=reservation_id,
        )

        def body(tx: WriteTx) -> tuple[Charge, str]:
            receipt = ops.charge(tx, ids, cost, context=context, reservation_id=reservation_id)
            return receipt, json.dumps(receipt.to_json())

        return fp, body

    def release(self, reservation_id: str, *, request_id: str | None = None) -> Reservation:
        """Return what is left of an open reservation to unallocated and close it.

        Raises:
            ReservationError: the reservation is already closed or expired.
            UnknownBlockError: no reservation has this id.
        """
        reservation_id = name_of(reservation_id, what="reservation_id")
        fp = fingerprint_of(Operation.RELEASE, reservation_id=reservation_id)

        def body(tx: WriteTx) -> tuple[Reservation, str]:
            res = ops.release(tx, reservation_id)
            return res, json.dumps(res.to_json())

        return self._write(Operation.RELEASE, request_id, fp, body)

    def expire_reservations(self, now: float | None = None) -> list[str]:
        """Release (never charge) every open reservation whose TTL has passed.

        Args:
            now: the time to compare TTLs with (default: the ledger's clock).

        Returns:
            The ids of the reservations expired, sorted.
        """
        if now is not None and not (isinstance(now, (int, float)) and math.isfinite(now)):
            raise InvalidRequestError(f"now must be a finite Unix time, got {now!r}")

        def fn(conn: Connection) -> AfterCommit[list[str]]:
            tx = WriteTx(conn, self._catalog, now=self._now(now), request_id=None)
            try:
                tx.lock_head()
                expired = ops.expire(tx)
                tip = (
                    None
                    if tx.last_seq is None or tx.last_hash is None
                    else (tx.last_seq, tx.last_hash, tx.charged)
                )
                return AfterCommit(expired, tx.after_commit, tip)
            finally:
                tx.sql.close()

        self._before_write()
        return run_committed(
            self._engine, fn, write=True, attempts=self._attempts, on_commit=self._committed
        )

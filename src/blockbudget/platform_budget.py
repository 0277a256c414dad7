"""The budget half of :class:`~blockbudget.platform.Platform`: grants, reservations, charges,
the audit log and block retirement, all on the platform's one ledger.

:class:`PlatformBudget` is a base class of ``Platform`` (import ``Platform`` from
:mod:`blockbudget.platform`; this class is not used alone). Everything a service route, the CLI
or a task needs of the ledger is a method here, so none of them reaches into
``platform.ledger`` or ``platform.store`` (a test checks this for the service and the CLI).

Costs come in two forms. :meth:`PlatformBudget.request` and :meth:`PlatformBudget.grant` take
the **per-row** cost of what the grant draws (as :meth:`Grant.draw <blockbudget.grant.Grant.draw>`
takes it) and apply group privacy themselves on a user-level stream
(:func:`blockbudget.grant.group_cost`). :meth:`PlatformBudget.reserve` and the direct charges
take the **ledger** cost, charged to each block as given (they hand out no data, so there is no
row count to scale by).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyarrow import Schema
from pyarrow import schema as pa_schema

from blockbudget.budget import Budget, Cost
from blockbudget.errors import (
    HighWaterMarkError,
    InvalidRequestError,
    ReservationError,
    UnknownColumnError,
)
from blockbudget.grant import (
    Grant,
    group_cost,
    open_reservation,
    refuse_short,
    reservation_stream,
    shortfall_of,
)
from blockbudget.ledger import (
    DEFAULT_TTL_SECONDS,
    AuditEvent,
    BlockInfo,
    Charge,
    Ledger,
    Reservation,
    ReservationState,
    VerifyReport,
    validate_context_name,
)
from blockbudget.selection import Last
from blockbudget.store import BlockStore, StreamSpec, Unit

if TYPE_CHECKING:
    import sqlalchemy as sa

    from blockbudget.accounting import Filter
    from blockbudget.engine import Engine
    from blockbudget.store.rollback import MarkStatus, ReconcileReport, Watermark

__all__ = ["DEFAULT_MIN_EPSILON", "GroupCommitStats", "PlatformBudget"]

#: A block whose every context cannot fit this much more epsilon is retired by
#: :meth:`PlatformBudget.retire_exhausted` unless told otherwise.
DEFAULT_MIN_EPSILON = Budget(epsilon="0.001")


@dataclass(frozen=True)
class GroupCommitStats:
    """What a group-committing ledger did in this process: the durable transactions
    (``batches``) it committed and the write requests they carried (``requests``)."""

    batches: int
    requests: int


class PlatformBudget:
    """Grants, reservations, charges, audit and retirement over ``self.ledger`` (a base of
    :class:`~blockbudget.platform.Platform`, which sets ``ledger`` and ``store``)."""

    ledger: Ledger
    store: BlockStore
    watermark: Watermark | None

    if TYPE_CHECKING:  # defined by Platform

        @property
        def engine(self) -> Engine: ...

        def stream(self, name: str) -> StreamSpec: ...

        def filter(self, stream: str) -> Filter: ...

        def select(
            self,
            stream: str,
            selection: Sequence[str] | Last,
            *,
            context: str | None = None,
            cost: Cost | None = None,
        ) -> tuple[str, ...]: ...

    @property
    def database(self) -> sa.Engine:
        """The SQLAlchemy engine of the platform's database (the ledger's): the service keeps
        its principals, keys, task leadership and metrics tables there too."""
        return self.ledger.engine

    # --- grants --------------------------------------------------------------------------------

    def request(
        self,
        stream: str,
        *,
        blocks: Sequence[str] | Last,
        budget: Cost,
        context: str,
        holder: str = "",
        ttl_seconds: float = 600.0,
        request_id: str | None = None,
        columns: Sequence[str] | None = None,
    ) -> Grant:
        """Reserve ``budget`` on every chosen block, atomically, seal them, and hand over a grant.

        No row is read here: the grant holds the blocks' part files and reads them through
        :attr:`engine` when asked (:meth:`Grant.batches`, :attr:`Grant.data`,
        :meth:`Grant.frame`). ``columns`` is the grant's projection (default: every column);
        on a user-level stream the user column bounds contributions whether projected or not.
        A request that fails before it returns releases its reservation; an error while
        reading afterwards (a part file missing: :class:`~blockbudget.errors.DataError`)
        releases nothing — close the grant, or it expires after ``ttl_seconds``.

        ``budget`` is the per-row cost the grant is to hold for its draws, as
        :meth:`Grant.draw` takes it. On a user-level stream with ``rows_per_user = k`` a draw
        of ``cost`` is charged its group-privacy cost ``group_cost(cost, k)`` (kε,
        k·e^{(k−1)ε}·δ: Dwork & Roth 2014, Thm 2.2; Vadhan 2017, Lemma 2.2), so the request
        reserves ``group_cost(budget, k)`` on every block (:meth:`group_size` says k; 1
        elsewhere, where ``budget`` itself is reserved), and ``Last(n)`` picks blocks that can
        afford that.

        Raises:
            BudgetExceededError: a block cannot afford the group cost (nothing is reserved).
            UnknownBlockError / RetiredBlockError / InvalidRequestError / InvalidBudgetError:
                bad input, or a group cost that does not exist (RDP with k > 1, or δ ≥ 1):
                nothing is reserved.

        Example:
            >>> import tempfile, pandas as pd
            >>> from blockbudget import Budget
            >>> from blockbudget.platform import Last, Platform
            >>> from blockbudget.store import Blocking
            >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
            >>> _ = p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
            >>> _ = p.add_context("team")
            >>> _ = p.ingest("s", pd.DataFrame({"t": pd.date_range("2024-01-01", periods=2,
            ...                                                    freq="h"), "v": [1.0, 2.0]}))
            >>> with p.request("s", blocks=Last(1), budget=Budget(epsilon=0.5),
            ...                context="team") as g:
            ...     g.reservation.cost == Budget(epsilon=0.5)  # k = 1 on a time stream
            True
            >>> p.close()
        """
        validate_context_name(context)
        wanted, schema = self._projection(stream, columns)
        reserve = group_cost(
            budget, self.group_size(stream), accounting=self.stream(stream).accounting
        )
        chosen = self.select(stream, blocks, context=context, cost=reserve)
        if not chosen:
            raise InvalidRequestError("a request needs at least one block")
        reservation = self.ledger.reserve(
            list(chosen),
            reserve,
            context=context,
            request_id=request_id or f"grant-{uuid.uuid4().hex}",
            holder=holder,
            ttl_seconds=ttl_seconds,
        )
        # Decided by the ledger's answer, not by a look-up before it: two calls with one id
        # that race both see no request before either commits, and the loser gets the
        # winner's reservation back — which it must neither treat as its own nor release.
        replay = reservation.replayed
        if replay:
            # A replay gets the stored reservation back (idempotency). Its data goes out again
            # only while that reservation is still open — draws then share what it holds; once
            # closed, a replay gets nothing.
            current = self.ledger.reservation(reservation.id).state
            if current is not ReservationState.OPEN:
                raise ReservationError(
                    f"request id {request_id!r} was used before and its reservation "
                    f"{reservation.id} is {current.value}: its data is not handed out again; "
                    "use a new request id"
                )
        try:
            return self._hand_over(stream, reservation, chosen, wanted, schema)
        except BaseException:
            if not replay:  # never release a reservation another holder is using
                self.ledger.release(reservation.id, request_id=f"{reservation.id}/release")
            raise

    def grant(
        self,
        reservation_id: str,
        *,
        holder: str | None = None,
        stream: str | None = None,
        context: str | None = None,
        columns: Sequence[str] | None = None,
        covers: Cost | None = None,
    ) -> Grant:
        """A grant over an EXISTING open reservation: what a scheduler granted, spent here.

        It never reserves: every draw on the grant comes out of ``reservation_id`` (the same
        checks, sealing, projection and group size as :meth:`request`). Closing the grant
        releases what the reservation still holds; leaving it open keeps the reservation
        for further draws until it is released or expires. Nothing is read here.

        Args:
            reservation_id: the ledger reservation to spend.
            holder: when given, the reservation's holder must be exactly this (a reservation
                held by anyone else is answered as unknown, so its existence does not leak).
            stream: when given, the reservation's blocks must be of this stream.
            context: when given, the reservation must hold budget in this context.
            columns: the grant's projection (default: every column).
            covers: when given, the reservation must still hold a draw of this cost (as
                :meth:`Grant.draw` charges it) on every block.

        Raises:
            UnknownReservationError: no such reservation, or not held by ``holder``.
            ReservationError: the reservation is closed or expired, or cannot pay ``covers``.
            RetiredBlockError: one of its blocks is retired.
            InvalidRequestError: its blocks are not of ``stream`` (or of several streams),
                or its context is not ``context``.
            UnknownColumnError: ``columns`` names a column the stream does not have.

        Example:
            >>> import tempfile, pandas as pd
            >>> from blockbudget import Budget
            >>> from blockbudget.platform import Last, Platform
            >>> from blockbudget.store import Blocking
            >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
            >>> _ = p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
            >>> _ = p.add_context("team")
            >>> _ = p.ingest("s", pd.DataFrame({"t": pd.date_range("2024-01-01", periods=2,
            ...                                                    freq="h"), "v": [1.0, 2.0]}))
            >>> res = p.reserve("s", Last(2), Budget(epsilon=0.5), context="team", holder="ann")
            >>> with p.grant(res.id, holder="ann") as g:
            ...     g.draw(Budget(epsilon=0.2), label="mine")
            >>> p.reservation(res.id).state.value  # closing released the other 0.3
            'closed'
            >>> p.close()
        """
        res = open_reservation(self.ledger, reservation_id, holder=holder, now=time.time())
        if context is not None and res.context != context:
            raise InvalidRequestError(
                f"reservation {res.id!r} holds budget in context {res.context!r}, not in "
                f"{context!r}"
            )
        of = reservation_stream(self.ledger, res)
        if stream is not None and of != stream:
            raise InvalidRequestError(
                f"reservation {res.id!r} holds blocks of stream {of!r}, not of {stream!r}"
            )
        wanted, schema = self._projection(of, columns)
        if covers is not None:  # before anything is sealed
            f = self.filter(of)
            need = f.features(group_cost(covers, self.group_size(of), accounting=f.accounting))
            short = shortfall_of(res.remaining, need)
            refuse_short(res.id, f"a draw of {covers}", short, accounting=f.accounting)
        return self._hand_over(of, res, res.blocks, wanted, schema)

    def group_size(self, stream: str) -> int:
        """The group size k a draw on ``stream`` is charged for (``rows_per_user`` on a
        user-level stream, else 1): a draw of ``cost`` costs ``group_cost(cost, k)``."""
        spec = self.stream(stream)
        return (spec.blocking.rows_per_user or 1) if spec.blocking.unit is Unit.USER else 1

    def _projection(
        self, stream: str, columns: Sequence[str] | None
    ) -> tuple[list[str] | None, Schema | None]:
        """The wanted columns (None: all) and their Arrow types, checked against the stream.

        Raises:
            UnknownBlockError: an unknown stream.
            UnknownColumnError: a column the stream does not have.
        """
        self.stream(stream)  # raises for an unknown stream
        wanted = list(columns) if columns else None
        schema = self.store.schema(stream)
        if wanted is not None and schema is not None:
            unknown = [c for c in wanted if c not in schema.names]
            if unknown:
                raise UnknownColumnError(stream, unknown, schema.names)
            schema = pa_schema([schema.field(c) for c in dict.fromkeys(wanted)])
        return wanted, schema

    def _hand_over(
        self,
        stream: str,
        reservation: Reservation,
        blocks: Sequence[str],
        wanted: list[str] | None,
        schema: Schema | None,
    ) -> Grant:
        """Seal ``blocks`` (the reservation's, in reading order) and build the grant on them:
        the one path of :meth:`request` and :meth:`grant`."""
        spec = self.stream(stream)
        group = self.group_size(stream)
        self.store.seal(list(blocks))
        return Grant(
            ledger=self.ledger,
            stream=stream,
            reservation=reservation,
            accounting=spec.accounting,
            source=self.store.source(list(blocks)),
            engine=lambda: self.engine,
            columns=wanted,
            schema=schema,
            group_size=group,
            filter=self.filter(stream),
        )

    # --- reservations and charges --------------------------------------------------------------

    def reserve(
        self,
        stream: str,
        blocks: Sequence[str] | Last,
        cost: Cost,
        *,
        context: str,
        holder: str | None = None,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        request_id: str | None = None,
    ) -> Reservation:
        """Reserve ``cost`` on every block of a selection, all-or-nothing, handing out no data.

        The selection is resolved as :meth:`select` does (``Last(n)``: the newest blocks that
        can afford ``cost``); ``cost`` is the ledger cost reserved on each block as given (no
        group privacy: the reservation is spent by :meth:`charge_reservation` with ledger
        costs, or backs a :meth:`grant`). A replay of ``request_id`` returns the stored
        reservation with ``replayed=True``.

        Raises:
            BudgetExceededError: a block cannot fit ``cost`` (nothing is reserved).
            UnknownBlockError / RetiredBlockError / UnknownContextError / InvalidRequestError /
                UnreleasedIdsError: as :meth:`select` and :meth:`Ledger.reserve`.

        Example:
            >>> import tempfile, pandas as pd
            >>> from blockbudget import Budget
            >>> from blockbudget.platform import Last, Platform
            >>> from blockbudget.store import Blocking
            >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
            >>> _ = p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
            >>> _ = p.add_context("team")
            >>> _ = p.ingest("s", pd.DataFrame({"t": pd.date_range("2024-01-01", periods=2,
            ...                                                    freq="h"), "v": [1.0, 2.0]}))
            >>> res = p.reserve("s", Last(1), Budget(epsilon=0.5), context="team", holder="ann")
            >>> receipt = p.charge_reservation(res, Budget(epsilon=0.2), request_id="c1")
            >>> p.release(res.id).state.value, str(receipt.cost.epsilon)
            ('closed', '0.2')
            >>> p.close()
        """
        chosen = self.select(stream, blocks, context=context, cost=cost)
        return self.ledger.reserve(
            list(chosen),
            cost,
            context=context,
            holder=holder,
            ttl_seconds=ttl_seconds,
            request_id=request_id,
        )

    def reservation(self, reservation_id: str) -> Reservation:
        """A reservation with its current state and remaining budget per block.

        Raises:
            UnknownBlockError: no such reservation (:meth:`Ledger.reservation`).
        """
        return self.ledger.reservation(reservation_id)

    def reservations(
        self, *, state: ReservationState | None = None, context: str | None = None
    ) -> list[Reservation]:
        """Every reservation (optionally of one state and context), by creation time."""
        return self.ledger.reservations(state=state, context=context)

    def open_reservation(self, reservation_id: str, *, holder: str | None) -> Reservation:
        """The open, unexpired reservation ``reservation_id`` held by ``holder`` (any holder
        when None): what a grant on it may spend (:func:`blockbudget.grant.open_reservation`).

        Raises:
            UnknownReservationError: unknown, or held by another (answered alike).
            ReservationError: closed, or past its time-to-live.
        """
        return open_reservation(self.ledger, reservation_id, holder=holder, now=time.time())

    def reservation_stream(self, reservation: Reservation) -> str:
        """The stream of a reservation's blocks (one stream: a reservation is made on one
        stream's selection), read from its first block's ledger row."""
        return self.ledger.state(reservation.blocks[0], reservation.context).stream

    def charge_reservation(
        self,
        reservation: Reservation,
        cost: Cost,
        *,
        blocks: Sequence[str] | None = None,
        request_id: str | None = None,
    ) -> Charge:
        """Move ``cost`` (a ledger cost, as given) from an open reservation to charged, on
        ``blocks`` (a subset of its blocks; default: all of them), durably.

        Raises:
            ReservationError: the reservation (as read) is not open, or the ledger finds it
                closed, expired or holding too little now (nothing is charged).
        """
        if reservation.state is not ReservationState.OPEN:
            raise ReservationError(f"reservation {reservation.id!r} is {reservation.state.value}")
        return self.ledger.charge(
            list(blocks) if blocks else list(reservation.blocks),
            cost,
            context=reservation.context,
            reservation_id=reservation.id,
            request_id=request_id,
        )

    def release(self, reservation_id: str, *, request_id: str | None = None) -> Reservation:
        """Return what an open reservation still holds and close it (idempotent per
        ``request_id``; see :meth:`Ledger.release`)."""
        return self.ledger.release(reservation_id, request_id=request_id)

    def charge(
        self,
        blocks: Sequence[str],
        cost: Cost,
        *,
        context: str,
        request_id: str | None = None,
    ) -> Charge:
        """Charge ``cost`` (a ledger cost, as given) to every block directly, durably and
        all-or-nothing, for a computation run elsewhere: no data leaves. Callers that take
        block names from a principal check them with :meth:`require_selectable` first.

        Raises:
            BudgetExceededError: a block cannot fit it (nothing is charged); and as
                :meth:`Ledger.charge`.
        """
        return self.ledger.charge(list(blocks), cost, context=context, request_id=request_id)

    async def charge_async(
        self,
        blocks: Sequence[str],
        cost: Cost,
        *,
        context: str,
        request_id: str | None = None,
    ) -> Charge:
        """:meth:`charge` for an asyncio event loop: with group commit the loop awaits the
        batch's durable commit without holding a thread (:meth:`Ledger.charge_async`)."""
        return await self.ledger.charge_async(
            list(blocks), cost, context=context, request_id=request_id
        )

    def group_commit_stats(self) -> GroupCommitStats | None:
        """This process's group-commit counters, or None when the ledger commits each write
        on its own (``Platform(..., group_commit=False)``)."""
        gc = self.ledger.group_committer
        return None if gc is None else GroupCommitStats(batches=gc.batches, requests=gc.requests)

    # --- the ledger's record -------------------------------------------------------------------

    def registered_blocks(self, stream: str | None = None) -> list[BlockInfo]:
        """The blocks the ledger knows (of one stream, or all), sorted by id: each with its
        stream. A block can serve only once registered."""
        return self.ledger.blocks(stream)

    def added_blocks(self, after_seq: int = 0) -> tuple[list[tuple[str, str]], int]:
        """The (block, stream) pairs registered after audit seq ``after_seq`` and the seq they
        are current to (:meth:`Ledger.added_blocks`): pass it back to read only what is new."""
        return self.ledger.added_blocks(after_seq)

    def audit_seq(self) -> int:
        """The seq of the last audit event (0 for an empty log)."""
        return self.ledger.audit_seq()

    def events(self, *, after_seq: int = 0, limit: int | None = None) -> list[AuditEvent]:
        """The audit events with seq > ``after_seq``, oldest first, at most ``limit``."""
        return self.ledger.events(after_seq=after_seq, limit=limit)

    # --- lifecycle -----------------------------------------------------------------------------

    def retire_exhausted(
        self,
        stream: str,
        *,
        contexts: Sequence[str] | None = None,
        min_cost: Cost = DEFAULT_MIN_EPSILON,
    ) -> list[str]:
        """Retire every block whose *charged* budget cannot fit ``min_cost`` in any of
        ``contexts`` (default: every open context — an open context that never used a block
        still has its full budget there, so the block stays; close a context that is no longer
        used with :meth:`close_context`). A block with an open
        reservation in any of them is kept, so a running grant is never cut off. Retired blocks
        never serve again (Sage §3.2). The check and the retirement are one ledger
        transaction (:meth:`Ledger.retire_exhausted`), so no grant can reserve in between."""
        retired = self.ledger.retire_exhausted(
            stream,
            min_cost=min_cost,
            contexts=contexts,
            request_id=f"retire-{uuid.uuid4().hex}",
            reason="budget exhausted",
        )
        return [b.block_id for b in retired]

    def expire(self) -> list[str]:
        """Release every reservation past its time-to-live (never charged)."""
        return self.ledger.expire_reservations()

    def verify(self, *, full: bool = False) -> VerifyReport:
        """Replay the audit log (after the last verified checkpoint, or all of it with
        ``full``) and check the ledger and every filter (see :meth:`Ledger.verify`)."""
        return self.ledger.verify(full=full)

    # --- the audit log's high-water mark -------------------------------------------------------

    def mark_status(self, *, refresh: bool = False) -> MarkStatus | None:
        """How the database stands against the audit log's high-water mark kept beside the
        block files (judged again with ``refresh``; None when the mark is off). Reads only."""
        return None if self.watermark is None else self.watermark.status(refresh=refresh)

    def budget_refusal(self) -> HighWaterMarkError | None:
        """The error every budget write gets now — the database is behind its high-water mark,
        or the mark cannot be read — or None. Reads only (re-judged now and then)."""
        return None if self.watermark is None else self.watermark.refusal()

    def require_budgets(self) -> None:
        """Raise :meth:`budget_refusal`'s error, if any, before a write that would otherwise
        change the store first (an ingest, a stream).

        Raises:
            LedgerBehindMarkError / MarkUnavailableError: budgets are refused.
        """
        if self.watermark is not None:
            self.watermark.before_write()

    def reconcile_rollback(self, *, adopt: bool = False) -> ReconcileReport:
        """Bring a database that is behind its high-water mark back (``blockbudget db
        reconcile``): count every block the lost events could have touched as spent — every
        live block, and every block whose part files the catalog does not name — and re-base
        the mark on the log's new head (:meth:`Watermark.reconcile
        <blockbudget.store.rollback.Watermark.reconcile>`). Idempotent; nothing to do is
        answered as such.

        Raises:
            LedgerBehindMarkError: another database's mark, without ``adopt``.
            MarkUnavailableError: the mark could not be read or written.
            InvalidRequestError: the mark is off for this platform.
        """
        if self.watermark is None:
            raise InvalidRequestError(
                "this platform keeps no high-water mark (mark_every='off'): nothing to reconcile"
            )
        return self.watermark.reconcile(self.store, adopt=adopt)

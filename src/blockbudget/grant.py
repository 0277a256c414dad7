"""Grants: what a pipeline holds while it runs.

A :class:`Grant` is the right to spend up to a reserved budget on the chosen (sealed) blocks,
together with the means to read them: their part files (a
:class:`~blockbudget.engine.ScanSource`, no rows) and the platform's engine (seed
``004_2b5d216070ae2ded.txt`` §3.2, "Sage Access Control"; PrivateKube's allocate →
consume/release claims). Mechanisms draw on a grant through the
:class:`~blockbudget.mechanisms.BudgetSource` contract: ``accounting`` and ``draw(cost)``.

Each draw is charged to the ledger *durably, before* the mechanism releases anything — a crash
after a noisy answer was computed can therefore never lose its charge. Every draw is a new ledger
request with a fresh random id: a draw is never answered from the ledger's idempotency table, so
no retry, thread race or replayed grant can obtain a second noisy answer for one charge.
Closing the grant releases whatever was reserved and not drawn. A grant whose holder dies is
never charged for its undrawn reservation: the ledger expires it after its time-to-live.

Reading is lazy: a grant holds no rows until asked. :meth:`Grant.batches` streams the rows in
bounded memory; :attr:`Grant.data` and :meth:`Grant.frame` materialise them once (for data that
fits in memory) and keep them until the grant closes.

User-level streams (Sage §4.4): the grant reads at most ``k = rows_per_user`` rows per user (the
engine bounds contributions as it reads), and a mechanism calibrated for one row is charged for
a group of k rows (group privacy: (ε, δ) becomes (kε, k·e^{(k−1)ε}·δ); Dwork & Roth 2014,
Thm 2.2 and its approximate-DP form).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from blockbudget.accounting import Accounting, Filter, get_rule, make_filter
from blockbudget.accounting.filters import exact_text, vector_json
from blockbudget.budget import Cost
from blockbudget.engine.base import Engine
from blockbudget.errors import (
    BlockBudgetError,
    DataError,
    InvalidBudgetError,
    InvalidRequestError,
    ReservationError,
    RetiredBlockError,
    UnknownBlockError,
    UnknownColumnError,
    UnknownReservationError,
)
from blockbudget.ledger import ReservationState
from blockbudget.ledger.types import Vector

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from blockbudget.engine.plan import Predicate, ScanSource
    from blockbudget.ledger import Ledger, Reservation

_T = TypeVar("_T")


class Grant:
    """Reserved budget on a set of sealed blocks, plus the means to read them.

    Use it as a context manager so that what was not spent is released::

        with platform.request("flights", blocks=last(7), budget=Budget(epsilon=0.2),
                              context="analytics") as grant:
            answer = dp_count(grant, grant.frame(), epsilon=0.1)

    The grant holds the blocks' part files, not their rows: nothing is read until
    :meth:`batches`, :attr:`data`, :meth:`frame` or :attr:`num_rows` asks, and then through
    :attr:`engine`. Reading never touches the reservation: an error while reading (a part file
    missing) raises :class:`~blockbudget.errors.DataError` and leaves the reservation open
    until the grant is closed or expires.

    Attributes:
        stream: the stream the blocks belong to.
        blocks: the block ids, in order.
        context: the context whose per-block budget pays.
        reservation: the ledger reservation backing the grant.
        source: the granted blocks' part files (what an engine reads; no rows).
        columns: the grant's projection: the columns its rows have, in schema order.
    """

    def __init__(
        self,
        *,
        ledger: Ledger,
        stream: str,
        reservation: Reservation,
        accounting: Accounting,
        source: ScanSource,
        engine: Engine | Callable[[], Engine],
        columns: Sequence[str] | None = None,
        schema: pa.Schema | None = None,
        group_size: int = 1,
        filter: Filter | None = None,
    ) -> None:
        if group_size < 1:
            raise InvalidBudgetError(f"group_size must be >= 1, got {group_size}")
        self._ledger = ledger
        self.stream = stream
        self.reservation = reservation
        self.blocks: tuple[str, ...] = tuple(reservation.blocks)
        self.context = reservation.context
        self._accounting = accounting
        self.source = source
        self.columns: tuple[str, ...] = tuple(dict.fromkeys(columns or source.columns))
        unknown = [c for c in self.columns if c not in source.columns]
        if unknown:
            raise UnknownColumnError(stream, unknown, list(source.columns))
        self._schema = schema
        self._engine = engine
        self.group_size = group_size
        self._filter = filter
        self._draws: list[tuple[str, Cost]] = []
        self._closed = False
        self._lock = threading.Lock()  # draws and close
        self._read_lock = threading.Lock()  # materialising the caches (never held by draw)
        self._table: pa.Table | None = None
        self._frame: pd.DataFrame | None = None
        self._rows: int | None = None
        self._token = uuid.uuid4().hex

    @property
    def schema(self) -> pa.Schema | None:
        """The projection's Arrow types, in :attr:`columns` order (None when not known)."""
        return self._schema

    @property
    def engine(self) -> Engine:
        """The engine that reads the granted blocks (created on first use)."""
        if not isinstance(self._engine, Engine):
            self._engine = self._engine()
        return self._engine

    @property
    def ledger_url(self) -> str:
        """The URL of the ledger database behind this grant (password hidden).

        Executors that charge from other processes (Ray workers) compare it with the database
        they were given, so that a worker can never charge a copy of the ledger instead of it.
        """
        return self._ledger.engine.url.render_as_string(hide_password=True)

    @property
    def mark_policy(self) -> str | None:
        """The policy of the audit log's high-water mark that guards this grant's ledger
        (:mod:`blockbudget.store.rollback`; None: none): a worker that charges from another
        process keeps the mark as the driver does."""
        from blockbudget.store.rollback import Watermark

        guard = self._ledger.guard
        return guard.policy.describe() if isinstance(guard, Watermark) else None

    # --- the BudgetSource contract -------------------------------------------------------------

    @property
    def accounting(self) -> Accounting:
        """The accounting rule of the grant's stream."""
        return self._accounting

    def draw(self, cost: Cost, *, label: str, request_id: str | None = None) -> None:
        """Charge ``cost`` to every block of the grant, durably, from its reservation.

        ``request_id`` names the charge in the ledger (its idempotency key; a fresh one when
        None): a second draw under the same id on another reservation is refused by the ledger.

        On a user-level stream with ``rows_per_user = k > 1`` the charge is the group-privacy
        cost of ``cost`` for k rows (see :func:`group_cost`).

        Raises:
            ReservationError: the grant is closed, or the draw exceeds what is left reserved.
            InvalidBudgetError: the cost kind does not suit the stream's accounting.
        """
        charged = group_cost(cost, self.group_size, accounting=self._accounting)
        with self._lock:  # one draw at a time: a refusal must be seen before the next try
            if self._closed:
                raise ReservationError(
                    f"grant {self.reservation.id} is closed; cannot draw {label!r}"
                )
            self._ledger.charge(
                self.blocks,
                charged,
                context=self.context,
                request_id=request_id
                or f"{self.reservation.id}/{self._token}/draw/{uuid.uuid4().hex}",
                reservation_id=self.reservation.id,
            )
            self._draws.append((label, charged))

    def remaining(self) -> tuple[tuple[str, Vector], ...]:
        """What the reservation still holds per block, as the ledger has it now (one read):
        ``(block, features)`` pairs in block order, in the layout of the stream's filter.

        Raises:
            ReservationError: the reservation is no longer open.
        """
        current = self._ledger.reservation(self.reservation.id)
        if current.state is not ReservationState.OPEN:
            raise ReservationError(
                f"reservation {current.id!r} is {current.state.value}; nothing can be drawn"
            )
        return current.remaining

    def shortfall(self, cost: Cost) -> tuple[tuple[str, Vector, Vector], ...]:
        """Where the reservation, as the ledger holds it now, cannot pay a draw of ``cost``.

        Reads the reservation's remaining features (one ledger read, no row) and compares
        them with the features of the draw — its group-privacy cost on a user-level stream,
        as :meth:`draw` charges it — block by block, as the ledger will when drawing.

        Returns:
            ``(block, needs, holds)`` feature vectors for every block that falls short
            (empty when the draw fits everywhere).

        Raises:
            ReservationError: the reservation is no longer open.
            InvalidBudgetError: the cost kind does not suit the stream's accounting.
        """
        f = self._filter
        if f is None:  # a grant rebuilt without its filter: the blocks' own, from the ledger
            state = self._ledger.state(self.blocks[0], self.context)
            f = make_filter(state.accounting, capacity=state.capacity)
        need = f.features(group_cost(cost, self.group_size, accounting=self._accounting))
        return shortfall_of(self.remaining(), need)

    # --- data ----------------------------------------------------------------------------------

    def batches(
        self,
        *,
        columns: Sequence[str] | None = None,
        predicates: Sequence[Predicate] = (),
        batch_rows: int = 65_536,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the granted rows in bounded memory, through :attr:`engine`.

        Rows come in stored order (block, part file, row), after contribution bounding on a
        user-level stream and after ``predicates``; nothing is cached.

        Args:
            columns: a subset of :attr:`columns` (default: all of them).
            predicates: row filters on columns of :attr:`columns`.
            batch_rows: the most rows one batch holds.

        Raises:
            ReservationError: the grant is closed (also while iterating, at the first batch
                after :meth:`close`).
            UnknownColumnError: a column or predicate outside the grant's projection.
            DataError: while iterating, when a part file is missing or unreadable.

        Example:
            >>> delays = grant.batches(columns=["dep_delay"])  # doctest: +SKIP
            >>> total = sum(b.num_rows for b in delays)  # doctest: +SKIP
        """
        self._check_open()
        wanted = self._projection(columns)
        unknown = sorted({p.column for p in predicates} - set(self.columns))
        if unknown:
            raise UnknownColumnError(self.stream, unknown, list(self.columns))
        return self._read(wanted, tuple(predicates), batch_rows)

    @property
    def data(self) -> pa.Table:
        """The granted rows as one Arrow table, read on first use and kept until the grant
        closes (only a holder of a grant ever sees them).

        For data that fits in memory: the whole projection is materialised. Stream larger
        grants with :meth:`batches`.

        Raises:
            ReservationError: the grant is closed.
            DataError: a part file is missing or unreadable.
        """
        self._check_open()
        table = self._table
        if table is None:
            with self._read_lock:
                table = self._table
                if table is None:
                    table = self._materialise()
                    self._check_open()
                    self._table = table
        return table

    def frame(self) -> pd.DataFrame:
        """The granted rows as a pandas DataFrame, converted once and kept until the grant
        closes (for data that fits in memory; see :attr:`data`).

        Every call returns a shallow copy of the one converted frame: adding or replacing
        columns does not reach the next call, and under pandas' copy-on-write (the default from
        pandas 3) neither does changing values; with pandas 2, copy it before changing values
        in place.

        Raises:
            ReservationError: the grant is closed.
            DataError: a part file is missing or unreadable.
        """
        self._check_open()
        frame = self._frame
        if frame is None:
            with self._read_lock:
                frame = self._frame
                if frame is None:
                    table = self._table if self._table is not None else self._materialise()
                    frame = table.to_pandas()
                    self._check_open()
                    self._frame = frame
        return frame.copy(deep=False)

    @property
    def num_rows(self) -> int:
        """How many rows the grant reads: on a user-level stream, after contribution bounding.

        An exact count of private data, for the holder only (as the rows are). Computed on
        first use by the engine (no rows are kept for it), then remembered.

        Raises:
            ReservationError: the grant is closed.
            DataError: a part file is missing or unreadable.
        """
        self._check_open()
        if self._rows is None:
            if self._table is not None:
                self._rows = int(self._table.num_rows)
            elif self._frame is not None:
                self._rows = len(self._frame)
            else:
                from blockbudget.engine.plan import AggKind, Aggregate, Plan

                plan = Plan(self.source, (Aggregate("rows", AggKind.COUNT),))
                self._rows = int(_guard(lambda: self.engine.aggregate(plan).of("rows")[0]))
        return self._rows

    def _check_open(self) -> None:
        if self._closed:
            raise ReservationError(f"grant {self.reservation.id} is closed; its data is gone")

    def _projection(self, columns: Sequence[str] | None) -> tuple[str, ...]:
        if columns is None:
            return self.columns
        wanted = set(columns)
        unknown = sorted(wanted - set(self.columns))
        if unknown or not wanted:
            raise UnknownColumnError(self.stream, unknown, list(self.columns))
        return tuple(c for c in self.columns if c in wanted)  # in the grant's order

    def _read(
        self, columns: tuple[str, ...], predicates: tuple[Predicate, ...], batch_rows: int
    ) -> Iterator[pa.RecordBatch]:
        """The engine's batches, with any low-level read error raised as DataError."""
        batches = _guard(
            lambda: self.engine.batches(
                self.source, columns=list(columns), predicates=predicates, batch_rows=batch_rows
            )
        )
        while True:
            self._check_open()  # a generator outliving close() stops at its next batch
            batch = _guard(lambda: next(batches, None))
            if batch is None:
                return
            if tuple(batch.schema.names) != columns:
                batch = batch.select(list(columns))
            yield batch

    def _materialise(self) -> pa.Table:
        import pyarrow as pa

        batches = list(self._read(self.columns, (), 65_536))
        schema = self._schema
        if not batches:
            if schema is None:  # no types known: empty columns of type null
                return pa.table({c: pa.array([], pa.null()) for c in self.columns})
            return schema.empty_table()
        table = pa.Table.from_batches(batches)
        if schema is not None and not table.schema.equals(schema):
            table = table.cast(schema)  # the stream's types, whichever engine read the rows
        return table

    # --- state ---------------------------------------------------------------------------------

    @property
    def draws(self) -> tuple[tuple[str, Cost], ...]:
        """Every (label, cost) drawn so far, in order."""
        return tuple(self._draws)

    @property
    def spent(self) -> Cost:
        """The exact sum of what was drawn (zero of the reservation's kind if nothing)."""
        rule = self._accounting.rule
        total: Cost = rule.own_kind(type(self.reservation.cost).zero())
        for _, cost in self._draws:
            total = total.add_up(rule.own_kind(cost))  # a pure budget counts as its price
        return total

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release what was reserved and not drawn. Idempotent.

        A reservation that already expired (its holder took longer than its time-to-live) or
        was released elsewhere has nothing left to release; the grant just closes.
        """
        with self._lock:
            if self._closed:
                return
            try:
                self._ledger.release(
                    self.reservation.id, request_id=f"{self.reservation.id}/{self._token}/release"
                )
            except ReservationError:
                if self._ledger.reservation(self.reservation.id).state is ReservationState.OPEN:
                    raise
            self._closed = True
        with self._read_lock:  # the caches go with the grant
            self._table = None
            self._frame = None
            self._rows = None

    def __enter__(self) -> Grant:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"Grant({self.reservation.id}, stream={self.stream!r}, context={self.context!r}, "
            f"blocks={len(self.blocks)}, reserved={self.reservation.cost}, {state})"
        )


def _guard(step: Callable[[], _T]) -> _T:
    """Run one read step; a low-level read error becomes :class:`DataError` (engines raise
    DataError themselves for missing files; this catches what slips through)."""
    import pyarrow as pa

    try:
        return step()
    except BlockBudgetError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise DataError(  # the reader's text is not repeated: it may quote the data
            f"the granted blocks' part files could not be read ({type(exc).__name__}); the "
            "store's files were changed outside blockbudget"
        ) from None


def open_reservation(
    ledger: Ledger, reservation_id: str, *, holder: str | None, now: float
) -> Reservation:
    """The open reservation ``reservation_id`` that a grant may spend (held by ``holder`` when
    given; ``now`` on the ledger's clock).

    Raises:
        UnknownReservationError: no such reservation, or not held by ``holder`` (answered
            alike, so that another holder's reservation does not leak).
        ReservationError: the reservation is closed, or past its time-to-live.
    """
    unheld = f"no reservation {reservation_id!r} is held by {holder!r}"
    try:
        res = ledger.reservation(reservation_id)
    except UnknownBlockError:
        text = f"unknown reservation {reservation_id!r}" if holder is None else unheld
        raise UnknownReservationError(text) from None
    if holder is not None and (res.holder or "") != holder:
        raise UnknownReservationError(unheld)  # word for word as an unknown id
    if res.state is not ReservationState.OPEN:
        raise ReservationError(
            f"reservation {res.id!r} is {res.state.value}; only an open reservation can back a "
            "grant"
        )
    if now >= res.expires_at:
        raise ReservationError(
            f"reservation {res.id!r} is past its time-to-live; an expired reservation is "
            "released, never charged"
        )
    return res


def reservation_stream(ledger: Ledger, res: Reservation) -> str:
    """The one stream of a reservation's blocks, read from the ledger rows of those blocks only.

    Raises:
        InvalidRequestError: blocks of several streams.
        RetiredBlockError: a retired block (it never serves again).
    """
    states = ledger.states(blocks=list(res.blocks), context=res.context)
    streams = sorted({s.stream for s in states})
    if len(streams) != 1:
        raise InvalidRequestError(
            f"a grant reads blocks of one stream; reservation {res.id!r} holds {streams}"
        )
    retired = sorted({s.block for s in states if s.retired})
    if retired:
        raise RetiredBlockError(retired)
    return streams[0]


def shortfall_of(
    remaining: Sequence[tuple[str, Vector]], needs: Vector
) -> tuple[tuple[str, Vector, Vector], ...]:
    """``(block, needs, holds)`` for every block whose remaining features cannot pay ``needs``
    (the ledger's own rule for a draw on a reservation: no feature may exceed what is held)."""
    return tuple(
        (block, needs, holds)
        for block, holds in remaining
        if any(n > h for n, h in zip(needs, holds, strict=True))
    )


def refuse_short(
    reservation_id: str,
    what: str,
    short: Sequence[tuple[str, Vector, Vector]],
    *,
    accounting: str,
) -> None:
    """Raise the refusal of a draw ``what`` that a reservation on a stream of rule
    ``accounting`` cannot pay (nothing done).

    Raises:
        ReservationError: when ``short`` names any block.
    """
    if short:
        block, needs, holds = short[0]
        over = tuple(max(0, n - h) for n, h in zip(needs, holds, strict=True))
        raise ReservationError(
            f"a draw spends at most what its reservation still holds: {what} needs "
            f"{exact_text(vector_json(accounting, needs))} but reservation {reservation_id!r} "
            f"holds {exact_text(vector_json(accounting, holds))} on {block!r}, short by "
            f"{exact_text(vector_json(accounting, over))} ({len(short)} block(s) short); "
            "nothing was read "
            "or charged"
        )


def group_cost(cost: Cost, k: int, *, accounting: str) -> Cost:
    """The cost of a mechanism for a group of ``k`` rows (group privacy) under the stream's
    rule ``accounting`` (:meth:`~blockbudget.accounting.rule.AccountingRule.group_cost`):
    (kε, k·e^{(k−1)ε}·δ) for (ε, δ) rules (Dwork & Roth 2014, Thm 2.2), kμ for μ-GDP.

    Raises:
        InvalidBudgetError: the rule does not support group privacy for k > 1, or a group
            cost that leaves δ < 1 unreachable.

    Example:
        >>> from blockbudget.budget import Budget
        >>> group_cost(Budget(epsilon="0.1"), 3, accounting="basic")
        Budget(epsilon='0.3', delta='0')
    """
    return get_rule(accounting).group_cost(cost, k)

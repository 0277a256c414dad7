"""The facade users import: streams, blocks, ingest and grants over one ledger and one store.

A :class:`Platform` lives in a home folder holding a SQLite database (the embedded default; any
SQLAlchemy URL, e.g. PostgreSQL, can be given instead) and the blocks' Parquet files (any
pyarrow filesystem URI can be given instead). It wires the store (rows per block) to the ledger
(budget per block and context): a new block gets its stream's global budget the moment it is
created, a block's data leaves the store only through a :class:`~blockbudget.grant.Grant` (which
holds the blocks' part files and reads them through the platform's engine), and a block is
sealed before a grant on it is handed out, so a charged block never changes afterwards
(seed ``004_2b5d216070ae2ded.txt`` §3.2 and §4.3, Theorem 4.3).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyarrow import Schema
from pyarrow import schema as pa_schema

from blockbudget.accounting import Accounting, Filter, add_vectors, make_filter
from blockbudget.affordance import Affordance, AffordFor, afford, last_refusal
from blockbudget.budget import Budget, Cost
from blockbudget.errors import (
    InvalidBudgetError,
    InvalidRequestError,
    ReservationError,
    UnknownBlockError,
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
    Ledger,
    Reservation,
    ReservationState,
    VerifyReport,
    validate_context_name,
)
from blockbudget.lowbudget import is_retiring, is_retiring_in
from blockbudget.selection import Last as Last  # re-exported: users import it from here
from blockbudget.selection import named_blocks, newest_blocks
from blockbudget.store import (
    Blocking,
    BlockStore,
    IngestReport,
    LatePolicy,
    OnOverlap,
    StreamSpec,
    Unit,
)
from blockbudget.store import catalog as store_catalog

if TYPE_CHECKING:
    from blockbudget.engine import Engine
    from blockbudget.store.inputs import IngestData

#: A block whose every context cannot fit this much more epsilon is retired by
#: :meth:`Platform.retire_exhausted` unless told otherwise.
DEFAULT_MIN_EPSILON = Budget(epsilon="0.001")


@dataclass(frozen=True)
class BlockView:
    """One block as an operator sees it: its data summary and its budget in each context."""

    block_id: str
    key: str
    rows: int
    sealed: bool
    retired: bool
    remaining_fraction: dict[str, float]
    remaining: dict[str, str]
    #: live and under 10% left in every open context (:func:`blockbudget.lowbudget.is_retiring`)
    retiring: bool = False
    #: per context shown: live and under 10% left there (:func:`.lowbudget.is_retiring_in`)
    retiring_in: dict[str, bool] = field(default_factory=dict)
    #: per context, the exact remaining budget as decimal strings (``{"epsilon", "delta"}``,
    #: or ``{"rdp": [...]}`` per order; :meth:`Filter.remaining_json`); None once retired
    remaining_exact: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def to_json(
        self,
        *,
        block_id: str | None = None,
        key: str | None = None,
        with_rows: bool = True,
        everywhere: bool = True,
    ) -> dict[str, Any]:
        """The one JSON form of a block (the HTTP ``BlockOut`` and ``blockbudget blocks
        --json``): remaining budgets exact; ``block_id``/``key`` as shown to the caller (default:
        the real ones); ``rows`` None unless ``with_rows``; the every-open-context ``retiring``
        flag None unless the caller sees every context (``everywhere``)."""
        return {
            "block_id": self.block_id if block_id is None else block_id,
            "key": self.key if key is None else key,
            "sealed": self.sealed,
            "retired": self.retired,
            "remaining_fraction": self.remaining_fraction,
            "remaining": self.remaining_exact,
            "remaining_display": self.remaining,
            "rows": self.rows if with_rows else None,
            "retiring": self.retiring if everywhere else None,
            "retiring_in": self.retiring_in,
        }


class Platform:
    """Streams of blocks with per-block, per-context privacy budgets.

    Args:
        home: folder for the default SQLite database and block files (created if missing).
        engine: the engine grants read block files with: a registry name (``duckdb``, the
            default; ``arrow``; ``ray``) or an :class:`~blockbudget.engine.Engine`.
        database_url: a SQLAlchemy URL to use instead of ``home/platform.db``.
        data_root: a local path or pyarrow filesystem URI for block files instead of
            ``home/blocks``.
    """

    def __init__(
        self,
        home: str | Path,
        *,
        database_url: str | None = None,
        data_root: str | None = None,
        engine: str | Engine = "duckdb",
    ) -> None:
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.database_url = database_url or f"sqlite:///{(self.home / 'platform.db').resolve()}"
        self.ledger = Ledger(self.database_url)
        self.store = BlockStore(self.database_url, data_root or str(self.home / "blocks"))
        self._filters: dict[str, Filter] = {}
        self._engine_choice = engine
        self._engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        """The engine grants read their blocks with (created on first use)."""
        if self._engine is None:
            from blockbudget.engine import get_engine

            self._engine = get_engine(self._engine_choice)
        return self._engine

    # --- streams -------------------------------------------------------------------------------

    def create_stream(
        self,
        name: str,
        *,
        policy: Budget,
        blocking: Blocking,
        accounting: Accounting = Accounting.BASIC,
        late_policy: LatePolicy = LatePolicy.NEW_BLOCK,
        slack_delta: float | None = None,
        close_after: int | None = None,
        description: str = "",
        exclusive: bool = False,
    ) -> StreamSpec:
        """Register a stream with its global policy (ε_g, δ_g), unit of protection and rule.

        :class:`StreamSpec` builds the filter on construction, so an unusable policy (e.g. RDP
        with δ_g = 0) is refused before anything is stored. Creating an identical stream again
        is a no-op, unless ``exclusive`` (see :meth:`BlockStore.create_stream`).

        Raises:
            StreamExistsError: the name is taken by another spec (or at all, ``exclusive``).
            InvalidRequestError: a rule without group privacy (RDP) on a user-level stream
                with ``rows_per_user > 1`` — no query could ever run on it.
        """
        rule = Accounting(accounting).rule
        try:  # the rule says whether it prices a group of k rows at all
            rule.group_cost(rule.pure(1), blocking.rows_per_user or 1)
        except InvalidBudgetError:
            raise InvalidRequestError(
                f"{rule.name.upper()} accounting needs rows_per_user=1 on a user-level stream: "
                f"group privacy for {rule.name.upper()} costs is not supported (got "
                f"rows_per_user={blocking.rows_per_user}); use basic or strong accounting for "
                "k > 1"
            ) from None
        spec = StreamSpec(
            name=name,
            policy=policy,
            accounting=accounting,
            blocking=blocking,
            late_policy=late_policy,
            slack_delta=slack_delta,
            close_after=close_after,
            description=description,
        )
        return self.store.create_stream(spec, exclusive=exclusive)

    def stream(self, name: str) -> StreamSpec:
        return self.store.get_stream(name)

    def streams(self) -> list[StreamSpec]:
        return self.store.list_streams()

    def filter(self, stream: str) -> Filter:
        """The per-block filter of a stream."""
        if stream not in self._filters:
            spec = self.stream(stream)
            self._filters[stream] = make_filter(
                spec.accounting, capacity=spec.policy, slack_delta=spec.slack_delta
            )
        return self._filters[stream]

    # --- contexts ------------------------------------------------------------------------------

    def add_context(self, name: str, *, description: str = "") -> str:
        """Register a context: one full per-block budget for a group of principals assumed not
        to collude (Sage §3.2). An administrative act, audited; requests name only registered
        contexts. Idempotent."""
        validate_context_name(name)
        self.ledger.add_context(name, description=description)
        return name

    def close_context(self, name: str) -> str:
        """Close a context for good (audited; see :meth:`Ledger.close_context`): it never
        spends again, no longer keeps exhausted blocks from retiring, and counts in the
        coalition bound only if it ever charged. Idempotent."""
        self.ledger.close_context(name)
        return name

    def contexts(self) -> list[str]:
        """The open registered contexts (those that can still spend budget). A new platform
        has none: an administrator registers each with :meth:`add_context`."""
        return self.ledger.contexts()

    def coalition_contexts(self) -> list[str]:
        """The contexts whose budgets add up if all their principals collude: the open ones
        and the closed ones that ever charged (see :meth:`Ledger.coalition_contexts`)."""
        return self.ledger.coalition_contexts()

    def coalition_epsilon(self, stream: str) -> float:
        """The most a coalition of every context could learn about one block of ``stream``:
        ``len(coalition_contexts()) × ε_g`` (0 with no context)."""
        return len(self.coalition_contexts()) * float(self.stream(stream).policy.epsilon)

    # --- data ----------------------------------------------------------------------------------

    def ingest(
        self,
        stream: str,
        data: IngestData,
        *,
        format: str | None = None,
        ingest_id: str | None = None,
        on_overlap: OnOverlap | str = OnOverlap.REFUSE,
    ) -> IngestReport:
        """Add rows to a stream's blocks; every new block starts with the stream's full budget.

        ``data`` is anything :meth:`BlockStore.ingest` takes (files and batch streams are read
        batch by batch). Idempotent per ``ingest_id`` (default: the content hash): a repeat
        changes nothing and returns the first report with ``repeat=True``; exact duplicates
        of stored rows follow ``on_overlap`` (default: refuse). See :meth:`BlockStore.ingest`.

        Example:
            >>> first = p.ingest("flights", "jan.csv")  # doctest: +SKIP
            >>> p.ingest("flights", "jan.csv").repeat, first.ingest_id  # doctest: +SKIP
            (True, 'sha256:…')
        """
        report = self.store.ingest(
            stream, data, format=format, ingest_id=ingest_id, on_overlap=on_overlap
        )
        # Under the ingest's own request id: a repeat replays it (no write), and registers the
        # blocks if the first ingest stopped between its store commit and this call.
        self._register_blocks(stream, report.new_blocks, request_id=_ingest_request(report))
        return report

    def _register_blocks(
        self, stream: str, block_ids: Sequence[str], *, request_id: str | None = None
    ) -> None:
        if not block_ids:
            return
        spec = self.stream(stream)
        self.ledger.add_blocks(
            list(block_ids),
            stream=stream,
            capacity=spec.policy,
            accounting=spec.accounting,
            slack_delta=spec.slack_delta,
            request_id=request_id,
        )

    def reconcile(self, stream: str) -> list[str]:
        """Give a budget to every stored block the ledger does not know (after a crash between
        writing a block and registering it). Returns the blocks registered."""
        known = {b.block_id for b in self.ledger.blocks(stream=stream)}
        missing = [m.block_id for m in self.store.blocks(stream) if m.block_id not in known]
        self._register_blocks(stream, missing)
        return missing

    # --- blocks and budgets --------------------------------------------------------------------

    def blocks(
        self, stream: str, *, contexts: Sequence[str] | None = None, last: int | None = None
    ) -> list[BlockView]:
        """Every block of a stream (or only its ``last`` newest ones, which costs what those
        blocks cost) with its remaining budget in each context (default: every open
        context), oldest first. ``retiring_in`` says, per context shown, whether the block is
        retiring there; ``retiring`` is judged over every open context whichever ``contexts``
        are shown (:mod:`blockbudget.lowbudget`)."""
        if last is not None and last <= 0:
            raise InvalidRequestError(f"last must be >= 1, got {last}")
        if last is None:
            metas = self.store.blocks(stream)
        else:
            with self.store.engine.connect() as conn:
                newest = store_catalog.select_newest_block_ids(conn, stream, offset=0, limit=last)
                found = store_catalog.select_blocks_by_id(conn, newest)
            metas = [found[b] for b in reversed(newest) if b in found]
        open_ctxs = self.ledger.contexts()
        ctxs = list(contexts) if contexts is not None else open_ctxs
        f = self.filter(stream)
        states = {
            (s.block, s.context): s
            for s in self.ledger.states(blocks=[m.block_id for m in metas])
            if s.stream == stream
        }
        retired = {s.block for s in states.values() if s.retired}
        views = []
        for m in metas:
            fractions: dict[str, float] = {}
            texts: dict[str, str] = {}
            exact: dict[str, dict[str, Any] | None] = {}
            for c in dict.fromkeys([*ctxs, *open_ctxs]):
                s = states.get((m.block_id, c))
                used = add_vectors(s.charged, s.reserved) if s is not None else f.zero()
                fractions[c] = 0.0 if m.block_id in retired else f.remaining_fraction(used)
                texts[c] = "retired" if m.block_id in retired else f.describe_remaining(used)
                if c in ctxs:
                    exact[c] = None if m.block_id in retired else f.remaining_json(used)
            every_open = {c: fractions[c] for c in open_ctxs}
            views.append(
                BlockView(
                    block_id=m.block_id,
                    key=m.key,
                    rows=m.rows,
                    sealed=m.sealed,
                    retired=m.block_id in retired,
                    remaining_fraction={c: fractions[c] for c in ctxs},
                    remaining={c: texts[c] for c in ctxs},
                    retiring=is_retiring(every_open, retired=m.block_id in retired),
                    retiring_in={
                        c: is_retiring_in(fractions[c], retired=m.block_id in retired) for c in ctxs
                    },
                    remaining_exact=exact,
                )
            )
        return views

    def afford(
        self,
        stream: str,
        selection: Sequence[str] | Last,
        *,
        context: str,
        delta: float | str | Decimal = 0,
        kind: AffordFor = AffordFor.BUDGET,
    ) -> Affordance:
        """The largest ε (at ``delta``; or, with ``kind=GAUSSIAN`` on an RDP stream, the
        smallest noise multiplier) that ``selection`` can still afford in ``context``, exact
        from the filters (:func:`blockbudget.affordance.afford`). Reserves nothing."""
        return afford(self, stream, selection, context=context, delta=delta, kind=kind)

    def can_afford(
        self, block_ids: Sequence[str], cost: Cost, *, context: str, stream: str | None = None
    ) -> list[bool]:
        """For each block, whether ``cost`` fits its filter in ``context`` right now (advisory:
        the ledger re-checks atomically when reserving). ``stream`` narrows the lookup. Reads
        the named blocks' ledger rows only."""
        states = {
            s.block: s for s in self.ledger.states(stream=stream, context=context, blocks=block_ids)
        }
        out = []
        for block in block_ids:
            s = states.get(block)
            if s is None or s.retired:
                out.append(False)
                continue
            f = self.filter(s.stream)
            used = add_vectors(s.charged, s.reserved)
            out.append(f.fits_with(used, f.features(cost)))
        return out

    def select(
        self,
        stream: str,
        selection: Sequence[str] | Last,
        *,
        context: str | None = None,
        cost: Cost | None = None,
    ) -> tuple[str, ...]:
        """Resolve a selection (block ids, block keys, or :class:`Last`) to block ids.

        ``context`` and ``cost`` are read by ``Last`` only (which needs both); named blocks
        are resolved without them.

        Costs what the chosen blocks cost, not what the stream holds: named blocks are looked
        up by id or key; ``Last(n)`` walks the stream from its newest block
        (:func:`blockbudget.selection.newest_blocks`), skipping retired blocks (and, with
        ``affordable``, blocks that cannot afford ``cost`` in ``context``). On a user stream
        with a maximum-id release, only blocks whose ids all lie at or below its ``safe_max``
        exist for selection (:mod:`blockbudget.userids`); naming another is refused as unknown.
        A user stream with no release yet has no block to select: any selection on it raises
        :class:`~blockbudget.errors.UnreleasedIdsError` (release one with
        :func:`blockbudget.userids.release_max_id` first).
        """
        from blockbudget import userids

        bound = userids.selection_bound(self, stream)

        def admit(ids: Sequence[str]) -> list[str]:
            return list(ids) if bound is None else userids.within(bound, ids)

        if isinstance(selection, Last):
            if context is None or cost is None:
                raise InvalidRequestError("selecting the newest blocks needs a context and a cost")
            chosen = newest_blocks(
                self.ledger,
                self.store.engine,
                self.filter(stream),
                stream,
                selection,
                context=context,
                cost=cost,
                admit=None if bound is None else admit,
            )
            if not chosen:
                raise last_refusal(
                    self.ledger,
                    self.store.engine,
                    self.filter(stream),
                    stream,
                    context=context,
                    cost=cost,
                    admit=None if bound is None else admit,
                )
            return tuple(chosen)
        named = named_blocks(self.store.engine, stream, selection)
        shown = set(admit(named))
        for block in named:
            if block not in shown:
                raise UnknownBlockError(f"stream {stream!r} has no block {block!r}")
        return named

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

        On a user-level stream with ``rows_per_user = k``, each draw is charged k times its
        row-level cost (group privacy): reserve ``group_cost(cost, k)`` for a draw of ``cost``.

        Raises:
            BudgetExceededError: a block cannot afford the budget (nothing is reserved).
            UnknownBlockError / RetiredBlockError / InvalidRequestError / InvalidBudgetError:
                bad input (nothing is reserved).
        """
        validate_context_name(context)
        wanted, schema = self._projection(stream, columns)
        chosen = self.select(stream, blocks, context=context, cost=budget)
        if not chosen:
            raise InvalidRequestError("a request needs at least one block")
        reservation = self.ledger.reserve(
            list(chosen),
            budget,
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
            >>> from blockbudget.platform import Platform
            >>> from blockbudget.store import Blocking
            >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
            >>> _ = p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
            >>> _ = p.add_context("team")
            >>> _ = p.ingest("s", pd.DataFrame({"t": pd.date_range("2024-01-01", periods=2,
            ...                                                    freq="h"), "v": [1.0, 2.0]}))
            >>> blocks = [b.block_id for b in p.blocks("s")]
            >>> res = p.ledger.reserve(blocks, Budget(epsilon=0.5), context="team", holder="ann")
            >>> with p.grant(res.id, holder="ann") as g:
            ...     g.draw(Budget(epsilon=0.2), label="mine")
            >>> p.ledger.reservation(res.id).state.value  # closing released the other 0.3
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
            need = f.features(group_cost(covers, self._group(of), accounting=f.accounting))
            short = shortfall_of(res.remaining, need)
            refuse_short(res.id, f"a draw of {covers}", short, accounting=f.accounting)
        return self._hand_over(of, res, res.blocks, wanted, schema)

    def _group(self, stream: str) -> int:
        """The group size a draw on ``stream`` is charged for (``rows_per_user`` on a
        user-level stream, else 1)."""
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
        group = self._group(stream)
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

    def close(self) -> None:
        self.ledger.dispose()
        self.store.dispose()


def _ingest_request(report: IngestReport) -> str | None:
    """The ledger request id that registers an ingest's new blocks: ``ingest/<stream>/<id>``.

    Internal ids carry a ``/`` before any ``:``; a principal's own ids are
    ``<name>:<id>`` with a name that never contains ``/`` (:func:`service.charges.scoped`), so
    no principal can claim (squat) this id. Registration is idempotent per block, so an
    ingest stored under the earlier ``ingest:`` form and repeated now still registers."""
    return f"ingest/{report.stream}/{report.ingest_id}" if report.ingest_id else None

"""The facade users import: streams, blocks, ingest and grants over one ledger and one store.

A :class:`Platform` lives in a home folder holding a SQLite database (the embedded default; any
SQLAlchemy URL, e.g. PostgreSQL, can be given instead) and the blocks' Parquet files (any
pyarrow filesystem URI can be given instead). It wires the store (rows per block) to the ledger
(budget per block and context): a new block gets its stream's global budget the moment it is
created, a block's data leaves the store only through a :class:`~blockbudget.grant.Grant` (which
holds the blocks' part files and reads them through the platform's engine), and a block is
sealed before a grant on it is handed out, so a charged block never changes afterwards
(seed ``004_2b5d216070ae2ded.txt`` §3.2 and §4.3, Theorem 4.3).

Streams, contexts, ingest, block listings and selection are here; grants, reservations,
charges, the audit log and retirement are the methods ``Platform`` inherits from
:class:`~blockbudget.platform_budget.PlatformBudget`. The service and the CLI reach
the ledger and the store through these methods only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blockbudget.accounting import Accounting, Filter, add_vectors, make_filter
from blockbudget.affordance import Affordance, AffordFor, afford, last_refusal
from blockbudget.budget import Budget, Cost
from blockbudget.errors import InvalidBudgetError, InvalidRequestError, UnknownBlockError
from blockbudget.ledger import ContextInfo, Ledger, validate_context_name
from blockbudget.lowbudget import is_retiring, is_retiring_in
from blockbudget.platform_budget import DEFAULT_MIN_EPSILON as DEFAULT_MIN_EPSILON
from blockbudget.platform_budget import GroupCommitStats as GroupCommitStats
from blockbudget.platform_budget import PlatformBudget
from blockbudget.selection import Last as Last  # re-exported: users import it from here
from blockbudget.selection import named_blocks, newest_blocks
from blockbudget.store import (
    Blocking,
    BlockMeta,
    BlockStore,
    FileCheck,
    IngestReport,
    LatePolicy,
    OnOverlap,
    StreamSpec,
)
from blockbudget.store import catalog as store_catalog
from blockbudget.store.markfiles import MarkFiles
from blockbudget.store.rollback import Watermark
from blockbudget.store.watermark import MARK_ENV, MarkPolicy, parse_policy

if TYPE_CHECKING:
    from blockbudget.engine import Engine
    from blockbudget.store.inputs import IngestData


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


class Platform(PlatformBudget):
    """Streams of blocks with per-block, per-context privacy budgets.

    Grants, reservations, charges, the audit log and retirement are the methods of its base
    :class:`~blockbudget.platform_budget.PlatformBudget`; callers (the service, the CLI,
    tasks) reach the ledger and the store through these methods only.

    Args:
        home: folder for the default SQLite database and block files (created if missing).
        engine: the engine grants read block files with: a registry name (``duckdb``, the
            default; ``arrow``; ``ray``) or an :class:`~blockbudget.engine.Engine`.
        database_url: a SQLAlchemy URL to use instead of ``home/platform.db``.
        data_root: a local path or pyarrow filesystem URI for block files instead of
            ``home/blocks``.
        group_commit: batch concurrent ledger writes of many threads into single durable
            transactions (:mod:`blockbudget.ledger.group`; what a server wants).
        mark_every: when the audit log's high-water mark beside the block files advances
            (:func:`blockbudget.store.watermark.parse_policy`: ``"charge"``, the default —
            after every write that charges, before its result leaves, and about a second after
            any other —, ``"commit"``, ``"N"`` events, ``"Ts"`` seconds, ``"N,Ts"``, or
            ``"off"``, which writes no mark but still checks one the block files hold: a
            process with the mark off on a restored database is refused all the same); None reads
            ``BLOCKBUDGET_MARK_EVERY``. A database whose audit log is behind the mark (restored
            from an older backup) refuses every write until ``blockbudget db reconcile``
            (:mod:`blockbudget.store.rollback`).
    """

    def __init__(
        self,
        home: str | Path,
        *,
        database_url: str | None = None,
        data_root: str | None = None,
        engine: str | Engine = "duckdb",
        group_commit: bool = False,
        mark_every: str | MarkPolicy | None = None,
    ) -> None:
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.database_url = database_url or f"sqlite:///{(self.home / 'platform.db').resolve()}"
        self.ledger = Ledger(self.database_url, group_commit=group_commit)
        self.store = BlockStore(self.database_url, data_root or str(self.home / "blocks"))
        policy = parse_policy(os.environ.get(MARK_ENV) if mark_every is None else mark_every)
        #: the guard of the audit log's high-water mark (with the policy ``off`` it writes no
        #: mark, but still refuses writes to a database behind a mark the block files hold)
        self.watermark: Watermark | None = Watermark(
            self.ledger, MarkFiles(self.store.files), policy=policy
        )
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
        accounting: str = Accounting.BASIC,
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
        rule_name = Accounting(accounting)
        rule = rule_name.rule
        try:  # the rule says whether it prices a group of k rows at all
            rule.group_cost(rule.pure(1), blocking.rows_per_user or 1)
        except InvalidBudgetError:
            raise InvalidRequestError(
                f"{rule.name.upper()} accounting needs rows_per_user=1 on a user-level stream: "
                f"group privacy for {rule.name.upper()} costs is not supported (got "
                f"rows_per_user={blocking.rows_per_user}); use basic or strong accounting for "
                "k > 1"
            ) from None
        self.require_budgets()
        spec = StreamSpec(
            name=name,
            policy=policy,
            accounting=rule_name,
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

    def add_context(self, name: str, *, description: str = "") -> ContextInfo:
        """Register a context: one full per-block budget for a group of principals assumed not
        to collude (Sage §3.2). An administrative act, audited; requests name only registered
        contexts. Idempotent: returns the registration (an existing context's original one).

        Raises:
            InvalidRequestError: a malformed name or description, or a context that exists
                with another description.
        """
        validate_context_name(name)
        return self.ledger.add_context(name, description=description)

    def close_context(self, name: str) -> ContextInfo:
        """Close a context for good (audited; see :meth:`Ledger.close_context`): it never
        spends again, no longer keeps exhausted blocks from retiring, and counts in the
        coalition bound only if it ever charged. Idempotent: returns the registration."""
        return self.ledger.close_context(name)

    def contexts(self, *, include_closed: bool = False) -> list[str]:
        """The open registered contexts (those that can still spend budget), sorted; with
        ``include_closed``, the closed ones too. A new platform has none: an administrator
        registers each with :meth:`add_context`."""
        return self.ledger.contexts(include_closed=include_closed)

    def context_infos(self) -> list[ContextInfo]:
        """Every registered context, open or closed, with its description and its creation
        and closing times, sorted by name."""
        return self.ledger.context_infos()

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
        self.require_budgets()  # before the store: a refused ingest writes nothing
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

    def check_files(self, stream: str | None = None) -> FileCheck:
        """The data root's part files compared with the catalog (one stream's, or all):
        orphans no catalog entry lists (killed ingests) and listed parts whose file is missing
        (a restored or damaged store). Reads only (:meth:`BlockStore.check_files`)."""
        return self.store.check_files(stream)

    def remove_orphans(
        self, stream: str | None = None, *, older_than: timedelta = timedelta(hours=1)
    ) -> list[str]:
        """Delete the part files no catalog entry lists that are older than ``older_than``
        (one stream's, or all), under each stream's lock: a file committed meanwhile is kept,
        and an ingest still running whose staged file this removes fails rather than commit
        it (:meth:`BlockStore.vacuum`). Returns the paths removed, sorted.

        Refused while the database is behind its high-water mark: the orphans are then the
        files of the blocks a reconciliation must retire (:meth:`reconcile_rollback`)."""
        self.require_budgets()
        return self.store.vacuum(stream, older_than=older_than)

    def reconcile(self, stream: str) -> list[str]:
        """Give a budget to every stored block the ledger does not know (after a crash between
        writing a block and registering it). Returns the blocks registered."""
        known = {b.block_id for b in self.ledger.blocks(stream=stream)}
        missing = [m.block_id for m in self.store.blocks(stream) if m.block_id not in known]
        self._register_blocks(stream, missing)
        return missing

    # --- blocks and budgets --------------------------------------------------------------------

    def block_metas(self, stream: str) -> list[BlockMeta]:
        """The store's record of every block of ``stream`` (id, key, rows, sealed), in key
        order, without budgets (:meth:`blocks` adds those); reads the catalog only."""
        return self.store.blocks(stream)

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
        _refuse_unshown(stream, named, admit(named))
        return named

    def require_selectable(self, stream: str, blocks: Sequence[str]) -> bool:
        """The user-stream gate of :meth:`select`, for blocks named by id outside a selection
        (a direct charge): it holds for every caller, owners and admins too.

        Returns:
            Whether ``stream`` is gated at all: False for any stream but a user stream, where
            nothing is ever refused here (a stream's blocking never changes, so a caller may
            skip the check for it from then on).

        Raises:
            UnreleasedIdsError: a user stream with no maximum-id release yet.
            UnknownBlockError: a block beyond the release's ``safe_max`` (as an unknown one).

        Example:
            >>> import tempfile
            >>> from blockbudget import Budget
            >>> from blockbudget.platform import Platform
            >>> from blockbudget.store import Blocking
            >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
            >>> _ = p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
            >>> p.require_selectable("s", ["s/2024-01-01T00:00:00"])  # a time stream: no gate
            False
            >>> p.close()
        """
        from blockbudget import userids

        bound = userids.selection_bound(self, stream)
        if bound is not None:
            _refuse_unshown(stream, blocks, userids.within(bound, blocks))
        return bound is not None

    # --- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        if self.watermark is not None:
            self.watermark.close()
        self.ledger.dispose()
        self.store.dispose()


def _refuse_unshown(stream: str, blocks: Sequence[str], shown: Sequence[str]) -> None:
    """Refuse the first of ``blocks`` that is not in ``shown`` as unknown (a hidden block of a
    user stream is answered exactly as one that does not exist)."""
    seen = set(shown)
    for block in blocks:
        if block not in seen:
            raise UnknownBlockError(f"stream {stream!r} has no block {block!r}")


def _ingest_request(report: IngestReport) -> str | None:
    """The ledger request id that registers an ingest's new blocks: ``ingest/<stream>/<id>``.

    Internal ids carry a ``/`` before any ``:``; a principal's own ids are
    ``<name>:<id>`` with a name that never contains ``/`` (:func:`service.charges.scoped`), so
    no principal can claim (squat) this id. Registration is idempotent per block, so an
    ingest stored under the earlier ``ingest:`` form and repeated now still registers."""
    return f"ingest/{report.stream}/{report.ingest_id}" if report.ingest_id else None

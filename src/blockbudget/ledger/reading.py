"""The read side of :class:`~blockbudget.ledger.ledger.Ledger`: block states, contexts,
reservations, requests, the audit log and its verification (each a read transaction through
:mod:`blockbudget.ledger.reads`, except the checkpoint a clean verification stores)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from blockbudget.errors import AuditError, InvalidRequestError
from blockbudget.ledger import checkpoint, reads
from blockbudget.ledger.requests import name_of
from blockbudget.ledger.types import (
    DEFAULT_CONTEXT,
    AuditEvent,
    BlockInfo,
    BlockState,
    ChainHead,
    ContextInfo,
    RequestRecord,
    Reservation,
    ReservationState,
    VerifyReport,
    validate_context_name,
)
from blockbudget.ledger.verify import verify_ledger
from blockbudget.ledger.writes import WriteRunner


class LedgerReads(WriteRunner):
    """Reads of a ledger (see the module docstring); the ledger sets the attributes."""

    # --- reads -------------------------------------------------------------------------------

    def state(self, block: str, context: str = DEFAULT_CONTEXT) -> BlockState:
        """The budget of one block in one registered context (zeros if the context never
        touched it).

        Raises:
            UnknownBlockError: the block is not registered.
            UnknownContextError: the context is not registered.
            InvalidRequestError: a malformed context name.
        """
        block = name_of(block, what="block id")
        context = validate_context_name(context)
        return self._run(lambda c: reads.state(c, self._catalog, block, context), write=False)

    def states(
        self,
        stream: str | None = None,
        context: str | None = None,
        *,
        blocks: Iterable[str] | None = None,
    ) -> list[BlockState]:
        """Block states, sorted by (block, context): for ``context`` given, one per block of
        ``stream`` (or of every stream); otherwise one per block and registered context (closed
        ones included).

        With ``blocks``, only those blocks (of any stream; ids that are not registered are left
        out): primary-key reads whose cost does not grow with the size of their streams.

        Raises:
            UnknownContextError: ``context`` is not registered.
            InvalidRequestError: a malformed context name.
        """
        if context is not None:
            context = validate_context_name(context)
        if blocks is not None:
            ids = [name_of(b, what="block id") for b in blocks]
            found = self._run(
                lambda c: reads.states_of(c, self._catalog, ids, context), write=False
            )
            return [s for s in found if stream is None or s.stream == stream]
        return self._run(
            lambda c: reads.states(c, self._catalog, stream=stream, context=context), write=False
        )

    def blocks(self, stream: str | None = None) -> list[BlockInfo]:
        """Registered blocks (of one stream, or all), sorted by id."""
        return self._run(lambda c: reads.block_infos(c, stream=stream), write=False)

    def audit_seq(self) -> int:
        """The seq of the last audit event (0 for an empty log): one read of the log's key."""
        return self._run(reads.audit_tip, write=False)

    def chain_head(self) -> ChainHead:
        """Where the audit log's hash chain ends — the last event's seq, hash and time — and
        the hash of its first event, which names the database's history (one read)."""
        return self._run(reads.chain_head, write=False)

    def chain_hash(self, seq: int) -> str | None:
        """The hash of the audit event at ``seq`` (None when the log has no such event): a
        primary-key read."""
        return self._run(lambda c: reads.chain_hash(c, int(seq)), write=False)

    def added_blocks(self, after_seq: int = 0) -> tuple[list[tuple[str, str]], int]:
        """The blocks registered by events after audit seq ``after_seq``, as (block, stream)
        in registration order, and the seq they are current to (pass it back next time): a
        range of the audit log's key, so a caller that keeps its seq pays for what is new only.

        Example:
            >>> from blockbudget.accounting import Accounting
            >>> from blockbudget.budget import Budget
            >>> from blockbudget.ledger import Ledger
            >>> ledger = Ledger("sqlite://")
            >>> _ = ledger.add_blocks(["s/1"], stream="s", capacity=Budget(epsilon=1),
            ...                       accounting=Accounting.BASIC)
            >>> ledger.added_blocks()
            ([('s/1', 's')], 1)
            >>> ledger.added_blocks(1)
            ([], 1)
        """
        if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
            raise InvalidRequestError(f"after_seq must be an int >= 0, got {after_seq!r}")
        return self._run(lambda c: reads.added_blocks(c, after_seq), write=False)

    def contexts(self, *, include_closed: bool = False) -> list[str]:
        """The names of the registered contexts that are open (touched a block or not), sorted;
        with ``include_closed``, the closed ones too."""
        return self._run(lambda c: reads.contexts(c, include_closed=include_closed), write=False)

    def coalition_contexts(self) -> list[str]:
        """The contexts whose budgets add up when all their principals collude, sorted: every
        open context and every closed one that ever charged a block. A coalition of them could
        learn up to ``len(coalition_contexts()) × ε_g`` about a block's records."""
        return self._run(reads.coalition_contexts, write=False)

    def context_infos(self) -> list[ContextInfo]:
        """Every registered context, open or closed, with its description, creation and closing
        time, sorted by name."""
        return self._run(reads.context_infos, write=False)

    def reservation(self, reservation_id: str) -> Reservation:
        """A reservation with its current state and remaining features.

        Raises:
            UnknownBlockError: no reservation has this id.
        """
        return self._run(lambda c: reads.reservation(c, reservation_id), write=False)

    def reservations(
        self, *, state: ReservationState | None = None, context: str | None = None
    ) -> list[Reservation]:
        """Reservations, optionally of one state and context, by creation time.

        Raises:
            UnknownContextError: ``context`` is not registered.
            InvalidRequestError: a malformed context name.
        """
        if context is not None:
            context = validate_context_name(context)
        return self._run(
            lambda c: reads.reservations_list(c, state=state, context=context), write=False
        )

    def request(self, request_id: str) -> RequestRecord | None:
        """The acknowledged request with this id, or None if there is none."""
        return self._run(lambda c: reads.request(c, request_id), write=False)

    def events(self, after_seq: int = 0, limit: int | None = None) -> list[AuditEvent]:
        """Audit events with seq > ``after_seq``, oldest first, at most ``limit``."""
        if limit is not None and limit < 0:
            raise InvalidRequestError(f"limit must be >= 0, got {limit!r}")
        return self._run(lambda c: reads.events(c, after_seq, limit), write=False)

    def verify(self, *, full: bool = False) -> VerifyReport:
        """Replay the audit log and compare it with the tables (see
        :mod:`blockbudget.ledger.verify`): the events after the last verified checkpoint, or
        every event with ``full``. The tables are compared in full either way.

        A clean verification then stores the state it reached as the next checkpoint, in a
        transaction of its own (:mod:`blockbudget.ledger.checkpoint`). Tampering with events
        before the checkpoint (and the checkpoint to match) is found only with ``full=True``.
        """
        report, state = self._run(lambda c: verify_ledger(c, full=full), write=False)
        if state is not None:
            self._store_checkpoint(state)
        return report

    def _store_checkpoint(self, state: dict[str, Any]) -> None:
        def fn(conn: Connection) -> bool:
            return checkpoint.store(
                conn, seq=int(state["seq"]), hash_=str(state["hash"]), state=state, now=self._now()
            )

        with contextlib.suppress(IntegrityError):  # a concurrent verify stored this very one
            self._run(fn, write=True)

    def verify_or_raise(self, *, full: bool = False) -> VerifyReport:
        """:meth:`verify`, raising AuditError listing the problems when there are any."""
        report = self.verify(full=full)
        if not report.ok:
            shown = "; ".join(report.problems[:10])
            more = f" (and {len(report.problems) - 10} more)" if len(report.problems) > 10 else ""
            raise AuditError(
                f"the audit log and the ledger disagree ({len(report.problems)} problem(s) over "
                f"{report.events} events): {shown}{more}"
            )
        return report

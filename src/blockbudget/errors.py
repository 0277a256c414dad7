"""The exception hierarchy of blockbudget.

Every error the platform raises on purpose derives from :class:`BlockBudgetError`, so callers
can catch one class. Each subclass says when it is raised. Messages state the rule that was
broken and the offending value; budget refusals also name the blocks, the requested and remaining
budget and the difference.

A refusal never has side effects: when any of these is raised by a ledger, grant or store
operation, nothing was charged, reserved, written or retired.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class BlockBudgetError(Exception):
    """Root of every error blockbudget raises deliberately."""


class InvalidBudgetError(BlockBudgetError, ValueError):
    """A budget or DP parameter is malformed.

    Raised for negative, NaN or infinite epsilon, delta outside [0, 1), an RDP curve with the
    wrong orders or a negative value, or a budget kind the accounting rule cannot use (an
    (epsilon, delta > 0) budget on an RDP stream, an RDP curve on a basic-composition stream).
    """


class InvalidRequestError(BlockBudgetError, ValueError):
    """A request is malformed regardless of any budget.

    Raised for an empty block set, a duplicate block in one request, a bad context name, a
    non-positive timeout, or (as :class:`RequestIdConflictError`) a request id reused with other
    arguments.
    """


class RequestIdConflictError(InvalidRequestError):
    """A request id was already used for a request with other arguments (or another
    operation). A request id names exactly one request: a replay with the same arguments gets
    the first request's result; anything else is this error and changes nothing (HTTP 409)."""


class StreamExistsError(InvalidRequestError):
    """A stream of that name already exists: with a different spec (a stream's spec never
    changes), or at all when the caller asked to create it exclusively (HTTP 409). The message
    never shows the existing stream's spec."""


class UnreleasedIdsError(InvalidRequestError):
    """A block selection on a user-blocked stream that has no DP maximum-id release yet.

    A user stream's blocks exist for selection only once a DP release of its largest id in
    use made them known (Sage §4.4; :mod:`blockbudget.userids`): before the first release no
    block can be selected or named, by anyone. The message names the command that releases it
    (an administrator or an owner of the stream runs it)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        super().__init__(
            f"stream {stream!r} is blocked by user id and has no DP maximum-id release yet, so "
            "none of its blocks can be selected (its ids become known only through that "
            "release); an administrator, or an owner of the stream in a context its key is "
            "bound to, must first run "
            f"`blockbudget stream max-id {stream} --context CONTEXT --epsilon EPSILON` "
            f"(or POST /v1/streams/{stream}/max-id); an owner bound to no context asks an "
            "administrator to run it, or to bind one with "
            "`blockbudget principal contexts OWNER --context CONTEXT`"
        )


class UnknownColumnError(InvalidRequestError):
    """A request names a column the stream does not have.

    Attributes:
        stream: the stream.
        columns: the unknown column names of the request.
        available: the stream's columns (the service shows them only to the stream's owners
            and admins).
    """

    def __init__(self, stream: str, columns: Sequence[str], available: Sequence[str]) -> None:
        self.stream = stream
        self.columns = tuple(columns)
        self.available = tuple(available)
        super().__init__(
            f"stream {stream!r} has no column(s) {list(self.columns)}; "
            f"it has {list(self.available)}"
        )


class UnknownBlockError(BlockBudgetError, KeyError):
    """A block, stream, context or reservation id does not exist (its subclasses name which
    kind of thing: a reservation, task, principal, key or context)."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable.
        return str(self.args[0]) if self.args else ""


class UnknownReservationError(UnknownBlockError):
    """A reservation id that does not exist — or, asked for by a holder, one that this holder
    does not hold (answered alike, so that another holder's reservation does not leak)."""


class UnknownTaskError(UnknownBlockError):
    """A task id that is not in the queue."""


class UnknownPrincipalError(UnknownBlockError):
    """A principal name that no principal has."""


class UnknownKeyError(UnknownBlockError):
    """An API key id that does not exist (or is not the named principal's)."""


class UnknownContextError(UnknownBlockError):
    """A request names a context that was never registered.

    Contexts are registered by an administrator (``Ledger.add_context``; on the command line
    ``blockbudget context add NAME``): letting any caller mint
    a context would hand out a fresh full budget on every block (Sage §3.2 allows one budget per
    group of non-colluding principals, not per request).
    """


class ClosedContextError(UnknownContextError):
    """A request would reserve or charge in a context an administrator closed
    (``Ledger.close_context``): a closed context never spends budget again."""


class RetiredBlockError(BlockBudgetError):
    """A request names a block that has been retired (its budget is spent or it was closed)."""

    def __init__(self, blocks: Sequence[str]) -> None:
        self.blocks = tuple(blocks)
        super().__init__(
            f"block(s) {', '.join(self.blocks)} are retired: a retired block never serves again"
        )


class BudgetExceededError(BlockBudgetError):
    """A charge or reservation would take at least one block past its filter.

    Attributes:
        blocks: the blocks that refused (a subset of the request).
        requested: a human-readable form of the requested budget.
        remaining: per refusing block, a human-readable form of what remains.
        difference: per refusing block, how much the request exceeds what remains (epsilon
            units for (epsilon, delta) filters; the smallest excess over orders for RDP).
        context: the context whose budget was exhausted.
        exact: per refusing block, ``{"remaining": {...}, "shortfall": {...}}`` as exact
            decimal strings (``{"epsilon", "delta"}``, or ``{"rdp": [...]}`` per order); empty
            when the raiser did not compute them.
    """

    def __init__(
        self,
        *,
        blocks: Sequence[str],
        requested: str,
        remaining: Sequence[str],
        difference: Sequence[str],
        context: str,
        rule: str,
        exact: Sequence[Mapping[str, Mapping[str, object]]] = (),
    ) -> None:
        self.exact = tuple(exact)
        self.blocks = tuple(blocks)
        self.requested = requested
        self.remaining = tuple(remaining)
        self.difference = tuple(difference)
        self.context = context
        self.rule = rule
        details = "; ".join(
            f"{b}: remaining {r}, short by {d}"
            for b, r, d in zip(self.blocks, self.remaining, self.difference, strict=True)
        )
        super().__init__(
            f"budget exceeded under {rule} in context {context!r}: requested {requested} "
            f"on {len(self.blocks)} refusing block(s) — {details}. Nothing was charged."
        )

    def refusal_json(self) -> dict[str, object]:
        """The refusal's budgets for a wire answer, naming no block: the context, and per
        refusing block (sorted by value, so that the order tells nothing of the blocks) the
        exact remaining budget and shortfall as decimal strings."""
        import json

        rows = sorted((dict(e) for e in self.exact), key=lambda e: json.dumps(e, sort_keys=True))
        return {"context": self.context, "refusing_blocks": len(self.blocks), "blocks": rows}


class NothingAffordableError(InvalidRequestError):
    """A selection of the newest blocks (``Last``/``--last N``) found no live block that can
    afford the cost in the context (HTTP 422, as before: the request names no block). The
    message and :meth:`refusal_json` give what the newest live block has left and the
    shortfall there, as exact decimals, naming no block.

    Attributes:
        context: the context asked for.
        remaining: the newest live block's remaining budget (``{"epsilon", "delta"}`` or
            ``{"rdp": [...]}``), or None when the stream has no live block.
        shortfall: by how much the cost exceeds it there (same form), or None.
    """

    def __init__(
        self,
        message: str,
        *,
        context: str,
        remaining: Mapping[str, object] | None,
        shortfall: Mapping[str, object] | None,
    ) -> None:
        super().__init__(message)
        self.context = context
        self.remaining = None if remaining is None else dict(remaining)
        self.shortfall = None if shortfall is None else dict(shortfall)

    def refusal_json(self) -> dict[str, object]:
        """The refusal's budgets for a wire answer (the form of
        :meth:`BudgetExceededError.refusal_json`, with the newest live block as its one row)."""
        rows = (
            []
            if self.remaining is None
            else [{"remaining": self.remaining, "shortfall": self.shortfall}]
        )
        return {"context": self.context, "refusing_blocks": len(rows), "blocks": rows}


class ReservationError(BlockBudgetError):
    """A reservation cannot be used as asked.

    Raised when drawing more than a reservation holds, or charging, releasing or drawing on a
    reservation that is already closed or has expired.
    """


class TaskStateError(BlockBudgetError):
    """A task cannot change as asked: cancelling a task that is already decided for good
    (done, failed, refused, expired or cancelled)."""


class LastAdminKeyError(BlockBudgetError):
    """Revoking this API key would leave no administrator able to sign in: it is the last key
    of an active admin that is valid and does not expire (HTTP 409). Nothing was changed;
    issue another admin key first, then revoke this one."""


class DataError(BlockBudgetError, ValueError):
    """Input data is malformed: an unreadable file, a missing or mistyped column, a record whose
    block cannot be determined, or a late record refused by the stream's policy."""


class StoreConflictError(BlockBudgetError):
    """An ingest could not commit because other writers kept changing the same stream's
    catalog entries; nothing was written. Retrying later is safe. Its subclasses are ingests
    that conflict with what the stream holds, which a retry does not change (HTTP 409 all)."""


class IngestIdConflictError(StoreConflictError):
    """An ingest id already names a committed ingest of other content (an ingest id names
    exactly one content: a repeat with the same rows is answered with the first ingest's
    report; anything else is this error and changes nothing)."""


class DuplicateRowsError(StoreConflictError):
    """An ingest under ``on_overlap`` REFUSE has rows equal in every column to rows its stream
    already holds under the same block key; nothing was written. ``duplicates``: the count
    found per block key (empty when not known)."""

    def __init__(self, message: str, *, duplicates: Mapping[str, int] | None = None) -> None:
        super().__init__(message)
        self.duplicates: dict[str, int] = dict(duplicates or {})


class SchemaRevisionError(InvalidRequestError):
    """The database's schema is not the revision this release reads: an older revision, one
    written before revisions were tracked, or an unknown (newer) one. Nothing was changed; the
    message names ``blockbudget db upgrade``."""


class HighWaterMarkError(BlockBudgetError):
    """The platform will not serve budgets now because of its audit log's high-water mark
    (:mod:`blockbudget.store.watermark`): a copy of the log's last sequence number and hash
    that the platform keeps beside the block files, outside the database it guards (HTTP 503:
    nothing was reserved, charged or written). Its subclasses say why.

    Attributes:
        state: ``"behind"``, ``"diverged"``, ``"foreign"`` or ``"unreadable"``.
    """

    state = "unreadable"


class LedgerBehindMarkError(HighWaterMarkError):
    """The database's audit log does not reach the high-water mark kept beside the block files:
    it was restored from a backup older than the last acknowledged write (``behind``), or
    restored and then written to (``diverged``: another event at the mark's seq), or it is
    another database than the one the mark belongs to (``foreign``). Budget already released
    to analysts may be missing from it, so every write — a reservation, a charge, an ingest,
    a context — is refused (reads that spend nothing still answer) until an administrator runs
    ``blockbudget db reconcile``, which counts every block the lost events could have touched
    as spent and re-bases the mark (docs/operations.md, "Restore").

    Attributes:
        state: ``"behind"``, ``"diverged"`` or ``"foreign"``.
        ledger_seq: the database's last audit seq.
        mark_seq: the mark's seq.
    """

    def __init__(self, message: str, *, state: str, ledger_seq: int, mark_seq: int) -> None:
        super().__init__(message)
        self.state = state
        self.ledger_seq = ledger_seq
        self.mark_seq = mark_seq


class MarkUnavailableError(HighWaterMarkError):
    """The high-water mark could not be read or advanced (the block store did not answer):
    nothing is spent until it can be. When the mark could not be advanced after a write that
    committed, the write's answer is withheld (its budget stays spent, nothing is released);
    the next write first advances the mark. Retry later."""


class AuditError(BlockBudgetError):
    """The audit log and the ledger disagree, or a replayed history violates a filter."""


class InternalError(BlockBudgetError):
    """A bug in blockbudget itself: an invariant that the code should have kept was broken."""

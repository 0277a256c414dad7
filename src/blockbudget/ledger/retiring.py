"""Retiring blocks: :class:`RetireWrites`, the part of :class:`~blockbudget.ledger.Ledger` that
retires blocks by id (:meth:`RetireWrites.retire`), retires every block a stream's contexts
have exhausted (:meth:`RetireWrites.retire_exhausted`) and retires every live block after a
rollback (:meth:`RetireWrites.reconcile`), each in one write transaction."""

from __future__ import annotations

import json
from collections.abc import Iterable

from blockbudget.budget import Cost
from blockbudget.errors import InvalidRequestError
from blockbudget.ledger import operations as ops
from blockbudget.ledger import sweeping
from blockbudget.ledger.audit import chain_tip
from blockbudget.ledger.requests import block_ids, check_cost, cost_key, fingerprint_of, name_of
from blockbudget.ledger.txn import WriteTx
from blockbudget.ledger.types import BlockInfo, Operation, Reconciliation, validate_context_name
from blockbudget.ledger.writes import WriteRunner


class RetireWrites(WriteRunner):
    """Retirement writes of a ledger (see the module docstring)."""

    def retire(
        self,
        blocks: Iterable[str],
        *,
        request_id: str | None = None,
        reason: str = "retired",
    ) -> tuple[BlockInfo, ...]:
        """Retire blocks forever (global, every context): any later reserve or charge naming
        them raises RetiredBlockError. Open reservations on them may still be released.

        Returns:
            The blocks' registrations, retired, in the order given.
        """
        ids = block_ids(blocks, sort=False)
        if not isinstance(reason, str):
            raise InvalidRequestError(f"reason must be a string, got {reason!r}")
        fp = fingerprint_of(Operation.RETIRE, blocks=sorted(ids), reason=reason)

        def body(tx: WriteTx) -> tuple[tuple[BlockInfo, ...], str]:
            out = ops.retire(tx, ids, reason=reason)
            return out, json.dumps([i.to_json() for i in out])

        return self._write(Operation.RETIRE, request_id, fp, body)

    def retire_exhausted(
        self,
        stream: str,
        *,
        min_cost: Cost,
        contexts: Iterable[str] | None = None,
        request_id: str | None = None,
        reason: str = "budget exhausted",
    ) -> tuple[BlockInfo, ...]:
        """Retire, in ONE write transaction, every live block of ``stream`` whose charges leave
        no room for ``min_cost`` in any of ``contexts`` (default: every open context). A block
        with an open reservation in any context is kept (reservations past their TTL are
        expired first, in the same transaction): the check and the retirement happen under one
        writer lock, so a running grant is never cut off. Audited as ``retired``. Retirement
        is global: with a ``contexts`` subset, a block is retired for every context.

        Costs what changed since the stream's previous sweep, not what the stream holds: only
        blocks that events touched since then (and new ones) are examined, unless the contexts
        or ``min_cost`` differ from that sweep's (see :mod:`blockbudget.ledger.sweeping`).

        Returns:
            The registrations of the blocks retired now (none: an empty tuple).

        Raises:
            UnknownContextError: a named context is not registered.
            InvalidBudgetError: ``min_cost`` is not a cost the blocks' filters account.
        """
        stream = name_of(stream, what="stream")
        check_cost(min_cost)
        ctxs = None if contexts is None else sorted(validate_context_name(c) for c in contexts)
        if not isinstance(reason, str):
            raise InvalidRequestError(f"reason must be a string, got {reason!r}")
        fp = fingerprint_of(
            Operation.RETIRE, exhausted=stream, contexts=ctxs, min_cost=cost_key(min_cost),
            reason=reason,
        )  # fmt: skip

        def body(tx: WriteTx) -> tuple[tuple[BlockInfo, ...], str]:
            out = sweeping.retire_exhausted(
                tx, stream, contexts=ctxs, min_cost=min_cost, reason=reason
            )
            return out, json.dumps([i.to_json() for i in out])

        return self._write(Operation.RETIRE, request_id, fp, body)

    def reconcile(
        self,
        *,
        epoch: int,
        mark: dict[str, object],
        state: str,
        tombstones: Iterable[BlockInfo] = (),
        request_id: str,
    ) -> Reconciliation:
        """Count every block as spent, for every context, for good, in ONE write transaction:
        register the ``tombstones`` that are not registered yet, retire every live block
        (tombstones included; one ``retired`` event, reason ``reconciled after a rollback``)
        and append a ``reconciled`` event naming the high-water mark the log did not reach
        (``mark``, its ``state``) and the mark's new ``epoch``.

        What a rollback lost cannot be known, so every block the lost events could have
        charged is treated as fully spent — every live block and every block the store still
        holds files of; retirement is the ledger's way to say a block never spends again in
        any context (see :mod:`blockbudget.store.rollback` for the argument).

        Not gated by the ledger's guard (it is how a refusing ledger is brought back) and
        idempotent by ``request_id`` (derive it from the mark: a rerun after a crash replays
        the stored result and writes nothing).

        Raises:
            InvalidRequestError: a malformed request id, or a request id already used with
                other arguments.
        """
        infos = tuple(tombstones)
        if not isinstance(epoch, int) or epoch < 1:
            raise InvalidRequestError(f"epoch must be an integer >= 1, got {epoch!r}")
        # The mark names the reconciliation: a rerun after a crash may judge the (now
        # reconciled) log otherwise, and its orphans may have changed; it must replay.
        fp = fingerprint_of(Operation.RECONCILE, epoch=epoch, mark=mark)

        def body(tx: WriteTx) -> tuple[Reconciliation, str]:
            seq, hash_ = chain_tip(tx.sql)
            payload: dict[str, object] = {
                "mark": mark,
                "state": state,
                "head": {"seq": seq, "hash": hash_},
            }
            retired, fresh = ops.reconcile(
                tx, infos, epoch=epoch, payload=payload, reason=RECONCILE_REASON
            )
            assert tx.last_seq is not None and tx.last_hash is not None
            out = Reconciliation(
                retired=tuple(retired),
                tombstones=tuple(fresh),
                seq=tx.last_seq,
                hash=tx.last_hash,
                epoch=epoch,
            )
            return out, json.dumps(out.to_json())

        return self._write(Operation.RECONCILE, request_id, fp, body, guarded=False)


#: The reason of the ``retired`` event a reconciliation writes.
RECONCILE_REASON = "reconciled after a rollback"

"""The append-only, hash-chained audit log.

Every change to the ledger appends events in the same transaction as the change. Event ``n``
stores ``prev_hash`` (the hash of event ``n-1``; 64 zeros for the first) and

    hash = SHA-256( JSON[prev_hash, seq, repr(ts), kind, version, request_id, context]
                    + newline + payload )

where ``payload`` is the canonical JSON text stored in the row (the JSON header has no raw
newline, so the split is unambiguous). Editing, inserting or removing
any event therefore breaks the chain from that point on, which :mod:`blockbudget.ledger.verify`
reports. Sequence numbers are assigned by the ledger (tip + 1) inside the serialized write
transaction, so they have no gaps and follow commit order.

Payloads (version 1 of every kind):

* ``context_added`` — ``name``, ``description`` (the row's ``context`` is the name too; in
  ledgers created before schema version 3 the ``default`` context's event is the first of the
  log, with no request id).
* ``context_closed`` — ``name`` (the row's ``context`` is the name too).
* ``block_added`` — ``block``, ``stream``, ``accounting``, ``capacity`` {epsilon, delta},
  ``slack_delta``.
* ``reserved`` — ``reservation_id``, ``blocks``, ``cost``, ``holder``, ``expires_at``.
* ``charged`` — ``blocks``, ``cost``, ``reservation_id`` (null for a direct charge).
* ``released`` / ``expired`` — ``reservation_id``, ``returned`` {block: vector} (the features
  given back to unallocated); ``expired`` adds ``expires_at`` and ``now``.
* ``retired`` — ``blocks``, ``reason``.
* ``reconciled`` — ``epoch`` (the high-water mark's new epoch), ``mark`` (the mark that the log
  did not reach: ``epoch``, ``seq``, ``hash``, ``database``), ``state``
  (``behind``, ``diverged`` or ``foreign``), ``head`` (the log's ``seq`` and ``hash`` before the
  reconciliation), ``retired`` (how many blocks it retired, in the ``retired`` event just
  before it) and ``tombstones`` (the blocks it registered, retired, from part files that no
  catalog row names). It changes no budget itself: see :mod:`blockbudget.store.rollback`.

Costs are stored with :meth:`Budget.to_json` / :meth:`RdpCurve.to_json` (exact decimal text);
vectors as lists of decimal integer strings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import RowMapping

from blockbudget.ledger import statements as st
from blockbudget.ledger.fastsql import FastSql
from blockbudget.ledger.types import AuditEvent, EventKind

#: The ``prev_hash`` of the first event.
GENESIS_HASH = "0" * 64

#: Payload version written for every kind today.
EVENT_VERSION = 1


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def canonical_json(obj: Any) -> str:
    """Deterministic JSON text: sorted keys, no spaces, UTF-8 kept."""
    return _CANONICAL.encode(obj)


def event_hash(
    *,
    prev_hash: str,
    seq: int,
    ts: float,
    kind: str,
    version: int,
    request_id: str | None,
    context: str | None,
    payload: str,
) -> str:
    """The SHA-256 chain hash of one event (see the module docstring)."""
    header = _COMPACT.encode([prev_hash, seq, repr(float(ts)), kind, version, request_id, context])
    return hashlib.sha256(f"{header}\n{payload}".encode()).hexdigest()


@dataclass(frozen=True)
class PendingEvent:
    """An event built during a transaction, appended when the transaction flushes."""

    kind: EventKind
    request_id: str | None
    context: str | None
    payload: dict[str, Any]


def chain_tip(sql: FastSql) -> tuple[int, str]:
    """The last event's (seq, hash), or (0, GENESIS_HASH) for an empty log."""
    rows = sql.rows("chain_tip", st.chain_tip, {})
    if not rows:
        return 0, GENESIS_HASH
    return int(rows[0][0]), str(rows[0][1])


def append_events(sql: FastSql, events: Sequence[PendingEvent], *, ts: float) -> tuple[int, str]:
    """Append ``events`` after the chain tip; returns the (seq, hash) of the last one.

    Must run inside the serialized write transaction (BEGIN IMMEDIATE on SQLite, the head-row
    lock on PostgreSQL), so the tip cannot move under it.
    """
    seq, prev = chain_tip(sql)
    rows = []
    for ev in events:
        seq += 1
        payload = canonical_json(ev.payload)
        digest = event_hash(
            prev_hash=prev,
            seq=seq,
            ts=ts,
            kind=ev.kind.value,
            version=EVENT_VERSION,
            request_id=ev.request_id,
            context=ev.context,
            payload=payload,
        )
        rows.append(
            {
                "seq": seq,
                "ts": ts,
                "kind": ev.kind.value,
                "version": EVENT_VERSION,
                "request_id": ev.request_id,
                "context": ev.context,
                "payload": payload,
                "prev_hash": prev,
                "hash": digest,
            }
        )
        prev = digest
    sql.run_many("insert_event", st.insert_event, rows)
    return seq, prev


def row_to_event(m: RowMapping) -> AuditEvent:
    """An :class:`AuditEvent` from a row of ``ledger_audit`` (all columns)."""
    return AuditEvent(
        seq=int(m["seq"]),
        ts=float(m["ts"]),
        kind=EventKind(m["kind"]),
        version=int(m["version"]),
        request_id=m["request_id"],
        context=m["context"],
        payload_json=m["payload"],
        prev_hash=m["prev_hash"],
        hash=m["hash"],
    )

"""The persistent per-block privacy ledger: budgets per (block, context), two-phase
reservations, idempotent requests, and a hash-chained audit log with replay verification.

Sage block composition (seed ``004_2b5d216070ae2ded.txt`` §3.2, §4.3, Appendix A) with
PrivateKube-style reserve → charge / release claims. See ``docs/ledger.md``.
"""

from blockbudget.ledger.audit import GENESIS_HASH, canonical_json, event_hash
from blockbudget.ledger.ledger import Ledger
from blockbudget.ledger.schema import AUDIT_TRIGGERS, SCHEMA_VERSION, metadata
from blockbudget.ledger.types import (
    DEFAULT_CONTEXT,
    DEFAULT_TTL_SECONDS,
    AuditEvent,
    BlockInfo,
    BlockState,
    Charge,
    EventKind,
    Operation,
    RequestRecord,
    Reservation,
    ReservationState,
    Vector,
    VerifyReport,
)

__all__ = [
    "AUDIT_TRIGGERS",
    "DEFAULT_CONTEXT",
    "DEFAULT_TTL_SECONDS",
    "GENESIS_HASH",
    "SCHEMA_VERSION",
    "AuditEvent",
    "BlockInfo",
    "BlockState",
    "Charge",
    "EventKind",
    "Ledger",
    "Operation",
    "RequestRecord",
    "Reservation",
    "ReservationState",
    "Vector",
    "VerifyReport",
    "canonical_json",
    "event_hash",
    "metadata",
]

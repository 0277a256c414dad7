"""The persistent per-block privacy ledger: budgets per (block, context), two-phase
reservations, idempotent requests, administratively registered contexts, and a hash-chained
audit log with replay verification.

Sage block composition (seed ``004_2b5d216070ae2ded.txt`` §3.2, §4.3, Appendix A) with
PrivateKube-style reserve → charge / release claims. See ``docs/ledger.md``.
"""

from blockbudget.ledger.audit import GENESIS_HASH, canonical_json, event_hash
from blockbudget.ledger.ledger import Ledger
from blockbudget.ledger.schema import AUDIT_TRIGGERS, SCHEMA_VERSION, metadata
from blockbudget.ledger.types import (
    CONTEXT_NAME_PATTERN,
    DEFAULT_CONTEXT,
    DEFAULT_TTL_SECONDS,
    MAX_CONTEXT_DESCRIPTION,
    AuditEvent,
    BlockInfo,
    BlockState,
    Charge,
    ContextInfo,
    EventKind,
    Operation,
    RequestRecord,
    Reservation,
    ReservationState,
    Vector,
    VerifyReport,
    validate_context_name,
)

__all__ = [
    "AUDIT_TRIGGERS",
    "CONTEXT_NAME_PATTERN",
    "DEFAULT_CONTEXT",
    "DEFAULT_TTL_SECONDS",
    "GENESIS_HASH",
    "MAX_CONTEXT_DESCRIPTION",
    "SCHEMA_VERSION",
    "AuditEvent",
    "BlockInfo",
    "BlockState",
    "Charge",
    "ContextInfo",
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
    "validate_context_name",
]

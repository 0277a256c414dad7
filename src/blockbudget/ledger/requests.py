"""A ledger request's validation, fingerprint and replay (idempotency by request id).

Every write names a request id (given by the caller, or generated). The fingerprint — SHA-256
of the operation and its canonical arguments — is stored with the result; a replay of the same
id with the same arguments returns the stored result, with other arguments it is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidBudgetError, InvalidRequestError, RequestIdConflictError
from blockbudget.ledger.audit import canonical_json
from blockbudget.ledger.types import (
    BlockInfo,
    Charge,
    ContextInfo,
    Operation,
    Reconciliation,
    RequestRecord,
    Reservation,
    decimal_text,
)

_MAX_ID_LENGTH = 512


def name_of(value: Any, *, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequestError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > _MAX_ID_LENGTH:
        raise InvalidRequestError(
            f"{what} must be at most {_MAX_ID_LENGTH} characters, got {len(value)}"
        )
    return value


def block_ids(blocks: Iterable[str], *, sort: bool = True) -> tuple[str, ...]:
    if isinstance(blocks, (str, bytes)):
        raise InvalidRequestError(
            f"blocks must be a collection of block ids, not one string ({blocks!r})"
        )
    try:
        items = list(blocks)
    except TypeError as exc:
        raise InvalidRequestError(f"blocks must be a collection of block ids: {exc}") from exc
    if not items:
        raise InvalidRequestError("a request must name at least one block; got none")
    ids = [name_of(b, what="block id") for b in items]
    dupes = sorted(b for b, n in Counter(ids).items() if n > 1)
    if dupes:
        raise InvalidRequestError(
            f"a request may name each block once; duplicated: {', '.join(map(repr, dupes))}"
        )
    return tuple(sorted(ids)) if sort else tuple(ids)


def check_cost(cost: object) -> None:
    if not isinstance(cost, Cost):
        raise InvalidBudgetError(
            f"a cost must be a Budget or an RdpCurve (or another registered Cost kind), got "
            f"{type(cost).__name__}"
        )


def ttl_of(ttl_seconds: float) -> float:
    ttl_seconds = plain_number(ttl_seconds)
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, (int, float)):
        raise InvalidRequestError(f"ttl_seconds must be a number, got {ttl_seconds!r}")
    ttl = float(ttl_seconds)
    if not (ttl > 0 and math.isfinite(ttl)):
        raise InvalidRequestError(f"ttl_seconds must be finite and > 0, got {ttl_seconds!r}")
    return ttl


_COST_KEYS: dict[Cost, list[str]] = {}


def cost_key(cost: Cost) -> list[str]:
    """Canonical text of a cost's value for fingerprints (equal values, equal text).

    Budgets and RDP curves keep the text they always had (a request retried across versions
    keeps its fingerprint); any other kind is its ``kind`` and canonical JSON.
    """
    key = _COST_KEYS.get(cost)
    if key is None:
        if isinstance(cost, Budget):
            key = ["budget", decimal_text(cost.epsilon), decimal_text(cost.delta)]
        elif isinstance(cost, RdpCurve):
            key = ["rdp", *(decimal_text(v) if v.is_finite() else "inf" for v in cost.epsilons)]
        else:
            key = [cost.kind, canonical_json(cost.to_json())]
        if len(_COST_KEYS) >= 1024:
            _COST_KEYS.clear()
        _COST_KEYS[cost] = key
    return key


def fingerprint_of(operation: Operation, **args: Any) -> str:
    text = canonical_json({"op": operation.value, **args})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def replay(record: RequestRecord, operation: Operation, fingerprint: str) -> Any:
    if record.operation is not operation or record.fingerprint != fingerprint:
        raise RequestIdConflictError(
            f"request id {record.request_id!r} was already used for a "
            f"{record.operation.value} with other arguments; a request id names exactly one "
            "request — retry with the same arguments or use a new id"
        )
    data = json.loads(record.result_json)
    if operation in (Operation.ADD_CONTEXT, Operation.CLOSE_CONTEXT):
        return ContextInfo.from_json(data)
    if operation in (Operation.ADD_BLOCKS, Operation.RETIRE):
        return tuple(BlockInfo.from_json(d) for d in data)
    if operation in (Operation.RESERVE, Operation.RELEASE):
        return dataclasses.replace(Reservation.from_json(data), replayed=True)
    if operation is Operation.RECONCILE:
        return dataclasses.replace(Reconciliation.from_json(data), replayed=True)
    return Charge.from_json(data)

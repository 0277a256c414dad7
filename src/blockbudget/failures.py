"""Failures whose cause must not reach a principal: stable codes and our own words.

The platform's third rule: no text of an exception raised while touching data reaches a
principal. Exceptions of pandas, NumPy and Arrow quote the cell they choke on (``could not
convert string to float: '…'``), and :class:`~blockbudget.errors.DataError` often wraps them,
so any such text may carry a data value. Code that reads or processes stored rows (DP queries,
pipelines, the task queue's work and significance providers) turns every failure except the
ledger's own refusals (:data:`LEDGER_REFUSALS`) into a :class:`Failure` — a stable ``code`` and
a message written here — and logs the traceback under a random reference
(:func:`new_reference`) that the message repeats, so an operator can find it.

This module sits below :mod:`blockbudget.tasks` and :mod:`blockbudget.service`; the service's
HTTP side (``ConcealedError``, ``concealing()``) is :mod:`blockbudget.service.failures`.

Example:
    >>> failure_of(ValueError("could not convert string to float: 'secret'"), what="query",
    ...            ref="abc").code
    'query_failed_data'
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from blockbudget.errors import (
    AuditError,
    BlockBudgetError,
    BudgetExceededError,
    HighWaterMarkError,
    InternalError,
    InvalidBudgetError,
    ReservationError,
    RetiredBlockError,
    StoreConflictError,
    UnknownBlockError,
)

__all__ = ["LEDGER_REFUSALS", "Failure", "failure_of", "new_reference"]

#: Refusals of the ledger: raised before any row is read, or about budgets and block ids only
#: (which the service rewrites for callers who may not see block keys). Their text may go out.
LEDGER_REFUSALS: tuple[type[BlockBudgetError], ...] = (
    HighWaterMarkError,
    BudgetExceededError,
    RetiredBlockError,
    ReservationError,
    UnknownBlockError,
    InvalidBudgetError,
    StoreConflictError,
)

_OPERATOR = "an operator can find the cause in the server log under reference {ref}"


@dataclass(frozen=True)
class Failure:
    """What a principal learns about a failure: a stable code and a message written by us.

    Attributes:
        code: machine-readable and stable, e.g. ``pipeline_failed_data``.
        message: one sentence of ours; never text taken from the exception.
    """

    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def failure_of(exc: BaseException, *, what: str, ref: str) -> Failure:
    """The public face of ``exc``, raised while ``what`` (``"pipeline"``, ``"query"``) ran.

    Ledger refusals become ``<what>_failed_budget``, broken invariants (InternalError,
    AuditError) ``<what>_failed_internal``, everything else ``<what>_failed_data``; no message
    contains any text of ``exc``.
    """
    where = _OPERATOR.format(ref=ref)
    if isinstance(exc, (BudgetExceededError, RetiredBlockError, ReservationError)):
        return Failure(
            f"{what}_failed_budget",
            f"the ledger refused the {what}'s budget (exceeded, retired block or closed "
            f"reservation); what it drew before stays charged; {where}",
        )
    if isinstance(exc, HighWaterMarkError):
        return Failure(
            f"{what}_failed_unavailable",
            f"the ledger refuses budgets until an administrator runs `blockbudget db "
            f"reconcile` (its database is behind the audit log's high-water mark, or the mark "
            f"cannot be read); {where}",
        )
    if isinstance(exc, (InternalError, AuditError)):
        return Failure(f"{what}_failed_internal", f"the {what} hit an internal error; {where}")
    return Failure(
        f"{what}_failed_data",
        f"the {what} failed while reading or processing data; {where}",
    )


def new_reference() -> str:
    """A random reference tying a response to its log record."""
    return secrets.token_hex(6)

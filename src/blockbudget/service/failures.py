"""Failures whose cause must not reach a principal: stable codes, our own words, the log.

The service's third rule: no text of an exception raised while touching data leaves the
service. Exceptions of pandas, NumPy and Arrow quote the cell they choke on (``could not
convert string to float: '…'``), and :class:`~blockbudget.errors.DataError` often wraps them, so
any such text may carry a data value. Where the service reads or processes stored rows (DP
queries, pipelines), every failure except the ledger's own refusals — budget exceeded, retired
block, reservation state, unknown block, all raised before any row is read or about budgets
only — is replaced by a :class:`ConcealedError`: a stable ``code`` and a message written here.
The full traceback goes to the server log (logger ``blockbudget.service``) with a random
reference that the message repeats, so an operator can find it; nobody sees it over HTTP, the
owner of the data included. Unexpected exceptions on any route (500) are answered the same way.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from blockbudget.errors import (
    AuditError,
    BlockBudgetError,
    BudgetExceededError,
    InternalError,
    InvalidBudgetError,
    ReservationError,
    RetiredBlockError,
    StoreConflictError,
    UnknownBlockError,
)

__all__ = [
    "LEDGER_REFUSALS",
    "ConcealedError",
    "Failure",
    "concealing",
    "failure_of",
    "log",
    "new_reference",
]

log = logging.getLogger("blockbudget.service")

#: Refusals of the ledger: raised before any row is read, or about budgets and block ids only
#: (which the service rewrites for callers who may not see block keys). Their text may go out.
LEDGER_REFUSALS: tuple[type[BlockBudgetError], ...] = (
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


class ConcealedError(BlockBudgetError):
    """Stands in for an exception whose text must not reach a principal (module docstring).

    Attributes:
        failure: the code and our message.
        status: the HTTP status of the response.
    """

    def __init__(self, failure: Failure, *, status: int) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.status = status


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
    if isinstance(exc, (InternalError, AuditError)):
        return Failure(f"{what}_failed_internal", f"the {what} hit an internal error; {where}")
    return Failure(
        f"{what}_failed_data",
        f"the {what} failed while reading or processing data; {where}",
    )


def new_reference() -> str:
    """A random reference tying a response to its log record."""
    return secrets.token_hex(6)


@contextmanager
def concealing(
    what: str, *, passing: tuple[type[BaseException], ...] = LEDGER_REFUSALS
) -> Iterator[None]:
    """Run a block that touches data: exceptions of ``passing`` go on unchanged, any other
    exception is logged with its traceback and replaced by a :class:`ConcealedError` (422: the
    request was well formed, the stored data could not be processed).

    Args:
        what: the operation, for the code (``"query"`` → ``query_failed_data``) and the log.
        passing: exception classes whose text may reach the caller.
    """
    try:
        yield
    except passing:
        raise
    except Exception as exc:
        ref = new_reference()
        log.error("%s failed while touching data (reference %s)", what, ref, exc_info=exc)
        raise ConcealedError(failure_of(exc, what=what, ref=ref), status=422) from None

"""Failures whose cause must not reach a principal, on the service's HTTP side.

The service's third rule: no text of an exception raised while touching data leaves the
service. Where the service reads or processes stored rows (DP queries, pipelines), every
failure except the ledger's own refusals is replaced by a :class:`ConcealedError`: a stable
``code`` and a message written in :mod:`blockbudget.failures` (which also serves the task
queue, below the service). The full traceback goes to the server log (logger
``blockbudget.service``) with a random reference that the message repeats, so an operator can
find it; nobody sees it over HTTP, the owner of the data included. Unexpected exceptions on any
route (500) are answered the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from blockbudget.errors import BlockBudgetError
from blockbudget.failures import LEDGER_REFUSALS, Failure, failure_of, new_reference

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

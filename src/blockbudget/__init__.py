"""blockbudget: differential-privacy budgets for growing datasets.

Sensitive data is cut into disjoint blocks; each block owns its budget; every DP computation is
charged only to the blocks it reads (Sage block composition: Lécuyer et al., "Privacy Accounting
and Quality Control in the Sage Differentially Private ML Platform", SOSP 2019, §4).

The public API is importable from here with one line::

    from blockbudget import Platform, Budget, Blocking, Unit, Last, Query, price, run

The value types and errors load at once; the platform, the store, the queries and the task
queue load on first use, so that ``import blockbudget`` (and ``blockbudget --help``) stay quick.

Example:
    >>> import blockbudget
    >>> blockbudget.Budget(epsilon=0.5, delta=1e-6)
    Budget(epsilon='0.5', delta='0.000001')
    >>> blockbudget.Platform.__name__
    'Platform'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from blockbudget.accounting import Accounting
from blockbudget.budget import ALPHAS, Budget, Cost, RdpCurve
from blockbudget.errors import (
    BlockBudgetError,
    BudgetExceededError,
    DataError,
    InvalidBudgetError,
    InvalidRequestError,
    RetiredBlockError,
    UnknownBlockError,
)

if TYPE_CHECKING:
    from blockbudget.grant import Grant
    from blockbudget.platform import Platform
    from blockbudget.query import Mechanism, Query, Statistic, price, run
    from blockbudget.selection import Last
    from blockbudget.store import Blocking, LatePolicy, StreamSpec, Unit
    from blockbudget.tasks.queue import TaskQueue
    from blockbudget.tasks.selectors import AnyBlocks, InRange, Named, Newest

__version__ = "0.1.0"

#: Names loaded on first use, and the module each comes from.
_LAZY = {
    "Platform": "blockbudget.platform",
    "Grant": "blockbudget.grant",
    "Last": "blockbudget.selection",
    "Blocking": "blockbudget.store",
    "LatePolicy": "blockbudget.store",
    "StreamSpec": "blockbudget.store",
    "Unit": "blockbudget.store",
    "Query": "blockbudget.query",
    "Mechanism": "blockbudget.query",
    "Statistic": "blockbudget.query",
    "price": "blockbudget.query",
    "run": "blockbudget.query",
    "TaskQueue": "blockbudget.tasks.queue",
    "Named": "blockbudget.tasks.selectors",
    "Newest": "blockbudget.tasks.selectors",
    "InRange": "blockbudget.tasks.selectors",
    "AnyBlocks": "blockbudget.tasks.selectors",
}


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'blockbudget' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ALPHAS",
    "Accounting",
    "AnyBlocks",
    "BlockBudgetError",
    "Blocking",
    "Budget",
    "BudgetExceededError",
    "Cost",
    "DataError",
    "Grant",
    "InRange",
    "InvalidBudgetError",
    "InvalidRequestError",
    "Last",
    "LatePolicy",
    "Mechanism",
    "Named",
    "Newest",
    "Platform",
    "Query",
    "RdpCurve",
    "RetiredBlockError",
    "Statistic",
    "StreamSpec",
    "TaskQueue",
    "Unit",
    "UnknownBlockError",
    "price",
    "run",
]

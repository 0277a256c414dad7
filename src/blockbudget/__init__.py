"""blockbudget: differential-privacy budgets for growing datasets.

Sensitive data is cut into disjoint blocks; each block owns its budget; every DP computation is
charged only to the blocks it reads (Sage block composition, seed 004 §4).
"""

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

__version__ = "0.1.0"

__all__ = [
    "ALPHAS",
    "Accounting",
    "BlockBudgetError",
    "Budget",
    "BudgetExceededError",
    "Cost",
    "DataError",
    "InvalidBudgetError",
    "InvalidRequestError",
    "RdpCurve",
    "RetiredBlockError",
    "UnknownBlockError",
]

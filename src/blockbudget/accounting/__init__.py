"""Accounting: per-block filters and conversions. Pure math, no state."""

from blockbudget.accounting.filters import (
    Accounting,
    BasicFilter,
    Filter,
    RdpFilter,
    StrongFilter,
    add_vectors,
    make_filter,
    sub_vectors,
)
from blockbudget.accounting.gdp import GaussianDp, GdpFilter
from blockbudget.accounting.whitehouse import WhitehouseFilter

__all__ = [
    "Accounting",
    "BasicFilter",
    "Filter",
    "GaussianDp",
    "GdpFilter",
    "RdpFilter",
    "StrongFilter",
    "WhitehouseFilter",
    "add_vectors",
    "make_filter",
    "sub_vectors",
]

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

__all__ = [
    "Accounting",
    "BasicFilter",
    "Filter",
    "RdpFilter",
    "StrongFilter",
    "add_vectors",
    "make_filter",
    "sub_vectors",
]

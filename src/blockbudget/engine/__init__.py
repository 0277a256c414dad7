"""Engines that compute query plans over the blocks' Parquet part files.

See :mod:`blockbudget.engine.plan` for what a plan means and :mod:`blockbudget.engine.base`
for the interface and the registry. Built in: ``duckdb`` (embedded, the default), ``arrow``
(the reference: pyarrow and numpy, batch by batch) and ``ray`` (Ray Data, for data beyond one
machine).
"""

from blockbudget.engine.base import Engine, engine_names, get_engine, register_engine
from blockbudget.engine.plan import (
    FIXED_POINT_BITS,
    AggKind,
    Aggregate,
    Bins,
    BlockFiles,
    FixedPoint,
    GroupKey,
    Op,
    Partials,
    Plan,
    Predicate,
    ScanSource,
    zero_partials,
)

__all__ = [
    "FIXED_POINT_BITS",
    "AggKind",
    "Aggregate",
    "Bins",
    "BlockFiles",
    "Engine",
    "FixedPoint",
    "GroupKey",
    "Op",
    "Partials",
    "Plan",
    "Predicate",
    "ScanSource",
    "engine_names",
    "get_engine",
    "register_engine",
    "zero_partials",
]

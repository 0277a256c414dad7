"""Block data: streams of records cut into disjoint blocks, kept as Parquet part files.

Blocks are cut by time, by user-id range or by a public attribute (Sage, seed
``004_2b5d216070ae2ded.txt``, §3.2 and §4.4); a catalog in the platform's SQL database tracks
streams, blocks and part files. See ``docs/store.md``.
"""

from typing import TYPE_CHECKING, Any

from blockbudget.errors import StoreConflictError
from blockbudget.store.model import (
    Blocking,
    BlockMeta,
    DataFormat,
    FileCheck,
    IngestReport,
    LatePolicy,
    OnOverlap,
    OverlapReport,
    StreamSpec,
    Unit,
    make_block_id,
    parse_block_id,
)

if TYPE_CHECKING:
    from blockbudget.store.blockstore import BlockStore
    from blockbudget.store.inputs import IngestData


def __getattr__(name: str) -> Any:
    """Import the Parquet/SQL side (pyarrow, SQLAlchemy) only when it is first used, so that
    the light model (:class:`Unit`, :class:`Blocking`, …) costs no heavy import."""
    if name == "BlockStore":
        from blockbudget.store.blockstore import BlockStore

        return BlockStore
    if name == "IngestData":
        from blockbudget.store.inputs import IngestData

        return IngestData
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BlockMeta",
    "BlockStore",
    "Blocking",
    "DataFormat",
    "FileCheck",
    "IngestData",
    "IngestReport",
    "LatePolicy",
    "OnOverlap",
    "OverlapReport",
    "StoreConflictError",
    "StreamSpec",
    "Unit",
    "make_block_id",
    "parse_block_id",
]

"""Block data: streams of records cut into disjoint blocks, kept as Parquet part files.

Blocks are cut by time, by user-id range or by a public attribute (Sage, seed
``004_2b5d216070ae2ded.txt``, §3.2 and §4.4); a catalog in the platform's SQL database tracks
streams, blocks and part files. See ``docs/store.md``.
"""

from blockbudget.errors import StoreConflictError
from blockbudget.store.blockstore import BlockStore
from blockbudget.store.inputs import IngestData
from blockbudget.store.model import (
    Blocking,
    BlockMeta,
    DataFormat,
    IngestReport,
    LatePolicy,
    StreamSpec,
    Unit,
    make_block_id,
    parse_block_id,
)

__all__ = [
    "BlockMeta",
    "BlockStore",
    "Blocking",
    "DataFormat",
    "IngestData",
    "IngestReport",
    "LatePolicy",
    "StoreConflictError",
    "StreamSpec",
    "Unit",
    "make_block_id",
    "parse_block_id",
]

"""The per-process cache of blocks' registrations and their filters (the cache rule).

Blocks' registrations are immutable apart from the retired flag, so each process keeps their
filters in one :class:`BlockCatalog`. It holds **committed** registrations only: a write
transaction stages what it learns in its :class:`~blockbudget.ledger.txn.WriteTx`, and the
catalog is changed only by the after-commit step (:meth:`BlockCatalog.publish`), so no
rollback at any level can leave a filter behind.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import RowMapping

from blockbudget.accounting import Accounting, Filter
from blockbudget.budget import Budget, Cost
from blockbudget.errors import InternalError
from blockbudget.ledger.types import BlockInfo, Vector

__all__ = ["BlockCatalog", "info_from_row", "info_from_tuple"]

#: How many (filter, cost) feature vectors a catalog keeps before starting afresh.
_FEATURE_CACHE_SIZE = 4096


def info_from_row(m: RowMapping) -> BlockInfo:
    """A :class:`BlockInfo` from a row holding the ``ledger_blocks`` columns."""
    slack = m["slack_delta"]
    return BlockInfo(
        block_id=m["block_id"],
        stream=m["stream"],
        accounting=Accounting(m["accounting"]),
        capacity=Budget(epsilon=Decimal(m["capacity_epsilon"]), delta=Decimal(m["capacity_delta"])),
        slack_delta=None if slack is None else float(slack),
        retired=bool(m["retired"]),
        retired_reason=m["retired_reason"],
    )


def info_from_tuple(t: Sequence[Any]) -> BlockInfo:
    """A :class:`BlockInfo` from a tuple in :data:`statements.BLOCK_COLUMNS` order."""
    block_id, stream, accounting, eps, delta, slack, retired, reason = t
    return BlockInfo(
        block_id=block_id,
        stream=stream,
        accounting=Accounting(accounting),
        capacity=Budget(epsilon=Decimal(eps), delta=Decimal(delta)),
        slack_delta=None if slack is None else float(slack),
        retired=bool(retired),
        retired_reason=reason,
    )


class BlockCatalog:
    """Per-process cache of blocks' immutable registrations and their filters.

    Holds **committed** registrations only: a read transaction (which sees committed rows
    only) may add what it read with :meth:`remember`; a write transaction stages what it
    learns in its :class:`WriteTx` and :meth:`publish` adds it only after that transaction
    committed, so a rolled-back ``add_blocks`` (refused, a duplicate request id, a savepoint
    rolled back in a group commit, a failed batch) never leaves a filter behind. Entries are
    never replaced: a committed registration never changes.

    Blocks with equal parameters share one :class:`Filter` instance, so a charge over many
    like blocks computes its features once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._filters: dict[str, Filter] = {}
        self._streams: dict[str, str] = {}
        self._shared: dict[tuple[Any, ...], Filter] = {}
        self._features: dict[tuple[int, Cost], Vector] = {}

    def features(self, f: Filter, cost: Cost) -> Vector:
        """``f.features(cost)``, memoized (filters are shared and immutable; costs are values)."""
        key = (id(f), cost)
        vec = self._features.get(key)
        if vec is None:
            vec = f.features(cost)
            if len(self._features) >= _FEATURE_CACHE_SIZE:
                self._features.clear()
            self._features[key] = vec
        return vec

    def known(self, block: str) -> bool:
        return block in self._filters

    def filter_for(self, info: BlockInfo) -> Filter:
        """The shared filter of ``info``'s parameters (a memo of a pure function of the
        parameters, so it reflects no database state and needs no commit)."""
        key = (info.accounting, info.capacity.epsilon, info.capacity.delta, info.slack_delta)
        f = self._shared.get(key)
        if f is None:
            with self._lock:
                f = self._shared.get(key)
                if f is None:
                    f = info.make_filter()
                    self._shared[key] = f
        return f

    def remember(self, info: BlockInfo) -> Filter:
        """Cache the filter of a **committed** registration (idempotent) and return it.

        Only for registrations read in a read transaction; a write transaction stages with
        :meth:`WriteTx.remember` instead.
        """
        f = self._filters.get(info.block_id)
        if f is not None:
            return f
        f = self.filter_for(info)
        self.publish({info.block_id: (f, info.stream)})
        return f

    def publish(self, entries: Mapping[str, tuple[Filter, str]]) -> None:
        """Add registrations whose transaction has committed (existing entries are kept)."""
        if not entries:
            return
        with self._lock:
            for block, (f, stream) in entries.items():
                if block not in self._filters:
                    self._streams[block] = stream
                    self._filters[block] = f

    def filter(self, block: str) -> Filter:
        try:
            return self._filters[block]
        except KeyError:
            raise InternalError(
                f"block {block!r} was used before its registration was read"
            ) from None

    def stream(self, block: str) -> str:
        return self._streams[block]

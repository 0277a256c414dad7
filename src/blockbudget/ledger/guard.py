"""The hook through which something outside the database watches and gates a ledger's writes.

A :class:`~blockbudget.ledger.Ledger` with a guard (:meth:`Ledger.set_guard
<blockbudget.ledger.ledger.Ledger.set_guard>`) calls :meth:`WriteGuard.before_write` before
every write transaction — a raise refuses the write, nothing is written — and
:meth:`WriteGuard.committed` with the (seq, hash) of the last audit event, and whether the
write charged, once a write that appended events has committed, *before* the write's result is
handed to its caller: a raise there withholds the result (the write stays committed). With
group commit the guard sees one call per batch, for the batch's last event.

The ledger knows nothing of what a guard does with this; the platform's guard keeps a
high-water mark of the audit log beside the block files (:mod:`blockbudget.store.rollback`),
so that a database restored to an older point is noticed before it spends again.
"""

from __future__ import annotations

from typing import Protocol


class WriteGuard(Protocol):
    """See the module docstring."""

    def before_write(self) -> None:
        """Raise to refuse a write before its transaction begins."""

    def committed(self, seq: int, hash_: str, *, charged: bool) -> None:
        """A write committed; its last audit event is (``seq``, ``hash_``); ``charged``: it
        appended a ``charged`` event (after which a DP answer may leave). Raise to withhold
        its result."""

"""Resolving a block selection to block ids: named blocks (ids or keys) and :class:`Last`.

Both cost what the chosen blocks cost, not what the stream holds: named blocks are looked up by
id or key in the store's catalog; ``Last(n)`` walks the stream from its newest block in pages
(an index of the catalog) and reads the ledger rows of the blocks walked past only.
:meth:`Platform.select <blockbudget.platform.Platform.select>` is the face users call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from blockbudget.accounting import Filter, add_vectors
from blockbudget.budget import Cost
from blockbudget.errors import InvalidRequestError, UnknownBlockError
from blockbudget.store import catalog as store_catalog

if TYPE_CHECKING:
    import sqlalchemy as sa

    from blockbudget.ledger import Ledger

__all__ = ["Last", "named_blocks", "newest_blocks"]


@dataclass(frozen=True)
class Last:
    """Select the newest ``n`` blocks of a stream that have not retired.

    Resolved by walking the stream from its newest block (an index of the store's catalog)
    and reading the ledger rows of the blocks walked past only, so the cost does not grow with
    the stream's length.

    Args:
        n: how many blocks.
        affordable: skip blocks that cannot afford the requested cost in the requesting context
            (so a sliding window keeps serving from fresh blocks while old ones run dry).
    """

    n: int
    affordable: bool = True

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise InvalidRequestError(
                f"last must be at least 1 (how many of the newest blocks), got {self.n}"
            )


def newest_blocks(
    ledger: Ledger,
    catalog: sa.Engine,
    f: Filter,
    stream: str,
    selection: Last,
    *,
    context: str,
    cost: Cost,
    admit: Callable[[Sequence[str]], Sequence[str]] | None = None,
) -> list[str]:
    """The newest ``n`` live (and, if asked, affordable under filter ``f``) blocks of a
    stream, oldest first: walks the stream from its newest block in pages (``catalog``: the
    store's database) and reads the ledger rows of the blocks examined only, so the cost is
    that of the blocks walked past, not of the stream. ``admit`` (when given) keeps the blocks
    of a page that selection may offer at all (a user stream's known ids,
    :func:`blockbudget.userids.visible_blocks`); the others are walked past as unknown."""
    chosen: list[str] = []
    offset, page = 0, max(2 * selection.n, 16)
    need = f.features(cost) if selection.affordable else f.zero()
    while len(chosen) < selection.n:
        with catalog.connect() as conn:
            ids = store_catalog.select_newest_block_ids(conn, stream, offset=offset, limit=page)
        if not ids:
            break
        offset += len(ids)
        if admit is not None:
            ids = list(admit(ids))
        states = {s.block: s for s in ledger.states(stream=stream, context=context, blocks=ids)}
        for block in ids:
            s = states.get(block)
            if s is not None and s.retired:
                continue  # a retired block never serves again
            if selection.affordable and (
                s is None or not f.fits_with(add_vectors(s.charged, s.reserved), need)
            ):
                continue
            chosen.append(block)
            if len(chosen) == selection.n:
                break
        page = min(page * 2, 4096)
    return chosen[::-1]


def named_blocks(catalog: sa.Engine, stream: str, selection: Sequence[str]) -> tuple[str, ...]:
    """Block ids for a list of block ids or keys, in order (a key names its window's first
    block and any late ``#2``, ``#3``… ones).

    Raises:
        InvalidRequestError: one string instead of a sequence.
        UnknownBlockError: a name the stream does not have.
    """
    if isinstance(selection, str):
        raise InvalidRequestError("blocks must be a sequence of ids or keys, not one string")
    names = list(selection)
    with catalog.connect() as conn:
        ids, by_key = store_catalog.select_named_blocks(conn, stream, names)
    out: list[str] = []
    for item in names:
        if item in ids:
            out.append(item)
        elif item in by_key:
            out.extend(by_key[item])
        else:
            raise UnknownBlockError(f"stream {stream!r} has no block {item!r}")
    return tuple(out)

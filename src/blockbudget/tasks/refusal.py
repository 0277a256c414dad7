"""What a refused task lacked, read from the ledger: per block it may use, what remains in its
context and by how much its demand exceeds that — the refusal of a query
(:class:`~blockbudget.errors.BudgetExceededError`), for a task the scheduler refused.

A task is refused after it was submitted, so the budgets are read when asked (a block's
remaining budget only shrinks, except when a reservation is released): the answer says what the
blocks lack *now*, and the next step the caller can take.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from blockbudget.accounting import add_vectors
from blockbudget.errors import BlockBudgetError
from blockbudget.tasks.model import Task, TaskState
from blockbudget.tasks.why import task_candidates
from blockbudget.userids import known_filter

if TYPE_CHECKING:
    from blockbudget.budget import Cost
    from blockbudget.platform import Platform

__all__ = [
    "BlockShortfall",
    "Refusal",
    "dry_run_next_step",
    "next_step",
    "refusal_of",
    "shortfall_on",
]


@dataclass(frozen=True)
class BlockShortfall:
    """One block the task may use that cannot afford its demand: what remains there in the
    task's context and the shortfall, exact (``{"epsilon", "delta"}`` or ``{"rdp": [...]}``;
    both None for a retired block)."""

    block: str
    remaining: dict[str, Any] | None
    shortfall: dict[str, Any] | None
    retired: bool = False


@dataclass(frozen=True)
class Refusal:
    """A refused task's blocks now: how many it may use, how many of them afford its demand,
    how many it needs, and the others (:class:`BlockShortfall`)."""

    considered: int
    affordable: int
    needed: int
    blocks: tuple[BlockShortfall, ...]


def refusal_of(platform: Platform, task: Task) -> Refusal | None:
    """A refused task's :class:`Refusal` (None for a task in any other state, or when its
    blocks cannot be read any more, e.g. a stream that was dropped). On a user stream only the
    blocks a DP maximum-id release made known are counted and listed."""
    if task.state is not TaskState.REFUSED:
        return None
    try:
        blocks, needed = task_candidates(platform, task)
        return shortfall_on(
            platform, task.stream, task.context, task.demand, blocks=blocks, needed=needed
        )
    except BlockBudgetError:
        return None


def shortfall_on(
    platform: Platform,
    stream: str,
    context: str,
    demand: Cost,
    *,
    blocks: list[str] | None,
    needed: int,
) -> Refusal:
    """What ``blocks`` (None: every block of the stream) lack for ``demand`` in ``context``
    now: the per-block computation of a refused task, also a dry run's that does not fit. On a
    user stream only the blocks a DP maximum-id release made known are counted and listed.

    Raises:
        BlockBudgetError: the stream or its blocks cannot be read, or the demand is refused.
    """
    ledger = platform.ledger
    states = (
        ledger.states(stream, context)
        if blocks is None
        else ledger.states(stream, context, blocks=blocks)
    )
    known = known_filter(platform, stream)
    f = platform.filter(stream)
    need = f.features(demand)
    if known is not None:
        keep = set(known([st.block for st in states]))
        states = [st for st in states if st.block in keep]
    short: list[BlockShortfall] = []
    affordable = 0
    for st in states:
        used = add_vectors(st.charged, st.reserved)
        if st.retired:
            short.append(BlockShortfall(st.block, None, None, retired=True))
        elif f.fits_with(used, need):
            affordable += 1
        else:
            short.append(
                BlockShortfall(
                    st.block, dict(f.remaining_json(used)), dict(f.shortfall_json(used, need))
                )
            )
    return Refusal(len(states), affordable, needed, tuple(short))


#: What a task whose blocks lack budget may be submitted with instead.
_FITS = (
    "a demand that fits, or choose blocks that still have budget (`blockbudget task submit "
    "… --newest N`, `--any K`, `--dry-run` to check first)"
)


def dry_run_next_step(stream: str, context: str) -> str:
    """The next step after a dry run whose blocks lack budget (the caller may read what they
    afford, and dry-run or submit a demand that fits)."""
    return (
        f"`blockbudget afford {stream} --context {context} --block BLOCK` "
        f"(GET /v1/streams/{stream}/afford) says the largest ε a block can still afford; "
        f"dry-run or submit {_FITS}"
    )


def next_step(task: Task, refusal: Refusal | None) -> str:
    """The next step a refused task's principal can take, naming commands it may run (an
    analyst may read what its blocks afford and submit again; only an administrator changes
    a stream's scheduler)."""
    afford = (
        f"`blockbudget afford {task.stream} --context {task.context} --block BLOCK` "
        f"(GET /v1/streams/{task.stream}/afford) says the largest ε a block can still afford"
    )
    if refusal is not None and refusal.affordable < refusal.needed:
        return f"{afford}; submit again with {_FITS}"
    return (
        "the blocks have the budget now but the stream's scheduler refused the task (see "
        f"the note); `blockbudget task scheduler {task.stream}` shows which scheduler decides "
        f"(an administrator may change it); {afford}; submit again to be decided anew"
    )

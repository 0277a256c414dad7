"""Why a task waits, read from the ledger: which of the blocks it may use lack what, or that
fewer blocks it may use exist than its selector needs (it waits for more, unbound).

Example:
    >>> from blockbudget.tasks.why import scheduler_note
    >>> scheduler_note("fcfs")[:30]
    'FCFS grants a task once enough'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from blockbudget.accounting import add_vectors
from blockbudget.platform import Last
from blockbudget.tasks.binding import blocks_in_range
from blockbudget.tasks.model import Shortfall, Task, TaskState, Waiting
from blockbudget.tasks.selectors import AnyBlocks, InRange, Named, Newest
from blockbudget.userids import known_filter

if TYPE_CHECKING:
    from blockbudget.platform import Platform
    from blockbudget.tasks.schedspec import SchedulerSpec

__all__ = ["UNBOUND_NOTE", "explain", "scheduler_note"]

#: At most this many blocks are listed in a shortfall.
MAX_LISTED = 100

#: The note on a task waiting unbound (:func:`~blockbudget.tasks.binding.blocks_wanting`).
UNBOUND_NOTE = (
    "it has not entered its scheduler yet: it enters, bound to its blocks, once as many blocks "
    "it may use exist as its selector needs, and no scheduler grants it on fewer"
)

_NOTES = {
    "dpf-n": "DPF grants waiting tasks, smallest dominant share first, once the budget it "
    "unlocks (1/N of a block per arriving task) covers them (PrivateKube, OSDI'21 §4.2); "
    "with lend, a task no other waiting task competes with as soon as its blocks afford it",
    "dpf-t": "DPF grants waiting tasks, smallest dominant share first, once the budget it "
    "unlocks over time covers them (PrivateKube, OSDI'21 §4.2)",
    "dpack": "DPack grants batches of waiting tasks by efficiency when budget unlocks "
    "(DPack, EuroSys'25 §4)",
    "fcfs": "FCFS grants a task once enough of its blocks can afford it, oldest first",
    "round-robin": "round robin offers budget to waiting tasks in turn at every tick",
    "online-threshold": "seed 000 Alg. 1 grants a block only above its threshold T(z)",
    "mixed-threshold": "seed 000 Alg. 3 grants (possibly partially) above its threshold",
    "sage-block-conserve": "Sage's Block/Conserve gives each new block's budget out evenly",
    "sage-block-aggressive": "Sage's Block/Aggressive gives each new block's budget out",
}


def scheduler_note(name: str) -> str:
    """One sentence on how scheduler ``name`` decides ("" when none is written)."""
    return _NOTES.get(name, "")


def task_candidates(platform: Platform, task: Task) -> tuple[list[str] | None, int]:
    """The blocks a task may use (None: every block of its stream) and how many it needs."""
    sel = task.selector
    if isinstance(sel, Named):
        return list(sel.blocks), len(sel.blocks)
    if isinstance(sel, Newest):
        found = platform.select(
            task.stream, Last(sel.n, affordable=False), context=task.context, cost=task.demand
        )
        return list(found), sel.n
    if isinstance(sel, InRange):
        return blocks_in_range(platform, task.stream, sel), sel.k
    assert isinstance(sel, AnyBlocks)
    return None, sel.min_k


def explain(
    platform: Platform,
    task: Task,
    spec: SchedulerSpec,
    *,
    note: str = "",
    limit: int | None = MAX_LISTED,
) -> Waiting:
    """A task's :class:`Waiting` (see the module docstring). Reads the ledger rows of the
    blocks it may use (of every block of the stream for ``AnyBlocks``); on a user stream it
    counts and lists only the blocks a DP maximum-id release made known. ``limit``: at most
    this many short blocks listed, in block order (None: all — for a caller that shows them in
    another order, e.g. by opaque id, and must cut the list after arranging it, lest the cut
    tell which blocks come last in key order)."""
    if task.state is not TaskState.WAITING:
        return Waiting(task.id, task.state, f"{task.state.value}: {task.note}".rstrip(": "))
    blocks, needed = task_candidates(platform, task)
    ledger = platform.ledger
    states = (
        ledger.states(task.stream, task.context)
        if blocks is None
        else ledger.states(task.stream, task.context, blocks=blocks)
    )
    known = known_filter(platform, task.stream)
    if known is not None:  # a user stream: only blocks its DP maximum id made known (Sage §4.4)
        keep = set(known([st.block for st in states]))
        states = [st for st in states if st.block in keep]
    f = platform.filter(task.stream)
    need = f.features(task.demand)
    short: list[Shortfall] = []
    affordable = 0
    for st in states:
        if st.retired:
            short.append(Shortfall(st.block, f.features_json(need), None, retired=True))
        elif f.fits_with(add_vectors(st.charged, st.reserved), need):
            affordable += 1
        else:
            used = add_vectors(st.charged, st.reserved)
            short.append(Shortfall(st.block, f.features_json(need), f.remaining_json(used)))
    how = note or scheduler_note(spec.name)
    live = sum(1 for st in states if not st.retired)
    if live < needed and isinstance(task.selector, AnyBlocks | InRange):
        reason = (
            f"{affordable} of the {len(states)} block(s) it may use can afford {task.demand} "
            f"in context {task.context!r}; it needs {needed} and {live} live one(s) exist: it "
            "waits for more blocks (it is bound to its blocks only once enough exist) under "
            f"scheduler {spec.text}"
        )
    elif affordable < needed:
        reason = (
            f"{affordable} of the {len(states)} block(s) it may use can afford {task.demand} "
            f"in context {task.context!r}; it needs {needed}: it waits for budget (new blocks, "
            f"released grants) under scheduler {spec.text}"
        )
    else:
        reason = (
            f"{affordable} block(s) can afford it; scheduler {spec.text} has not granted it yet"
        )
    if how:
        reason += f" ({how})"
    listed = short if limit is None else short[:limit]
    return Waiting(task.id, task.state, reason, tuple(listed), affordable)

"""From a stored task to what its scheduler sees: selectors resolved and bound.

Two kinds of schedulers (``Scheduler.shapes``):

* **OPEN-capable** ones (online-threshold, mixed-threshold, Sage's, FCFS, round-robin,
  random-blocks) choose blocks themselves. A task's selector becomes the set of blocks it may
  use (``TaskSpec.eligible``) and how many (``min_blocks``/``max_blocks``): ``Named`` and
  ``Newest`` → exactly those blocks; ``InRange(k)`` → exactly ``k`` of the range;
  ``AnyBlocks(k, min_k)`` → between ``min_k`` and ``k`` of any. Schedulers that serve both
  shapes (FCFS, round-robin) get ``Named`` and ``Newest`` tasks as NAMED ones — the same
  blocks, all or nothing — so that they keep their rule for tasks that name their blocks
  (FCFS turns down at once a task whose blocks cannot afford it).
* **NAMED-only** ones (DPF-N, DPF-T, DPack) serve tasks that name their blocks, so a selector
  task is **bound when it enters the scheduler** — PrivateKube's semantics (Luo et al.,
  "Privacy Budget Scheduling", OSDI'21 §3.2: a claim is bound to the blocks that exist when it
  is made): the ``k`` eligible blocks with the most budget left in the pool, newest first on
  ties; ``AnyBlocks`` without ``k``: every block that can afford the demand now (at least
  ``min_k``).

``Newest(n)`` is bound at entry too (the up to n newest live blocks then), for both kinds.

A task is never bound to (so never granted on) fewer blocks than its selector needs
(:func:`blocks_wanting`): an ``AnyBlocks(k, min_k)`` task while fewer than ``min_k`` blocks it
may use exist (live, and on a user stream known to selection), or an ``InRange(k)`` one while
fewer than ``k`` of its range's blocks are in the pool, waits *unbound*, outside its scheduler,
and enters it — bound then — once enough exist. An ``InRange(k)`` whose range holds fewer than
``k`` live blocks (some retired since it was submitted, when it held ``k``) is refused.

Example:
    >>> from blockbudget.tasks.selectors import AnyBlocks
    >>> shape_of(AnyBlocks(3, min_k=2), eligible=None)
    (None, 2, 3)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlalchemy as sa

from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError
from blockbudget.scheduling import TaskShape, TaskSpec
from blockbudget.tasks.selectors import AnyBlocks, InRange, Named, Newest, Selector

#: Keeps the blocks selection may offer (:func:`blockbudget.userids.known_filter`).
Known = Callable[[Sequence[str]], list[str]]

if TYPE_CHECKING:
    from blockbudget.platform import Platform
    from blockbudget.tasks.livepool import LivePool
    from blockbudget.tasks.model import Task

__all__ = [
    "blocks_in_range",
    "blocks_wanting",
    "check_significance",
    "resolved_blocks",
    "shape_of",
    "task_spec",
]


def blocks_in_range(platform: Platform, stream: str, selector: InRange) -> list[str]:
    """The blocks of ``stream`` whose time window starts in ``[start, end)``, oldest first
    (one range read of the store's catalog)."""
    from blockbudget.store.catalog import blocks_table as b

    start = selector.start.astimezone(UTC).replace(tzinfo=None)
    end = selector.end.astimezone(UTC).replace(tzinfo=None)
    q = (
        sa.select(b.c.block_id)
        .where(b.c.stream == stream, b.c.window_start >= start, b.c.window_start < end)
        .order_by(b.c.window_start, b.c.seq)
    )
    with platform.store.engine.connect() as conn:
        return [r[0] for r in conn.execute(q)]


def check_significance(value: Any, *, blocks: Sequence[str] | None) -> Mapping[str, Any] | None:
    """A task's significance: None, ``{block: p_ij}`` (finite, >= 0; for a Named task only
    its blocks) or a provider spec ``{"provider": name, ...}``.

    Raises:
        InvalidRequestError: anything else.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"significance must be an object, got {value!r}")
    if "provider" in value:
        if not isinstance(value["provider"], str):
            raise InvalidRequestError(f"a significance provider is named, got {value!r}")
        return dict(value)
    out: dict[str, float] = {}
    for block, p in value.items():
        p = plain_number(p)
        if isinstance(p, bool) or not isinstance(p, int | float) or not np.isfinite(p) or p < 0:
            raise InvalidRequestError(
                f"significance of block {block!r} must be a finite number >= 0, got {p!r}"
            )
        out[str(block)] = float(p)
    if blocks is not None and set(out) - set(blocks):
        extra = sorted(set(out) - set(blocks))[:5]
        raise InvalidRequestError(f"significance given for blocks the task omits: {extra}")
    return out


def shape_of(
    selector: Selector, *, eligible: Sequence[str] | None
) -> tuple[frozenset[str] | None, int, int | None]:
    """(eligible, min_blocks, max_blocks) of a selector for an OPEN-capable scheduler;
    ``eligible`` is the resolved block list (Named, Newest, InRange)."""
    if isinstance(selector, AnyBlocks):
        return None, selector.min_k, selector.k
    assert eligible is not None
    k = selector.k if isinstance(selector, InRange) else len(eligible)
    return frozenset(eligible), k, k


def _candidates(live: LivePool, candidates: Sequence[str] | None) -> list[int]:
    """The pool indices of the blocks a task may be bound to (None: every live block)."""
    pool = live.pool
    if candidates is None:
        return [i for i in range(pool.n_blocks) if pool.blocks[i].block_id not in live.retired]
    return [pool.block_index[b] for b in candidates if b in pool.block_index]


def blocks_wanting(
    task: Task, live: LivePool, resolved: Sequence[str] | None, *, named_only: bool
) -> tuple[int, int] | None:
    """(blocks it may use now, blocks it needs) when a task cannot enter its scheduler yet
    because fewer blocks it may use are in its pool than it needs; None when it can enter now
    (or, an ``InRange`` whose range holds too few live blocks, never: :func:`task_spec`
    refuses it).

    * ``AnyBlocks(k, min_k)`` needs ``min_k`` live blocks (on a user stream known ones,
      ``resolved``) where its blocks are fixed at entry: a NAMED-only scheduler binds them, and
      a user stream's known blocks are all an OPEN-capable one may ever choose from (offered
      any block, an OPEN-capable scheduler chooses among those that come).
    * ``InRange(k)`` needs ``k`` of its range's live blocks in the pool (a block just
      registered reaches the pool at the next pump).
    * ``Named`` needs its blocks in the pool: another process may store a task naming a block
      registered since the leader's last pump, which the leader meets at its poll of the task
      table before the pump brings the block into the pool.
    """
    sel = task.selector
    if isinstance(sel, Named):  # checked in the ledger at submission: in the pool next pump
        have = sum(1 for b in sel.blocks if b in live.pool.block_index)
        return (have, len(sel.blocks)) if have < len(sel.blocks) else None
    if isinstance(sel, AnyBlocks) and (named_only or resolved is not None):
        need = sel.min_k
    elif isinstance(sel, InRange) and resolved is not None and len(resolved) >= sel.k:
        need = sel.k
    else:
        return None
    have = len(_candidates(live, resolved))
    return (have, need) if have < need else None


def _bind(
    live: LivePool, task: Task, candidates: Sequence[str] | None, k: int | None, min_k: int
) -> tuple[str, ...]:
    """NAMED-only schedulers: the blocks a selector task is bound to (module docstring), at
    least ``min_k`` of them.

    Raises:
        InvalidRequestError: fewer than ``min_k`` candidates (see :func:`blocks_wanting`).
    """
    pool = live.pool
    idx = _candidates(live, candidates)
    if len(idx) < min_k:
        raise InvalidRequestError(
            f"task {task.id}: {len(idx)} block(s) it may use exist; it needs {min_k}"
        )
    arr = np.asarray(idx, dtype=np.int64)
    left = 1.0 - pool.used_fraction(arr)
    order = arr[np.lexsort((-arr, -left))]  # most left first; newest first on ties
    if k is None:
        fits = pool.fits_many(order, pool.vector(task.demand))
        chosen = [int(i) for i in order[fits]]
        if len(chosen) < min_k:
            chosen = [int(i) for i in order[:min_k]]
    else:
        chosen = [int(i) for i in order[:k]]
    return tuple(pool.blocks[i].block_id for i in sorted(chosen))


def _newest(live: LivePool, n: int, known: Known | None = None) -> list[str]:
    pool = live.pool
    out: list[str] = []
    for i in range(pool.n_blocks - 1, -1, -1):
        b = pool.blocks[i].block_id
        if b not in live.retired and (known is None or known([b])):
            out.append(b)
            if len(out) == n:
                break
    return out[::-1]


def resolved_blocks(
    task: Task, live: LivePool, in_range: Sequence[str] | None, known: Known | None = None
) -> list[str] | None:
    """The blocks a task's selector allows now (None: any block): ``Named`` its blocks,
    ``Newest(n)`` the n newest live ones, ``InRange`` the live ones of the range
    (``in_range``). ``known`` (a user stream with a DP maximum id,
    :func:`blockbudget.userids.known_filter`) keeps only the blocks selection may offer; an
    ``AnyBlocks`` task then gets the known live blocks instead of any block."""
    sel = task.selector
    if isinstance(sel, Named):
        return list(sel.blocks)
    if isinstance(sel, Newest):
        return _newest(live, sel.n, known)
    if isinstance(sel, InRange):
        return [b for b in in_range or [] if b not in live.retired]
    if known is None:
        return None
    return known([b.block_id for b in live.pool.blocks if b.block_id not in live.retired])


def task_spec(
    task: Task,
    live: LivePool,
    *,
    named_only: bool,
    takes_named: bool = False,
    in_range: Sequence[str] | None,
    timeout: float | None,
    significance: Mapping[str, float] | Callable[[str], float] | None = None,
    known: Known | None = None,
) -> TaskSpec:
    """The :class:`TaskSpec` a task enters its scheduler with (module docstring).

    Args:
        task: the stored task.
        live: its (stream, context)'s live pool (for binding).
        named_only: whether the scheduler serves NAMED tasks only.
        takes_named: whether it serves NAMED tasks (too): ``Named`` and ``Newest`` tasks then
            enter as NAMED tasks (all or nothing on exactly those blocks).
        in_range: the resolved blocks of an ``InRange`` selector (else None).
        timeout: seconds the task may still wait (None: forever).
        significance: p_ij as the scheduler reads it (:mod:`blockbudget.tasks.scoring`).
        known: as for :func:`resolved_blocks`.

    Raises:
        InvalidRequestError: nothing to bind (no live block of the selector yet), fewer blocks
            than the selector needs (an ``InRange(k)`` whose range holds fewer than ``k`` live
            blocks; an ``AnyBlocks`` task :func:`blocks_wanting` keeps waiting).
    """
    sel = task.selector
    resolved = resolved_blocks(task, live, in_range, known)
    if isinstance(sel, InRange) and resolved is not None and 0 < len(resolved) < sel.k:
        raise InvalidRequestError(
            f"task {task.id}: its range holds {len(resolved)} live block(s); it needs {sel.k}"
        )
    if blocks_wanting(task, live, resolved, named_only=named_only) is not None:
        raise InvalidRequestError(f"task {task.id}: fewer blocks it may use exist than it needs")
    if resolved is not None and not resolved:
        raise InvalidRequestError(f"task {task.id}: its selector matches no live block yet")
    common: dict[str, Any] = {
        "arrival": task.submitted_at,
        "demand": task.demand,
        "significance": significance,
        "timeout": timeout,
    }
    if takes_named and not named_only and isinstance(sel, Named | Newest):
        return TaskSpec(task.id, blocks=tuple(resolved or ()), **common)
    if named_only:
        if isinstance(sel, Named | Newest):
            blocks = tuple(resolved or ())
        elif isinstance(sel, InRange):
            blocks = _bind(live, task, resolved, sel.k, sel.k)
        else:
            assert isinstance(sel, AnyBlocks)
            blocks = _bind(live, task, resolved, sel.k, sel.min_k)
        if not blocks:
            raise InvalidRequestError(f"task {task.id}: no live block to bind it to")
        return TaskSpec(task.id, blocks=blocks, **common)
    eligible, lo, hi = shape_of(sel, eligible=resolved)
    if isinstance(sel, AnyBlocks) and resolved is not None:  # only the known blocks
        eligible = frozenset(resolved)
    return TaskSpec(task.id, eligible=eligible, min_blocks=lo, max_blocks=hi, **common)


def named_only(shapes: frozenset[TaskShape]) -> bool:
    """Whether a scheduler with these shapes serves only NAMED tasks."""
    return TaskShape.OPEN not in shapes

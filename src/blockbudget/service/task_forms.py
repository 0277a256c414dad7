"""A task's public JSON form, shared by the HTTP routes and the CLI's local mode (no FastAPI here).

Blocks are shown as a :class:`~blockbudget.service.blocknames.Naming` says: on user and
attribute streams an analyst sees opaque ids — in the selector, ``blocks``, the significance,
``why``, the note and the result — sorted by opaque id so that their order tells nothing of the
keys.

Selectors travel in their wire form — exactly one of ``{"named": [...]}``, ``{"newest": n}``,
``{"range": {"k", "start", "end"}}``, ``{"any": {"k", "min_k"}}`` — which
:func:`wire_selector` and :func:`selector_of_wire` translate to and from the stored form
(:func:`blockbudget.tasks.selectors.selector_from_json`).

Example:
    >>> wire_selector({"kind": "newest", "n": 3})
    {'newest': 3}
    >>> selector_of_wire({"any": {"k": 2}})
    AnyBlocks(k=2, min_k=1)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    from blockbudget.budget import Cost
    from blockbudget.platform import Platform
    from blockbudget.service.blocknames import Naming
    from blockbudget.tasks.model import Task
    from blockbudget.tasks.queue import TaskQueue
    from blockbudget.tasks.refusal import Refusal
    from blockbudget.tasks.selectors import Selector

#: States a task leaves only by a decision (a cancel ends each of them).
ACTIVE = frozenset({"waiting", "granted", "running"})

__all__ = [
    "ACTIVE",
    "dry_run_refusal",
    "refusal_form",
    "refusal_json",
    "selector_of_wire",
    "task_json",
    "why_json",
    "wire_selector",
]

#: The wire form's key of each stored selector kind.
_WIRE = ("named", "newest", "range", "any")


def wire_selector(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The wire form of a stored selector's JSON (module docstring)."""
    kind = stored["kind"]
    if kind == "named":
        return {"named": list(stored["blocks"])}
    if kind == "newest":
        return {"newest": stored["n"]}
    return {kind: {k: v for k, v in stored.items() if k != "kind"}}


def selector_of_wire(wire: Mapping[str, Any]) -> Selector:
    """The selector a wire form gives.

    Raises:
        InvalidRequestError: not exactly one of the four keys, or bad values (422).
    """
    from blockbudget.tasks.selectors import selector_from_json

    keys = [k for k in _WIRE if wire.get(k) is not None]
    if len(keys) != 1 or set(wire) - set(_WIRE):
        raise InvalidRequestError(
            f"a selector has exactly one of {list(_WIRE)}; got {sorted(wire)}"
        )
    kind, value = keys[0], wire[keys[0]]
    if kind == "named":
        return selector_from_json({"kind": kind, "blocks": value})
    if kind == "newest":
        return selector_from_json({"kind": kind, "n": value})
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"selector {kind!r} is an object, got {value!r}")
    return selector_from_json({"kind": kind, **value})


def _show(naming: Naming | None, block: str) -> str:
    return block if naming is None else naming.show(block)


def _show_all(naming: Naming | None, blocks: list[str] | tuple[str, ...]) -> list[str]:
    return list(blocks) if naming is None else naming.show_all(blocks)


def shown_selector(stored: Mapping[str, Any], naming: Naming | None) -> dict[str, Any]:
    """A stored selector's wire form with its named blocks shown as ``naming`` says."""
    out = wire_selector(stored)
    if "named" in out:
        out["named"] = _show_all(naming, out["named"])
    return out


def _significance(sig: Mapping[str, Any] | None, naming: Naming | None) -> dict[str, Any] | None:
    if sig is None or "provider" in sig or naming is None:
        return None if sig is None else dict(sig)
    return {naming.show(b): p for b, p in naming.arrange(sig.items(), lambda item: item[0])}


def _result(result: Mapping[str, Any] | None, naming: Naming | None) -> dict[str, Any] | None:
    if result is None:
        return None
    out = dict(result)
    if isinstance(out.get("blocks"), list):
        out["blocks"] = _show_all(naming, out["blocks"])
    return out


def task_json(
    t: Task,
    naming: Naming | None = None,
    *,
    why: dict[str, Any] | None = None,
    refusal: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The public form of a task (``TaskOut`` over HTTP), its blocks named as ``naming`` says
    (None: as stored); ``why`` while it waits, ``refusal`` once refused."""
    demand = t.demand.to_json()
    basic = t.demand if isinstance(t.demand, Budget) else None
    kind = t.kind.value
    work = None if t.work is None else dict(t.work)
    return {
        "id": t.id,
        "principal": t.principal,
        "stream": t.stream,
        "context": t.context,
        "kind": kind,
        "selector": shown_selector(t.selector.to_json(), naming),
        "demand": demand,
        "epsilon": None if basic is None else str(basic.epsilon),
        "delta": None if basic is None else str(basic.delta),
        "query": work if kind == "query" else None,
        "pipeline": work if kind == "pipeline" else None,
        "blocks": _show_all(naming, t.blocks),
        "significance": _significance(t.significance, naming),
        "submitted_at": t.submitted_at,
        "deadline": t.deadline,
        "state": t.state.value,
        "reservation_id": t.reservation_id,
        "decided_at": t.decided_at,
        "note": (t.note or "") if naming is None else naming.text(t.note or ""),
        "request_id": t.request_id,
        "why": why,
        "refusal": refusal,
        "result": _result(t.result, naming),
    }


def refusal_json(
    queue: TaskQueue, task: Task, naming: Naming | None = None
) -> dict[str, Any] | None:
    """What a refused task's blocks lack now (:func:`blockbudget.tasks.refusal.refusal_of`):
    how many of the blocks it may use afford its demand, per other block the remaining budget
    and the shortfall as exact decimal strings, and the next step its principal can take (None
    for a task in any other state). Blocks are arranged as the caller sees them, then cut (as
    in :func:`why_json`)."""
    if task.state.value != "refused":
        return None
    from blockbudget.tasks.refusal import next_step, refusal_of

    found = refusal_of(queue.platform, task)
    step = next_step(task, found)
    if found is None:
        return {
            "context": task.context,
            "considered": None,
            "affordable": None,
            "needed": None,
            "blocks": [],
            "next": step,
        }
    return refusal_form(found, task.context, step, naming)


def refusal_form(
    found: Refusal, context: str, step: str, naming: Naming | None = None
) -> dict[str, Any]:
    """A :class:`~blockbudget.tasks.refusal.Refusal` in its public form (``RefusalOut``): a
    refused task's, or a dry run's that does not fit. Blocks are arranged as the caller sees
    them, then cut (as in :func:`why_json`)."""
    from blockbudget.tasks.why import MAX_LISTED

    rows = list(found.blocks) if naming is None else naming.arrange(found.blocks, lambda r: r.block)
    return {
        "context": context,
        "considered": found.considered,
        "affordable": found.affordable,
        "needed": found.needed,
        "blocks": [
            {
                "block": _show(naming, r.block),
                "remaining": r.remaining,
                "shortfall": r.shortfall,
                "retired": r.retired,
            }
            for r in rows[:MAX_LISTED]
        ],
        "next": step if naming is None else naming.text(step),
    }


def dry_run_refusal(
    platform: Platform,
    stream: str,
    context: str,
    demand: Cost,
    blocks: list[str],
    naming: Naming | None = None,
) -> dict[str, Any] | None:
    """What ``blocks`` lack for a dry run's ``demand`` (each must afford it), in
    ``RefusalOut``'s form with the next step (None when they cannot be read)."""
    from blockbudget.errors import BlockBudgetError
    from blockbudget.tasks.refusal import dry_run_next_step, shortfall_on

    try:
        found = shortfall_on(
            platform, stream, context, demand, blocks=blocks, needed=max(len(blocks), 1)
        )
    except BlockBudgetError:
        return None
    return refusal_form(found, context, dry_run_next_step(stream, context), naming)


def why_json(queue: TaskQueue, task: Task, naming: Naming | None = None) -> dict[str, Any] | None:
    """Why a waiting task waits: the reason and, per block, what it needs and what it has
    (None for a task in any other state)."""
    if task.state.value != "waiting":
        return None
    # every short block, arranged as the caller sees them (by opaque id for an analyst on a
    # hidden stream), then cut: a cut in key order would tell which opaque ids come last
    from blockbudget.tasks.why import MAX_LISTED

    w = queue.why(task.id, limit=None)
    rows = list(w.shortfall) if naming is None else naming.arrange(w.shortfall, lambda r: r.block)
    rows = rows[:MAX_LISTED]
    return {
        "reason": w.reason if naming is None else naming.text(w.reason),
        "affordable": w.affordable,
        "shortfall": [
            {
                "block": _show(naming, r.block),
                "needs": dict(r.needs),
                "has": None if r.has is None else dict(r.has),
                "retired": r.retired,
            }
            for r in rows
        ],
    }

"""``task submit --dry-run``: price a task and check its blocks, reserving and queueing nothing.

The dry run answers what a submit would ask for: the task's demand on each block (a query's
priced reservation, or the budget named) and, for the blocks its selector may use, which can
afford it now in the context. Locally every selector is priced (``--range`` and ``--any``
against every live block of the stream, the scheduler's candidates); on a server a query is
priced by ``POST /v1/streams/{s}/query/price`` and a budget by ``/v1/streams/{s}/afford``, for
``--block`` or ``--newest`` selectors. Nothing is reserved, charged, sealed or stored: the
ledger is unchanged.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    from blockbudget.budget import Cost
    from blockbudget.platform import Platform
    from blockbudget.service.client import ServiceClient

__all__ = ["price_task_local", "price_task_remote"]


def price_task_local(
    platform: Platform, stream: str, body: dict[str, Any], *, context: str
) -> dict[str, Any]:
    """The dry run of a task body (the HTTP form of ``task submit``) on the local platform.

    Raises:
        UnknownContextError: the context is not registered (or closed).
        As a submit would for a malformed query, selector or demand.
    """
    from blockbudget.budget import Budget
    from blockbudget.ledger.txn import unknown_context
    from blockbudget.platform import Last
    from blockbudget.query import check, from_dict

    if context not in platform.contexts():
        raise unknown_context(context)
    demand: Cost
    if body["kind"] == "query":
        demand = check(platform, stream, from_dict(body["query"])).reserve
    else:
        demand = Budget(epsilon=body["epsilon"], delta=body.get("delta", 0.0))
    platform.filter(stream).features(demand)  # a demand the stream's rule refuses, refused
    selector = body["selector"]
    blocks: list[str]
    if "named" in selector:
        blocks = list(platform.select(stream, selector["named"]))
    elif "newest" in selector:
        newest = Last(int(selector["newest"]), affordable=False)
        blocks = list(platform.select(stream, newest, context=context, cost=demand))
    else:  # the scheduler's candidates: every live block of the stream
        blocks = [v.block_id for v in platform.blocks(stream, contexts=[context]) if not v.retired]
    fits = platform.can_afford(blocks, demand, context=context, stream=stream)
    affordable = [b for b, ok in zip(blocks, fits, strict=True) if ok]
    ok = _enough(selector, blocks, affordable)
    return _answer(
        body,
        stream=stream,
        context=context,
        demand=demand.to_json(),
        blocks=blocks,
        affordable=affordable,
        ok=ok,
        refusal=None if ok else _shortfall(platform, stream, context, demand, selector, blocks),
    )


def _shortfall(
    platform: Platform,
    stream: str,
    context: str,
    demand: Cost,
    selector: dict[str, Any],
    blocks: list[str],
) -> dict[str, Any]:
    """What the blocks of a dry run that does not fit lack, as a refused task's
    (:func:`blockbudget.tasks.refusal.shortfall_on`; ``RefusalOut``'s form)."""
    from blockbudget.service.task_forms import refusal_form
    from blockbudget.tasks.refusal import dry_run_next_step, shortfall_on

    found = shortfall_on(
        platform, stream, context, demand, blocks=blocks, needed=_needed(selector, blocks)
    )
    return refusal_form(found, context, dry_run_next_step(stream, context))


def price_task_remote(
    client: ServiceClient, stream: str, body: dict[str, Any], *, context: str | None
) -> dict[str, Any]:
    """The dry run of a task body on a server (``--block`` or ``--newest`` selectors).

    Raises:
        InvalidRequestError: a ``--range`` or ``--any`` selector.
        ServiceError: the server's refusal.
    """
    selector = body["selector"]
    if "named" in selector:
        where: dict[str, Any] = {"blocks": list(selector["named"])}
    elif "newest" in selector:
        where = {"last": int(selector["newest"])}
    else:
        k = (selector.get("range") or selector.get("any") or {}).get("k", "K")
        raise InvalidRequestError(
            "a dry run on a server prices --block or --newest selectors only (which of the "
            "stream's blocks --range or --any would get is the scheduler's choice); to check "
            f"the budget, dry-run `blockbudget task submit {stream} … --newest {k} --dry-run`, "
            f"or see what the newest blocks afford with `blockbudget afford {stream} "
            f"--last {k}` — both with this --server and key"
        )
    if context:
        where["context"] = context
    if body["kind"] == "query":
        out = client.price(stream, {"query": body["query"], **where})
        return _answer(
            body,
            stream=stream,
            context=out["context"],
            demand=out["cost"],
            blocks=list(out["blocks"]),
            affordable=None,
            ok=bool(out["ok"]),
            refusal=out.get("refusal"),  # an older server: none
        )
    from blockbudget.budget import to_decimal
    from blockbudget.service.client import ServiceError

    delta = to_decimal(body.get("delta", 0), name="delta")
    want = to_decimal(body["epsilon"], name="epsilon")
    path = f"/v1/streams/{stream}/afford"
    plain = {**where, "delta": str(delta)}
    try:  # with the demand, the answer says what each block lacks
        out = client.call("POST", path, json={**plain, "epsilon": str(want)})
    except ServiceError as exc:
        if exc.status != 422:
            raise
        out = client.call("POST", path, json=plain)  # an older server: the largest ε only
    largest = out["epsilon"]
    exact = out.get("epsilon_exact", largest)
    ok = exact is not None and want <= Decimal(exact)
    demand = {"epsilon": _canonical(want), "delta": _canonical(delta)}
    return _answer(
        body,
        stream=stream,
        context=out["context"],
        demand=demand,
        blocks=list(out["blocks"]),
        affordable=list(out["blocks"]) if ok else None,
        ok=ok,
        largest_epsilon=largest,
        refusal=None if ok else out.get("refusal"),
    )


def _canonical(value: Decimal) -> str:
    from blockbudget.budget import canonical_decimal

    return canonical_decimal(value)


def _enough(selector: dict[str, Any], blocks: list[str], affordable: list[str]) -> bool:
    """Whether the blocks have enough budget now: every named or newest block affords the
    demand; ``--range`` and ``--any``: at least their ``k`` (``min_k``) blocks do."""
    if "named" in selector or "newest" in selector:
        return bool(blocks) and len(affordable) == len(blocks)
    return len(affordable) >= _needed(selector, blocks)


def _needed(selector: dict[str, Any], blocks: list[str]) -> int:
    """How many blocks the task needs: every named block, the ``n`` newest, or the ``k``
    (``min_k``) of ``--range`` and ``--any``."""
    if "named" in selector:
        return len(blocks)
    if "newest" in selector:
        return max(int(selector["newest"]), len(blocks))
    spec = selector.get("range") or selector.get("any") or {}
    return int(spec.get("min_k", spec.get("k", 1)))


def _answer(body: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "dry_run": True,
        "kind": body["kind"],
        "selector": body["selector"],
        "reserved": False,
        **fields,
    }

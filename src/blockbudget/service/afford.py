"""``GET|POST /v1/streams/{stream}/afford``: the largest ε a block selection can still afford.

The answer of :meth:`Platform.afford <blockbudget.platform.Platform.afford>` for the caller's
context (or the one it is bound to): the largest ε of an (ε, δ) budget that fits on every
selected block right now — exact, a multiple of 1e-18, as a decimal string — or, with
``kind=gaussian`` on an RDP stream, the smallest Gaussian noise multiplier σ/Δ. The blocks are
``blocks`` (ids or keys; opaque ids for analysts on user and attribute streams) or the newest
``last`` live ones. Nothing is reserved: the answer is advisory, and the ledger re-checks when
a request spends. Reading it needs the same stream access as a query.
"""

from decimal import Decimal
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query
from pydantic import BaseModel, Field

from blockbudget.affordance import AffordFor
from blockbudget.errors import InvalidRequestError
from blockbudget.platform import Last, Platform
from blockbudget.service.access import Authenticator, require_stream, resolve_context
from blockbudget.service.auth import Principal
from blockbudget.service.blocknames import BlockNames, Naming
from blockbudget.service.params import ContextQuery, StreamPath
from blockbudget.service.schema_fields import (
    DECIMAL_PATTERN,
    BlockName,
    ContextName,
    Count,
    DecimalText,
    Number,
)
from blockbudget.service.task_schemas import RefusalOut

__all__ = ["AffordIn", "AffordOut", "register_afford_routes"]


class AffordIn(BaseModel):
    """Which blocks, in which context, and what to size."""

    model_config = {"extra": "forbid"}

    blocks: list[BlockName] | None = Field(default=None, min_length=1, max_length=10_000)
    last: Count | None = Field(default=None, ge=1, le=100_000)
    context: str | None = ContextName
    delta: DecimalText | Number = Field(
        default="0", description="δ of the budget sized (exact decimal string or number)"
    )
    kind: AffordFor = AffordFor.BUDGET
    epsilon: DecimalText | Number | None = Field(
        default=None,
        description="optional: the ε of an (ε, delta) demand to check (a task's dry run); when "
        "it does not fit, the answer's 'refusal' lists each block's remaining and shortfall",
    )


class AffordOut(BaseModel):
    """The largest request the blocks can still afford (budgets as exact decimal strings)."""

    stream: str
    context: str
    accounting: str
    blocks: list[str]
    kind: str
    delta: str
    epsilon: str | None = Field(
        description="largest ε that fits on every block when requested as a float (the largest "
        "double whose shortest decimal is at most epsilon_exact; null: none)"
    )
    epsilon_exact: str | None = Field(
        description="the exact largest ε (a multiple of 1e-18): request it as a decimal string"
    )
    noise_multiplier: str | None = Field(description="kind=gaussian: smallest σ/Δ that fits")
    binding: list[str] = Field(description="the blocks a larger request would not fit on")
    rule: str
    refusal: RefusalOut | None = Field(
        default=None,
        description="with 'epsilon' that does not fit: per block that cannot afford it, what "
        "remains and the shortfall, and the next step (as a refused task's)",
    )


def _refusal(
    platform: Platform,
    stream: str,
    context: str,
    body: AffordIn,
    out: dict[str, Any],
    naming: Naming,
) -> dict[str, Any] | None:
    """What the blocks lack for ``body``'s (ε, δ) demand (None when every block affords it)."""
    from blockbudget.budget import Budget, to_decimal
    from blockbudget.service.task_forms import dry_run_refusal

    want = to_decimal(body.epsilon if body.epsilon is not None else 0, name="epsilon")
    exact = out.get("epsilon_exact")
    if out["blocks"] and exact is not None and want <= Decimal(exact):
        return None
    delta = body.delta if isinstance(body.delta, str) else repr(body.delta)
    demand = Budget(epsilon=str(want), delta=delta)
    return dry_run_refusal(platform, stream, context, demand, list(out["blocks"]), naming)


def register_afford_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator, names: BlockNames
) -> None:
    """Add ``GET`` and ``POST /v1/streams/{stream}/afford`` to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    def answer(me: Principal, stream: str, body: AffordIn) -> AffordOut:
        require_stream(me, stream)
        context = resolve_context(me, body.context)
        if (body.blocks is None) == (body.last is None):
            raise InvalidRequestError("give exactly one of 'blocks' and 'last'")
        naming = names.naming(me, stream)
        selection: list[str] | Last = (
            naming.resolve(body.blocks) if body.blocks is not None else Last(body.last or 1)
        )
        delta = body.delta if isinstance(body.delta, str) else repr(body.delta)
        out: dict[str, Any] = platform.afford(
            stream, selection, context=context, delta=delta, kind=body.kind
        ).to_json()
        if body.epsilon is not None and body.kind is AffordFor.BUDGET:
            out["refusal"] = _refusal(platform, stream, context, body, out, naming)
        out["blocks"] = naming.show_all(out["blocks"])
        out["binding"] = naming.show_all(out["binding"])
        return AffordOut(**out)

    @app.post("/v1/streams/{stream}/afford", tags=["budget"])
    def afford_post(me: Auth, stream: StreamPath, body: AffordIn) -> AffordOut:
        return answer(me, stream, body)

    @app.get("/v1/streams/{stream}/afford", tags=["budget"])
    def afford_get(
        me: Auth,
        stream: StreamPath,
        blocks: Annotated[list[BlockName] | None, Query(max_length=10_000)] = None,
        last: Annotated[int | None, Query(ge=1, le=100_000)] = None,
        context: ContextQuery = None,
        delta: Annotated[str, Query(max_length=64, pattern=DECIMAL_PATTERN)] = "0",
        kind: AffordFor = AffordFor.BUDGET,
    ) -> AffordOut:
        body = AffordIn(blocks=blocks, last=last, context=context, delta=delta, kind=kind)
        return answer(me, stream, body)

"""Direct charges over HTTP: one charge per request, or a batch of independent charges.

A direct charge spends budget for a computation run elsewhere (e.g. a trusted executor); no
data leaves the service. Both routes are ``async``: with group commit
(:mod:`blockbudget.ledger.group`) a request awaits its durable commit without holding a
thread, and a batch's charges enter the committer together, so they share commits.

A **batch** (``POST /v1/streams/{stream}/charges/batch``) is a pipeline of independent
charges, not a transaction: each item is all-or-nothing on its own blocks and gets its own
result (the receipt, or the status and refusal it would have had alone); a refused item charges
nothing. The caller's key, stream ACL, contexts and blocks are checked for every item before
any is charged — one failing check refuses the whole batch with nothing charged. The batch
exists because each HTTP request costs the server more CPU than the ledger work of a charge
(docs/benchmarks.md).

On a user- or attribute-blocked stream an analyst names blocks by opaque ids and gets them
back in receipts and refusals (:mod:`blockbudget.service.blocknames`). A user stream's gate
(:meth:`Platform.require_selectable <blockbudget.platform.Platform.require_selectable>`, the
one of selections) holds for every caller, owners and admins too: with no maximum-id release
yet a charge is a 422 (``UnreleasedIdsError``), and a block beyond the released bound is a 404
like an unknown one.
"""

import json
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI
from fastapi.responses import Response

from blockbudget.budget import Budget
from blockbudget.errors import BlockBudgetError, InvalidRequestError
from blockbudget.ledger import Charge
from blockbudget.platform import Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import (
    Authenticator,
    AuthError,
    require_stream,
    resolve_context,
    status_of,
)
from blockbudget.service.auth import Principal, Role
from blockbudget.service.blocknames import BlockNames, Naming
from blockbudget.service.params import StreamPath

__all__ = ["charge_json", "register_charge_routes", "scoped"]


def scoped(me: Principal, request_id: str | None) -> str | None:
    """Request ids are scoped per principal, so one principal cannot replay (and read the
    stored result of) another's request.

    The scoped id is ``<name>:<request id>`` with every ``:`` of the principal's name written
    ``%3A`` (principal names contain no ``%``), so the part before the first ``:`` names exactly
    one principal: principal ``a`` sending ``b:c`` and principal ``a:b`` sending ``c`` get
    different ids. Names without ``:`` keep the plain form, so stored ids still replay.

    The part before the first ``:`` of a scoped id has only the characters of a principal name
    (and ``%``). The platform's own predictable ids (an ingest's ``ingest/<stream>/<id>``, a
    release's ``<reservation>/release``, a stream release's ``stream-release/<hash>/<block>``)
    carry a ``/`` there or no ``:`` at all, so no principal can claim one in advance.
    """
    if request_id is None:
        return None
    return f"{me.name.replace(':', '%3A')}:{request_id}"


def charge_json(receipt: Charge, naming: Naming | None = None) -> dict[str, Any]:
    """A charge receipt in the shape of :class:`~blockbudget.service.schemas.ChargeOut`, its
    blocks named as ``naming`` says (opaque ids for analysts on user and attribute streams)."""
    return {
        "request_id": receipt.request_id,
        "blocks": list(receipt.blocks) if naming is None else naming.show_all(receipt.blocks),
        "context": receipt.context,
        "cost": receipt.cost.to_json(),
        "reservation_id": receipt.reservation_id,
        "seq": receipt.seq,
    }


def _json(data: Any) -> Response:
    # The hot path: serialized directly (the response_model documents the shape); FastAPI
    # would otherwise build, re-validate and re-encode a pydantic model per charge.
    return Response(json.dumps(data), media_type="application/json")


def register_charge_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator, names: BlockNames
) -> None:
    """Add ``POST /v1/streams/{stream}/charges`` and ``…/charges/batch`` to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]
    streams_of: dict[str, str] = {}  # block → stream; immutable once registered
    gated: dict[str, bool] = {}  # stream → is it a user stream; immutable once created

    def refresh_streams() -> None:
        for info in platform.registered_blocks():
            streams_of[info.block_id] = info.stream

    async def check(me: Principal, stream: str, items: list[sc.ChargeIn]) -> list[sc.ChargeIn]:
        """The items, their blocks named by id, once every check passed for all of them."""
        require_stream(me, stream)
        naming = names.naming(me, stream)
        if naming.hidden:  # opaque ids → block ids (anything else refused, not echoed)
            resolve = await anyio.to_thread.run_sync(
                lambda: [naming.resolve(i.blocks) for i in items]
            )
            items = [
                i.model_copy(update={"blocks": b}) for i, b in zip(items, resolve, strict=True)
            ]
        wanted: set[str] = set()
        for item in items:
            item.context = resolve_context(me, item.context)
            wanted.update(item.blocks)
        if any(b not in streams_of for b in wanted):
            await anyio.to_thread.run_sync(refresh_streams)
        foreign = sorted(b for b in wanted if streams_of.get(b) != stream)
        if foreign:
            text = f"block(s) {foreign[:5]} are not blocks of stream {stream!r}"
            if me.role is Role.ADMIN:
                raise InvalidRequestError(text)
            raise AuthError(403, text + " (unknown, or another stream's)")
        if gated.get(stream) is not False:
            await anyio.to_thread.run_sync(lambda: require_known(stream, sorted(wanted)))
        return items

    def require_known(stream: str, blocks: list[str]) -> None:
        """The user-stream gate (:meth:`Platform.require_selectable`): 422 with no release,
        404 for a block beyond its bound; remembers a stream that is not gated."""
        gated[stream] = platform.require_selectable(stream, blocks)

    async def run(me: Principal, item: sc.ChargeIn) -> Charge:
        assert item.context is not None  # check() resolved it to the caller's context
        return await platform.charge_async(
            item.blocks,
            Budget(epsilon=item.epsilon, delta=item.delta),
            context=item.context,
            request_id=scoped(me, item.request_id),
        )

    @app.post("/v1/streams/{stream}/charges", tags=["budget"], response_model=sc.ChargeOut)
    async def charge(me: Auth, stream: StreamPath, body: sc.ChargeIn) -> Response:
        """Charge budget directly, durably (answered after the commit)."""
        (item,) = await check(me, stream, [body])
        return _json(charge_json(await run(me, item), names.naming(me, stream)))

    @app.post(
        "/v1/streams/{stream}/charges/batch", tags=["budget"], response_model=sc.ChargeBatchOut
    )
    async def charge_batch(me: Auth, stream: StreamPath, body: sc.ChargeBatchIn) -> Response:
        """Many independent direct charges in one request (see the module docstring)."""
        items = await check(me, stream, body.charges)
        naming = names.naming(me, stream)
        results: list[dict[str, Any] | None] = [None] * len(items)

        async def one(k: int, item: sc.ChargeIn) -> None:
            try:
                results[k] = {"ok": True, "charge": charge_json(await run(me, item), naming)}
            except BlockBudgetError as exc:
                if status_of(exc) >= 500:
                    raise  # a broken ledger or a bug: the whole request fails loudly
                results[k] = {
                    "ok": False,
                    "status": status_of(exc),
                    "error": type(exc).__name__,
                    "detail": names.describe(me, exc),
                }

        async with anyio.create_task_group() as group:
            for k, item in enumerate(items):
                group.start_soon(one, k, item)
        return _json({"results": results})

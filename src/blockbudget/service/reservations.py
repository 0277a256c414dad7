"""Reservations over HTTP: reserve budget on a selection of blocks, read a reservation, charge
from it, release it.

A reservation holds budget for a computation run elsewhere; no data leaves the service. The
cost is the ledger cost, reserved and charged on every block as given (no group privacy: that
is :meth:`Platform.request <blockbudget.platform.Platform.request>`'s, for grants that read
rows). Only the holder (or an admin) reads, charges or releases a reservation: anyone else
gets, on every route, the 404 of an unknown reservation, word for word, before any other
check (as a query on a reservation does: whether another's reservation exists does not
leak). A charge also needs the holder to be still bound to the reservation's context and still
able to read its stream (an ACL revoked after the reservation was made stops its spending
too). Request ids are scoped per principal (:func:`blockbudget.service.charges.scoped`).
"""

from typing import Annotated

from fastapi import Depends, FastAPI

from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError, ReservationError, UnknownReservationError
from blockbudget.ledger import Reservation, ReservationState
from blockbudget.platform import Last, Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import (
    Authenticator,
    require_context,
    require_stream,
    resolve_context,
)
from blockbudget.service.auth import Principal, Role
from blockbudget.service.blocknames import BlockNames, Naming
from blockbudget.service.charges import charge_json, scoped
from blockbudget.service.params import StreamPath
from blockbudget.service.reservation_usage import usage_json
from blockbudget.store.model import parse_block_id

__all__ = ["register_reservation_routes", "reservation_out"]


def reservation_out(r: Reservation, naming: Naming, platform: Platform) -> sc.ReservationOut:
    """A reservation, its blocks named as ``naming`` says, with its per-block usage."""
    return sc.ReservationOut(
        id=r.id,
        blocks=naming.show_all(r.blocks),
        context=r.context,
        cost=r.cost.to_json(),
        state=r.state.value,
        holder=r.holder,
        expires_at=r.expires_at,
        usage=[
            {**u, "block": naming.show(u["block"])}
            for u in usage_json(
                r.cost,
                r.remaining,
                is_open=r.is_open,
                filter_=platform.filter(parse_block_id(r.blocks[0])[0]),
            )
        ],
    )


def register_reservation_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator, names: BlockNames
) -> None:
    """Add ``POST /v1/streams/{stream}/reservations``, ``GET /v1/reservations/{rid}``,
    ``POST /v1/reservations/{rid}/charges`` and ``POST /v1/reservations/{rid}/release``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    def naming_of(me: Principal, res: Reservation) -> Naming:
        """How ``me`` names the blocks of a reservation (all of one stream)."""
        return names.naming(me, parse_block_id(res.blocks[0])[0])

    def owned_reservation(me: Principal, rid: str) -> Reservation:
        """The reservation ``rid`` if ``me`` holds it (or is an admin).

        Raises:
            UnknownReservationError: unknown, or another principal's — answered alike (the
                ledger's own words for an unknown id), so that its existence does not leak.
        """
        res = platform.reservation(rid)
        if me.role is not Role.ADMIN and res.holder != me.name:
            raise UnknownReservationError(f"unknown reservation {rid!r}")
        return res

    @app.post("/v1/streams/{stream}/reservations", status_code=201, tags=["budget"])
    def reserve(me: Auth, stream: StreamPath, body: sc.ReserveIn) -> sc.ReservationOut:
        require_stream(me, stream)
        context = resolve_context(me, body.context)
        cost = Budget(epsilon=body.epsilon, delta=body.delta)
        naming = names.naming(me, stream)
        if (body.blocks is None) == (body.last is None):
            raise InvalidRequestError("give exactly one of 'blocks' and 'last'")
        chosen: list[str] | Last = (
            naming.resolve(body.blocks) if body.blocks is not None else Last(body.last or 1)
        )
        res = platform.reserve(
            stream,
            chosen,
            cost,
            context=context,
            holder=me.name,
            ttl_seconds=body.ttl_seconds,
            request_id=scoped(me, body.request_id),
        )
        return reservation_out(res, naming, platform).model_copy(update={"replayed": res.replayed})

    @app.get("/v1/reservations/{rid}", tags=["budget"])
    def get_reservation(me: Auth, rid: str) -> sc.ReservationOut:
        res = owned_reservation(me, rid)
        return reservation_out(res, naming_of(me, res), platform)

    @app.post("/v1/reservations/{rid}/charges", tags=["budget"])
    def draw(me: Auth, rid: str, body: sc.DrawIn) -> sc.ChargeOut:
        res = owned_reservation(me, rid)
        require_context(me, res.context)
        # The holder must still read the stream: an ACL revoked after the reservation was made
        # (directly, or granted later by the scheduler queue) stops its spending too.
        require_stream(me, platform.reservation_stream(res))
        if res.state is not ReservationState.OPEN:  # before its blocks are looked at
            raise ReservationError(f"reservation {rid!r} is {res.state.value}")
        naming = naming_of(me, res)
        receipt = platform.charge_reservation(
            res,
            Budget(epsilon=body.epsilon, delta=body.delta),
            blocks=naming.resolve(body.blocks) if body.blocks else None,
            request_id=scoped(me, body.request_id),
        )
        return sc.ChargeOut(**charge_json(receipt, naming))

    @app.post("/v1/reservations/{rid}/release", tags=["budget"])
    def release(me: Auth, rid: str) -> sc.ReservationOut:
        naming = naming_of(me, owned_reservation(me, rid))
        return reservation_out(platform.release(rid, request_id=f"{rid}/release"), naming, platform)

"""Private stand-ins for seams other parts of issue 13 provide (replaced when they land):
the leadership lease (``tasks/leader.py``), a grant over an existing reservation
(``Platform.grant``) and running a query on it (``tasks/work.py::run_query_on``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from blockbudget.errors import ReservationError
from blockbudget.grant import Grant
from blockbudget.ledger import ReservationState
from blockbudget.store import Unit

if TYPE_CHECKING:
    from blockbudget.mechanisms.noise import NoiseSource
    from blockbudget.platform import Platform
    from blockbudget.query import Query, QueryResult


class LeadershipLike(Protocol):
    """The part of ``tasks.leader.Leadership`` the queue uses."""

    def try_acquire(self) -> bool: ...

    @property
    def held(self) -> bool: ...

    def release(self) -> None: ...


class OneProcess:
    """The leadership of a single process (``AlwaysLeader``)."""

    def __init__(self) -> None:
        self._held = False

    def try_acquire(self) -> bool:
        self._held = True
        return True

    @property
    def held(self) -> bool:
        return self._held

    def release(self) -> None:
        self._held = False


def grant_over(platform: Platform, reservation_id: str, *, stream: str) -> Grant:
    """A grant over an existing open reservation (sealing its blocks); never reserves.

    Raises:
        ReservationError: the reservation is not open or not on ``stream``'s blocks.
    """
    res = platform.ledger.reservation(reservation_id)
    if res.state is not ReservationState.OPEN:
        raise ReservationError(f"reservation {reservation_id} is {res.state.value}, not open")
    spec = platform.stream(stream)
    prefix = f"{stream}/"
    if not all(b.startswith(prefix) for b in res.blocks):
        raise ReservationError(f"reservation {reservation_id} holds blocks of another stream")
    platform.store.seal(list(res.blocks))
    group = (spec.blocking.rows_per_user or 1) if spec.blocking.unit is Unit.USER else 1
    return Grant(
        ledger=platform.ledger,
        stream=stream,
        reservation=res,
        accounting=spec.accounting,
        source=platform.store.source(list(res.blocks)),
        engine=lambda: platform.engine,
        schema=platform.store.schema(stream),
        group_size=group,
    )


def run_query_on(
    grant: Grant, platform: Platform, query: Query, *, noise: NoiseSource | None
) -> QueryResult:
    """Run ``query`` on ``grant``: aggregates, one draw of its cost, noise; the grant is
    closed after (what is unspent returns).

    Raises:
        ReservationError: the grant does not cover the query's priced reservation.
    """
    from blockbudget.query import aggregate, check, release
    from blockbudget.query.checks import check_rows

    with grant:
        pricing = check(platform, grant.stream, query)
        if not pricing.reserve <= grant.reservation.cost:  # type: ignore[operator]
            raise ReservationError(
                f"grant {grant.reservation.id} holds {grant.reservation.cost}, less than the "
                f"query's priced reservation {pricing.reserve}"
            )
        check_rows(query, 0 if grant.source is None else grant.source.rows)
        partials = aggregate(grant, query, pricing)
        return release(grant, query, partials, pricing, noise=noise)

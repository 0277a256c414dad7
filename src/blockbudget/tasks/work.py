"""Work on a grant it is given: a DP query spends exactly the reservation a scheduler granted.

A queue grant is one ledger reservation of the task's demand on the blocks the scheduler
chose (PrivateKube's allocate → consume/release claim). :func:`run_query_on` spends that
reservation and no other: it checks the query against the grant's stream and that the
reservation still covers the query's draw on every block — both before any row is read —
then the grant's engine computes the exact aggregates, the cost is drawn once from the
reservation, durably, before noise, and the noisy answer is released. It reserves nothing and
does not close the grant: its holder does, which releases what is unspent.

It is the same code path as :func:`blockbudget.query.run` after its own reservation
(:func:`blockbudget.query.execute.spend`). Privacy-adaptive training on a given grant is
:func:`blockbudget.training.adaptive.run_iteration`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blockbudget.grant import Grant
    from blockbudget.mechanisms.noise import NoiseSource
    from blockbudget.query import Query, QueryResult

__all__ = ["run_query_on"]


def run_query_on(grant: Grant, query: Query, *, noise: NoiseSource | None = None) -> QueryResult:
    """Run ``query`` on ``grant``: the draw comes out of the grant's reservation, nothing more.

    Args:
        grant: an open grant (:meth:`Platform.grant` over a scheduler's reservation, or
            :meth:`Platform.request`).
        query: the query; its priced draw (group privacy included) must fit what the
            reservation still holds on every block.
        noise: None (the default) means OpenDP's secure samplers; a seeded source makes the
            result say ``secure_noise=False``.

    Returns:
        The DP answer; ``result.cost`` is what was drawn from the reservation.

    Raises:
        UnknownColumnError / InvalidRequestError / InvalidBudgetError: the query does not fit
            the grant's stream or projection (nothing read or charged).
        ReservationError: the reservation is closed, or holds less than the query's draw on
            some block (nothing read or charged).
        DataError: a part file is missing or unreadable (the cost is drawn: a data-dependent
            failure is never free).

    Example:
        >>> import tempfile, pandas as pd
        >>> from blockbudget import Budget
        >>> from blockbudget.platform import Platform
        >>> from blockbudget.query import Query
        >>> from blockbudget.store import Blocking
        >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
        >>> _ = p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
        >>> _ = p.add_context("team")
        >>> hours = pd.date_range("2024-01-01", periods=3, freq="h")
        >>> _ = p.ingest("s", pd.DataFrame({"t": hours, "v": [1.0, 2.0, 3.0]}))
        >>> blocks = [b.block_id for b in p.blocks("s")]
        >>> res = p.ledger.reserve(blocks, Budget(epsilon=0.5), context="team", holder="ann")
        >>> with p.grant(res.id, holder="ann") as grant:
        ...     answer = run_query_on(grant, Query.count(epsilon=0.3))
        >>> answer.cost, len(p.ledger.reservations())  # drawn from the one reservation
        (Budget(epsilon='0.3', delta='0'), 1)
        >>> p.close()
    """
    from blockbudget.query.execute import run_on

    return run_on(grant, query, noise=noise)

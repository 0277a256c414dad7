"""Grants: what a pipeline holds while it runs.

A :class:`Grant` is the chosen blocks' data together with the right to spend up to a reserved
budget on them (seed ``004_2b5d216070ae2ded.txt`` §3.2, "Sage Access Control"; PrivateKube's
allocate → consume/release claims). Mechanisms draw on a grant through the
:class:`~blockbudget.mechanisms.BudgetSource` contract: ``accounting`` and ``draw(cost)``.

Each draw is charged to the ledger *durably, before* the mechanism releases anything — a crash
after a noisy answer was computed can therefore never lose its charge. Every draw is a new ledger
request with a fresh random id: a draw is never answered from the ledger's idempotency table, so
no retry, thread race or replayed grant can obtain a second noisy answer for one charge.
Closing the grant releases whatever was reserved and not drawn. A grant whose holder dies is
never charged for its undrawn reservation: the ledger expires it after its time-to-live.

User-level streams (Sage §4.4): the grant holds at most ``k = rows_per_user`` rows per user, and
a mechanism calibrated for one row is charged for a group of k rows (group privacy: (ε, δ)
becomes (kε, k·e^{(k−1)ε}·δ); Dwork & Roth 2014, Thm 2.2 and its approximate-DP form).
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable
from decimal import ROUND_CEILING, localcontext
from types import TracebackType
from typing import TYPE_CHECKING

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.engine.base import Engine
from blockbudget.errors import InvalidBudgetError, ReservationError
from blockbudget.ledger import ReservationState

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from blockbudget.engine import ScanSource
    from blockbudget.ledger import Ledger, Reservation


class Grant:
    """Reserved budget on a set of blocks, plus their data.

    Use it as a context manager so that what was not spent is released::

        with platform.request("flights", blocks=last(7), budget=Budget(epsilon=0.2),
                              context="analytics") as grant:
            answer = dp_count(grant, grant.frame(), epsilon=0.1)

    Attributes:
        stream: the stream the blocks belong to.
        blocks: the block ids, in order.
        context: the context whose per-block budget pays.
        reservation: the ledger reservation backing the grant.
        accounting: the stream's accounting rule (the kind of cost ``draw`` takes).
    """

    def __init__(
        self,
        *,
        ledger: Ledger,
        stream: str,
        reservation: Reservation,
        accounting: Accounting,
        data: pa.Table,
        group_size: int = 1,
        source: ScanSource | None = None,
        engine: Engine | Callable[[], Engine] | None = None,
    ) -> None:
        self._ledger = ledger
        self.stream = stream
        self.reservation = reservation
        self.blocks: tuple[str, ...] = tuple(reservation.blocks)
        self.context = reservation.context
        self._accounting = accounting
        self._data = data
        #: The granted blocks' part files (what an engine reads; no rows).
        self.source = source
        self._engine = engine
        self._draws: list[tuple[str, Cost]] = []
        self._closed = False
        self._lock = threading.Lock()
        self._token = uuid.uuid4().hex
        if group_size < 1:
            raise InvalidBudgetError(f"group_size must be >= 1, got {group_size}")
        self.group_size = group_size

    @property
    def engine(self) -> Engine:
        """The engine that reads the granted blocks (created on first use)."""
        if self._engine is None:
            raise ReservationError(f"grant {self.reservation.id} has no engine to read with")
        if callable(self._engine) and not isinstance(self._engine, Engine):
            self._engine = self._engine()
        assert isinstance(self._engine, Engine)
        return self._engine

    @property
    def ledger_url(self) -> str:
        """The URL of the ledger database behind this grant (password hidden).

        Executors that charge from other processes (Ray workers) compare it with the database
        they were given, so that a worker can never charge a copy of the ledger instead of it.
        """
        return self._ledger.engine.url.render_as_string(hide_password=True)

    # --- the BudgetSource contract -------------------------------------------------------------

    @property
    def accounting(self) -> Accounting:
        """The accounting rule of the grant's stream."""
        return self._accounting

    def draw(self, cost: Cost, *, label: str) -> None:
        """Charge ``cost`` to every block of the grant, durably, from its reservation.

        On a user-level stream with ``rows_per_user = k > 1`` the charge is the group-privacy
        cost of ``cost`` for k rows (see :func:`group_cost`).

        Raises:
            ReservationError: the grant is closed, or the draw exceeds what is left reserved.
            InvalidBudgetError: the cost kind does not suit the stream's accounting.
        """
        charged = group_cost(cost, self.group_size)
        with self._lock:  # one draw at a time: a refusal must be seen before the next try
            if self._closed:
                raise ReservationError(
                    f"grant {self.reservation.id} is closed; cannot draw {label!r}"
                )
            self._ledger.charge(
                self.blocks,
                charged,
                context=self.context,
                request_id=f"{self.reservation.id}/{self._token}/draw/{uuid.uuid4().hex}",
                reservation_id=self.reservation.id,
            )
            self._draws.append((label, charged))

    # --- data ----------------------------------------------------------------------------------

    @property
    def data(self) -> pa.Table:
        """The rows of the granted blocks (only a holder of a grant ever sees them)."""
        if self._closed:
            raise ReservationError(f"grant {self.reservation.id} is closed; its data is gone")
        return self._data

    def frame(self) -> pd.DataFrame:
        """The rows of the granted blocks as a pandas DataFrame."""
        frame: pd.DataFrame = self.data.to_pandas()
        return frame

    @property
    def num_rows(self) -> int:
        return int(self._data.num_rows)

    # --- state ---------------------------------------------------------------------------------

    @property
    def draws(self) -> tuple[tuple[str, Cost], ...]:
        """Every (label, cost) drawn so far, in order."""
        return tuple(self._draws)

    @property
    def spent(self) -> Cost:
        """The exact sum of what was drawn (zero of the reservation's kind if nothing)."""
        reserved = self.reservation.cost
        total: Cost = RdpCurve.zero() if isinstance(reserved, RdpCurve) else Budget.zero()
        for _, cost in self._draws:
            if isinstance(total, RdpCurve) and isinstance(cost, Budget):
                cost = RdpCurve.from_pure_dp(cost.epsilon)
            total = total + cost
        return total

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release what was reserved and not drawn. Idempotent.

        A reservation that already expired (its holder took longer than its time-to-live) or
        was released elsewhere has nothing left to release; the grant just closes.
        """
        with self._lock:
            if self._closed:
                return
            try:
                self._ledger.release(
                    self.reservation.id, request_id=f"{self.reservation.id}/{self._token}/release"
                )
            except ReservationError:
                if self._ledger.reservation(self.reservation.id).state is ReservationState.OPEN:
                    raise
            self._closed = True
            self._data = self._data.slice(0, 0)

    def __enter__(self) -> Grant:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"Grant({self.reservation.id}, stream={self.stream!r}, context={self.context!r}, "
            f"blocks={len(self.blocks)}, reserved={self.reservation.cost}, {state})"
        )


def group_cost(cost: Cost, k: int) -> Cost:
    """The cost of a mechanism for a group of ``k`` rows (group privacy).

    (ε, δ)-DP for one row is (kε, k·e^{(k−1)ε}·δ)-DP for k rows (Dwork & Roth 2014, Thm 2.2;
    Vadhan 2017, Lemma 2.2 for δ > 0). RDP curves compose over groups only at a loss of order
    (Mironov 2017, Prop. 11 needs α·2^c), so k > 1 with RDP is refused.

    Raises:
        InvalidBudgetError: RDP with k > 1, or a group cost that leaves δ < 1 unreachable.
    """
    if k < 1:
        raise InvalidBudgetError(f"a group has at least one row, got k={k}")
    if k == 1:
        return cost
    if isinstance(cost, RdpCurve):
        raise InvalidBudgetError(
            "user-level streams with rows_per_user > 1 account (ε, δ) budgets only: group "
            "privacy for RDP curves is not supported; use rows_per_user=1 or basic accounting"
        )
    with localcontext() as ctx:  # exact product, rounded up if it ever needed rounding
        ctx.prec = 200
        ctx.rounding = ROUND_CEILING
        eps = cost.epsilon * k
    if cost.delta == 0:
        return Budget(epsilon=eps, delta=0)
    # log of k·e^{(k−1)ε}·δ, compared in log space so that nothing overflows.
    log_delta = math.log(k) + (k - 1) * float(cost.epsilon) + math.log(float(cost.delta))
    if log_delta >= -1e-12:
        raise InvalidBudgetError(
            f"the group-privacy cost of {cost} for {k} rows per user has δ ≥ 1; "
            "lower δ or rows_per_user"
        )
    delta = math.nextafter(math.exp(log_delta) * (1 + 1e-12), math.inf)  # float: round up
    return Budget(epsilon=eps, delta=min(delta, math.nextafter(1.0, 0.0)))

"""The DP maximum user id of a user stream, and the blocks it makes known (Sage §4.4).

Sage (Lécuyer et al., "Privacy Accounting and Quality Control in the Sage Differentially
Private ML Platform", SOSP 2019, §4.4) blocks a stream by user id for user-level privacy and
notes that the ids in use must not be public: a block key such as ``u004242000-004242999``
tells that some user in that range exists. Its proposal, built here: user ids are
**incrementing** (this fact is public), and an admin periodically releases a **DP estimate of
the largest id in use**; block selection then considers only blocks whose whole id range lies
below that estimate.

The release (:func:`release_max_id`):

* reads every block whose range starts at or above the **floor** ``T`` — 0 the first time, then
  the first id of the block that holds the previous release's ``safe_max + 1`` (a public
  function of earlier releases, so which blocks are read depends on no unreleased data);
* counts the distinct user ids ``c`` at or above ``T``: adding or removing one user changes
  ``c`` by at most 1 (sensitivity 1), and ids being incrementing, ``T + c − 1`` is the largest
  id in use (an underestimate if ids have gaps);
* releases ``ĉ = c + Laplace(1/ε)`` (Dwork & Roth 2014, Thm 3.6) from one ledger reservation
  on the blocks read — the charge is durable before any noise is drawn, as for every query; on
  a stream with ``rows_per_user = k`` it is charged like any query there, at its group cost (kε
  for pure ε). The blocks are not sealed: the last range keeps receiving new users;
* stores ``released_max = T + ĉ − 1`` and ``safe_max = ⌊released_max − ln(1/(2β))/ε⌋`` in the
  table ``user_id_releases`` of the platform's database, so later selections reuse it for free.
  As P[Laplace(1/ε) > ln(1/(2β))/ε] = β, every id up to ``safe_max`` is in use with probability
  at least 1 − β: a block is offered only once it is full with probability ≥ 1 − β.

Selection (:func:`selection_bound`, used by :meth:`Platform.select
<blockbudget.platform.Platform.select>` and task binding) and the service's block lists
(:func:`known_bound`): a user stream is gated **from its creation**. Before its first release no
block of it exists for selection — a selection, by anyone, is refused with
:class:`~blockbudget.errors.UnreleasedIdsError`, whose message names the command that releases
the maximum id — and an analyst's block list is empty. Afterwards a block whose last id exceeds
the latest ``safe_max`` is treated as unknown: ``Last(n)`` skips it, naming it is refused as an
unknown block. So which blocks a query reads, and which blocks an analyst can list or count, is
a function of released values only (Sage §4.4: "block selection only among ids known through
it").
"""

from __future__ import annotations

import math
import re
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

import sqlalchemy as sa

from blockbudget.budget import Budget
from blockbudget.dbrevision import ensure_current
from blockbudget.errors import InvalidBudgetError, InvalidRequestError, UnreleasedIdsError
from blockbudget.grant import group_cost
from blockbudget.mechanisms.basic import laplace_mechanism
from blockbudget.mechanisms.calibration import exact_epsilon
from blockbudget.store import Unit

if TYPE_CHECKING:
    from blockbudget.accounting import Accounting
    from blockbudget.budget import Cost
    from blockbudget.ledger import Reservation
    from blockbudget.mechanisms.noise import NoiseSource
    from blockbudget.platform import Platform

__all__ = [
    "MaxIdRelease",
    "known_bound",
    "known_filter",
    "latest_release",
    "release_max_id",
    "require_release",
    "selection_bound",
    "visible_blocks",
    "within",
]

_RANGE = re.compile(r"^u\d+-(\d+)(?:#\d+)?$")
_metadata = sa.MetaData()
releases_table = sa.Table(
    "user_id_releases",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("stream", sa.String(64), nullable=False, index=True),
    sa.Column("floor", sa.BigInteger, nullable=False),
    sa.Column("released_max", sa.Float, nullable=False),
    sa.Column("safe_max", sa.BigInteger, nullable=False),
    sa.Column("epsilon", sa.String(64), nullable=False),
    sa.Column("beta", sa.Float, nullable=False),
    sa.Column("secure_noise", sa.Boolean, nullable=False),
    sa.Column("reservation_id", sa.String(128), nullable=False),
    sa.Column("released_at", sa.Float, nullable=False),
)


@dataclass(frozen=True)
class MaxIdRelease:
    """One DP release of a user stream's largest id in use.

    Attributes:
        stream: the user stream.
        floor: the public id ``T`` the count started at.
        released_max: ``T + ĉ − 1``, the noisy largest id (ĉ the noisy count of ids ≥ T).
        safe_max: the largest id in use with probability ≥ 1 − ``beta``; blocks whose last id
            exceeds it are not offered.
        epsilon: ε of the Laplace noise (the charge is its cost on the stream).
        beta: the probability that ``safe_max`` overstates the largest id in use.
        secure_noise: False when a seeded (test) noise source drew the noise.
        reservation_id: the ledger reservation the charge was drawn from.
        released_at: seconds since the epoch.
    """

    stream: str
    floor: int
    released_max: float
    safe_max: int
    epsilon: Decimal
    beta: float
    secure_noise: bool
    reservation_id: str
    released_at: float


_READY: weakref.WeakSet[sa.Engine] = weakref.WeakSet()


def _engine(platform: Platform) -> sa.Engine:
    """The platform's database, with ``user_id_releases`` created (checked once per engine)."""
    engine = platform.store.engine
    if engine not in _READY:
        ensure_current(engine)
        _metadata.create_all(engine, checkfirst=True)
        _READY.add(engine)  # after the table exists
    return engine


def _user_stream(platform: Platform, stream: str) -> int:
    """``ids_per_block`` of a user stream.

    Raises:
        InvalidRequestError: the stream is not blocked by user id.
    """
    blocking = platform.stream(stream).blocking
    if blocking.unit is not Unit.USER or blocking.ids_per_block is None:
        raise InvalidRequestError(
            f"a maximum-id release needs a stream blocked by user id; {stream!r} is blocked by "
            f"{blocking.unit.value}"
        )
    return blocking.ids_per_block


def latest_release(platform: Platform, stream: str) -> MaxIdRelease | None:
    """The latest maximum-id release of ``stream`` (None if it never had one); free."""
    table = releases_table
    query = sa.select(table).where(table.c.stream == stream).order_by(table.c.id.desc()).limit(1)
    with _engine(platform).connect() as conn:
        row = conn.execute(query).first()
    if row is None:
        return None
    return MaxIdRelease(
        stream=row.stream,
        floor=row.floor,
        released_max=row.released_max,
        safe_max=row.safe_max,
        epsilon=Decimal(row.epsilon),
        beta=row.beta,
        secure_noise=row.secure_noise,
        reservation_id=row.reservation_id,
        released_at=row.released_at,
    )


#: The bound of a user stream with no release: no id is known, so no block (ids are >= 0).
NOTHING_KNOWN = -1


def known_bound(platform: Platform, stream: str) -> int | None:
    """The largest id a block of ``stream`` may end at to be offered: the latest release's
    ``safe_max`` (never lower than an earlier one's: a block once offered stays known), or
    :data:`NOTHING_KNOWN` on a user stream with no release yet; None when blocks are not
    gated (not a user stream)."""
    if platform.stream(stream).blocking.unit is not Unit.USER:
        return None
    release = latest_release(platform, stream)
    return NOTHING_KNOWN if release is None else release.safe_max


def selection_bound(platform: Platform, stream: str) -> int | None:
    """:func:`known_bound` for a selection: None when ``stream`` is not gated, else the
    release's ``safe_max``.

    Raises:
        UnreleasedIdsError: a user stream with no maximum-id release yet (the message names
            the command that releases it).

    Example:
        >>> import tempfile, pandas as pd
        >>> from blockbudget import Budget
        >>> from blockbudget.errors import UnreleasedIdsError
        >>> from blockbudget.platform import Platform
        >>> from blockbudget.store import Blocking, LatePolicy
        >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
        >>> _ = p.create_stream("u", policy=Budget(epsilon=10), late_policy=LatePolicy.DROP,
        ...                     blocking=Blocking.by_user("uid", 10))
        >>> _ = p.ingest("u", pd.DataFrame({"uid": list(range(25)), "v": [1.0] * 25}))
        >>> try:
        ...     selection_bound(p, "u")
        ... except UnreleasedIdsError as exc:
        ...     print("blockbudget stream max-id u" in str(exc))
        True
        >>> known_bound(p, "u")  # analysts' lists: nothing is known yet
        -1
        >>> p.close()
    """
    if platform.stream(stream).blocking.unit is not Unit.USER:
        return None
    release = latest_release(platform, stream)
    if release is None:
        raise UnreleasedIdsError(stream)
    return release.safe_max


def require_release(platform: Platform, stream: str) -> None:
    """Refuse any selection on a user stream that has no maximum-id release yet.

    Raises:
        UnreleasedIdsError: as :func:`selection_bound`.
    """
    selection_bound(platform, stream)


def visible_blocks(platform: Platform, stream: str, block_ids: Sequence[str]) -> list[str]:
    """The blocks of ``block_ids`` (of ``stream``) that selection may offer, in order: all of
    them unless the stream is gated, else those whose last id is at most :func:`known_bound`
    (none on a user stream with no release)."""
    bound = known_bound(platform, stream)
    if bound is None:
        return list(block_ids)
    return within(bound, block_ids)


def known_filter(platform: Platform, stream: str) -> Callable[[Sequence[str]], list[str]] | None:
    """A filter keeping the blocks selection may offer on ``stream`` (None when it is not
    gated; it keeps nothing on a user stream with no release), with the bound read once: for
    callers that filter many lists (task binding)."""
    bound = known_bound(platform, stream)
    if bound is None:
        return None
    return lambda ids: within(bound, ids)


def within(bound: int, block_ids: Sequence[str]) -> list[str]:
    """The user blocks of ``block_ids`` whose last id is at most ``bound``, in order."""
    return [b for b in block_ids if _last_id(b) <= bound]


def _last_id(block_id: str) -> int:
    """The last user id of a user block's range, read from its key (``u000000-000999``)."""
    found = _RANGE.search(block_id.partition("/")[2])
    if found is None:
        raise InvalidRequestError("not a user block id")
    return int(found.group(1))


def _check(epsilon: float | Decimal | int, beta: float) -> Decimal:
    eps = exact_epsilon(epsilon)
    if not 0 < beta < 0.5:
        raise InvalidBudgetError(f"beta must lie in (0, 0.5), got {beta}")
    return eps


def release_max_id(
    platform: Platform,
    stream: str,
    *,
    context: str,
    epsilon: float | Decimal | int,
    beta: float = 0.05,
    noise: NoiseSource | None = None,
    holder: str = "",
) -> MaxIdRelease:
    """Release a DP estimate of the largest user id in use on ``stream`` (see the module
    docstring): a Laplace(1/ε) count of the distinct ids at or above the floor, charged to the
    blocks read before any noise is drawn.

    Args:
        platform: the platform.
        stream: a user stream.
        context: the budget context the charge lands in.
        epsilon: ε > 0 of the count.
        beta: in (0, 0.5): ``safe_max`` overstates the largest id with probability ≤ β.
        noise: None for OpenDP's secure sampler; a seeded source for tests (the release then
            says ``secure_noise=False``).
        holder: the grant's holder.

    Returns:
        The stored release.

    Raises:
        InvalidRequestError: not a user stream, or no block at or above the floor.
        InvalidBudgetError: bad ε or β.
        BudgetExceededError / RetiredBlockError: a block read cannot pay (nothing charged).

    Example:
        >>> import tempfile, pandas as pd
        >>> from blockbudget import Budget
        >>> from blockbudget.platform import Platform
        >>> from blockbudget.store import Blocking, LatePolicy
        >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
        >>> _ = p.create_stream("u", policy=Budget(epsilon=1e10), late_policy=LatePolicy.DROP,
        ...                     blocking=Blocking.by_user("uid", 10))
        >>> _ = p.add_context("c")
        >>> _ = p.ingest("u", pd.DataFrame({"uid": list(range(25)), "v": [1.0] * 25}))
        >>> r = release_max_id(p, "u", context="c", epsilon=1e9, beta=0.05)
        >>> round(r.released_max), r.secure_noise  # 25 users: ids 0..24
        (24, True)
        >>> r.safe_max in (23, 24)  # 24 less a margin of ln(1/(2β))/ε ≈ 2.3e-9
        True
        >>> p.close()
    """
    eps = _check(epsilon, beta)
    n = _user_stream(platform, stream)
    previous = latest_release(platform, stream)
    floor = 0 if previous is None else max(0, (previous.safe_max + 1) // n * n)
    read = _blocks_from(platform, stream, floor)
    if not read:
        raise InvalidRequestError(
            f"stream {stream!r} has no block at or above id {floor}: nothing to count"
        )
    spec = platform.stream(stream)
    column = spec.blocking.column
    k = spec.blocking.rows_per_user or 1
    # Reserved on the ledger directly, not through selection (which hides exactly the blocks
    # above the previous release that this count must read), and not sealed: the last range
    # keeps receiving new users (a sealed range would drop them as late rows).
    reservation = platform.ledger.reserve(
        read,
        group_cost(Budget(epsilon=eps), k, accounting=spec.accounting),
        context=context,
        request_id=f"max-id-{uuid.uuid4().hex}",
        holder=holder,
        ttl_seconds=600.0,
    )
    source = _ReservationSource(platform, reservation, k)
    try:
        try:
            count = _distinct_ids(platform, read, column)
        except BaseException:  # a data-dependent failure is paid for, as for queries
            source.draw(Budget(epsilon=eps), label="max-id:failed")
            raise
        result = laplace_mechanism(
            source, float(count), epsilon=eps, sensitivity=1.0, noise=noise, label="max-id"
        )
    finally:
        platform.ledger.release(reservation.id, request_id=f"{reservation.id}/release")
    released = floor + float(result.value) - 1.0
    margin = math.log(1.0 / (2.0 * beta)) / float(eps)
    release = MaxIdRelease(
        stream=stream,
        floor=floor,
        released_max=released,
        safe_max=max(-1 if previous is None else previous.safe_max, math.floor(released - margin)),
        epsilon=eps,
        beta=beta,
        secure_noise=result.secure_noise,
        reservation_id=reservation.id,
        released_at=time.time(),
    )
    _store(platform, release)
    return release


def _blocks_from(platform: Platform, stream: str, floor: int) -> list[str]:
    """The blocks of ``stream`` whose id range starts at or above ``floor``, in id order (one
    range read of the store's catalog: what lies below the floor is not touched)."""
    from blockbudget.store.catalog import blocks_table as b

    query = (
        sa.select(b.c.block_id)
        .where(b.c.stream == stream, b.c.ordinal >= floor)  # a user block's ordinal: its first id
        .order_by(b.c.ordinal, b.c.seq)
    )
    with platform.store.engine.connect() as conn:
        return [row[0] for row in conn.execute(query)]


def _distinct_ids(platform: Platform, block_ids: Sequence[str], column: str) -> int:
    """The number of distinct values of ``column`` in the blocks' committed rows (one column
    read, open blocks included)."""
    import pyarrow.compute as pc

    table = platform.store.read(list(block_ids), columns=[column])
    return len(pc.unique(table.column(0)))


class _ReservationSource:
    """A :class:`~blockbudget.mechanisms.source.BudgetSource` that draws from a ledger
    reservation on every block it holds, at the stream's group cost (as a grant's draw)."""

    def __init__(self, platform: Platform, reservation: Reservation, k: int) -> None:
        self._ledger = platform.ledger
        self._reservation = reservation
        self._k = k
        self._accounting = platform.stream(platform_stream(reservation)).accounting

    @property
    def accounting(self) -> Accounting:
        return self._accounting

    def draw(self, cost: Cost, *, label: str) -> None:
        res = self._reservation
        self._ledger.charge(
            list(res.blocks),
            group_cost(cost, self._k, accounting=self._accounting),
            context=res.context,
            request_id=f"{res.id}/{label}",
            reservation_id=res.id,
        )


def platform_stream(reservation: Reservation) -> str:
    """The stream of a reservation's blocks (all of one stream here)."""
    return reservation.blocks[0].partition("/")[0]


def _store(platform: Platform, release: MaxIdRelease) -> None:
    values = {
        "stream": release.stream,
        "floor": release.floor,
        "released_max": release.released_max,
        "safe_max": release.safe_max,
        "epsilon": str(release.epsilon),
        "beta": release.beta,
        "secure_noise": release.secure_noise,
        "reservation_id": release.reservation_id,
        "released_at": release.released_at,
    }
    with _engine(platform).begin() as conn:
        conn.execute(releases_table.insert().values(**values))

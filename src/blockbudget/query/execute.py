"""Pricing (a dry run) and running a query on a stream's blocks.

:func:`run` checks the query (:func:`~blockbudget.query.checks.check`), reserves its cost on
the chosen blocks with one :meth:`Platform.request`, has the grant's engine compute the plan's
exact integer aggregates over the granted part files, then draws the cost durably *before* any
noise is sampled (:func:`~blockbudget.mechanisms.source.draw_then_perturb`: priced per the
stream's accounting rule, so an RDP stream is charged the parts' Laplace or Gaussian curves),
then adds noise from OpenDP's secure samplers unless the caller passes another
:class:`~blockbudget.mechanisms.NoiseSource`. Closing the grant releases what was not drawn.

:func:`run_on` runs a query on a grant it is given (``run(..., reservation=...)`` builds that
grant with :meth:`Platform.grant`): it reserves nothing, and refuses before any row is read a
query whose draw the reservation no longer covers. Both share one path after the grant
(:func:`spend`): aggregate, draw once, release noise.

:func:`price` runs the same check and resolves the same selection, and reports what a run
would charge and whether each block can afford it — reserving, sealing and charging nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from blockbudget.errors import InternalError, InvalidRequestError, UnknownContextError
from blockbudget.grant import refuse_short
from blockbudget.ledger import validate_context_name
from blockbudget.mechanisms.noise import NoiseSource, Selection, resolve_noise
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.source import draw_then_perturb
from blockbudget.query.answers import answer
from blockbudget.query.checks import Pricing, check, check_grant, check_rows
from blockbudget.query.parts import aggregates as plan_aggregates
from blockbudget.query.parts import plan
from blockbudget.query.result import CONFIDENCE, DryRun, GroupAnswer, QueryResult
from blockbudget.query.spec import Query
from blockbudget.query.statistic import decode_unit

if TYPE_CHECKING:
    from blockbudget.engine.plan import Partials
    from blockbudget.grant import Grant
    from blockbudget.platform import Last, Platform


def _resolution(query: Query) -> float | None:
    return query.statistic.definition.resolution(query)


def _known_context(platform: Platform, context: str) -> None:
    validate_context_name(context)
    if context not in platform.contexts():
        raise UnknownContextError(f"unknown or closed context {context!r}")


def price(
    platform: Platform,
    stream: str,
    query: Query,
    *,
    blocks: Sequence[str] | Last,
    context: str,
) -> DryRun:
    """What running ``query`` on ``blocks`` in ``context`` would charge — a dry run.

    Returns:
        The blocks the selection resolves to, the cost per block, the noise of every part and
        whether each block can afford the reservation now. Nothing is reserved, sealed or
        charged, and no row is read.

    Raises:
        As :func:`check`; UnknownContextError for an unknown or closed context;
        UnknownBlockError / InvalidRequestError for a bad selection (or none affordable).

    Example:
        >>> import tempfile, pandas as pd
        >>> from blockbudget import Budget
        >>> from blockbudget.platform import Platform, Last
        >>> from blockbudget.query import Query, price
        >>> from blockbudget.store import Blocking
        >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
        >>> _ = p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
        >>> _ = p.add_context("team")
        >>> hours = pd.date_range("2024-01-01", periods=3, freq="h")
        >>> _ = p.ingest("s", pd.DataFrame({"t": hours, "v": [1.0, 2.0, 3.0]}))
        >>> quote = price(p, "s", Query.count(epsilon=0.5), blocks=Last(1), context="team")
        >>> quote.cost, quote.ok, quote.noise_summary
        (Budget(epsilon='0.5', delta='0'), True, 'count: laplace b=2 (Δ=1)')
        >>> p.close()
    """
    pricing = check(platform, stream, query)
    _known_context(platform, context)
    chosen = platform.select(stream, blocks, context=context, cost=pricing.reserve)
    ok = platform.can_afford(chosen, pricing.reserve, context=context, stream=stream)
    return DryRun(
        query=query,
        stream=stream,
        context=context,
        blocks=tuple(chosen),
        cost=pricing.charged,
        reserve=pricing.reserve,
        parts=pricing.parts,
        affordable=tuple(ok),
        resolution=_resolution(query),
    )


def open_grant(
    platform: Platform,
    stream: str,
    query: Query,
    *,
    blocks: Sequence[str] | Last,
    context: str,
) -> tuple[Grant, Pricing]:
    """Check the query, then reserve its cost on the chosen blocks (one grant).

    Raises:
        As :func:`check` (nothing reserved or sealed); BudgetExceededError /
        UnknownContextError / UnknownBlockError / RetiredBlockError as for
        :meth:`Platform.request` (nothing reserved or sealed); InvalidRequestError from
        :func:`~blockbudget.query.checks.check_rows` for a sum, mean or variance over 4.5
        billion stored rows or more (the reservation is released, nothing is charged; the
        chosen blocks stay sealed).
    """
    pricing = check(platform, stream, query)
    grant = platform.request(
        stream, blocks=blocks, budget=pricing.row_reserve, context=context, columns=query.columns()
    )
    try:
        check_rows(query, 0 if grant.source is None else grant.source.rows)
    except BaseException:
        grant.close()  # releases the reservation: nothing is charged
        raise
    return grant, pricing


def aggregate(grant: Grant, query: Query, pricing: Pricing) -> Partials:
    """The query's exact aggregates over the grant's part files, by the grant's engine.

    The plan is built from ``pricing.typed`` (the query with column-typed literals). Once the
    engine has started on the rows, its outcome may depend on them, so a failure is paid for:
    any exception of the engine first draws ``pricing.cost`` from the grant (as a release
    would), then propagates — a data-dependent failure is never free.

    Raises:
        InternalError: the grant holds no part files; DataError and anything the engine
            raises (after the draw).
    """
    if grant.source is None:
        raise InternalError(f"grant {grant.reservation.id} holds no part files to read")
    work = plan(pricing.typed, grant.source)
    try:
        return grant.engine.aggregate(work)
    except BaseException:
        # the engine's failure is the one to report, even if the draw is refused
        with contextlib.suppress(Exception):
            grant.draw(pricing.cost, label=f"query:{query.statistic.value}:failed")
        raise


def release(
    grant: Grant,
    query: Query,
    partials: Partials,
    pricing: Pricing,
    *,
    noise: NoiseSource | None = None,
    confidence: float = CONFIDENCE,
) -> QueryResult:
    """Draw the query's cost from the grant durably, then add noise and post-process.

    Raises:
        BudgetExceededError / ReservationError: the draw was refused; nothing is released.
    """
    sampler = resolve_noise(noise)
    units = {agg.name: decode_unit(agg) for agg in plan_aggregates(pricing.typed)}
    jobs = []
    for part in pricing.parts:
        ints = partials.of(part.name)
        unit = units[part.name]  # q for a sum, q² for a sum of squares, 1 for counts
        vector = np.array([float(v) * unit for v in ints], dtype=np.float64)
        if isinstance(part.kind, Selection):  # one selection per group, over its own cells
            width = part.size // query.groups
            jobs += [(part, vector[g : g + width]) for g in range(0, part.size, width)]
        else:
            jobs.append((part, vector))
    # pricing.cost: the parts priced under the stream's rule (their curves on RDP streams);
    # the grant charges its group-privacy cost on a user-level stream.
    noisy = draw_then_perturb(
        grant, cost=pricing.cost, label=f"query:{query.statistic.value}", noise=sampler, jobs=jobs
    )
    outs = _rejoin(pricing.parts, noisy)
    return QueryResult(
        query=query,
        stream=grant.stream,
        context=grant.context,
        blocks=tuple(grant.blocks),
        cost=grant.draws[-1][1],
        parts=pricing.parts,
        groups=_groups(query, pricing, outs, confidence),
        secure_noise=sampler.secure,
        resolution=_resolution(query),
        confidence=confidence,
    )


def _rejoin(parts: Sequence[Perturbation], noisy: Sequence[np.ndarray]) -> list[np.ndarray]:
    """One output vector per part: a selection's per-group jobs concatenated back."""
    outs, i = [], 0
    for part in parts:
        taken = 0
        pieces: list[np.ndarray] = []
        while taken < part.size or not pieces:
            pieces.append(noisy[i])
            taken += noisy[i].size
            i += 1
        outs.append(np.concatenate(pieces) if len(pieces) > 1 else pieces[0])
    return outs


def _groups(
    query: Query, pricing: Pricing, outs: Sequence[np.ndarray], confidence: float
) -> tuple[GroupAnswer, ...]:
    """Split each part's noisy vector by group (row-major over the keys' domains) and answer
    each group."""
    import itertools

    keys = list(itertools.product(*(k.domain for k in query.keys))) or [()]
    by_name = {p.name: p for p in pricing.parts}
    vectors = {p.name: out for p, out in zip(pricing.parts, outs, strict=True)}
    answers = []
    for g, key in enumerate(keys):
        noisy = {}
        for name, vec in vectors.items():
            width = by_name[name].size // len(keys)
            noisy[name] = vec[g * width : (g + 1) * width]
        answers.append(answer(query, key, noisy, by_name, confidence=confidence))
    return tuple(answers)


def covered(grant: Grant, query: Query, pricing: Pricing) -> None:
    """Refuse, before any row is read, a query that the grant's reservation cannot pay now.

    Raises:
        ReservationError: the reservation is closed, or holds less than the query's draw on
            some block (nothing is read or charged).
    """
    short = grant.shortfall(pricing.cost)
    what = f"the {query.statistic.value} ({pricing.charged})"
    refuse_short(grant.reservation.id, what, short, accounting=grant.accounting)


def run_on(grant: Grant, query: Query, *, noise: NoiseSource | None = None) -> QueryResult:
    """Run ``query`` on a grant it is given: the draw comes out of the grant's reservation.

    Checks the query against the grant's stream (:func:`~blockbudget.query.checks.check_grant`:
    its projection, accounting and group size) and that the reservation still covers the
    query's draw on every block — both before any row is read — then aggregates with the
    grant's engine, draws once and releases noise (:func:`spend`). Nothing is reserved; the
    grant stays open (its holder closes it, releasing what is unspent).

    Raises:
        As :func:`~blockbudget.query.checks.check_grant` and :func:`covered` (nothing read or
        charged); DataError and anything the engine raises (the cost drawn: see
        :func:`aggregate`); BudgetExceededError / ReservationError: the draw was refused.
    """
    return spend(grant, query, prepare_on(grant, query), noise=noise)


def prepare_on(grant: Grant, query: Query) -> Pricing:
    """Everything :func:`run_on` checks before any row is read: the query against the grant's
    stream and projection, the row limit of sums, and the reservation's cover.

    Raises:
        As :func:`~blockbudget.query.checks.check_grant`, :func:`check_rows` and
        :func:`covered` (nothing read or charged).
    """
    pricing = check_grant(grant, query)
    check_rows(query, 0 if grant.source is None else grant.source.rows)
    covered(grant, query, pricing)
    return pricing


def open_reserved(
    platform: Platform,
    stream: str,
    query: Query,
    *,
    reservation: str,
    holder: str | None = None,
    context: str | None = None,
) -> tuple[Grant, Pricing]:
    """Check the query, then open a grant over an existing reservation (reserving nothing):
    the counterpart of :func:`open_grant` for a scheduler's grant.

    The query, and the reservation's cover of its draw, are checked before the reservation's
    blocks are sealed, so a refused query changes nothing.

    Raises:
        As :func:`check`, :meth:`Platform.grant` and :func:`prepare_on` (nothing charged).
    """
    pricing = check(platform, stream, query)
    grant = platform.grant(
        reservation,
        holder=holder,
        stream=stream,
        context=context,
        columns=query.columns(),
        covers=pricing.cost,  # refused before any block is sealed
    )
    return grant, prepare_on(grant, query)


def close_if_spent(grant: Grant) -> bool:
    """Close the grant when its reservation holds nothing more on any block (closing then
    releases nothing); returns whether it closed. A reservation that still holds budget stays
    open for further draws."""
    if grant.closed or any(any(v) for _, v in grant.remaining()):
        return False
    grant.close()
    return True


def spend(
    grant: Grant, query: Query, pricing: Pricing, *, noise: NoiseSource | None = None
) -> QueryResult:
    """The common path of :func:`run` and :func:`run_on`: exact aggregates by the grant's
    engine (:func:`aggregate`), then one draw and the noisy answer (:func:`release`)."""
    partials = aggregate(grant, query, pricing)
    return release(grant, query, partials, pricing, noise=noise)


def run(
    platform: Platform,
    stream: str,
    query: Query,
    *,
    blocks: Sequence[str] | Last | None = None,
    context: str | None = None,
    reservation: str | None = None,
    holder: str | None = None,
    noise: NoiseSource | None = None,
) -> QueryResult:
    """Run ``query`` on ``blocks`` in ``context``, or on an existing ``reservation``.

    With ``blocks`` and ``context`` the query reserves its cost in one grant (see the module
    docstring), which is closed afterwards. With ``reservation`` it reserves nothing: the
    draw comes out of that reservation (:meth:`Platform.grant`, :func:`run_on`); the
    reservation stays open for further draws until its holder releases it or it expires —
    unless the draw spent all it held, when it is closed.

    Args:
        platform: the platform.
        stream: the stream.
        query: the query.
        blocks: block ids or keys, or :class:`~blockbudget.platform.Last` (not with
            ``reservation``).
        context: the context that pays; with ``reservation``, when given, it must be the
            reservation's.
        reservation: an open reservation of ``stream`` to spend (e.g. a scheduler's grant).
        holder: with ``reservation``: its holder must be this one.
        noise: None (the default) means OpenDP's secure samplers; a seeded source makes the
            result say ``secure_noise=False``.

    Raises:
        As :func:`check` and :meth:`Platform.request` / :meth:`Platform.grant` (nothing
        reserved or sealed); ReservationError: the reservation cannot pay the query (nothing
        read or charged); DataError: a part file is missing or unreadable (the cost is drawn:
        see :func:`aggregate`); BudgetExceededError / ReservationError: the draw was refused
        (nothing released).

    Example:
        >>> import tempfile, pandas as pd
        >>> from blockbudget import Budget
        >>> from blockbudget.platform import Platform, Last
        >>> from blockbudget.query import Query, run
        >>> from blockbudget.store import Blocking
        >>> p = Platform(tempfile.mkdtemp(), engine="arrow")
        >>> _ = p.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("t"))
        >>> _ = p.add_context("team")
        >>> hours = pd.date_range("2024-01-01", periods=3, freq="h")
        >>> _ = p.ingest("s", pd.DataFrame({"t": hours, "v": [1.0, 2.0, 3.0]}))
        >>> q = Query.mean("v", epsilon=0.5, lower=0, upper=4)
        >>> answer = run(p, "s", q, blocks=Last(1), context="team")
        >>> 0.0 <= answer.number <= 4.0, answer.cost, answer.secure_noise
        (True, Budget(epsilon='0.5', delta='0'), True)
        >>> res = p.ledger.reserve([answer.blocks[0]], Budget(epsilon=0.25), context="team")
        >>> spent = run(p, "s", Query.count(epsilon=0.25), reservation=res.id)
        >>> p.ledger.reservation(res.id).state.value  # spent in full, so closed
        'closed'
        >>> p.close()
    """
    if reservation is None:
        if blocks is None or context is None:
            raise InvalidRequestError(
                "a query runs on 'blocks' in a 'context', or on a reservation"
            )
        grant, pricing = open_grant(platform, stream, query, blocks=blocks, context=context)
        with grant:
            return spend(grant, query, pricing, noise=noise)
    if blocks is not None:
        raise InvalidRequestError(
            "a query on a reservation reads the reservation's blocks; do not name 'blocks'"
        )
    grant, pricing = open_reserved(
        platform, stream, query, reservation=reservation, holder=holder, context=context
    )
    result = spend(grant, query, pricing, noise=noise)
    close_if_spent(grant)
    return result

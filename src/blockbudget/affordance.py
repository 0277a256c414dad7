"""What a selection of blocks can still afford in a context, and why ``Last`` found nothing.

:func:`afford` answers "the largest ε I can still request over these blocks": it reads the
selected blocks' ledger rows in the context (charged plus reserved, as the ledger counts them
when it decides) and searches the filter's own fit test
(:mod:`blockbudget.accounting.afford`), so a request of exactly the answer fits right now and
one a unit (1e-18) larger is refused — until someone else spends there. It reserves nothing.

:func:`last_refusal` builds the refusal of a ``Last`` selection that found no affordable block:
what the newest live block has left and the shortfall, as exact decimals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import TYPE_CHECKING, Any

from blockbudget.accounting import Accounting, Filter, add_vectors, rules
from blockbudget.accounting.afford import (
    gaussian_release,
    largest_epsilon,
    largest_float_at_most,
    smallest_noise_multiplier,
)
from blockbudget.accounting.filters import exact_text
from blockbudget.budget import UNIT, Budget, Cost, canonical_decimal, from_units, to_decimal
from blockbudget.errors import (
    InvalidRequestError,
    NothingAffordableError,
    RetiredBlockError,
)
from blockbudget.store import catalog as store_catalog

if TYPE_CHECKING:
    import sqlalchemy as sa

    from blockbudget.ledger import Ledger
    from blockbudget.platform import Last, Platform

__all__ = ["AffordFor", "Affordance", "afford", "last_refusal"]


class AffordFor(Enum):
    """What :func:`afford` sizes.

    ``BUDGET``: the largest ε of an (ε, δ) budget, as a reservation, a budget task or a query's
    ε asks for it (on an RDP stream a pure (ε, 0) budget, priced min(ε, α·ε²/2) per order).
    ``GAUSSIAN``: on a stream whose rule prices the noise, the smallest Gaussian noise
    multiplier σ/Δ (on RDP its curve α/(2(σ/Δ)²), Mironov 2017, Prop. 7; on GDP μ = Δ/σ,
    Dong, Roth & Su 2022, Thm 2.7).
    """

    BUDGET = "budget"
    GAUSSIAN = "gaussian"


@dataclass(frozen=True)
class Affordance:
    """The answer of :func:`afford`.

    Attributes:
        stream: the stream.
        context: the context whose budget was read.
        accounting: the stream's rule.
        blocks: the selected blocks, oldest first.
        kind: what was sized.
        delta: the δ of the (ε, δ) budget sized (0 on RDP streams).
        epsilon: the largest ε that fits on every block (a multiple of 1e-18), or None when
            not even ε = 0 fits (the δ asked is more than some block has left).
        noise_multiplier: for ``GAUSSIAN``, the smallest σ/Δ that fits (None when none does).
        binding: the blocks that stop a larger request (those a unit more would not fit on).
        rule: the filter rule searched, with its source.
    """

    stream: str
    context: str
    accounting: Accounting
    blocks: tuple[str, ...]
    kind: AffordFor
    delta: Decimal
    epsilon: Decimal | None
    noise_multiplier: float | None
    binding: tuple[str, ...]
    rule: str

    def to_json(self) -> dict[str, Any]:
        """The wire form: budgets as exact decimal strings, the noise multiplier as the
        shortest decimal of its double.

        ``epsilon`` is the largest ε a float can carry and still fit (the largest double whose
        shortest decimal is at most the exact answer: request it as a JSON number, a
        ``--epsilon`` option or a string); ``epsilon_exact`` is the exact largest ε (a multiple
        of 1e-18), which fits when requested as an exact decimal string (``"epsilon":
        "0.341279519435449196"``, ``--epsilon 0.341279519435449196``)."""
        return {
            "stream": self.stream,
            "context": self.context,
            "accounting": self.accounting.value,
            "blocks": list(self.blocks),
            "kind": self.kind.value,
            "delta": canonical_decimal(self.delta),
            "epsilon": None
            if self.epsilon is None
            else canonical_decimal(largest_float_at_most(self.epsilon)),
            "epsilon_exact": None if self.epsilon is None else canonical_decimal(self.epsilon),
            "noise_multiplier": None
            if self.noise_multiplier is None
            else repr(self.noise_multiplier),
            "binding": list(self.binding),
            "rule": self.rule,
        }


def afford(
    platform: Platform,
    stream: str,
    selection: Sequence[str] | Last,
    *,
    context: str,
    delta: int | float | str | Decimal = 0,
    kind: AffordFor = AffordFor.BUDGET,
) -> Affordance:
    """The largest request a selection of blocks can still afford in ``context``.

    ``Last(n)`` here means the newest ``n`` live blocks, affordable or not (the question is what
    they can afford). Reads the selected blocks' rows only; reserves nothing.

    Raises:
        UnknownContextError: the context is not registered, or is closed.
        RetiredBlockError: a named block is retired (it can afford nothing, ever).
        InvalidRequestError: ``GAUSSIAN`` on a stream whose rule does not price the noise, or
            δ > 0 on one whose rule cannot price it.
    """
    from blockbudget.platform import Last

    if context not in platform.ledger.contexts():
        from blockbudget.ledger.txn import unknown_context

        raise unknown_context(context)
    d = to_decimal(delta, name="delta")
    f = platform.filter(stream)
    if kind is AffordFor.GAUSSIAN and not f.rule.prices_noise:
        noisy = ", ".join(r.name for r in rules() if r.prices_noise)
        raise InvalidRequestError(
            "a Gaussian noise multiplier is sized only on streams whose rule prices the noise "
            f"({noisy}); stream {stream!r} uses {f.accounting.value} composition (ask for the "
            "largest ε instead)"
        )
    sel = Last(selection.n, affordable=False) if isinstance(selection, Last) else selection
    blocks = platform.select(stream, sel, context=context, cost=Budget.zero())
    states = {
        s.block: s
        for s in platform.ledger.states(stream=stream, context=context, blocks=list(blocks))
    }
    retired = [b for b in blocks if b in states and states[b].retired]
    if retired:
        raise RetiredBlockError(retired)
    used = {
        b: add_vectors(states[b].charged, states[b].reserved) if b in states else f.zero()
        for b in blocks
    }
    eps: Decimal | None = None
    sigma: float | None = None
    if kind is AffordFor.GAUSSIAN:
        sigma = smallest_noise_multiplier(f, list(used.values()))
    else:
        eps = largest_epsilon(f, list(used.values()), delta=d)
    return Affordance(
        stream=stream,
        context=context,
        accounting=f.accounting,
        blocks=tuple(blocks),
        kind=kind,
        delta=d,
        epsilon=eps,
        noise_multiplier=sigma,
        binding=_binding(f, used, kind=kind, epsilon=eps, sigma=sigma, delta=d),
        rule=f.rule.title,
    )


def _binding(
    f: Filter,
    used: dict[str, tuple[int, ...]],
    *,
    kind: AffordFor,
    epsilon: Decimal | None,
    sigma: float | None,
    delta: Decimal,
) -> tuple[str, ...]:
    """The blocks on which a request just above the answer does not fit."""
    more: Cost
    if kind is AffordFor.GAUSSIAN:
        if sigma is None:
            return tuple(used)
        import math

        more = f.rule.price(gaussian_release(math.nextafter(sigma, 0.0)))
    elif epsilon is None:
        more = Budget(epsilon=0, delta=delta)
    else:
        more = Budget(epsilon=from_units(int(epsilon * UNIT) + 1), delta=delta)
    need = f.features(more)
    return tuple(b for b, u in used.items() if not f.fits(add_vectors(u, need)))


def last_refusal(
    ledger: Ledger,
    catalog: sa.Engine,
    f: Filter,
    stream: str,
    *,
    context: str,
    cost: Cost,
    admit: Callable[[Sequence[str]], Sequence[str]] | None = None,
) -> NothingAffordableError:
    """The refusal of a ``Last`` selection that found no block affording ``cost``: what the
    newest live block has left in ``context`` and the shortfall there. Walks the stream from its
    newest block in pages, as :func:`blockbudget.selection.newest_blocks` does, keeping only the
    blocks ``admit`` lets a selection offer (so how many others sit above them changes
    nothing), and reads the ledger rows of the blocks walked past only."""
    newest, s = None, None
    offset, page = 0, 64
    while newest is None:
        with catalog.connect() as conn:
            ids = list(
                store_catalog.select_newest_block_ids(conn, stream, offset=offset, limit=page)
            )
        if not ids:
            break
        offset += len(ids)
        if admit is not None:
            ids = list(admit(ids))
        states = {s.block: s for s in ledger.states(stream=stream, context=context, blocks=ids)}
        live = [b for b in ids if not (b in states and states[b].retired)]
        if live:
            newest, s = live[0], states.get(live[0])
        page = min(page * 2, 4096)
    head = f"no block of stream {stream!r} can afford {cost} in context {context!r}"
    if newest is None:
        return NothingAffordableError(
            f"{head}: the stream has no live block", context=context, remaining=None, shortfall=None
        )
    used = add_vectors(s.charged, s.reserved) if s is not None else f.zero()
    left, short = f.remaining_json(used), f.shortfall_json(used, f.features(cost))
    return NothingAffordableError(
        f"{head}: the newest live block has {exact_text(left)} left there, short by "
        f"{exact_text(short)} (an older block with enough left would have been used)",
        context=context,
        remaining=left,
        shortfall=short,
    )

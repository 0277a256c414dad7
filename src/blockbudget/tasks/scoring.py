"""A task's significance as its scheduler reads it: a table, or a live provider's values.

A task stores ``None``, a table ``{block: p_ij}`` or a provider spec ``{"provider": ...}``
(:mod:`blockbudget.tasks.significance`). When the task enters its scheduler:

* a table is passed as is (a block it does not list has p = 0);
* a **free** provider (``recency``, ``user``: nothing charged) becomes a function of the block,
  scored on first use and cached, so blocks that arrive while the task waits are scored too;
* a **paid** provider (``loss-reduction``: a DP measurement charged to each block it scores,
  before the value is used) scores the blocks the task may use once, at its first entry, and
  the values — DP outputs, public from then on — replace the spec in the task's row, so a new
  leader re-entering the task reads them instead of paying again. A paid provider therefore
  needs a selector that bounds its blocks (``Named``, ``Newest``, ``InRange``): scoring every
  block of a stream would charge blocks the task never uses.

Example:
    >>> check_provider({"provider": "recency", "half_life_seconds": 3600}, bounded=False)
    >>> check_provider({"s/1": 2.0}, bounded=False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from blockbudget.errors import InvalidRequestError

if TYPE_CHECKING:
    from blockbudget.accounting import Filter
    from blockbudget.budget import Cost
    from blockbudget.mechanisms.noise import NoiseSource
    from blockbudget.platform import Platform
    from blockbudget.scheduling.base import Scheduler
    from blockbudget.tasks.model import Task

__all__ = ["check_comparison", "check_provider", "significance_of"]

Significance = Mapping[str, float] | Callable[[str], float] | None


def check_provider(spec: Mapping[str, Any] | None, *, bounded: bool) -> None:
    """Refuse a bad provider spec, or a paid one on a selector that does not bound its blocks
    (before anything is stored, read or charged).

    Raises:
        InvalidRequestError: as said.
    """
    if spec is None or "provider" not in spec:
        return
    from blockbudget.tasks.significance import provider_from_json

    provider = provider_from_json(spec)
    if provider.cost_per_block is not None and not bounded:
        raise InvalidRequestError(
            f"significance provider {provider.name!r} pays a DP measurement on every block it "
            "scores: give a selector that names the blocks (named, newest or a time range), "
            "not any blocks of the stream"
        )


def check_comparison(
    scheduler: Scheduler,
    spec: Mapping[str, Any] | None,
    *,
    demand: Cost,
    block_filter: Filter,
) -> None:
    """Refuse a task whose significance is private to a scheduler whose comparison would not
    be DP for it (docs/scheduling.md, "Significance and Δ").

    Only values a provider computed from private rows without noise
    (:attr:`~blockbudget.tasks.significance.Disclosure.PRIVATE`, e.g. a ``user`` table with a
    stated ``sensitivity``) need this: public values and DP releases are compared as
    post-processing. A threshold scheduler's AboveThreshold is ε0-DP only if its configured
    ``sensitivity`` bounds the compared quantity's, ``compared_sensitivity`` (Alg. 1:
    Δ_p/(ε_j + ε0) with ε_j bounded below on a block of ``block_filter``, the stream's, by
    :func:`~blockbudget.scheduling.threshold.epsilon_floor`: the demand's ε under basic and
    strong composition, its share of the capped features under another linear rule, 0 under
    RDP). Schedulers that never read significance need nothing.

    Raises:
        InvalidRequestError: the scheduler's sensitivity is below what the values need.

    Example:
        >>> from blockbudget.accounting import make_filter
        >>> from blockbudget.budget import Budget
        >>> from blockbudget.scheduling import get_scheduler
        >>> private = {"provider": "user", "values": {"s/1": 3.0}, "sensitivity": 5.0}
        >>> basic = make_filter("basic", capacity=Budget(epsilon=1))
        >>> check_comparison(get_scheduler("online-threshold", sensitivity=500.0), private,
        ...                  demand=Budget(epsilon=0.09), block_filter=basic)
        >>> check_comparison(get_scheduler("online-threshold"), private,
        ...                  demand=Budget(epsilon=0.09), block_filter=basic)
        Traceback (most recent call last):
        ...
        blockbudget.errors.InvalidRequestError: ...
    """
    needs = getattr(scheduler, "compared_sensitivity", None)
    if spec is None or "provider" not in spec or needs is None:
        return  # no provider (a table is public: Δ = 0), or a scheduler that compares nothing
    from blockbudget.scheduling.threshold import epsilon_floor
    from blockbudget.tasks.significance import Disclosure, provider_from_json

    provider = provider_from_json(spec)
    if provider.disclosure is not Disclosure.PRIVATE:
        return
    floor = epsilon_floor(block_filter, demand)
    needed = float(needs(provider.comparison_sensitivity, demand_epsilon=floor))
    have = float(getattr(scheduler, "sensitivity", 0.0))
    if have < needed:
        raise InvalidRequestError(
            f"significance {provider.name!r} is computed from private rows with stated Δ = "
            f"{provider.comparison_sensitivity!r}; {scheduler.name!r} compares a quantity of "
            f"sensitivity {needed!r} for this demand, but is configured with sensitivity "
            f"{have!r}: its comparison would not be DP (configure the stream's scheduler with "
            f"sensitivity >= {needed!r}, or give public significance)"
        )


def significance_of(
    platform: Platform,
    task: Task,
    *,
    blocks: Sequence[str] | None,
    noise: NoiseSource | None,
    store: Callable[[Mapping[str, float], bool], None],
) -> Significance:
    """What the scheduler reads for ``task`` (module docstring).

    Args:
        blocks: the blocks the task may use (None: any block of its stream).
        store: saves a paid provider's values as the task's significance table, with its
            ``secure_noise`` (False when a seed — a Python caller's, or the queue's seeded
            noise — drew the measurement: the task must say so).
    """
    sig = task.significance
    if sig is None:
        return None
    if "provider" not in sig:
        return {str(b): float(p) for b, p in sig.items()}
    from blockbudget.tasks.significance import provider_from_json

    provider = provider_from_json(sig)
    kw: dict[str, Any] = {"context": task.context, "task": task.id, "holder": task.principal}
    if provider.cost_per_block is not None:
        if blocks is None:  # refused at submission; a row written otherwise scores nothing
            return {}
        scores = provider.score(platform, task.stream, list(blocks), noise=noise, **kw)
        store(scores.values, scores.secure_noise)
        return dict(scores.values)
    cache: dict[str, float] = {}

    def value(block: str) -> float:
        if block not in cache:
            got = provider.values(platform, task.stream, [block], noise=noise, **kw)
            cache[block] = float(got.get(block, 0.0))
        return cache[block]

    return value

"""Checks of a significance provider's parameters (re-exported by
:mod:`blockbudget.tasks.significance`): the noise controls a principal may never set, missing
and unknown parameters, numbers, and the blocks a provider is asked to score."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError, UnknownBlockError

if TYPE_CHECKING:
    from blockbudget.platform import Platform


#: Provider parameters that control the randomness of a paid DP measurement. A principal
#: (HTTP, CLI) may never set them: a seeded measurement is deterministic — no DP at all.
NOISE_CONTROLS = frozenset({"seed"})


def refuse_noise_controls(spec: Mapping[str, Any] | None) -> None:
    """Refuse a provider spec from a principal that sets a noise control (:data:`NOISE_CONTROLS`).

    The project's randomness rule: every release draws fresh OS entropy or OpenDP's secure
    samplers unless a *trusted* caller asks for a seed. Over HTTP and the CLI the spec comes
    from a principal, and a seed would make the paid measurement reproducible — its output a
    function of the rows alone — so it is refused before anything is stored or charged. A
    Python caller may still seed a provider (tests, experiments): the task then records
    ``significance_secure_noise: false`` in its result.

    Raises:
        InvalidRequestError: the spec sets one of :data:`NOISE_CONTROLS`.

    Example:
        >>> refuse_noise_controls({"provider": "recency", "half_life_seconds": 60.0})
        >>> refuse_noise_controls({"provider": "loss-reduction", "seed": 1})
        Traceback (most recent call last):
        ...
        blockbudget.errors.InvalidRequestError: a significance provider's noise is not yours to \
control: remove ['seed'] (the measurement draws from OpenDP's secure samplers)
    """
    if spec is None or "provider" not in spec:
        return
    bad = sorted(NOISE_CONTROLS & set(spec))
    if bad:
        raise InvalidRequestError(
            f"a significance provider's noise is not yours to control: remove {bad} (the "
            "measurement draws from OpenDP's secure samplers)"
        )


def params_of(
    params: Mapping[str, Any], *, required: Sequence[str], optional: Sequence[str], name: str
) -> None:
    """Refuse missing and unknown parameters of provider ``name``."""
    missing = [k for k in required if k not in params]
    unknown = sorted(set(params) - set(required) - set(optional))
    if missing or unknown:
        raise InvalidRequestError(
            f"significance provider {name!r} takes {list(required)} and optionally "
            f"{list(optional)}; missing {missing}, unknown {unknown}"
        )


def number(value: Any, *, what: str, positive: bool = False, minimum: float = -math.inf) -> float:
    """A finite JSON number (not a boolean), > 0 when ``positive``, ≥ ``minimum``."""
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequestError(f"{what} must be a number, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or (positive and out <= 0) or out < minimum:
        rule = "> 0" if positive else f">= {minimum:g}" if minimum > -math.inf else "finite"
        raise InvalidRequestError(f"{what} must be finite and {rule}, got {value!r}")
    return out


def distinct_blocks(block_ids: Sequence[str]) -> list[str]:
    if isinstance(block_ids, str):
        raise InvalidRequestError("block_ids must be a sequence of block ids, not one string")
    ids = list(block_ids)
    if len(set(ids)) != len(ids):
        raise InvalidRequestError(f"block_ids repeat a block: {ids!r}")
    return ids


def check_blocks(platform: Platform, stream: str, ids: Sequence[str]) -> None:
    """Every id names a block of ``stream`` (reads those blocks' catalog rows only)."""
    from blockbudget.store import catalog

    with platform.store.engine.connect() as conn:
        found = catalog.select_blocks_by_id(conn, list(ids))
    bad = [b for b in ids if b not in found or found[b].stream != stream]
    if bad:
        raise UnknownBlockError(f"stream {stream!r} has no block(s) {bad[:5]}")

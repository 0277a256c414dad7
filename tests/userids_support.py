"""Test helpers for user streams, which are gated from creation (:mod:`blockbudget.userids`).

A test whose point is not the gate makes a user stream's blocks known with :func:`make_known`:
a real maximum-id release, but with its noise replaced by a large fixed shift (so every block,
present and future, is known) and charged in a context of its own (``ids-{stream}``) that is
closed afterwards (the test's contexts keep their exact budgets, and a closed context keeps no
block from retiring). The release says ``secure_noise=False``.
"""

from __future__ import annotations

import numpy as np

from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.platform import Platform
from blockbudget.userids import MaxIdRelease, release_max_id


def make_known(
    platform: Platform, stream: str, *, epsilon: float = 1e-3, context: str | None = None
) -> MaxIdRelease:
    """Release a maximum id of ``stream`` that makes every block of it known (module
    docstring); ``epsilon`` is charged to every block in ``context`` (default: a new context
    ``ids-{stream}``, closed after the release)."""
    own = context is None
    ctx = f"ids-{stream}" if context is None else context
    if own:
        platform.add_context(ctx)
    release = release_max_id(platform, stream, context=ctx, epsilon=epsilon, noise=ShiftNoise(1e12))
    if own:
        platform.ledger.close_context(ctx)
    return release


class ShiftNoise(NoiseSource):
    """Adds a fixed shift instead of noise (tests only; the release says secure_noise=False)."""

    def __init__(self, shift: float) -> None:
        self.shift = shift

    def _laplace(self, values: np.ndarray, scale: float) -> np.ndarray:  # type: ignore[type-arg]
        return values + self.shift

    def _gaussian(self, values: np.ndarray, sigma: float) -> np.ndarray:  # type: ignore[type-arg]
        raise AssertionError("not used")

"""Test doubles for the mechanisms: an in-memory budget source and non-random noise sources.

``NoNoise`` exists only here, in the tests: the library itself has no zero-noise source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from blockbudget.accounting import Accounting
from blockbudget.budget import Cost
from blockbudget.errors import BudgetExceededError
from blockbudget.mechanisms.noise import FloatArray, NoiseKind, NoiseSource


@dataclass
class FakeSource:
    """An in-memory BudgetSource that records draws, optionally refusing them."""

    rule: Accounting = Accounting.BASIC
    events: list[str] = field(default_factory=list)
    draws: list[tuple[Cost, str]] = field(default_factory=list)
    refuse: bool = False

    @property
    def accounting(self) -> Accounting:
        return self.rule

    def draw(self, cost: Cost, *, label: str) -> None:
        self.events.append(f"draw:{label}")
        if self.refuse:
            raise BudgetExceededError(
                blocks=["b0"],
                requested=str(cost),
                remaining=["(ε=0, δ=0)"],
                difference=[str(cost)],
                context="default",
                rule=self.rule.value,
            )
        self.draws.append((cost, label))


@dataclass(frozen=True)
class NoiseCall:
    kind: NoiseKind
    scale: float
    values: tuple[float, ...]


class NoNoise(NoiseSource):
    """Returns the values unchanged and records every call (kind, scale, exact values)."""

    secure = False

    def __init__(self, events: list[str] | None = None) -> None:
        self.calls: list[NoiseCall] = []
        self.selections: list[tuple[int, float, tuple[float, ...]]] = []
        self.events = events if events is not None else []

    def _record(self, kind: NoiseKind, values: FloatArray, scale: float) -> FloatArray:
        self.calls.append(NoiseCall(kind, scale, tuple(float(v) for v in values)))
        self.events.append(f"noise:{kind.value}")
        return values.copy()

    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        return self._record(NoiseKind.LAPLACE, values, scale)

    def _gaussian(self, values: FloatArray, sigma: float) -> FloatArray:
        return self._record(NoiseKind.GAUSSIAN, values, sigma)

    def _top_k(self, values: FloatArray, k: int, scale: float) -> NDArray[np.intp]:
        """The exact top k (ties to the lower index), recorded as a Gumbel selection."""
        self.selections.append((k, scale, tuple(float(v) for v in values)))
        self.events.append("noise:gumbel")
        return np.argsort(-values, kind="stable")[:k].astype(np.intp)


class ShiftNoise(NoNoise):
    """Adds a fixed offset per call (offsets[i] to the i-th call), to test post-processing."""

    def __init__(self, *offsets: float) -> None:
        super().__init__()
        self.offsets = offsets

    def _offset(self) -> float:
        return self.offsets[len(self.calls) - 1]

    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        return super()._laplace(values, scale) + self._offset()

    def _gaussian(self, values: FloatArray, sigma: float) -> FloatArray:
        return super()._gaussian(values, sigma) + self._offset()


class RecordingNoise(NoiseSource):
    """Delegates to another noise source and records (kind, scale, size) of every call."""

    def __init__(self, inner: NoiseSource) -> None:
        self.inner = inner
        self.secure = inner.secure
        self.calls: list[tuple[NoiseKind, float, int]] = []

    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        self.calls.append((NoiseKind.LAPLACE, scale, int(values.size)))
        return np.asarray(self.inner.add_laplace(values, scale=scale))

    def _gaussian(self, values: FloatArray, sigma: float) -> FloatArray:
        self.calls.append((NoiseKind.GAUSSIAN, sigma, int(values.size)))
        return np.asarray(self.inner.add_gaussian(values, sigma=sigma))

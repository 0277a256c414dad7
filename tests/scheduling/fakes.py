"""A zero-noise source that records the Laplace scales asked for (tests only)."""

from __future__ import annotations

from blockbudget.mechanisms.noise import FloatArray, NoiseSource


class ZeroNoise(NoiseSource):
    """Adds nothing; records every Laplace scale requested."""

    secure = False

    def __init__(self) -> None:
        self.scales: list[float] = []

    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        self.scales.append(scale)
        return values.copy()

    def _gaussian(self, values: FloatArray, sigma: float) -> FloatArray:
        return values.copy()

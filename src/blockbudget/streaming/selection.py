"""Private selection for DPI's two reweighting directions: report-noisy-max with exponential noise.

Each direction of a DPI slot (seed ``002_e6d4c77f2abb3a16.txt`` Alg. 1) draws an index — a query
from
the pool, or a synopsis from the pool — with probability growing as ``w_j·exp(α·s_j)``: public
weights w (the boosted P_Q or P_A) times the exponential of a data-dependent score s whose
ℓ∞-sensitivity is ``d``. We implement it as report-noisy-max on ``s_j + ln(w_j)/α`` with exponential
noise of scale ``1/α`` (≡ permute-and-flip, McKenna & Sheldon 2020), which is ``2·α·d``-DP; the
public offset ``ln(w)/α`` does not change the sensitivity (its float rounding is added to d).

* :class:`SecureSelector` (default) — OpenDP 0.16's ``make_noisy_max`` (floating-point safe,
  OS entropy); its privacy map is checked to be within the ε charged.
* :class:`SeededSelector` — numpy, the same mechanism, **for tests and experiments only**
  (``secure = False``; results say so).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import numpy.typing as npt

from blockbudget.decimals import plain_number
from blockbudget.errors import InternalError, InvalidRequestError

FloatArray = npt.NDArray[np.float64]


def scale_for(*, epsilon: float, sensitivity: float) -> float:
    """Noise scale of an ε-DP report-noisy-max over scores of ℓ∞-sensitivity d: 2d/ε, nudged up."""
    epsilon, sensitivity = plain_number(epsilon), plain_number(sensitivity)
    if not (epsilon > 0 and sensitivity > 0):
        raise InvalidRequestError(
            f"selection needs epsilon > 0 and sensitivity > 0, got {epsilon!r} and {sensitivity!r}"
        )
    return float(np.nextafter(2.0 * sensitivity / epsilon * (1.0 + 1e-12), np.inf))


class Selector(ABC):
    """Draws the index of a noisy maximum. ``secure`` says whether it may touch real data."""

    secure: bool

    def select(self, scores: FloatArray, *, epsilon: float, sensitivity: float) -> int:
        """An ε-DP noisy argmax of ``scores`` whose entries move by at most ``sensitivity``."""
        values = np.asarray(scores, dtype=np.float64)
        if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
            raise InvalidRequestError("scores must be a non-empty 1-d array of finite numbers")
        # Rounding of the public offsets can move an entry by up to one ulp of its magnitude.
        d = float(sensitivity) + 2.0 * float(np.spacing(np.abs(values).max()))
        return self._select(values, scale_for(epsilon=epsilon, sensitivity=d), d, epsilon)

    @abstractmethod
    def _select(self, values: FloatArray, scale: float, sensitivity: float, epsilon: float) -> int:
        """Index of the noisy max."""


class SecureSelector(Selector):
    """OpenDP's ``make_noisy_max`` (max-divergence, exponential noise) — the default."""

    secure = True

    def __init__(self) -> None:
        from blockbudget.mechanisms.noise import opendp_modules

        dp = opendp_modules()
        self._dp: Any = dp
        self._space: Any = (
            dp.vector_domain(dp.atom_domain(T=float, nan=False)),
            dp.linf_distance(T=float),
        )

    def _select(self, values: FloatArray, scale: float, sensitivity: float, epsilon: float) -> int:
        dp = self._dp
        meas = dp.m.make_noisy_max(*self._space, dp.max_divergence(), scale=scale)
        if float(meas.map(sensitivity)) > epsilon * (1.0 + 1e-9):
            raise InternalError(
                f"noisy max would spend {meas.map(sensitivity)} > the {epsilon} charged"
            )
        return int(meas(values.tolist()))

    def __repr__(self) -> str:
        return "SecureSelector()"


class SeededSelector(Selector):
    """numpy report-noisy-max with exponential noise. **FOR TESTS AND EXPERIMENTS ONLY.**"""

    secure = False

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def _select(self, values: FloatArray, scale: float, sensitivity: float, epsilon: float) -> int:
        return int(np.argmax(values + self._rng.exponential(scale, size=values.shape)))

    def __repr__(self) -> str:
        return "SeededSelector() [INSECURE: tests and experiments only]"

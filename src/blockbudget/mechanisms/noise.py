"""Noise sources: where the randomness of every mechanism comes from.

Invariant 7 in docs/architecture.md, *secure noise by default*: every mechanism takes
``noise: NoiseSource | None = None`` and ``None`` means :class:`SecureNoise`, which draws from
OpenDP's floating-point-safe samplers. Textbook samplers that transform a uniform double (inverse
CDF, Box–Muller) leave holes and biases in the low-order bits of their output that can reveal the
input exactly (Mironov, "On significance of the least significant bits for differential privacy",
CCS 2012). OpenDP 0.16 instead samples the exact real-valued result ``x + noise`` and rounds it
once to the nearest double (``make_laplace`` / ``make_gaussian`` on float domains; proofs linked
from the OpenDP 0.16 documentation). That is why a :class:`NoiseSource` *perturbs values* rather
than handing out noise to be added by the caller: adding a pre-rounded noise sample to a value in
floating point would round twice and bring the leak back.

:class:`SeededNoise` is a reproducible numpy generator for experiments and tests only; it says so
through ``secure = False``, and every result produced with it carries ``secure_noise=False``.

Throughput (measured with OpenDP 0.16 on the development machine, see docs/mechanisms.md):
tens of thousands of secure samples per second, so vectors are always perturbed in one call.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from enum import Enum
from types import SimpleNamespace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from blockbudget.decimals import plain_number
from blockbudget.errors import DataError, InvalidBudgetError, InvalidRequestError

FloatArray = NDArray[np.float64]


class NoiseKind(Enum):
    """The noise distribution of one perturbation."""

    LAPLACE = "laplace"
    GAUSSIAN = "gaussian"


class Selection(Enum):
    """A noisy selection: a release of indices (which coordinates are largest), never of the
    noisy values themselves.

    Attributes:
        GUMBEL: one-shot Gumbel top-k (:meth:`NoiseSource.top_k`).
    """

    GUMBEL = "gumbel"


def _check_scale(scale: float, *, name: str) -> float:
    scale = plain_number(scale)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise InvalidBudgetError(f"{name} must be a float, got {type(scale).__name__}")
    value = float(scale)
    if not (value > 0 and math.isfinite(value)):
        raise InvalidBudgetError(f"{name} must be finite and > 0, got {scale!r}")
    return value


def _check_values(values: FloatArray) -> FloatArray:
    arr = np.ascontiguousarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise DataError(f"noise is added to a 1-D vector, got an array of shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise DataError(
            "values to perturb must be finite: clip or drop NaN/inf before adding noise "
            f"({int(np.count_nonzero(~np.isfinite(arr)))} non-finite value(s))"
        )
    return arr


class NoiseSource(ABC):
    """The contract of a noise source: perturb a vector of values in one call.

    Attributes:
        secure: True only for floating-point-safe samplers fit for releases on real data;
            False unless a subclass says otherwise.
    """

    secure: bool = False

    def add_laplace(self, values: FloatArray, *, scale: float) -> FloatArray:
        """Return ``values`` plus i.i.d. Laplace(0, ``scale``) noise, one draw per entry.

        Args:
            values: a finite 1-D float vector.
            scale: the Laplace scale b > 0 (the standard deviation is b·√2).

        Raises:
            InvalidBudgetError: if ``scale`` is not finite and positive.
            DataError: if ``values`` is not a finite 1-D vector.
        """
        b = _check_scale(scale, name="Laplace scale")
        arr = _check_values(values)
        if arr.size == 0:
            return arr.copy()
        return self._laplace(arr, b)

    def add_gaussian(self, values: FloatArray, *, sigma: float) -> FloatArray:
        """Return ``values`` plus i.i.d. N(0, ``sigma``²) noise, one draw per entry.

        Raises:
            InvalidBudgetError: if ``sigma`` is not finite and positive.
            DataError: if ``values`` is not a finite 1-D vector.
        """
        s = _check_scale(sigma, name="Gaussian sigma")
        arr = _check_values(values)
        if arr.size == 0:
            return arr.copy()
        return self._gaussian(arr, s)

    def add(self, kind: NoiseKind, values: FloatArray, *, scale: float) -> FloatArray:
        """Dispatch on ``kind``: Laplace scale b or Gaussian standard deviation σ."""
        if kind is NoiseKind.LAPLACE:
            return self.add_laplace(values, scale=scale)
        return self.add_gaussian(values, sigma=scale)

    def top_k(self, values: FloatArray, *, k: int, scale: float) -> NDArray[np.intp]:
        """The indices of the ``k`` largest of ``values`` + i.i.d. Gumbel(0, ``scale``) noise,
        largest first — only the indices, never the noisy values.

        One-shot Gumbel top-k has the distribution of k rounds of peeling with the exponential
        mechanism that picks i with probability ∝ exp(vᵢ/scale) (Durfee & Rogers, "Practical
        Differentially Private Top-k Selection with Pay-what-you-get Composition", NeurIPS
        2019, Lemma 4.2): on scores that one row moves by at most Δ, all in the same direction
        (counts under add/remove), each round is (Δ/scale)-DP and (Δ/scale)-bounded-range.

        Raises:
            InvalidBudgetError: a scale that is not finite and positive.
            InvalidRequestError: ``k`` not in [1, len(values)], or a source that does not
                sample selections.
            DataError: values that are not a finite 1-D vector.
        """
        s = _check_scale(scale, name="Gumbel scale")
        arr = _check_values(values)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= arr.size:
            raise InvalidRequestError(f"top-k needs 1 ≤ k ≤ {arr.size} candidates, got k={k!r}")
        return self._top_k(arr, k, s)

    def _top_k(self, values: FloatArray, k: int, scale: float) -> NDArray[np.intp]:
        """Select from validated, non-empty, finite values (a source that selects overrides
        it)."""
        raise InvalidRequestError(f"{type(self).__name__} does not sample top-k selections")

    def laplace_samples(self, n: int, *, scale: float) -> FloatArray:
        """``n`` Laplace(0, scale) samples (zeros perturbed in one call)."""
        return self.add_laplace(np.zeros(n, dtype=np.float64), scale=scale)

    def gaussian_samples(self, n: int, *, sigma: float) -> FloatArray:
        """``n`` N(0, sigma²) samples (zeros perturbed in one call)."""
        return self.add_gaussian(np.zeros(n, dtype=np.float64), sigma=sigma)

    @abstractmethod
    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        """Perturb validated, non-empty, finite values with Laplace noise."""

    @abstractmethod
    def _gaussian(self, values: FloatArray, sigma: float) -> FloatArray:
        """Perturb validated, non-empty, finite values with Gaussian noise."""


def opendp_modules() -> SimpleNamespace:
    """The parts of OpenDP the mechanisms use, with its ``contrib`` features enabled.

    Imports only ``opendp.mod``, ``domains``, ``metrics``, ``measures`` and ``measurements``
    — not ``opendp.prelude``, which also imports OpenDP's extras (scikit-learn, polars, …:
    about 3 s of CPU and 150 MiB per process) that no mechanism here uses.

    Returns:
        A namespace with ``m`` (measurements) and the domain, metric and measure
        constructors: ``vector_domain``, ``atom_domain``, ``l1_distance``, ``l2_distance``,
        ``linf_distance``, ``max_divergence``, ``zero_concentrated_divergence``.

    Example:
        >>> dp = opendp_modules()
        >>> meas = dp.m.make_laplace(
        ...     dp.vector_domain(dp.atom_domain(T=float, nan=False)),
        ...     dp.l1_distance(T=float),
        ...     scale=1.0,
        ... )
        >>> len(meas([0.0, 0.0]))
        2
    """
    import opendp.domains as domains
    import opendp.measurements as measurements
    import opendp.measures as measures
    import opendp.metrics as metrics
    import opendp.mod as mod

    mod.enable_features("contrib")
    return SimpleNamespace(
        m=measurements,
        vector_domain=domains.vector_domain,
        atom_domain=domains.atom_domain,
        l1_distance=metrics.l1_distance,
        l2_distance=metrics.l2_distance,
        linf_distance=metrics.linf_distance,
        max_divergence=measures.max_divergence,
        zero_concentrated_divergence=measures.zero_concentrated_divergence,
    )


class SecureNoise(NoiseSource):
    """The default noise source: OpenDP 0.16's floating-point-safe samplers.

    Top-k selections: ``dp.m.make_noisy_top_k`` with Gumbel noise (its ``zero_concentrated_
    divergence`` form) over a monotone ``linf_distance``.

    Laplace: ``dp.m.make_laplace(vector_domain(atom_domain(T=float, nan=False)),
    l1_distance(T=float), scale=b)``. Gaussian: ``dp.m.make_gaussian`` on the same vector domain
    with ``l2_distance(T=float)`` (OpenDP 0.16 supports float vectors with the L2 metric; its
    privacy map is ρ-zCDP, ρ = Δ²/(2σ²)). Both sample the exact perturbed real and round it once
    (Mironov CCS 2012 explains why this matters). A measurement is built per call (≈15 µs) and
    applied to the whole vector, so a vector costs one call.

    OpenDP does not check its input domain when a measurement is invoked (a NaN input returns a
    number), so :class:`NoiseSource` rejects non-finite values before they reach it.
    """

    secure = True

    def __init__(self) -> None:
        dp = opendp_modules()
        self._dp: Any = dp
        self._domain: Any = dp.vector_domain(dp.atom_domain(T=float, nan=False))

    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        dp = self._dp
        meas = dp.m.make_laplace(self._domain, dp.l1_distance(T=float), scale=scale)
        return np.asarray(meas(values.tolist()), dtype=np.float64)

    def _gaussian(self, values: FloatArray, sigma: float) -> FloatArray:
        dp = self._dp
        meas = dp.m.make_gaussian(self._domain, dp.l2_distance(T=float), scale=sigma)
        return np.asarray(meas(values.tolist()), dtype=np.float64)

    def _top_k(self, values: FloatArray, k: int, scale: float) -> NDArray[np.intp]:
        # OpenDP's noisy top-k with Gumbel noise (its zCDP form; scores monotone in the data):
        # it samples the selection exactly, not from rounded noisy doubles.
        dp = self._dp
        meas = dp.m.make_noisy_top_k(
            self._domain,
            dp.linf_distance(T=float, monotonic=True),
            dp.zero_concentrated_divergence(),
            k=k,
            scale=scale,
        )
        return np.asarray(meas(values.tolist()), dtype=np.intp)

    def __repr__(self) -> str:
        return "SecureNoise()"


class SeededNoise(NoiseSource):
    """A reproducible numpy noise source. **FOR EXPERIMENTS AND TESTS ONLY.**

    Warning:
        Not fit for releasing statistics about real people. Its samples come from
        ``numpy.random.Generator`` transforms of uniform doubles, which are not
        floating-point safe (Mironov, CCS 2012), and anyone who knows the seed can subtract the
        noise. ``secure`` is False and every result produced with it carries
        ``secure_noise=False``. Use it to make experiments and distribution tests reproducible.

    Args:
        seed: the generator's seed.
    """

    secure = False

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidRequestError(f"seed must be an int, got {type(seed).__name__}")
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        return values + self._rng.laplace(0.0, scale, size=values.shape)

    def _gaussian(self, values: FloatArray, sigma: float) -> FloatArray:
        return values + self._rng.normal(0.0, sigma, size=values.shape)

    def _top_k(self, values: FloatArray, k: int, scale: float) -> NDArray[np.intp]:
        scores = values + self._rng.gumbel(0.0, scale, size=values.shape)
        return np.argsort(-scores, kind="stable")[:k].astype(np.intp)

    def __repr__(self) -> str:
        return f"SeededNoise(seed={self.seed}) [INSECURE: experiments and tests only]"


_DEFAULT: SecureNoise | None = None


def resolve_noise(noise: NoiseSource | None) -> NoiseSource:
    """``noise`` itself, or the shared :class:`SecureNoise` when it is None (invariant 7).

    Raises:
        InvalidRequestError: if ``noise`` is not a :class:`NoiseSource`.
    """
    global _DEFAULT
    if noise is None:
        if _DEFAULT is None:
            _DEFAULT = SecureNoise()
        return _DEFAULT
    if not isinstance(noise, NoiseSource):
        raise InvalidRequestError(
            f"noise must be a NoiseSource (SecureNoise, SeededNoise), got {type(noise).__name__}"
        )
    return noise

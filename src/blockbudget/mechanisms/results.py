"""Frozen result values of DP releases.

A result holds the noisy value(s) and public metadata only: the cost drawn, the mechanism, the
noise scales and sensitivities, and whether the noise was secure. It never holds input rows, and
deliberately not data-dependent side counts either — e.g. *how many rows were clipped or
dropped* is an exact statistic of the data that the drawn ε does not cover, so it is not
reported (estimate it with its own DP count if needed).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from blockbudget.budget import Cost
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseKind, Selection

V = TypeVar("V")


@dataclass(frozen=True)
class Perturbation:
    """One noisy release inside a result: public parameters only.

    Attributes:
        name: what was perturbed ("value", "count", "sum", "sum_squares", "counts", ...).
        kind: Laplace or Gaussian noise, or a Gumbel top-k :class:`~blockbudget.mechanisms.
            noise.Selection` (which releases indices, not noisy values).
        scale: the parameter passed to the sampler: Laplace b, Gaussian σ or Gumbel scale.
        sensitivity: L1 (Laplace) or L2 (Gaussian) sensitivity the scale was calibrated to;
            for a selection, how far one row moves each score (its L∞ sensitivity, monotone).
        size: how many coordinates were perturbed.
        epsilon: the share of ε this part was calibrated to (None when σ was given directly).
        picks: for a selection, how many indices each group's selection releases (k); 1
            otherwise.
    """

    name: str
    kind: NoiseKind | Selection
    scale: float
    sensitivity: float
    size: int
    epsilon: Decimal | None
    picks: int = 1


@dataclass(frozen=True)
class DPResult(Generic[V]):
    """A differentially private release.

    Attributes:
        value: the noisy output (a float, a tuple of floats, a :class:`Histogram` or
            :class:`GroupMeans`).
        cost: what was drawn from the budget source (a Budget or an RdpCurve).
        mechanism: the mechanism or statistic's name.
        perturbations: every noisy part of the release, with its scale and sensitivity.
        secure_noise: True iff the noise came from a floating-point-safe sampler (SecureNoise);
            False for SeededNoise — such results are for experiments and tests only.
        label: the label the cost was drawn under.
    """

    value: V
    cost: Cost
    mechanism: str
    perturbations: tuple[Perturbation, ...]
    secure_noise: bool
    label: str

    def _single(self) -> Perturbation:
        if len(self.perturbations) != 1:
            raise InvalidRequestError(
                f"{self.mechanism} made {len(self.perturbations)} perturbations; "
                "read result.perturbations for their scales and sensitivities"
            )
        return self.perturbations[0]

    @property
    def noise_scale(self) -> float:
        """Laplace b or Gaussian σ of a single-part release (InvalidRequestError otherwise)."""
        return self._single().scale

    @property
    def sensitivity(self) -> float:
        """The sensitivity of a single-part release (InvalidRequestError otherwise)."""
        return self._single().sensitivity

    @property
    def noise_summary(self) -> str:
        """Every part's noise in one line, e.g. ``count: laplace b=2 (Δ=1); sum: ...``."""
        return "; ".join(
            f"{p.name}: {p.kind.value} {'b' if p.kind is NoiseKind.LAPLACE else 'σ'}="
            f"{p.scale:.6g} (Δ={p.sensitivity:.6g})"
            for p in self.perturbations
        )


@dataclass(frozen=True)
class Histogram:
    """Noisy per-category counts; indexes and iterates like the tuple :attr:`counts`
    (``hist[i]`` is the count of ``categories[i]``; use :meth:`as_dict` to look up by category).

    Attributes:
        categories: the public categories, in the order given.
        counts: one noisy count per category.
        other: the noisy count of values outside the categories when they were binned into an
            "other" bin (``Unmatched.OTHER``); None when they were dropped.
    """

    categories: tuple[Hashable, ...]
    counts: tuple[float, ...]
    other: float | None

    def as_dict(self) -> dict[Hashable, float]:
        """``{category: noisy count}`` (without the "other" bin)."""
        return dict(zip(self.categories, self.counts, strict=True))

    def __getitem__(self, index: int) -> float:
        """The noisy count of ``categories[index]`` (positional, like a tuple)."""
        return self.counts[index]

    def __len__(self) -> int:
        return len(self.counts)

    def __iter__(self) -> Iterator[float]:
        return iter(self.counts)


@dataclass(frozen=True)
class GroupMeans:
    """Noisy per-key means as Sage's ``dp_group_by_mean`` computes them (seed 001 List. 1).

    Attributes:
        keys: the public keys (``range(nkeys)`` or the categories given).
        counts: noisy count per key (Laplace 2/ε).
        sums: noisy sum of clipped values per key (Laplace 2·value_range/ε).
        means: ``sums / counts`` per key, exactly the seed's ratio (it can leave [0, range] or be
            huge when a noisy count is near zero).
        value_range: values were clipped into [0, value_range].
    """

    keys: tuple[Hashable, ...]
    counts: tuple[float, ...]
    sums: tuple[float, ...]
    means: tuple[float, ...]
    value_range: float

    @property
    def clamped_means(self) -> tuple[float, ...]:
        """Post-processed means (free in privacy): ``sum / max(count, 1)`` clipped into
        [0, value_range]."""
        out = []
        for s, c in zip(self.sums, self.counts, strict=True):
            out.append(min(max(s / max(c, 1.0), 0.0), self.value_range))
        return tuple(out)

    def as_dict(self, *, clamped: bool = False) -> dict[Hashable, float]:
        """``{key: mean}``; the seed's raw ratio, or :attr:`clamped_means`."""
        values = self.clamped_means if clamped else self.means
        return dict(zip(self.keys, values, strict=True))

    def lookup(self, keys: Sequence[Hashable] | NDArray[Any]) -> NDArray[np.float64]:
        """The per-row feature Sage returns (``tf.gather(dp_sums/dp_counts, key_tensor)``):
        each key replaced by its noisy mean; NaN for a key not in :attr:`keys`."""
        table = {k: m for k, m in zip(self.keys, self.means, strict=True)}
        return np.array([table.get(k, math.nan) for k in keys], dtype=np.float64)

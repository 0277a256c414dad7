"""The 0-DP synopsis pool (seed ``002_e6d4c77f2abb3a16.txt`` §4.2, App. C, Alg. 2).

A pool of N PDFs over the declared domain, generated **without touching any data** (0-DP):
quantise probability into units of size p and distribute ``n_u`` units over the k categories by
multinomial sampling (Alg. 2). Each synopsis is stored as its ``n_u`` unit positions (an N × n_u
int array), so its answer to any linear query is a mean over its units and the pool's mixture is one
``bincount`` — memory and time O(N·n_u), independent of k.

Two readings (``PoolDesign``):

* ``UNIFORM`` — Alg. 2 as printed: every unit lands uniformly (``Prob = 1/k``). Every synopsis is
  then
  close to the uniform PDF (its largest mass is a few units), so no mixture of them can express a
  skewed stream. Kept for comparison.
* ``DIRICHLET`` (default) — the same multinomial sampling, but each synopsis first draws its own
  category probabilities from a symmetric Dirichlet(β) (still data-independent). Small β gives
  concentrated synopses, so the pool spans the simplex — App. C's "universe of PDFs". Measured:
  at k = 105, N = 1,000, p = 0.02 no synopsis held more than 0.46–0.64 of its mass on one item
  (depending on the seed), so a point query's measurement (the drawn synopsis' answer) never
  exceeds that.
* ``SPIKED`` — the Dirichlet pool in which every other synopsis gets a spike: a uniformly drawn
  item receives a share m of its units, m uniform on [0.3, 0.98] (still data-independent, so the
  pool stays 0-DP). A mixture can then express a PDF with 90% of its mass on one item, and a
  point query can be measured near 0.9.

We use ``n_u = round(1/p)`` units (the paper's ``n_p = 1/p + 1`` would make each synopsis sum to
1 + p, contradicting its own "sum of P_i is 1").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import numpy.typing as npt

from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError

FloatArray = npt.NDArray[np.float64]

MAX_POOL_CELLS = 200_000_000
"""Largest N × (units or Dirichlet support) a pool may allocate (≈ 1.6 GB of int64)."""
IntArray = npt.NDArray[np.int64]


class PoolDesign(Enum):
    """How the multinomial's category probabilities are chosen (see the module docstring)."""

    UNIFORM = "uniform"
    DIRICHLET = "dirichlet"
    SPIKED = "spiked"


@dataclass(frozen=True)
class SynopsisPool:
    """N quantised PDFs, as unit positions.

    Attributes:
        domain_size: k.
        units: the N × n_u array of unit positions (each row is one synopsis).
    """

    domain_size: int
    units: IntArray = field(repr=False)

    def __post_init__(self) -> None:
        if self.units.ndim != 2 or self.units.shape[0] < 1 or self.units.shape[1] < 1:
            raise InvalidRequestError(f"units must be an N x n_u array, got {self.units.shape}")
        if int(self.units.min()) < 0 or int(self.units.max()) >= self.domain_size:
            raise InvalidRequestError("every unit must lie in the domain [0, k)")

    @classmethod
    def generate(
        cls,
        *,
        domain_size: int,
        size: int,
        precision: float,
        design: PoolDesign = PoolDesign.DIRICHLET,
        concentration: float = 0.1,
        rng: np.random.Generator | None = None,
    ) -> SynopsisPool:
        """Alg. 2: N = ``size`` synopses, quantisation p = ``precision``, from ``rng`` only.

        Args:
            domain_size: k ≥ 1.
            size: N ≥ 1.
            precision: p ∈ (0, 1]; each synopsis has ``round(1/p)`` units of mass p.
            design: see :class:`PoolDesign`.
            concentration: β > 0 of the Dirichlet design.
            rng: a numpy Generator (OS entropy when None); the pool never sees data.
        """
        domain_size = plain_number(domain_size)
        if isinstance(domain_size, bool) or not isinstance(domain_size, int) or domain_size < 1:
            raise InvalidRequestError(f"domain_size must be an int >= 1, got {domain_size!r}")
        size = plain_number(size)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidRequestError(f"pool size N must be an int >= 1, got {size!r}")
        if not (isinstance(precision, (int, float)) and 0 < precision <= 1):
            raise InvalidRequestError(f"precision p must lie in (0, 1], got {precision!r}")
        if not (math.isfinite(concentration) and concentration > 0):
            raise InvalidRequestError(f"concentration must be > 0, got {concentration!r}")
        if not isinstance(design, PoolDesign):
            raise InvalidRequestError(f"design must be a PoolDesign, got {design!r}")
        n_units = max(1, round(1.0 / precision))
        cells = size * max(n_units, min(domain_size, max(8, 4 * n_units)))
        if cells > MAX_POOL_CELLS:
            raise InvalidRequestError(
                f"a pool of N={size} synopses at p={precision} over k={domain_size} needs "
                f"{cells} cells, above the limit {MAX_POOL_CELLS}; use a smaller N or a larger p"
            )
        gen = rng if rng is not None else np.random.default_rng()
        if design is PoolDesign.UNIFORM:
            units = gen.integers(0, domain_size, size=(size, n_units), dtype=np.int64)
        else:
            # A Dirichlet(β) draw per synopsis (via Gamma variables) over the categories it can
            # reach — all k when k is small, else 4·n_u (at least 8) random ones — then n_u
            # multinomial units by inverse CDF, one vectorised searchsorted for the whole pool.
            support = min(domain_size, max(8, 4 * n_units))
            if support < domain_size:
                cats = gen.integers(0, domain_size, size=(size, support), dtype=np.int64)
            else:
                cats = np.tile(np.arange(domain_size, dtype=np.int64), (size, 1))
            gam = gen.gamma(concentration, 1.0, size=cats.shape)
            gam_sum = gam.sum(axis=1, keepdims=True)
            gam_sum[gam_sum == 0] = 1.0
            cdf = np.cumsum(gam / gam_sum, axis=1)
            cdf[:, -1] = 1.0
            offset = np.arange(size, dtype=np.float64)[:, None] * 2.0
            flat = (cdf + offset).ravel()
            draws = (gen.random((size, n_units)) + offset).ravel()
            pos = np.searchsorted(flat, draws, side="left").reshape(size, n_units)
            pos -= np.arange(size, dtype=np.int64)[:, None] * support
            pos = np.clip(pos, 0, support - 1)
            units = np.take_along_axis(cats, pos, axis=1)
            if design is PoolDesign.SPIKED:
                _add_spikes(units, domain_size=domain_size, rng=gen)
        return cls(domain_size=domain_size, units=np.ascontiguousarray(units))

    @property
    def max_share(self) -> float:
        """The largest mass any synopsis puts on one item."""
        best = 0
        for row in self.units:
            best = max(best, int(np.bincount(row).max()))
        return best / self.n_units

    @property
    def size(self) -> int:
        """N."""
        return int(self.units.shape[0])

    @property
    def n_units(self) -> int:
        """Units per synopsis, ``round(1/p)``."""
        return int(self.units.shape[1])

    def mixture(self, weights: FloatArray) -> FloatArray:
        """``Σ_a w_a·a`` for weights over the pool summing to 1: a PDF over the domain."""
        per_unit = np.repeat(weights / self.n_units, self.n_units)
        mixed = np.bincount(self.units.ravel(), weights=per_unit, minlength=self.domain_size)
        return np.asarray(mixed, dtype=np.float64)

    def dense(self) -> FloatArray:
        """The N × k matrix of the synopses (for small pools and tests)."""
        out = np.zeros((self.size, self.domain_size))
        rows = np.repeat(np.arange(self.size), self.n_units)
        np.add.at(out, (rows, self.units.ravel()), 1.0 / self.n_units)
        return out


def _add_spikes(units: IntArray, *, domain_size: int, rng: np.random.Generator) -> None:
    """In place: every other synopsis puts a share m ~ U[0.3, 0.98] of its units on one uniformly
    drawn item (``PoolDesign.SPIKED``; data-independent)."""
    n, n_units = units.shape
    rows = np.arange(0, n, 2)
    items = rng.integers(0, domain_size, size=rows.size, dtype=np.int64)
    counts = np.rint(rng.uniform(0.3, 0.98, size=rows.size) * n_units).astype(np.int64)
    for row, item, count in zip(rows, items, counts, strict=True):
        units[row, :count] = item

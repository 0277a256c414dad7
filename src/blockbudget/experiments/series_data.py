"""Shared pieces of the series experiments: data sets, a metered source, clustering metrics.

* :func:`unbalance_like` — seed 003 §7.2.1's "Unbalance" benchmark rebuilt with a fixed seed:
  8 Gaussian clusters, 6,500 2-D points, 3 dense clusters of 2,000 and 5 sparse ones of 100
  (the original, from the Joensuu clustering benchmarks, is itself synthetic; it is not
  bundled offline, so we generate one with the same shape: a dense group on one side, the
  small clusters spread on the other).
* :func:`birch3_like` — "Birch3": 100,000 2-D points in 100 clusters of random sizes at random
  locations (clusters not explicit); the experiments fit k = 20.
* :func:`weighted_f1` — Eq. 38–39 with Kuhn–Munkres matching of found to true clusters.
* :func:`nivc` — Eq. 40, the normalized intra-cluster variance.
* :class:`MeteredSource` — an in-memory BudgetSource with an exact cap, so experiments draw
  every ε_i through the same contract a Grant implements (and overspending would raise).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import linear_sum_assignment

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Cost
from blockbudget.errors import InvalidRequestError, ReservationError
from blockbudget.series.kmeans import assign

FloatMatrix = NDArray[np.float64]
Labels = NDArray[np.intp]


class MeteredSource:
    """A BudgetSource for simulations: sums draws exactly and refuses to pass ``cap``.

    It guards no real data; it exists so that the experiments exercise the same draw-then-noise
    path as a platform Grant.
    """

    def __init__(self, cap: Budget) -> None:
        self.cap = cap
        self.spent = Budget.zero()
        self.draws = 0

    @property
    def accounting(self) -> Accounting:
        return Accounting.BASIC

    def draw(self, cost: Cost, *, label: str) -> None:
        if not isinstance(cost, Budget):
            raise InvalidRequestError(f"a BASIC source takes Budget costs, got {cost!r}")
        total = self.spent + cost
        if not total <= self.cap:
            raise ReservationError(f"draw {label!r} of {cost} passes the cap {self.cap}")
        self.spent = total
        self.draws += 1


#: Unbalance-like layout on [0, 1]²: (centre x, centre y, standard deviation, size).
UNBALANCE_CLUSTERS: tuple[tuple[float, float, float, int], ...] = (
    (0.12, 0.30, 0.035, 2000),
    (0.30, 0.15, 0.035, 2000),
    (0.28, 0.48, 0.035, 2000),
    (0.62, 0.18, 0.030, 100),
    (0.86, 0.30, 0.030, 100),
    (0.66, 0.55, 0.030, 100),
    (0.90, 0.72, 0.030, 100),
    (0.62, 0.86, 0.030, 100),
)


def unbalance_like(seed: int = 2021) -> tuple[FloatMatrix, Labels]:
    """6,500 points in 8 clusters (3 × 2,000 dense, 5 × 100 sparse) in [0, 1]², with labels."""
    rng = np.random.default_rng(seed)
    parts = []
    labels = []
    for idx, (cx, cy, sd, size) in enumerate(UNBALANCE_CLUSTERS):
        parts.append(rng.normal((cx, cy), sd, size=(size, 2)))
        labels.append(np.full(size, idx, dtype=np.intp))
    points = np.clip(np.vstack(parts), 0.0, 1.0)
    return points, np.concatenate(labels)


def birch3_like(seed: int = 2021, *, n: int = 100_000, clusters: int = 100) -> FloatMatrix:
    """``n`` points in ``clusters`` Gaussian clusters of random sizes and locations in [0, 1]²."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.05, 0.95, size=(clusters, 2))
    sizes = rng.multinomial(n, rng.dirichlet(np.full(clusters, 1.0)))
    spreads = rng.uniform(0.01, 0.05, size=clusters)
    parts = [rng.normal(c, s, size=(m, 2)) for c, s, m in zip(centres, spreads, sizes, strict=True)]
    return np.clip(np.vstack(parts), 0.0, 1.0)


def weighted_f1(true_labels: Labels, found_labels: Labels, k: int) -> float:
    """F̄1 = Σ_i |O^i|/|D| · F1_i (seed 003 Eq. 38–39), found clusters matched to true ones by
    Kuhn–Munkres on the F1 matrix (scipy's ``linear_sum_assignment``, maximizing)."""
    true_k = int(true_labels.max()) + 1
    table = np.zeros((true_k, k), dtype=np.float64)
    np.add.at(table, (true_labels, found_labels), 1.0)
    true_sizes = table.sum(axis=1)
    found_sizes = table.sum(axis=0)
    denom = true_sizes[:, None] + found_sizes[None, :]
    f1 = np.divide(2.0 * table, denom, out=np.zeros_like(table), where=denom > 0)
    rows, cols = linear_sum_assignment(f1, maximize=True)
    per_true = np.zeros(true_k)
    per_true[rows] = f1[rows, cols]
    return float(np.sum(true_sizes / true_sizes.sum() * per_true))


def nivc(points: FloatMatrix, centroids: FloatMatrix) -> float:
    """(1/|D|) Σ_i Σ_{p ∈ O^i} ||p − o^i||² (seed 003 Eq. 40), each point in the cluster of its
    nearest released centroid o^i."""
    labels = assign(points, centroids)
    diff = points - centroids[labels]
    return float(np.einsum("ij,ij->", diff, diff) / points.shape[0])


def mean_and_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    m = math.fsum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    return m, math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))

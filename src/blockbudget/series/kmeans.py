"""Differentially private k-means with a per-iteration budget sequence.

Seed 003 (``003_a7fa9cb9080a05af.txt``) §7.2, Algorithm 1 — one iteration: partition the points
by the current centroids u_1 … u_k; for each cluster C_i release a noisy count c̄_i and a noisy
sum m̄_i; set u_i = m̄_i / c̄_i. The budget of iteration j is ε_j from a
:class:`~blockbudget.series.BudgetSequence` (AVG, Geo, Flip-Geo, AC-…), drawn through a
:class:`~blockbudget.series.split.SplitSource` over the caller's budget source (a Grant).

Sensitivity (seed 003 §7.2.1, "scale all dimensions to [−1, +1]"): the points are clipped to
public bounds and mapped affinely onto [−1, 1]^d. Under add/remove of one point exactly one
cluster changes: the k counts have L1 sensitivity 1, and the k·d sums L1 sensitivity d (a point
in [−1, 1]^d has L1 norm ≤ d), inflated by the float-summation slack of
:func:`~blockbudget.mechanisms.statistics.sum_sensitivity` (sums are computed with ``math.fsum``).
Each iteration spends ``count_fraction``·ε_j on the counts and the rest on the sums (Laplace
mechanism, Dwork & Roth 2014 Thm 3.6), so it is ε_j-DP by basic composition, and the run is
(Σ ε_j)-DP. The partition itself is computed on the private points but never released; the
centroid update, the clipping of centroids to [−1, 1]^d and keeping the old centroid when a
noisy count is below 1 are post-processing.

Initial centroids must not depend on the data: pass public ones, or let a seeded generator draw
them uniformly in the bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
from numpy.typing import NDArray

from blockbudget.decimals import plain_number, shortest_decimal
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.calibration import exact_epsilon, laplace_scale
from blockbudget.mechanisms.noise import NoiseKind, NoiseSource, resolve_noise
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.source import BudgetSource, draw_then_perturb, price
from blockbudget.mechanisms.statistics import sum_sensitivity
from blockbudget.series._exact import FLOOR
from blockbudget.series.sequence import BudgetSequence
from blockbudget.series.split import SplitSource

FloatMatrix = NDArray[np.float64]


@dataclass(frozen=True)
class KMeansResult:
    """The output of :func:`dp_kmeans` (public values only).

    Attributes:
        centroids: the final k × d centroids, in the original coordinates.
        history: the centroids after each iteration (original coordinates).
        epsilons: ε_j spent per iteration.
        secure_noise: whether the noise came from the secure sampler.
    """

    centroids: FloatMatrix
    history: tuple[FloatMatrix, ...]
    epsilons: tuple[Decimal, ...]
    secure_noise: bool


def _check_points(points: Any) -> FloatMatrix:
    try:
        arr = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"points must be a numeric n × d array: {exc}") from None
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DataError(f"points must be a non-empty n × d array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise DataError("points must be finite (no NaN or infinity)")
    return arr


def _check_bounds(lower: Any, upper: Any, d: int) -> tuple[FloatMatrix, FloatMatrix]:
    try:
        lo = np.broadcast_to(np.asarray(lower, dtype=np.float64), (d,)).copy()
        hi = np.broadcast_to(np.asarray(upper, dtype=np.float64), (d,)).copy()
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(
            f"bounds must be numbers or one per dimension ({d}), got {lower!r} and {upper!r}: {exc}"
        ) from None
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise InvalidRequestError(
            f"bounds must be finite with lower < upper in every dimension, got {lo} and {hi}"
        )
    return lo, hi


def to_unit_cube(points: FloatMatrix, lower: FloatMatrix, upper: FloatMatrix) -> FloatMatrix:
    """Clip to [lower, upper] and map affinely onto [−1, 1]^d (sensitivity normalization)."""
    clipped = np.clip(points, lower, upper)
    return np.clip(2.0 * (clipped - lower) / (upper - lower) - 1.0, -1.0, 1.0)


def from_unit_cube(points: FloatMatrix, lower: FloatMatrix, upper: FloatMatrix) -> FloatMatrix:
    """The inverse of :func:`to_unit_cube` (on [−1, 1]^d)."""
    return lower + (points + 1.0) * (upper - lower) / 2.0


def assign(points: FloatMatrix, centroids: FloatMatrix) -> NDArray[np.intp]:
    """The index of the nearest centroid of each point (squared Euclidean distance; ties go to
    the lower index)."""
    columns = [np.ascontiguousarray(points[:, j]) for j in range(points.shape[1])]
    labels = np.zeros(points.shape[0], dtype=np.intp)
    best = np.full(points.shape[0], np.inf)
    for c in range(centroids.shape[0]):
        dist = np.zeros(points.shape[0])
        for j, column in enumerate(columns):
            diff = column - centroids[c, j]
            dist += diff * diff
        closer = dist < best
        labels[closer] = c
        best[closer] = dist[closer]
    return labels


def cluster_stats(
    points: FloatMatrix, labels: NDArray[np.intp], k: int
) -> tuple[FloatMatrix, FloatMatrix]:
    """Exact per-cluster counts (k,) and ``math.fsum``'d sums (k, d)."""
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(k + 1))
    sums = np.zeros((k, points.shape[1]), dtype=np.float64)
    for j in range(points.shape[1]):
        column = points[order, j].tolist()
        for c in range(k):
            sums[c, j] = math.fsum(column[bounds[c] : bounds[c + 1]])
    return counts, sums


def lloyd_step(points: FloatMatrix, centroids: FloatMatrix) -> FloatMatrix:
    """One exact Lloyd iteration (empty clusters keep their centroid) — the zero-noise limit of
    one iteration of :func:`dp_kmeans`."""
    labels = assign(points, centroids)
    counts, sums = cluster_stats(points, labels, centroids.shape[0])
    out = centroids.copy()
    nonempty = counts > 0
    out[nonempty] = sums[nonempty] / counts[nonempty, None]
    return out


def dp_kmeans(
    source: BudgetSource,
    points: Any,
    *,
    k: int,
    budgets: BudgetSequence,
    lower: Any,
    upper: Any,
    iterations: int | None = None,
    initial: Any = None,
    seed: int | None = None,
    count_fraction: float = 0.5,
    noise: NoiseSource | None = None,
    label: str = "dp_kmeans",
) -> KMeansResult:
    """DP k-means (seed 003 Algorithm 1) with iteration j spending ε_j = ``budgets.term(j)``.

    Args:
        source: the budget source (a Grant); the run draws Σ ε_j from it, per iteration.
        points: n × d private points.
        k: the number of clusters.
        budgets: the per-iteration budgets (e.g. ``parse_strategy("Flip-Geo").build(N, ...)``).
        lower: public lower bound(s) of the coordinates (scalar or per dimension).
        upper: public upper bound(s).
        iterations: how many iterations (default: the sequence's length; required if infinite).
        initial: public k × d initial centroids (original coordinates); default: uniform in the
            bounds from ``seed``.
        seed: seed of the initial centroids when ``initial`` is None (public randomness).
        count_fraction: share of ε_j spent on the counts (0 < f < 1).
        noise: the noise source (None: secure).
        label: label prefix of the charges.

    Returns:
        The final centroids, their history and the ε_j spent.

    Raises:
        DataError: bad points. InvalidRequestError: bad k, bounds, initial centroids, fraction
        or iteration count. BudgetExceededError / ReservationError: from the source — the run
        stops there and nothing of that iteration is released.
    """
    pts = _check_points(points)
    d = pts.shape[1]
    k = plain_number(k)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidRequestError(f"k must be a positive integer, got {k!r}")
    lo, hi = _check_bounds(lower, upper, d)
    count_fraction = plain_number(count_fraction)
    if (
        isinstance(count_fraction, bool)
        or not isinstance(count_fraction, int | float)
        or not (0.0 < count_fraction < 1.0)
    ):
        raise InvalidRequestError(f"count_fraction must be in (0, 1), got {count_fraction!r}")
    if not isinstance(budgets, BudgetSequence):
        raise InvalidRequestError(
            f"budgets must be a BudgetSequence (e.g. parse_strategy(...).build(n, epsilon=...)), "
            f"got {type(budgets).__name__}"
        )
    if iterations is None:
        if budgets.length is None:
            raise InvalidRequestError("an infinite budget sequence needs iterations=")
        iterations = budgets.length
    iterations = plain_number(iterations)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise InvalidRequestError(f"iterations must be a positive integer, got {iterations!r}")
    if budgets.length is not None and iterations > budgets.length:
        raise InvalidRequestError(
            f"iterations = {iterations} exceeds the {budgets.length} budget terms"
        )
    if initial is None:
        rng = np.random.default_rng(seed)
        start = rng.uniform(-1.0, 1.0, size=(k, d))
    else:
        try:
            init = np.asarray(initial, dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidRequestError(f"initial must be a finite {k} × {d} array") from None
        if init.shape != (k, d) or not np.all(np.isfinite(init)):
            raise InvalidRequestError(f"initial must be a finite {k} × {d} array, got {init.shape}")
        start = to_unit_cube(init, lo, hi)
    unit = to_unit_cube(pts, lo, hi)
    sampler = resolve_noise(noise)
    split = SplitSource(source, budgets, label=label)
    fraction = shortest_decimal(count_fraction)
    sum_sens = sum_sensitivity(float(d))
    centroids = start
    history: list[FloatMatrix] = []
    epsilons: list[Decimal] = []
    for eps_j in split.iterations(iterations):
        eps = exact_epsilon(eps_j, name=f"epsilon of iteration {split.index}")
        eps_count = FLOOR.multiply(eps, fraction)
        eps_sum = FLOOR.subtract(eps, eps_count)
        labels = assign(unit, centroids)
        counts, sums = cluster_stats(unit, labels, k)
        count_part = Perturbation(
            "counts",
            NoiseKind.LAPLACE,
            laplace_scale(sensitivity=1.0, epsilon=eps_count),
            1.0,
            k,
            eps_count,
        )
        sum_part = Perturbation(
            "sums",
            NoiseKind.LAPLACE,
            laplace_scale(sensitivity=sum_sens, epsilon=eps_sum),
            sum_sens,
            k * d,
            eps_sum,
        )
        cost = price(split.accounting, epsilon=eps, parts=[count_part, sum_part])
        noisy_counts, noisy_sums = draw_then_perturb(
            split,
            cost=cost,
            label=f"{label}: counts+sums of {k} clusters",
            noise=sampler,
            jobs=[(count_part, counts), (sum_part, sums.reshape(-1))],
        )
        new = centroids.copy()
        ok = noisy_counts >= 1.0
        new[ok] = noisy_sums.reshape(k, d)[ok] / noisy_counts[ok, None]
        centroids = np.clip(new, -1.0, 1.0)
        history.append(from_unit_cube(centroids, lo, hi))
        epsilons.append(eps_j)
    return KMeansResult(
        centroids=history[-1],
        history=tuple(history),
        epsilons=tuple(epsilons),
        secure_noise=sampler.secure,
    )

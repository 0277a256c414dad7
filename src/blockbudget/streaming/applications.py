"""What DPI's released PDFs are used for (seed ``002_e6d4c77f2abb3a16.txt`` §6.1, §6.3, §7).

All functions are post-processing of released PDFs (plus, for counts, a public total), so they
cost no privacy:

* :func:`counts_from_pdf` — §7: counts = PDF × the public total n_t.
* :func:`pdf_sum`, :func:`pdf_mean`, :func:`pdf_quantile` — statistical queries over public item
  values (§6.3).
* :func:`hbos_scores` / :func:`hbos_anomalies` — Histogram-Based Outlier Score (Goldstein & Dengel
  2012, the paper's [41]): ``score(x) = Σ_f log(1/hist_f(x))``; here one feature per release.
* :func:`svd_recommend` — truncated SVD of a user × item matrix of released distributions
  (Sarwar et al. 2000, [42]): top-n items per row from the rank-r reconstruction.
* :func:`kmeans_labels` — k-means (scikit-learn) on released distributions.
* :func:`precision_recall` — against the non-private result taken as ground truth (Fig. 5–6).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from blockbudget.errors import InvalidRequestError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _check_pdf(pdf: FloatArray) -> FloatArray:
    p = np.asarray(pdf, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0):
        raise InvalidRequestError("a PDF must be a non-empty 1-d array of finite values >= 0")
    total = float(p.sum())
    if total <= 0:
        raise InvalidRequestError("a PDF must have positive mass")
    return p / total


def counts_from_pdf(pdf: FloatArray, *, total: float) -> FloatArray:
    """Estimated counts ``total × PDF`` given the slot's public total (§7)."""
    if not total >= 0:
        raise InvalidRequestError(f"total must be >= 0, got {total!r}")
    return _check_pdf(pdf) * float(total)


def pdf_mean(pdf: FloatArray, values: FloatArray) -> float:
    """``Σ_i P_i·v_i`` for public per-item values."""
    p = _check_pdf(pdf)
    v = np.asarray(values, dtype=np.float64)
    if v.shape != p.shape:
        raise InvalidRequestError(f"values must have the PDF's shape {p.shape}, got {v.shape}")
    return float(p @ v)


def pdf_sum(pdf: FloatArray, values: FloatArray, *, total: float) -> float:
    """``total × mean``: the sum of the values over the slot's records (public total)."""
    return float(total) * pdf_mean(pdf, values)


def pdf_quantile(pdf: FloatArray, values: FloatArray, q: float) -> float:
    """The q-quantile of the values under the PDF (smallest value whose CDF reaches q)."""
    if not 0 <= q <= 1:
        raise InvalidRequestError(f"q must lie in [0, 1], got {q!r}")
    p = _check_pdf(pdf)
    v = np.asarray(values, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    cdf = np.cumsum(p[order])
    idx = int(np.searchsorted(cdf, q * cdf[-1] - 1e-12, side="left"))
    return float(v[order][min(idx, len(v) - 1)])


def hbos_scores(histograms: FloatArray, *, floor: float = 1e-6) -> FloatArray:
    """HBOS of each item: ``Σ_f log(1/max(h_f(item), floor))`` over histograms (rows = features,
    e.g. slots; columns = items). High score = rare = anomalous."""
    h = np.asarray(histograms, dtype=np.float64)
    if h.ndim == 1:
        h = h[None, :]
    if h.ndim != 2 or not np.all(np.isfinite(h)) or np.any(h < 0):
        raise InvalidRequestError("histograms must be a 2-d array of finite values >= 0")
    norm = h / np.maximum(h.max(axis=1, keepdims=True), 1e-300)  # HBOS normalises to max 1
    return np.asarray(-np.log(np.maximum(norm, floor)).sum(axis=0), dtype=np.float64)


def hbos_anomalies(histograms: FloatArray, *, fraction: float = 0.1) -> IntArray:
    """Items whose HBOS lies in the top ``fraction`` (at least one)."""
    if not 0 < fraction <= 1:
        raise InvalidRequestError(f"fraction must lie in (0, 1], got {fraction!r}")
    scores = hbos_scores(histograms)
    n = max(1, round(fraction * scores.size))
    return np.sort(np.argsort(-scores, kind="stable")[:n]).astype(np.int64)


def svd_recommend(matrix: FloatArray, *, rank: int, top: int) -> IntArray:
    """Top-``top`` items per row of the rank-``rank`` SVD reconstruction of a (users × items)
    matrix of distributions."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or not np.all(np.isfinite(m)):
        raise InvalidRequestError("matrix must be a finite 2-d array")
    if not 1 <= rank <= min(m.shape) or not 1 <= top <= m.shape[1]:
        raise InvalidRequestError(f"need 1 <= rank <= {min(m.shape)} and 1 <= top <= {m.shape[1]}")
    u, s, vt = np.linalg.svd(m, full_matrices=False)
    approx = (u[:, :rank] * s[:rank]) @ vt[:rank]
    return np.argsort(-approx, axis=1, kind="stable")[:, :top].astype(np.int64)


def kmeans_labels(rows: FloatArray, *, clusters: int, seed: int = 0) -> IntArray:
    """k-means cluster labels of released distributions (scikit-learn, ``n_init=10``)."""
    import warnings

    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    x = np.asarray(rows, dtype=np.float64)
    if x.ndim != 2 or not 1 <= clusters <= x.shape[0]:
        raise InvalidRequestError(f"need a 2-d array and 1 <= clusters <= {x.shape[0]}")
    with warnings.catch_warnings():
        # released rows can coincide (e.g. all uniform at tiny ε): fewer distinct clusters is a
        # legitimate answer there, not an error.
        warnings.simplefilter("ignore", ConvergenceWarning)
        labels = KMeans(n_clusters=clusters, n_init=10, random_state=seed).fit_predict(x)
    return np.asarray(labels, dtype=np.int64)


def precision_recall(predicted: IntArray, truth: IntArray) -> tuple[float, float]:
    """Precision and recall of a predicted item set against the non-private one."""
    p = set(np.asarray(predicted).ravel().tolist())
    t = set(np.asarray(truth).ravel().tolist())
    hit = len(p & t)
    return (hit / len(p) if p else 1.0, hit / len(t) if t else 1.0)


def kl_divergence(truth: FloatArray, estimate: FloatArray, *, floor: float = 1e-12) -> float:
    """KL(truth ‖ estimate) in nats (both normalised; estimate floored to keep it finite)."""
    p = _check_pdf(truth)
    q = np.maximum(_check_pdf(estimate), floor)
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def mse(truth: FloatArray, estimate: FloatArray) -> float:
    """Mean squared error between two vectors."""
    a = np.asarray(truth, dtype=np.float64)
    b = np.asarray(estimate, dtype=np.float64)
    if a.shape != b.shape:
        raise InvalidRequestError(f"shapes differ: {a.shape} and {b.shape}")
    return float(np.mean((a - b) ** 2))

"""Applications of DPI's released PDFs: HBOS anomaly detection, an SVD recommender, k-means.

Seed ``002_e6d4c77f2abb3a16.txt`` §6.3, Fig. 5 (HBOS anomaly detection, precision/recall against the
non-private result) and Fig. 6 (SVD recommender and k-means, precision/recall against non-private).
Offline data: the flights stream (destinations per day; user = aircraft) for HBOS, and one DPI
stream per carrier (carrier × destination distributions) for the recommender and k-means. The
non-private result on the true PDFs is the ground truth, as in the paper. ε beyond the paper's
range (100, 1000) is included to show where the released PDFs start to carry the signal. The
``synthetic_*`` columns repeat the recommender and k-means on 8 synthetic rows with 10⁵ users per
slot and two planted clusters, where a slot does carry signal.
Seeded randomness (``secure=False``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockbudget.apps.flights.streams import flights_by_carrier, flights_stream
from blockbudget.experiments.common import (
    Experiment,
    ExperimentContext,
    ExperimentResult,
    new_figure,
)
from blockbudget.experiments.plotting import Caption, count_ticks, finish, label_axes
from blockbudget.streaming.applications import (
    hbos_anomalies,
    kmeans_labels,
    precision_recall,
    svd_recommend,
)
from blockbudget.streaming.compression import Compression
from blockbudget.streaming.evaluation import Setup, build_stream
from blockbudget.streaming.release import DPIConfig, Horizon


def _released(
    stream_slots: list[tuple[Any, Any]], k: int, eps: float, n_min: int, seed: int
) -> np.ndarray:
    n = len(stream_slots)
    dpi = build_stream(
        k,
        DPIConfig.for_horizon(epsilon=eps, slots=n, horizon=Horizon.ACCUMULATIVE),
        Setup(min_users=n_min),
        seed=seed,
    )
    out = []
    for users, items in stream_slots:
        out.append(dpi.step(users, items).pdf)
    return np.stack(out)


def _synthetic_apps(eps: float, *, quick: bool, seed: int) -> dict[str, float]:
    """The recommender and k-means where a slot carries signal: 8 synthetic "carriers" over 60
    items, 10⁵ users per slot, each a Zipf(1.2) over one of two item orders (two planted
    clusters); one DPI stream per row, accumulative release after the last slot."""
    from sklearn.metrics import adjusted_rand_score

    k, rows_n, slots, users = 60, 8, (15 if quick else 60), 100_000
    rng = np.random.default_rng(seed + 99)
    orders = [rng.permutation(k), rng.permutation(k)]
    zipf = 1.0 / np.arange(1, k + 1) ** 1.2
    zipf /= zipf.sum()
    truth = np.stack([zipf[np.argsort(orders[i % 2])] for i in range(rows_n)])
    released = []
    for i in range(rows_n):
        dpi = build_stream(
            k,
            DPIConfig.for_horizon(epsilon=eps, slots=slots, horizon=Horizon.ACCUMULATIVE),
            Setup(min_users=users // 2),
            seed=seed + 31 * i,
        )
        for _ in range(slots):
            last = dpi.step_counts(rng.multinomial(users, truth[i]))
        released.append(last.pdf)
    matrix = np.stack(released)
    rec = svd_recommend(matrix, rank=2, top=5)
    truth_top = svd_recommend(truth, rank=2, top=5)
    pr = [precision_recall(rec[i], truth_top[i]) for i in range(rows_n)]
    labels = kmeans_labels(matrix, clusters=2, seed=seed)
    return {
        "synthetic_svd_precision": float(np.mean([p for p, _ in pr])),
        "synthetic_kmeans_ari": float(adjusted_rand_score(np.arange(rows_n) % 2, labels)),
    }


def run_apps(ctx: ExperimentContext) -> ExperimentResult:
    """Fig. 5–6: precision/recall of HBOS, SVD top-5 and k-means against non-private results."""
    from sklearn.metrics import adjusted_rand_score

    epsilons = (1.0, 1000.0) if ctx.quick else (0.5, 1.0, 2.0, 10.0, 100.0, 1000.0)
    limit = 20 if ctx.quick else None
    flights = flights_stream()
    slots = list(flights.slots[:limit] if limit else flights.slots)
    k = flights.domain_size
    comp = Compression(k, 1)
    true_pdfs = np.stack([comp.pdf(u, i) for u, i in slots])
    true_acc = np.cumsum(true_pdfs, axis=0) / np.arange(1, len(slots) + 1)[:, None]
    truth_anom = hbos_anomalies(true_acc[-1:], fraction=0.1)
    carriers = flights_by_carrier()
    names = sorted(carriers)[:6] if ctx.quick else sorted(carriers)
    carrier_slots = {
        c: list(carriers[c].slots[:limit] if limit else carriers[c].slots) for c in names
    }
    true_matrix = np.stack(
        [
            np.mean(
                [comp.pdf(u, i) if len(u) else np.zeros(k) for u, i in carrier_slots[c]], axis=0
            )
            for c in names
        ]
    )
    true_matrix /= np.maximum(true_matrix.sum(axis=1, keepdims=True), 1e-12)
    rank, top, clusters = 3, 5, (2 if ctx.quick else 4)
    truth_top = svd_recommend(true_matrix, rank=rank, top=top)
    truth_labels = kmeans_labels(true_matrix, clusters=clusters, seed=ctx.seed)
    rows: list[dict[str, Any]] = []
    for eps in ctx.progress(epsilons, description="dpi-apps"):
        released = _released(slots, k, eps, 400, ctx.seed)
        hb_p, hb_r = precision_recall(hbos_anomalies(released[-1:], fraction=0.1), truth_anom)
        matrix = np.stack(
            [
                _released(carrier_slots[c], k, eps, 20, ctx.seed + 17 * i)[-1]
                for i, c in enumerate(names)
            ]
        )
        rec = svd_recommend(matrix, rank=rank, top=top)
        pr = [precision_recall(rec[i], truth_top[i]) for i in range(len(names))]
        labels = kmeans_labels(matrix, clusters=clusters, seed=ctx.seed)
        rows.append(
            {
                "epsilon": eps,
                "hbos_precision": hb_p,
                "hbos_recall": hb_r,
                "svd_precision": float(np.mean([p for p, _ in pr])),
                "svd_recall": float(np.mean([r for _, r in pr])),
                "kmeans_ari": float(adjusted_rand_score(truth_labels, labels)),
                **_synthetic_apps(eps, quick=ctx.quick, seed=ctx.seed),
                "secure": False,
            }
        )
    ctx.write_csv("dpi_apps.csv", rows)
    fig, ax = new_figure()
    eps_axis = [r["epsilon"] for r in rows]
    for key in (
        "hbos_precision",
        "svd_precision",
        "kmeans_ari",
        "synthetic_svd_precision",
        "synthetic_kmeans_ari",
    ):
        ax.plot(eps_axis, [r[key] for r in rows], marker="o", label=key)
    ax.set_xscale("log")
    count_ticks(ax, "x", eps_axis)
    label_axes(
        ax,
        x=("ε, total per user", "nats"),
        y=("agreement with the non-private result", "precision or ARI"),
    )
    caption = Caption(
        epsilon="ε on the x-axis (total, user-level)",
        runs=1,
        note="DPI releases with seeded noise (secure=False); precision of HBOS anomalies and "
        "SVD top-5, adjusted Rand index (ARI) of k-means",
    )
    finish(fig, caption, title="DPI applications (seed 002 Fig. 5–6)")
    ctx.save_figure("dpi_apps.png", fig)
    return ExperimentResult(rows=rows, files=list(ctx.files), notes=["seeded (secure=False)"])


EXPERIMENTS = [
    Experiment(
        name="dpi-apps",
        summary="DPI applications: HBOS anomalies, SVD recommender, k-means vs non-private",
        source="seed 002 Fig. 5-6",
        run=run_apps,
    ),
]

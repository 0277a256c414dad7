"""Post-processing applications of released PDFs, against non-private references."""

from __future__ import annotations

import numpy as np
import pytest

from blockbudget.errors import InvalidRequestError
from blockbudget.streaming.applications import (
    counts_from_pdf,
    hbos_anomalies,
    hbos_scores,
    kl_divergence,
    kmeans_labels,
    pdf_mean,
    pdf_quantile,
    pdf_sum,
    precision_recall,
    svd_recommend,
)
from blockbudget.streaming.queries import QueryPool


def test_counts_and_statistics_are_exact_on_the_true_pdf() -> None:
    counts = np.array([5, 0, 15, 30])
    pdf = counts / counts.sum()
    assert np.allclose(counts_from_pdf(pdf, total=50), counts)
    values = np.array([1.0, 2.0, 3.0, 4.0])
    assert pdf_mean(pdf, values) == pytest.approx((5 * 1 + 15 * 3 + 30 * 4) / 50)
    assert pdf_sum(pdf, values, total=50) == pytest.approx(5 + 45 + 120)
    assert pdf_quantile(pdf, values, 0.5) == 4.0  # CDF: 0.1, 0.1, 0.4, 1.0
    assert pdf_quantile(pdf, values, 0.1) == 1.0
    with pytest.raises(InvalidRequestError):
        pdf_quantile(pdf, values, 1.5)


def test_hbos_flags_the_rare_items_like_the_reference_definition() -> None:
    rng = np.random.default_rng(0)
    hist = rng.uniform(0.5, 1.0, size=(3, 20))
    hist[:, [4, 11]] = 0.001  # two rare items in every feature
    flagged = hbos_anomalies(hist, fraction=0.1)
    assert flagged.tolist() == [4, 11]
    scores = hbos_scores(hist)
    manual = -np.log(hist / hist.max(axis=1, keepdims=True)).sum(axis=0)
    assert np.allclose(scores, manual)


def test_svd_recommender_and_kmeans_recover_planted_structure() -> None:
    rng = np.random.default_rng(1)
    a = np.zeros(12)
    a[:3] = 1
    b = np.zeros(12)
    b[6:9] = 1
    rows = np.stack([a] * 5 + [b] * 5) + rng.uniform(0, 0.01, size=(10, 12))
    top = svd_recommend(rows, rank=2, top=3)
    assert {tuple(sorted(r)) for r in top[:5].tolist()} == {(0, 1, 2)}
    assert {tuple(sorted(r)) for r in top[5:].tolist()} == {(6, 7, 8)}
    labels = kmeans_labels(rows, clusters=2)
    assert len(set(labels[:5].tolist())) == 1 and labels[0] != labels[5]
    assert precision_recall(np.array([1, 2, 3]), np.array([2, 3, 4])) == (2 / 3, 2 / 3)


def test_kl_is_zero_on_itself_and_positive_otherwise() -> None:
    p = np.array([0.7, 0.2, 0.1])
    assert kl_divergence(p, p) == pytest.approx(0.0, abs=1e-12)
    assert kl_divergence(p, np.full(3, 1 / 3)) > 0.1


def test_query_pool_answers_match_dense_weights() -> None:
    k = 16
    values = np.linspace(3.0, 9.0, k)
    qp = QueryPool.standard(k, values=values)
    pdf = np.random.default_rng(2).dirichlet(np.ones(k))
    items = np.arange(k)
    dense = np.stack([qp.weights_at(j, items) for j in range(qp.size)])
    assert np.allclose(qp.answers(pdf), dense @ pdf)
    units = np.random.default_rng(3).integers(0, k, size=(7, 10))
    for j in (0, k, qp.size - 1):
        synopses = np.stack([np.bincount(u, minlength=k) / 10 for u in units])
        assert np.allclose(qp.pool_answers(j, units), synopses @ dense[j])
    assert qp.max_weight() == 1.0
    with pytest.raises(InvalidRequestError):
        QueryPool.standard(k, values=np.ones(3))


def test_answers_at_matches_answers() -> None:
    k = 32
    qp = QueryPool.standard(k, values=np.arange(k, dtype=float))
    pdf = np.random.default_rng(4).dirichlet(np.ones(k))
    ids = np.array([0, 5, k, k + 3, qp.size - 1, 2])
    assert np.allclose(qp.answers_at(pdf, ids), qp.answers(pdf)[ids])

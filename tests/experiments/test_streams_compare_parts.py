"""streams-compare's parts: the score of the exact answers is zero, the histogram methods answer
the true PDF (with the shared 1% uniform mix) when their noise vanishes, the synthetic streams are
floored PDFs, and the quick table's columns."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from experiment_support import QuickRun

from blockbudget.experiments.streams_compare import (
    METHODS,
    SMOOTHING,
    _run,
    _score,
    _Stream,
    _synthetic,
)

HISTOGRAMS = ("per-slot-laplace", "windowed-laplace", "windowed-gaussian")


def test_the_exact_accumulative_answers_score_zero() -> None:
    pdfs = [np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.5, 0.5]), np.array([1.0, 0.0, 0.0])]
    stream = _Stream("toy", 3, 10, pdfs)
    exact = [pdfs[0], (pdfs[0] + pdfs[1]) / 2, (pdfs[0] + pdfs[1] + pdfs[2]) / 3]
    assert _score(stream, exact) == (0.0, 0.0)
    kl, mse = _score(stream, _run("uniform", stream, 1.0, 0))
    assert kl > 0 and mse > 0
    assert all(np.array_equal(a, np.full(3, 1 / 3)) for a in _run("uniform", stream, 1.0, 0))


@pytest.mark.parametrize("method", HISTOGRAMS)
def test_histograms_at_infinite_epsilon_answer_the_true_pdf_mixed_with_uniform(
    method: str,
) -> None:
    p = np.array([0.5, 0.3, 0.2])
    stream = _Stream("stationary", 3, 100, [p.copy() for _ in range(9)])
    answers = _run(method, stream, 1e12, seed=0)
    want = (1 - SMOOTHING) * p + SMOOTHING / 3  # any weighting of equal releases is p itself
    assert len(answers) == 9
    for answer in answers:
        np.testing.assert_allclose(answer, want, atol=1e-7)


def test_every_method_answers_a_pdf_every_slot_and_is_seeded() -> None:
    stream = _synthetic("skewed", np.array([0.7, 0.1, 0.1, 0.1]), 300, 100, 6, seed=1)
    for method in METHODS:
        answers = _run(method, stream, 5.0, seed=3)
        assert len(answers) == 6
        assert all(np.all(a >= 0) and a.sum() == pytest.approx(1.0) for a in answers), method
        again = _run(method, stream, 5.0, seed=3)
        assert all(np.array_equal(a, b) for a, b in zip(answers, again, strict=True)), method


def test_synthetic_slots_are_pdfs_floored_at_n_min() -> None:
    p = np.array([0.5, 0.3, 0.2])
    enough = _synthetic("s", p, 500, 100, 3, seed=0)
    padded = _synthetic("s", p, 50, 100, 3, seed=0)
    for pdf in enough.pdfs + padded.pdfs:
        assert pdf.sum() == pytest.approx(1.0) and pdf.shape == (3,)
    # 50 users under a floor of 100: 50 phantom users spread evenly, so every bin ≥ 50/3 / 100
    assert all(pdf.min() >= (50 / 3) / 100 - 1e-12 for pdf in padded.pdfs)
    rng = np.random.default_rng(0)
    counts = rng.multinomial(50, p).astype(np.float64)
    np.testing.assert_allclose(padded.pdfs[0], (counts + 50 / 3) / 100)
    assert (enough.k, enough.n_min, len(enough.pdfs)) == (3, 100, 3)


def test_quick_table_columns_and_ratios(quick_run: Callable[[str], QuickRun]) -> None:
    rows = quick_run("streams-compare").result.rows
    assert {(r["stream"], r["method"]) for r in rows} == {
        (s, m) for s in ("flights", "covid", "skewed") for m in METHODS
    }
    for r in rows:
        dpi = next(x for x in rows if x["method"] == "dpi" and x["stream"] == r["stream"])
        assert r["mse_vs_dpi"] == pytest.approx(dpi["mse"] / r["mse"])
        assert r["kl"] >= 0 and r["mse"] > 0 and r["slots"] == 40
        assert r["recommended"] in {"dpi", "per-slot", "windowed", "uniform"}
    assert all(r["mse_vs_dpi"] == 1.0 for r in rows if r["method"] == "dpi")

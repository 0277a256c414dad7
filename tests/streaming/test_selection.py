"""Noise parameters of DPI's draws (deterministic) and the selection distribution (large sample)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blockbudget.errors import InvalidRequestError
from blockbudget.streaming import (
    Compression,
    DPIConfig,
    DPIStream,
    QueryPool,
    SecureSelector,
    SeededSelector,
    SynopsisPool,
)
from blockbudget.streaming.selection import scale_for


class Recording(SeededSelector):
    def __init__(self) -> None:
        super().__init__(np.random.default_rng(0))
        self.calls: list[tuple[float, float, int]] = []

    def select(self, scores: np.ndarray, *, epsilon: float, sensitivity: float) -> int:
        self.calls.append((epsilon, sensitivity, scores.size))
        return super().select(scores, epsilon=epsilon, sensitivity=sensitivity)


@pytest.mark.parametrize("per_slot", [1, 3])
def test_each_slot_spends_exactly_its_term_across_its_draws(per_slot: int) -> None:
    k, n_min, mu = 12, 40, 0.3
    rec = Recording()
    pool = SynopsisPool.generate(
        domain_size=k, size=64, precision=0.1, rng=np.random.default_rng(1)
    )
    queries = QueryPool.standard(k)
    s = DPIStream(
        config=DPIConfig(epsilon=1.0, mu=mu, rate=20.0, queries_per_slot=per_slot),
        compression=Compression(k, n_min),
        pool=pool,
        queries=queries,
        selector=rec,
        rng=np.random.default_rng(2),
    )
    rng = np.random.default_rng(3)
    for _ in range(15):
        before = len(rec.calls)
        r = s.step(rng.integers(0, 50, 100), rng.integers(0, k, 100))
        calls = rec.calls[before:]
        assert len(calls) == 2 * per_slot  # k_s query draws, k_s synopsis draws
        assert sum(e for e, _, _ in calls) == pytest.approx(r.epsilon, rel=1e-12)
        # ℓ∞-sensitivity of every score vector: (2/μ)·Δ_P·max|w| with Δ_P = 2/n_min
        assert all(d == pytest.approx(2 / mu * 2 / n_min) for _, d, _ in calls)
        sizes = [n for _, _, n in calls]
        n_cand = min(256, queries.size)  # candidates sampled from P_Q (DPIConfig.candidates)
        assert sizes[:per_slot] == [n_cand - i for i in range(per_slot)]
        assert sizes[per_slot:] == [pool.size] * per_slot


def test_scale_is_twice_the_sensitivity_over_epsilon_rounded_up() -> None:
    assert scale_for(epsilon=0.5, sensitivity=0.1) >= 0.4
    assert scale_for(epsilon=0.5, sensitivity=0.1) == pytest.approx(0.4, rel=1e-9)
    with pytest.raises(InvalidRequestError):
        scale_for(epsilon=0.0, sensitivity=1.0)


def test_secure_selector_privacy_map_is_within_the_charge() -> None:
    sel = SecureSelector()
    picks = [
        sel.select(np.array([0.0, 0.0, 50.0]), epsilon=1.0, sensitivity=0.5) for _ in range(50)
    ]
    assert picks.count(2) >= 45  # a gap of 50 at scale ≈ 1 is almost always found
    with pytest.raises(InvalidRequestError):
        sel.select(np.array([np.nan]), epsilon=1.0, sensitivity=1.0)


def test_seeded_selection_matches_exponential_noisy_max_distribution() -> None:
    """Report-noisy-max with Exp(b) noise on two scores a gap g apart picks the lower one with
    probability ½·e^{−g/b}; a 30% wrong scale is rejected at this sample size."""
    n = 30_000
    sel = SeededSelector(np.random.default_rng(11))
    gap, eps, d = 1.0, 1.0, 1.0
    b = scale_for(epsilon=eps, sensitivity=d + 2 * float(np.spacing(gap)))
    p_low = 0.5 * math.exp(-gap / b)
    low = sum(sel.select(np.array([0.0, gap]), epsilon=eps, sensitivity=d) == 0 for _ in range(n))
    sd = math.sqrt(n * p_low * (1 - p_low))
    assert abs(low - n * p_low) < 6 * sd
    for wrong in (0.7 * b, 1.3 * b):
        assert abs(low - n * 0.5 * math.exp(-gap / wrong)) > 6 * sd


def test_plausible_interval_is_narrow_for_sharp_draws_and_wide_for_weak_ones() -> None:
    from blockbudget.streaming.release import plausible_interval

    answers = np.linspace(0.0, 1.0, 51)  # a pool whose answers cover [0, 1]
    base = np.full(answers.size, -np.log(answers.size))
    lo, hi = plausible_interval(answers, base, 0.3, alpha=200.0, lam=0.0, mu=0.5)
    assert lo <= 0.3 <= hi and hi - lo < 0.05
    lo, hi = plausible_interval(answers, base, 0.3, alpha=1e-6, lam=0.0, mu=0.5)
    assert lo <= 0.0 and hi >= 1.0  # a draw at a tiny budget says nothing
    # every candidate clips at -1 far from the truth: a small μ cannot localise beyond λ + μ
    lo, hi = plausible_interval(answers, base, 0.3, alpha=200.0, lam=0.0, mu=0.01)
    assert lo <= 0.3 <= hi

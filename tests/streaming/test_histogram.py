"""Windowed and per-slot histogram releases: exact accounting, exactness at a huge budget, data
dependence, post-processing and public state."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseKind
from blockbudget.series import InfiniteBudgetSequence, InverseSquareSeries
from blockbudget.streaming import (
    Combine,
    Compression,
    HistogramConfig,
    HistogramStream,
    Horizon,
    ReleaseMode,
    project_to_simplex,
    zcdp_rho,
)
from blockbudget.streaming.config import DPIConfig
from blockbudget.streaming.series import DPISeries

SLOTS = 200_000


def test_inverse_square_series_prefixes_never_exceed_one() -> None:
    seq = InfiniteBudgetSequence(epsilon=Decimal(1), series=InverseSquareSeries())
    terms = seq.prefix(5000)
    assert sum(terms) <= 1
    assert abs(float(terms[0]) - 6 / math.pi**2) < 1e-17
    assert abs(float(terms[9]) - 6 / (math.pi**2 * 100)) < 1e-17


@pytest.mark.parametrize(
    ("noise", "window"),
    [(NoiseKind.LAPLACE, 1), (NoiseKind.LAPLACE, 30), (NoiseKind.GAUSSIAN, 30)],
)
def test_windowed_budgets_sum_within_total_over_200000_slots(noise: NoiseKind, window: int) -> None:
    delta = 1e-6 if noise is NoiseKind.GAUSSIAN else 0.0
    config = HistogramConfig(epsilon=3.0, delta=delta, noise=noise, window=window)
    stream = HistogramStream(config=config, compression=Compression(4, 10), seed=0)
    covered, j, total = 0, 1, Decimal(0)
    while covered < SLOTS:
        covered += config.window_length(j)
        total += Decimal(repr(stream.window_budget(j)))  # what the accountant charges
        j += 1
    assert total <= Decimal(repr(config.budget))
    assert total > Decimal(repr(config.budget)) * Decimal("0.99")  # and it spends the budget
    if noise is NoiseKind.GAUSSIAN:  # ρ-zCDP ⇒ (ε, δ)-DP with ε ≤ 3
        rho = float(total)
        assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) <= 3.0


def test_per_slot_budgets_sum_within_total_over_200000_slots() -> None:
    cfg = DPIConfig.for_horizon(epsilon=2.0, slots=365)
    series = DPISeries(epsilon=2.0, mu=cfg.mu, zeta=cfg.zeta)
    total = sum(Decimal(repr(series.term(t))) for t in range(1, SLOTS + 1))
    assert total <= Decimal(2)


@pytest.mark.parametrize("mode", list(ReleaseMode))
def test_a_long_run_never_overspends(mode: ReleaseMode) -> None:
    config = HistogramConfig(epsilon=1.0, mode=mode, window=3, expected_slots=50)
    stream = HistogramStream(config=config, compression=Compression(3, 5), seed=1)
    pdf = np.array([0.5, 0.3, 0.2])
    for _ in range(3000):
        r = stream.step_pdf(pdf)
        assert not r.refused
    assert r.spent <= Decimal(1) and r.spent + r.remaining == Decimal(1)
    assert stream.accountant.spent_units <= stream.accountant.capacity_units


def test_huge_budget_is_exact_against_a_hand_computation() -> None:
    """At ε = 10¹² the noise is ~10⁻¹⁴: the accumulative answer is the inverse-variance mean of
    the window means; the instantaneous one is the latest window's mean."""
    k = 3
    pdfs = [np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0])] * 2
    inst = HistogramConfig(epsilon=1e12, window=2, horizon=Horizon.INSTANTANEOUS, smoothing=0.0)
    s = HistogramStream(config=inst, compression=Compression(k, 1), seed=2)
    out = [s.step_pdf(p) for p in pdfs]
    # warm-up windows of lengths 1, 1, then windows of 2 slots: releases after slots 1, 2, 4, 6
    assert [r.released for r in out] == [True, True, False, True, False, True]
    np.testing.assert_allclose(out[3].pdf, (pdfs[2] + pdfs[3]) / 2, atol=1e-9)
    np.testing.assert_allclose(out[5].pdf, (pdfs[4] + pdfs[5]) / 2, atol=1e-9)
    acc = HistogramConfig(epsilon=1e12, window=2, smoothing=0.0)
    s = HistogramStream(config=acc, compression=Compression(k, 1), seed=2)
    out = [s.step_pdf(p) for p in pdfs]
    eps = [s.window_budget(j) for j in (1, 2, 3, 4)]
    means = [pdfs[0], pdfs[1], (pdfs[2] + pdfs[3]) / 2, (pdfs[4] + pdfs[5]) / 2]
    w = np.array(eps) ** 2  # inverse variance: Var ∝ 1/ε_j²
    expected = sum(wi * m for wi, m in zip(w, means, strict=True)) / w.sum()
    np.testing.assert_allclose(out[5].pdf, expected, atol=1e-9)
    # the warm-up windows share the first window's term by length: ε₁/2 each
    first = float(
        InfiniteBudgetSequence(epsilon=Decimal("1e12"), series=InverseSquareSeries()).term(1)
    )
    assert eps[0] == pytest.approx(first / 2) and eps[1] == pytest.approx(first / 2)


@pytest.mark.parametrize(
    ("mode", "noise"),
    [
        (ReleaseMode.WINDOWED, NoiseKind.LAPLACE),
        (ReleaseMode.WINDOWED, NoiseKind.GAUSSIAN),
        (ReleaseMode.PER_SLOT, NoiseKind.LAPLACE),
    ],
)
def test_a_skewed_stream_moves_mass_to_its_heavy_bin(mode: ReleaseMode, noise: NoiseKind) -> None:
    k, users = 20, 2000
    rng = np.random.default_rng(5)
    p = np.full(k, 0.1 / (k - 1))
    p[7] = 0.9
    delta = 1e-6 if noise is NoiseKind.GAUSSIAN else 0.0
    config = HistogramConfig(epsilon=10.0, delta=delta, mode=mode, noise=noise, window=10)
    stream = HistogramStream(config=config, compression=Compression(k, 1000), seed=3)
    for _ in range(60):
        r = stream.step_counts(rng.multinomial(users, p))
    assert r.pdf[7] > 0.8
    assert r.secure_noise is False


def test_projection_onto_the_simplex() -> None:
    np.testing.assert_allclose(project_to_simplex(np.array([0.5, 0.5])), [0.5, 0.5])
    np.testing.assert_allclose(project_to_simplex(np.array([2.0, 0.0])), [1.0, 0.0])
    np.testing.assert_allclose(project_to_simplex(np.array([0.6, 0.6, -1.0])), [0.5, 0.5, 0.0])
    np.testing.assert_allclose(project_to_simplex(np.array([-1.0, -1.0])), [0.5, 0.5])


def test_zcdp_conversion_implies_the_requested_epsilon() -> None:
    for eps, delta in ((1.0, 1e-6), (10.0, 1e-9), (0.1, 1e-5)):
        rho = zcdp_rho(epsilon=eps, delta=delta)
        assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) <= eps
        assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) > eps * (1 - 1e-9)


def test_state_is_public_only_between_windows_and_resumes() -> None:
    config = HistogramConfig(epsilon=2.0, window=4, combine=Combine.SLOT_WEIGHTED)
    s = HistogramStream(config=config, compression=Compression(3, 2), seed=4)
    pdf = np.array([0.2, 0.3, 0.5])
    for _ in range(2):  # warm-up windows of 1, 2 and 1 slots: window 2 is open after slot 2
        s.step_pdf(pdf)
    with pytest.raises(InvalidRequestError, match="still open"):
        s.state()
    s.step_pdf(pdf)
    state = s.state()
    again = HistogramStream(config=config, compression=Compression(3, 2), seed=9)
    again.resume(state)
    np.testing.assert_allclose(again.release, s.release)
    assert again.accountant.spent == s.accountant.spent and again.t == s.t == 3


def test_invalid_configurations_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="delta"):
        HistogramConfig(epsilon=1.0, noise=NoiseKind.GAUSSIAN)
    with pytest.raises(InvalidRequestError, match="pure DP"):
        HistogramConfig(epsilon=1.0, delta=1e-6)
    with pytest.raises(InvalidRequestError, match="window"):
        HistogramConfig(epsilon=1.0, window=0)
    with pytest.raises(InvalidRequestError, match="either"):
        from blockbudget.mechanisms import SeededNoise

        HistogramStream(
            config=HistogramConfig(epsilon=1.0),
            compression=Compression(2),
            noise=SeededNoise(1),
            seed=1,
        )

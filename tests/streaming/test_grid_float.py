"""The secure grid is never finer than a computed PDF's float error (the "+ 1" margin)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from blockbudget.streaming import Compression
from blockbudget.streaming.histogram import MAX_GRID_EXPONENT, grid_exponent


def test_the_grid_step_exceeds_the_float_error_of_a_fine_pdf() -> None:
    # 20 001 users × 3 records over 500 bins, n_min = 20 000: Δ = 10⁻⁴; at ε = 10 the uncapped
    # rule chose a 2⁻⁵⁴ grid, on which this PDF's ℓ₁ float error was 9.4 steps (> the + 1)
    rng = np.random.default_rng(1)
    k, n, n_min = 500, 20_001, 20_000
    users = np.repeat(np.arange(n), 3)
    items = rng.integers(0, k, size=users.size)
    pdf = Compression(k, n_min).pdf(users, items)
    counts = np.bincount(items, minlength=k)
    exact = [Fraction(int(c), 3 * n) for c in counts]  # each record weighs 1/(3n)
    error = sum(abs(Fraction(float(a)) - b) for a, b in zip(pdf, exact, strict=True))
    for eps in (1.0, 10.0):
        q = grid_exponent((2 / n_min) / eps)
        assert q <= MAX_GRID_EXPONENT
        assert float(error) * 2.0**q < 1.0, (eps, q, float(error) * 2.0**q)
    assert grid_exponent(1e-30) == MAX_GRID_EXPONENT and grid_exponent(1.0) == 40
    assert math.ldexp(1.0, -MAX_GRID_EXPONENT) > 4 * float(error)  # 6.8× here

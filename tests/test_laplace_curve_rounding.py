"""RdpCurve.laplace is never below the exact curve at any scale (issue 29, item 4).

The exact curve is Mironov 2017, Prop. 6, at t = Δ/b: evaluated by mpmath to 60 significant
digits (the working precision grows with 1/t, as ε ≈ α·t²/2 is what is left of numbers of size
t), with Δ and b read both as the doubles' exact binary values and as their shortest decimals.
"""

from __future__ import annotations

import mpmath as mp
import pytest

from blockbudget.budget import ALPHAS, MIN_MAGNITUDE, RdpCurve

#: Scales 1e-3 … 1e60, log-spaced, three per decade (the pure-DP branch starts near 1e40, the
#: smallest stored magnitude binds past ~1e50).
SCALES = [10.0 ** (e / 3) for e in range(-9, 181)]


def _exact(alpha: float, t: mp.mpf) -> mp.mpf:
    """Mironov 2017, Prop. 6, to 60 significant digits."""
    digits = 60 + 2 * max(0, int(-mp.log10(t)))
    with mp.workdps(digits):
        a, x = mp.mpf(alpha), mp.mpf(t)
        inner = a / (2 * a - 1) * mp.exp((a - 1) * x) + (a - 1) / (2 * a - 1) * mp.exp(-a * x)
        return mp.log(inner) / (a - 1)


def _readings(scale: float, sensitivity: float) -> list[mp.mpf]:
    """Δ/b from the doubles' binary values and from their shortest decimals (250 digits)."""
    with mp.workdps(250):
        return [
            mp.mpf(sensitivity) / mp.mpf(scale),
            mp.mpf(repr(sensitivity)) / mp.mpf(repr(scale)),
        ]


@pytest.mark.parametrize("sensitivity", [1.0, 0.1])
def test_the_laplace_curve_is_never_below_the_exact_one(sensitivity: float) -> None:
    for scale in SCALES:
        curve = RdpCurve.laplace(scale=scale, sensitivity=sensitivity)
        for t in _readings(scale, sensitivity):
            for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
                exact = _exact(alpha, t)
                with mp.workdps(250):
                    got = mp.mpf(str(value))
                    assert got >= exact, (scale, sensitivity, alpha, value, exact)
                    # ... and tight: the float bump (1e-12), the pure-DP bound (exact·(1 + t/3))
                    # rounded up at 40 digits, or the smallest stored magnitude.
                    ceiling = max(exact * (1 + mp.mpf("1e-11")), mp.mpf(str(MIN_MAGNITUDE)))
                    assert got <= ceiling, (scale, sensitivity, alpha, value, exact)


@pytest.mark.parametrize("scale", [1e40, 1e41, 3e40, 1e45])
def test_the_tiny_t_branch_covers_the_decimal_scale(scale: float) -> None:
    """Below t = 1e-40 the curve is α·t²/2 in decimal, without the float bump: from the binary
    quotient alone it sat up to an ulp below the curve at the written scale (6e-17 relative at
    scale=1e40, whose double is above 10^40)."""
    curve = RdpCurve.laplace(scale=scale)
    with mp.workdps(250):
        t = 1 / mp.mpf(repr(scale))
    for alpha, value in zip(ALPHAS, curve.epsilons, strict=True):
        with mp.workdps(250):
            assert mp.mpf(str(value)) >= _exact(alpha, t), (scale, alpha, value)

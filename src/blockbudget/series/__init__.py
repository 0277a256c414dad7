"""Budget sequences: splitting ε over many queries or iterations (seed 003 §4–6).

A :class:`BudgetSequence` is ε_1, ε_2, … (1-based, :meth:`~BudgetSequence.term` /
:meth:`~BudgetSequence.prefix`) with **every prefix summing to at most ε** — exactly, in decimal:
terms are multiples of 10**-18 (the ledger's unit) rounded down, so what the ledger adds is what
the sequence promises. :attr:`~BudgetSequence.total` is the bound (the exact sum for a finite
sequence, ε for an infinite series), :attr:`~BudgetSequence.is_infinite` says whether there is a
term for every i (an infinite series serves a stream forever; its terms eventually round to 0,
see :meth:`InfiniteBudgetSequence.positive_length`).

Quick use::

    from blockbudget.series import geometric, taylor, parse_strategy

    slots = geometric(epsilon=1.0, ratio="0.9")          # infinite: slot i gets slots.term(i)
    plan = parse_strategy("AC-Flip-Geo", noise_bound=50).build(10, epsilon=0.3)
    plan.terms                                           # 10 Decimals, sum <= 0.3

Modules: :mod:`.sequence` (value types, the geometric and Taylor series), :mod:`.strategies`
(average, geometric, Taylor, bisection, Cormode, ideal parameters, calibration, flips),
:mod:`.acceptable` (acceptable budget, AC-/bl- compounding, usefulness), :mod:`.protection`
(random arrangement, probabilistic perturbation, noisy n), :mod:`.plan` (named strategies),
:mod:`.split` (a grant split over the iterations of an algorithm).
"""

from blockbudget.series.acceptable import (
    NoiseBoundInterval,
    SensitivityNormalization,
    Usefulness,
    ac_alpha,
    ac_compound,
    acceptable_budget,
    blend,
    compound,
    is_useful,
    lemma2_allows,
    lemma4_usefulness,
    noise_std,
    us_interval,
    useful_probability,
)
from blockbudget.series.plan import Base, Flip, Strategy, parse_strategy
from blockbudget.series.protection import (
    NoisyN,
    NoisySign,
    draw_noisy_n,
    noisy_n,
    perturbation_probabilities,
    probabilistic_perturbation,
    random_arrangement,
)
from blockbudget.series.sequence import (
    BudgetSequence,
    FiniteBudgetSequence,
    GeometricSeries,
    InfiniteBudgetSequence,
    InverseSquareSeries,
    ProportionSeries,
    TaylorSeries,
)
from blockbudget.series.split import SplitSource
from blockbudget.series.strategies import (
    CORMODE_RATIO,
    TaylorCentre,
    average,
    bisection,
    calibrate,
    cormode,
    flip_horizontal,
    flip_vertical,
    geometric,
    ideal_geometric,
    ideal_initial_term,
    ideal_ratio,
    ideal_taylor,
    taylor,
)

__all__ = [
    "CORMODE_RATIO",
    "Base",
    "BudgetSequence",
    "FiniteBudgetSequence",
    "Flip",
    "GeometricSeries",
    "InfiniteBudgetSequence",
    "InverseSquareSeries",
    "NoiseBoundInterval",
    "NoisyN",
    "NoisySign",
    "ProportionSeries",
    "SensitivityNormalization",
    "SplitSource",
    "Strategy",
    "TaylorCentre",
    "TaylorSeries",
    "Usefulness",
    "ac_alpha",
    "ac_compound",
    "acceptable_budget",
    "average",
    "bisection",
    "blend",
    "calibrate",
    "compound",
    "cormode",
    "draw_noisy_n",
    "flip_horizontal",
    "flip_vertical",
    "geometric",
    "ideal_geometric",
    "ideal_initial_term",
    "ideal_ratio",
    "ideal_taylor",
    "is_useful",
    "lemma2_allows",
    "lemma4_usefulness",
    "noise_std",
    "noisy_n",
    "parse_strategy",
    "perturbation_probabilities",
    "probabilistic_perturbation",
    "random_arrangement",
    "taylor",
    "us_interval",
    "useful_probability",
]

"""DP mechanisms and statistics that draw their cost from a budget source.

Secure noise by default (invariant 7 in docs/architecture.md): every function takes
``noise: NoiseSource | None = None`` and None means OpenDP's floating-point-safe samplers
(:class:`SecureNoise`). Every mechanism validates its parameters, prices itself for the source's
accounting rule, calls ``source.draw(cost, label=...)``, and only then samples noise, so a
refused draw releases nothing. See docs/mechanisms.md.

Modules: :mod:`~blockbudget.mechanisms.noise` (noise sources),
:mod:`~blockbudget.mechanisms.calibration` (ε → noise scale, analytic Gaussian),
:mod:`~blockbudget.mechanisms.source` (the BudgetSource contract and pricing),
:mod:`~blockbudget.mechanisms.basic` (Laplace, Gaussian),
:mod:`~blockbudget.mechanisms.sparse_vector` (AboveThreshold),
:mod:`~blockbudget.mechanisms.statistics` (count, sum, mean, variance, histogram, Sage's
group-by mean), :mod:`~blockbudget.mechanisms.results` (frozen result values).
"""

from blockbudget.mechanisms.basic import gaussian_mechanism, laplace_mechanism
from blockbudget.mechanisms.calibration import (
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    laplace_scale,
    rdp_gaussian_sigma,
    split_epsilon,
)
from blockbudget.mechanisms.inputs import NanPolicy, Unmatched
from blockbudget.mechanisms.noise import NoiseKind, NoiseSource, SecureNoise, SeededNoise
from blockbudget.mechanisms.results import DPResult, GroupMeans, Histogram, Perturbation
from blockbudget.mechanisms.source import BudgetSource
from blockbudget.mechanisms.sparse_vector import AboveThreshold
from blockbudget.mechanisms.statistics import (
    FLOAT_SUM_SLACK,
    dp_count,
    dp_group_by_mean,
    dp_histogram,
    dp_mean,
    dp_sum,
    dp_variance,
)

__all__ = [
    "FLOAT_SUM_SLACK",
    "AboveThreshold",
    "BudgetSource",
    "DPResult",
    "GroupMeans",
    "Histogram",
    "NanPolicy",
    "NoiseKind",
    "NoiseSource",
    "Perturbation",
    "SecureNoise",
    "SeededNoise",
    "Unmatched",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "classical_gaussian_sigma",
    "dp_count",
    "dp_group_by_mean",
    "dp_histogram",
    "dp_mean",
    "dp_sum",
    "dp_variance",
    "gaussian_mechanism",
    "laplace_mechanism",
    "laplace_scale",
    "rdp_gaussian_sigma",
    "split_epsilon",
]

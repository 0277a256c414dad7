"""DP statistics on the rows of a grant: count, sum, mean, variance, histogram, group-by mean.

Neighbouring relation: add or remove one row (Dwork & Roth 2014 §2.3) — the relation of Sage's
event- and user-level blocks (seed ``004_2b5d216070ae2ded.txt`` §4, §4.4) and of Sage's own
``dp_group_by_mean`` (seed ``001_7d2967ad64403faa.txt`` List. 1). Sensitivities below are for
that relation. Every statistic clips with public bounds, draws its whole declared cost from the
source in one ``draw`` (before any noise), and perturbs all its parts with Laplace noise whose
scale is rounded up from the exact ε share (:mod:`blockbudget.mechanisms.calibration`).

Budget splits (basic composition, Dwork & Roth 2014 Thm 3.16; the whole ε is drawn):

=================== ====================================== ==============================
statistic           parts (Laplace scale)                  ε split
=================== ====================================== ==============================
dp_count            n + Lap(1/ε)                           —
dp_sum              Σclip(x) + Lap(B/ε), B = max(|L|,|U|)  —
dp_mean             n + Lap(2/ε); Σ(x−m) + Lap(2r/ε)        ε/2 + ε/2
dp_variance         n; Σ(x−m); Σ(x−m)² (Lap 3/ε, 3r/ε,     ε/3 each
                    3r²/ε)
dp_histogram        counts + Lap(1/ε) per bin              — (parallel over bins)
dp_group_by_mean    counts + Lap(2/ε); sums + Lap(2R/ε)     ε/2 + ε/2 (parallel over keys)
=================== ====================================== ==============================

with m = (L+U)/2 and r = (U−L)/2 (centring halves the sum's sensitivity). On RDP streams the
cost is the sum of the parts' Laplace curves at their actual scales.

Floating-point sums. A naive float sum's error grows with the number of rows, and its true
sensitivity can exceed the textbook one (Casacuberta, Shoemate, Vadhan & Wagaman, "Widespread
underestimation of sensitivity in differentially private libraries", CCS 2022). Sums here are
``math.fsum`` — the exact sum rounded once — and their sensitivity is inflated by a relative
:data:`FLOAT_SUM_SLACK` = 1e-6, which covers the two half-ulp roundings of neighbouring sums
whenever |sum| ≤ 4.5·10⁹ × the per-row bound (e.g. fewer than 4.5 billion rows). Counts are
exact integers and get no slack.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
from numpy.typing import NDArray

from blockbudget.budget import Number
from blockbudget.decimals import plain_number
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.calibration import exact_epsilon, laplace_scale, split_epsilon
from blockbudget.mechanisms.inputs import (
    MAX_BOUND,
    NanPolicy,
    Unmatched,
    apply_nan_policy,
    check_bounds,
    check_categories,
    check_enum,
    key_codes,
    row_count,
    to_float_array,
)
from blockbudget.mechanisms.noise import FloatArray, NoiseKind, NoiseSource, resolve_noise
from blockbudget.mechanisms.results import DPResult, GroupMeans, Histogram, Perturbation
from blockbudget.mechanisms.source import BudgetSource, draw_then_perturb, price, source_accounting

#: Relative inflation of the sensitivity of a float sum (see the module docstring).
FLOAT_SUM_SLACK = 1e-6


def sum_sensitivity(bound: float) -> float:
    """Sensitivity of an fsum of values bounded by ``bound`` in magnitude, with the
    floating-point slack, rounded up."""
    return math.nextafter(bound * (1.0 + FLOAT_SUM_SLACK), math.inf)


def clamped_mean(n_hat: float, s_hat: float, *, centre: float, lower: float, upper: float) -> float:
    """The mean ``centre + Ŝ/max(n̂, 1)`` of a noisy count and a noisy centred sum, clamped
    into ``[lower, upper]`` (post-processing; Dwork & Roth 2014 Prop. 2.1). The one home of this
    post-processing: :func:`dp_mean` and the query statistic ``mean`` both use it.

    Example:
        >>> clamped_mean(4.0, 2.0, centre=1.0, lower=0.0, upper=2.0)
        1.5
        >>> clamped_mean(0.5, 9.0, centre=0.0, lower=-1.0, upper=1.0)
        1.0
    """
    return min(max(centre + s_hat / max(n_hat, 1.0), lower), upper)


def clamped_variance(n_hat: float, s_hat: float, s2_hat: float, *, radius: float) -> float:
    """The population variance ``Ŝ₂/n' − (Ŝ/n')²`` (n' = max(n̂, 1)) of a noisy count, centred
    sum and centred sum of squares, clamped into ``[0, radius²]`` — the largest variance of
    values within ``radius`` of the centre (``radius²`` if it is not finite). Used by
    :func:`dp_variance` and the query statistic ``variance``.

    Example:
        >>> clamped_variance(2.0, 0.0, 2.0, radius=2.0)
        1.0
        >>> clamped_variance(2.0, 0.0, 99.0, radius=2.0)
        4.0
    """
    n = max(n_hat, 1.0)
    mean_c = s_hat / n
    var = s2_hat / n - mean_c * mean_c
    return min(max(var, 0.0), radius * radius) if math.isfinite(var) else radius * radius


def _laplace_part(name: str, sensitivity: float, epsilon: Decimal, size: int) -> Perturbation:
    scale = laplace_scale(sensitivity=sensitivity, epsilon=epsilon)
    return Perturbation(name, NoiseKind.LAPLACE, scale, sensitivity, size, epsilon)


def _release(
    source: BudgetSource,
    *,
    epsilon: Decimal,
    jobs: Sequence[tuple[Perturbation, FloatArray]],
    noise: NoiseSource | None,
    label: str,
) -> tuple[list[FloatArray], Any, bool]:
    accounting = source_accounting(source)
    sampler = resolve_noise(noise)
    cost = price(accounting, epsilon=epsilon, parts=[part for part, _ in jobs])
    out = draw_then_perturb(source, cost=cost, label=label, noise=sampler, jobs=jobs)
    return out, cost, sampler.secure


def _values(values: Any, on_nan: NanPolicy, *, name: str = "values") -> FloatArray:
    return apply_nan_policy(to_float_array(values, name=name), on_nan, name=name)


def _centre(lower: float, upper: float) -> tuple[float, float]:
    """(m, r): a centre and a float radius with |fl(x − m)| ≤ r for every x in [lower, upper]
    (rounding is monotone, so the extremes bound every difference)."""
    m = lower / 2.0 + upper / 2.0
    return m, max(upper - m, m - lower)


def _vec(x: float) -> FloatArray:
    return np.array([x], dtype=np.float64)


def count_parts(*, epsilon: Number) -> tuple[Perturbation, ...]:
    """The perturbations :func:`dp_count` makes at ``epsilon`` — computed from public
    parameters alone, so a caller can check and price a release before touching data.

    Raises:
        InvalidBudgetError: a bad ε, or a noise scale that does not fit in a double.
    """
    return (_laplace_part("count", 1.0, exact_epsilon(epsilon), 1),)


def sum_parts(*, epsilon: Number, lower: float, upper: float) -> tuple[Perturbation, ...]:
    """The perturbations :func:`dp_sum` makes (see :func:`count_parts`).

    Raises:
        InvalidBudgetError: a bad ε or an unrepresentable noise scale.
        InvalidRequestError: bad bounds.
    """
    lo, hi = check_bounds(lower, upper)
    bound = sum_sensitivity(max(abs(lo), abs(hi)))
    return (_laplace_part("sum", bound, exact_epsilon(epsilon), 1),)


def mean_parts(*, epsilon: Number, lower: float, upper: float) -> tuple[Perturbation, ...]:
    """The perturbations :func:`dp_mean` makes: count and centred sum at ε/2 each (see
    :func:`count_parts`).

    Raises:
        As :func:`sum_parts`.
    """
    lo, hi = check_bounds(lower, upper)
    _, r = _centre(lo, hi)
    half = split_epsilon(exact_epsilon(epsilon), 2)
    return (
        _laplace_part("count", 1.0, half, 1),
        _laplace_part("sum", sum_sensitivity(r), half, 1),
    )


def histogram_parts(
    *, epsilon: Number, categories: Sequence[Hashable], unmatched: Unmatched = Unmatched.DROP
) -> tuple[Perturbation, ...]:
    """The perturbations :func:`dp_histogram` makes: one count per public bin, plus the
    "other" bin under ``Unmatched.OTHER`` (see :func:`count_parts`).

    Raises:
        InvalidBudgetError: a bad ε. InvalidRequestError: empty or duplicate categories.
    """
    cats = check_categories(categories)
    mode = check_enum(unmatched, Unmatched, name="unmatched")
    size = len(cats) + (1 if mode is Unmatched.OTHER else 0)
    return (_laplace_part("counts", 1.0, exact_epsilon(epsilon), size),)


def dp_count(
    source: BudgetSource,
    data: Any,
    *,
    epsilon: Number,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[float]:
    """The number of rows + Lap(1/ε) — ε-DP, sensitivity 1 under add/remove.

    Args:
        source: where ε is drawn from.
        data: any sized collection of rows (array, Series, DataFrame, pyarrow Array/Table).
        epsilon: ε > 0.
        noise: None means SecureNoise.
        label: the charge's label (default "dp_count").

    Returns:
        The noisy count, unrounded (rounding or clamping at 0 is free post-processing).

    Raises:
        InvalidBudgetError: for a bad ε. DataError: when ``data`` has no length.
        BudgetExceededError, ReservationError: from the source; nothing is released.
    """
    eps = exact_epsilon(epsilon)
    n = row_count(data)
    (part,) = count_parts(epsilon=eps)
    name = label or "dp_count"
    (out,), cost, secure = _release(
        source, epsilon=eps, jobs=[(part, _vec(float(n)))], noise=noise, label=name
    )
    return DPResult(float(out[0]), cost, "dp_count", (part,), secure, name)


def dp_sum(
    source: BudgetSource,
    values: Any,
    *,
    epsilon: Number,
    lower: float,
    upper: float,
    on_nan: NanPolicy = NanPolicy.DROP,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[float]:
    """Σ clip(x, lower, upper) + Lap(B/ε), B = max(|lower|, |upper|) (plus float slack).

    Args:
        source: where ε is drawn from.
        values: numbers (numpy, pandas, pyarrow or a sequence).
        epsilon: ε > 0.
        lower: public lower clipping bound (finite).
        upper: public upper clipping bound (finite, > lower).
        on_nan: what to do with missing values (:class:`NanPolicy`, default DROP).
        noise: None means SecureNoise.
        label: the charge's label (default "dp_sum").

    Raises:
        InvalidBudgetError: bad ε. InvalidRequestError: bad bounds or policy.
        DataError: non-numeric values, or missing values under REJECT.
        BudgetExceededError, ReservationError: from the source; nothing is released.
    """
    eps = exact_epsilon(epsilon)
    lo, hi = check_bounds(lower, upper)
    (part,) = sum_parts(epsilon=eps, lower=lo, upper=hi)
    x = np.clip(_values(values, on_nan), lo, hi)
    name = label or "dp_sum"
    (out,), cost, secure = _release(
        source, epsilon=eps, jobs=[(part, _vec(math.fsum(x.tolist())))], noise=noise, label=name
    )
    return DPResult(float(out[0]), cost, "dp_sum", (part,), secure, name)


def dp_mean(
    source: BudgetSource,
    values: Any,
    *,
    epsilon: Number,
    lower: float,
    upper: float,
    on_nan: NanPolicy = NanPolicy.DROP,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[float]:
    """Mean of clipped values as noisy sum / noisy count, with ε split evenly.

    ε/2 buys the count (Lap(2/ε)); ε/2 buys the sum of the centred values x − m
    (m = (lower+upper)/2, sensitivity r = (upper−lower)/2, Lap(2r/ε)). The result
    m + S/max(n̂, 1) is clamped into [lower, upper] (post-processing; Dwork & Roth 2014
    Prop. 2.1).

    Raises:
        As :func:`dp_sum`.
    """
    eps = exact_epsilon(epsilon)
    lo, hi = check_bounds(lower, upper)
    m, _ = _centre(lo, hi)
    count_part, sum_part = mean_parts(epsilon=eps, lower=lo, upper=hi)
    x = np.clip(_values(values, on_nan), lo, hi) - m
    name = label or "dp_mean"
    (n_hat, s_hat), cost, secure = _release(
        source,
        epsilon=eps,
        jobs=[(count_part, _vec(float(x.size))), (sum_part, _vec(math.fsum(x.tolist())))],
        noise=noise,
        label=name,
    )
    mean = clamped_mean(float(n_hat[0]), float(s_hat[0]), centre=m, lower=lo, upper=hi)
    return DPResult(mean, cost, "dp_mean", (count_part, sum_part), secure, name)


def dp_variance(
    source: BudgetSource,
    values: Any,
    *,
    epsilon: Number,
    lower: float,
    upper: float,
    on_nan: NanPolicy = NanPolicy.DROP,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[float]:
    """Population variance (divide by n) of clipped values from three noisy sums.

    ε/3 each buys the count n̂ (Lap(3/ε)), the centred sum S₁ = Σ(x−m) (Lap(3r/ε)) and the
    centred sum of squares S₂ = Σ(x−m)² (Lap(3r²/ε)); with n' = max(n̂, 1) the result
    S₂/n' − (S₁/n')² is clamped into [0, r²], r = (upper−lower)/2 — the largest variance of
    values in [lower, upper].

    Raises:
        As :func:`dp_sum`.
    """
    eps = exact_epsilon(epsilon)
    # Squares of centred values must sum without overflow too (see inputs.MAX_BOUND).
    lo, hi = check_bounds(lower, upper, limit=2.0**479)
    m, r = _centre(lo, hi)
    x = np.clip(_values(values, on_nan), lo, hi) - m
    r2 = math.nextafter(r * r, math.inf)
    third = split_epsilon(eps, 3)
    parts = (
        _laplace_part("count", 1.0, third, 1),
        _laplace_part("sum", sum_sensitivity(r), third, 1),
        _laplace_part("sum_squares", sum_sensitivity(r2), third, 1),
    )
    exact = (float(x.size), math.fsum(x.tolist()), math.fsum((x * x).tolist()))
    name = label or "dp_variance"
    outs, cost, secure = _release(
        source,
        epsilon=eps,
        jobs=[(p, _vec(v)) for p, v in zip(parts, exact, strict=True)],
        noise=noise,
        label=name,
    )
    var = clamped_variance(float(outs[0][0]), float(outs[1][0]), float(outs[2][0]), radius=r)
    return DPResult(var, cost, "dp_variance", parts, secure, name)


def _codes(keys: Any, cats: tuple[Hashable, ...], on_nan: NanPolicy) -> NDArray[np.intp]:
    codes = key_codes(keys, cats, name="keys")
    policy = check_enum(on_nan, NanPolicy, name="on_nan")
    if policy is NanPolicy.REJECT and bool(np.any(codes == -2)):
        raise DataError(
            "keys contain missing values and on_nan=NanPolicy.REJECT; "
            "drop them upstream or pass on_nan=NanPolicy.DROP"
        )
    return codes


def dp_histogram(
    source: BudgetSource,
    values: Any,
    *,
    categories: Sequence[Hashable],
    epsilon: Number,
    unmatched: Unmatched = Unmatched.DROP,
    on_nan: NanPolicy = NanPolicy.DROP,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[Histogram]:
    """Per-category counts + Lap(1/ε) each — ε-DP: one row changes one bin by one.

    The categories are public and fixed in advance (never taken from the data). A value outside
    them is dropped (``Unmatched.DROP``, default) or counted in an extra "other" bin
    (``Unmatched.OTHER``); a missing value follows ``on_nan`` and never goes to "other".

    Raises:
        InvalidBudgetError: bad ε. InvalidRequestError: empty/duplicate categories, bad policy.
        DataError: missing values under REJECT.
        BudgetExceededError, ReservationError: from the source; nothing is released.
    """
    eps = exact_epsilon(epsilon)
    cats = check_categories(categories)
    mode = check_enum(unmatched, Unmatched, name="unmatched")
    (part,) = histogram_parts(epsilon=eps, categories=cats, unmatched=mode)
    codes = _codes(values, cats, on_nan)
    counts = np.bincount(codes[codes >= 0], minlength=len(cats)).astype(np.float64)
    if mode is Unmatched.OTHER:
        counts = np.append(counts, float(np.count_nonzero(codes == -1)))
    name = label or "dp_histogram"
    (out,), cost, secure = _release(
        source, epsilon=eps, jobs=[(part, counts)], noise=noise, label=name
    )
    noisy = tuple(float(v) for v in out)
    other = noisy[-1] if mode is Unmatched.OTHER else None
    hist = Histogram(categories=cats, counts=noisy[: len(cats)], other=other)
    return DPResult(hist, cost, "dp_histogram", (part,), secure, name)


def _group_fsums(codes: NDArray[np.intp], values: FloatArray, k: int) -> FloatArray:
    order = np.argsort(codes, kind="stable")
    sorted_codes, sorted_values = codes[order], values[order]
    bounds = np.searchsorted(sorted_codes, np.arange(k + 1))
    return np.array(
        [math.fsum(sorted_values[bounds[i] : bounds[i + 1]].tolist()) for i in range(k)],
        dtype=np.float64,
    )


def dp_group_by_mean(
    source: BudgetSource,
    keys: Any,
    values: Any,
    *,
    epsilon: Number,
    value_range: float,
    nkeys: int | None = None,
    categories: Sequence[Hashable] | None = None,
    on_nan: NanPolicy = NanPolicy.DROP,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[GroupMeans]:
    """Sage's DP group-by mean (seed ``001_7d2967ad64403faa.txt`` List. 1, lines 30–38; the
    same listing in seed ``004_2b5d216070ae2ded.txt`` §3.1, List. 1, lines 33–42).

    As in the seed: per key, a count of rows + Lap(2/ε) and a sum of values + Lap(2·range/ε);
    the mean is their ratio. Each row has exactly one key, so the counts (and the sums) compose
    in parallel across keys (seed 004 §3.1, citing McSherry's PINQ), and ε is split evenly
    between the counts and the sums. Differences from the TensorFlow sketch, all needed for
    the guarantee: values are *clipped* into [0, value_range] (the seed assumes it, having
    scaled them with ``tft.scale_to_0_1``); the sums are exact fsums with the float slack of
    this module; rows whose key is not one of the public keys are dropped.

    Args:
        source: where ε is drawn from.
        keys: one key per row: integers in [0, nkeys), or values among ``categories``.
        values: one number per row.
        epsilon: ε > 0 for the whole release.
        value_range: R > 0; values are clipped into [0, R].
        nkeys: the keys are 0..nkeys−1 (the seed's ``nkeys``); exclusive with ``categories``.
        categories: the public keys; exclusive with ``nkeys``.
        on_nan: rows with a missing key or value are dropped (default) or rejected.
        noise: None means SecureNoise.
        label: the charge's label (default "dp_group_by_mean").

    Returns:
        A :class:`GroupMeans` with the noisy counts and sums, the seed's raw ratios ``means``,
        ``clamped_means``, and ``lookup(keys)`` — the seed's per-row ``tf.gather``.

    Raises:
        InvalidBudgetError: bad ε. InvalidRequestError: bad value_range, nkeys or categories.
        DataError: keys and values of different lengths; missing values under REJECT.
        BudgetExceededError, ReservationError: from the source; nothing is released.
    """
    eps = exact_epsilon(epsilon)
    if (nkeys is None) == (categories is None):
        raise InvalidRequestError("pass exactly one of nkeys= or categories=")
    nkeys, value_range = plain_number(nkeys), plain_number(value_range)
    if nkeys is not None:
        if isinstance(nkeys, bool) or not isinstance(nkeys, int) or nkeys < 1:
            raise InvalidRequestError(f"nkeys must be a positive int, got {nkeys!r}")
        cats: tuple[Hashable, ...] = tuple(range(nkeys))
    else:
        assert categories is not None
        cats = check_categories(categories)
    if isinstance(value_range, bool) or not isinstance(value_range, (int, float)):
        raise InvalidRequestError(f"value_range must be a number, got {value_range!r}")
    if not (value_range > 0 and value_range <= MAX_BOUND):
        raise InvalidRequestError(
            f"value_range must be > 0 and at most {MAX_BOUND:.4g} (so that no sum of clipped "
            f"values can overflow), got {value_range!r}"
        )
    big_r = float(value_range)
    policy = check_enum(on_nan, NanPolicy, name="on_nan")
    codes = _codes(keys, cats, policy)
    x = to_float_array(values, name="values")
    if codes.size != x.size:
        raise DataError(f"keys and values differ in length ({codes.size} vs {x.size})")
    missing = np.isnan(x) | (codes == -2)
    if policy is NanPolicy.REJECT and bool(missing.any()):
        raise DataError(
            "values contain missing entries and on_nan=NanPolicy.REJECT; "
            "drop them upstream or pass on_nan=NanPolicy.DROP"
        )
    keep = ~missing & (codes >= 0)
    codes, x = codes[keep], np.clip(x[keep], 0.0, big_r)
    k = len(cats)
    counts = np.bincount(codes, minlength=k).astype(np.float64)
    sums = _group_fsums(codes, x, k)
    half = split_epsilon(eps, 2)
    count_part = _laplace_part("counts", 1.0, half, k)  # Lap(2/ε)
    sum_part = _laplace_part("sums", sum_sensitivity(big_r), half, k)  # Lap(2·R/ε)
    name = label or "dp_group_by_mean"
    (dp_counts, dp_sums), cost, secure = _release(
        source, epsilon=eps, jobs=[(count_part, counts), (sum_part, sums)], noise=noise, label=name
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        means = dp_sums / dp_counts  # the seed's ratio, as is
    result = GroupMeans(
        keys=cats,
        counts=tuple(float(v) for v in dp_counts),
        sums=tuple(float(v) for v in dp_sums),
        means=tuple(float(v) for v in means),
        value_range=big_r,
    )
    return DPResult(result, cost, "dp_group_by_mean", (count_part, sum_part), secure, name)

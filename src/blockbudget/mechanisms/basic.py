"""The Laplace and Gaussian mechanisms on values the caller computed.

The caller states the sensitivity of the query that produced the value(s): L1 for Laplace, L2
for Gaussian, under the stream's neighbouring relation. Each function validates its parameters,
calibrates the noise (:mod:`blockbudget.mechanisms.calibration`), prices itself for the source's
accounting rule (:mod:`blockbudget.mechanisms.source`), draws the cost, and only then perturbs.

* Laplace mechanism — Dwork, McSherry, Nissim & Smith 2006; Dwork & Roth 2014, Def. 3.3 and
  Thm 3.6: value + Lap(Δ₁/ε) per coordinate is ε-DP.
* Gaussian mechanism — for (ε, δ) the analytic calibration of Balle & Wang 2018 (ICML, Thm 8);
  on RDP streams N(0, σ²) with RDP α·Δ₂²/(2σ²) (Mironov 2017, Prop. 7); on GDP streams
  (Δ₂/σ)-GDP (Dong, Roth & Su 2022, Thm 2.7).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, TypeAlias, overload

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from blockbudget.accounting import get_rule
from blockbudget.budget import Number
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.calibration import (
    analytic_gaussian_sigma,
    check_sensitivity,
    exact_delta,
    exact_epsilon,
    fitted_gaussian_scales,
    laplace_scale,
)
from blockbudget.mechanisms.inputs import to_float_array
from blockbudget.mechanisms.noise import FloatArray, NoiseKind, NoiseSource, resolve_noise
from blockbudget.mechanisms.results import DPResult, Perturbation
from blockbudget.mechanisms.source import (
    BudgetSource,
    draw_then_perturb,
    price,
    source_accounting,
)

#: A vector of query answers: numpy array, pandas Series, pyarrow Array or a sequence of floats.
VectorLike: TypeAlias = NDArray[Any] | pd.Series | Sequence[float]


def _as_vector(value: Any) -> tuple[FloatArray, bool]:
    """(finite float64 vector, whether the input was a scalar).

    Raises:
        DataError: for non-numeric or non-finite values.
    """
    if isinstance(value, bool):
        raise DataError("a query answer must be a number, got a boolean")
    if isinstance(value, (int, float, np.integer, np.floating)):
        vec, scalar = np.array([float(value)], dtype=np.float64), True
    else:
        vec, scalar = to_float_array(value, name="value"), False
    if not np.all(np.isfinite(vec)):
        raise DataError("query answers must be finite (no NaN or infinity) before adding noise")
    return vec, scalar


def _result_value(out: FloatArray, scalar: bool) -> float | tuple[float, ...]:
    return float(out[0]) if scalar else tuple(float(x) for x in out)


@overload
def laplace_mechanism(
    source: BudgetSource,
    value: float,
    *,
    epsilon: Number,
    sensitivity: float,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[float]: ...


@overload
def laplace_mechanism(
    source: BudgetSource,
    value: VectorLike,
    *,
    epsilon: Number,
    sensitivity: float,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[tuple[float, ...]]: ...


def laplace_mechanism(
    source: BudgetSource,
    value: Any,
    *,
    epsilon: Number,
    sensitivity: float,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[Any]:
    """Release value(s) + Laplace(Δ₁/ε) noise — ε-DP (Dwork & Roth 2014, Thm 3.6).

    Args:
        source: where the cost is drawn from.
        value: a number, or a vector of numbers whose L1 sensitivity is ``sensitivity``.
        epsilon: ε > 0, exact; the scale is Δ₁/ε rounded up to the next double.
        sensitivity: L1 sensitivity Δ₁ > 0 of the query that produced ``value``.
        noise: the noise source; None means :class:`~blockbudget.mechanisms.noise.SecureNoise`.
        label: the label of the charge (default "laplace").

    Returns:
        A float for a scalar input, a tuple of floats for a vector. Cost: ``Budget(ε)`` on
        (ε, δ) streams, otherwise the rule's price of Laplace(b) (RDP:
        ``RdpCurve.laplace(scale=b, sensitivity=Δ₁)``).

    Raises:
        InvalidBudgetError: for a bad ε or sensitivity.
        InvalidRequestError: for a source that is not a BudgetSource.
        DataError: for non-numeric or non-finite values.
        BudgetExceededError, ReservationError: from the source; nothing is released.
    """
    accounting = source_accounting(source)
    eps = exact_epsilon(epsilon)
    delta_1 = check_sensitivity(sensitivity)
    scale = laplace_scale(sensitivity=delta_1, epsilon=eps)
    vec, scalar = _as_vector(value)
    sampler = resolve_noise(noise)
    part = Perturbation("value", NoiseKind.LAPLACE, scale, delta_1, int(vec.size), eps)
    cost = price(accounting, epsilon=eps, parts=[part])
    name = label or "laplace"
    (out,) = draw_then_perturb(source, cost=cost, label=name, noise=sampler, jobs=[(part, vec)])
    return DPResult(
        value=_result_value(out, scalar),
        cost=cost,
        mechanism="laplace",
        perturbations=(part,),
        secure_noise=sampler.secure,
        label=name,
    )


@overload
def gaussian_mechanism(
    source: BudgetSource,
    value: float,
    *,
    sensitivity: float,
    epsilon: Number | None = None,
    delta: Number | None = None,
    sigma: float | None = None,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[float]: ...


@overload
def gaussian_mechanism(
    source: BudgetSource,
    value: VectorLike,
    *,
    sensitivity: float,
    epsilon: Number | None = None,
    delta: Number | None = None,
    sigma: float | None = None,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[tuple[float, ...]]: ...


def gaussian_mechanism(
    source: BudgetSource,
    value: Any,
    *,
    sensitivity: float,
    epsilon: Number | None = None,
    delta: Number | None = None,
    sigma: float | None = None,
    noise: NoiseSource | None = None,
    label: str | None = None,
) -> DPResult[Any]:
    """Release value(s) + N(0, σ²) noise.

    Parametrization, by the source's accounting rule:

    * (ε, δ) rules (basic, strong, advanced composition): ``epsilon`` and ``delta``
      (0 < δ < 1) are required and ``sigma`` is not allowed; σ is the analytic Gaussian
      calibration (Balle & Wang 2018, Thm 8) rounded up, and the cost is ``Budget(ε, δ)``.
    * rules that price the noise (``prices_noise``): either ``sigma`` directly, or a target
      ``epsilon`` and ``delta`` translated to σ by the rule's own filter — the smallest σ whose
      price fits an empty (ε, δ) block
      (:func:`~blockbudget.mechanisms.calibration.fitted_gaussian_scales`). RDP: cost
      ``RdpCurve.gaussian(sigma=σ, sensitivity=Δ₂)`` (Mironov 2017, Prop. 7). GDP: cost
      μ = Δ₂/σ (Dong, Roth & Su 2022, Thm 2.7).

    Args:
        source: where the cost is drawn from.
        value: a number or a vector of numbers whose L2 sensitivity is ``sensitivity``.
        sensitivity: L2 sensitivity Δ₂ > 0.
        epsilon: target ε > 0.
        delta: target δ in (0, 1).
        sigma: noise standard deviation (streams whose rule prices the noise only).
        noise: the noise source; None means SecureNoise.
        label: the label of the charge (default "gaussian").

    Raises:
        InvalidBudgetError: for bad ε, δ, σ or sensitivity.
        InvalidRequestError: for a parametrization the accounting rule does not take.
        DataError: for non-numeric or non-finite values.
        BudgetExceededError, ReservationError: from the source; nothing is released.
    """
    accounting = source_accounting(source)
    rule = get_rule(accounting)
    delta_2 = check_sensitivity(sensitivity)
    eps: Decimal | None = None
    dl = Decimal(0)
    if sigma is not None:
        if not rule.prices_noise:
            raise InvalidRequestError(
                f"sigma= is for streams whose rule prices the noise (RDP, GDP); a "
                f"{accounting.value} stream needs epsilon= and delta= (the analytic Gaussian "
                "calibration picks σ)"
            )
        if epsilon is not None or delta is not None:
            raise InvalidRequestError("pass either sigma= or epsilon= and delta=, not both")
        std = check_sensitivity(sigma, name="sigma")
    else:
        if epsilon is None or delta is None:
            raise InvalidRequestError(
                "the Gaussian mechanism needs epsilon= and delta= (or sigma=)"
            )
        eps = exact_epsilon(epsilon)
        dl = exact_delta(delta, positive=True)
        # A rule that prices the noise calibrates by its own filter (the σ whose price fits an
        # empty (ε, δ) block); an (ε, δ) rule takes the analytic Gaussian (Balle & Wang 2018,
        # Thm 8), which is exact.
        fitted = fitted_gaussian_scales(
            accounting=accounting, epsilon=eps, delta=dl, sensitivities=[delta_2]
        )
        std = (
            analytic_gaussian_sigma(epsilon=eps, delta=dl, sensitivity=delta_2)
            if fitted is None
            else fitted[0]
        )
    if not math.isfinite(std):
        raise InvalidRequestError(f"the Gaussian σ is not finite: {std}")
    vec, scalar = _as_vector(value)
    sampler = resolve_noise(noise)
    part = Perturbation("value", NoiseKind.GAUSSIAN, std, delta_2, int(vec.size), eps)
    # RDP: RdpCurve.gaussian(sigma=σ, sensitivity=Δ₂); GDP: μ = Δ₂/σ; (ε, δ) rules: Budget(ε, δ).
    cost = price(accounting, epsilon=eps if eps is not None else Decimal(0), delta=dl, parts=[part])
    name = label or "gaussian"
    (out,) = draw_then_perturb(source, cost=cost, label=name, noise=sampler, jobs=[(part, vec)])
    return DPResult(
        value=_result_value(out, scalar),
        cost=cost,
        mechanism="gaussian",
        perturbations=(part,),
        secure_noise=sampler.secure,
        label=name,
    )

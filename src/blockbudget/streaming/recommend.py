"""Which stream release to configure, from the stream's public parameters only.

:func:`recommend` takes what is declared before any data is seen — the domain size k, the public
floor n_min (Δ₁ = 2/n_min, seed ``002_e6d4c77f2abb3a16.txt`` §4.1), the total ε (and δ for
Gaussian noise), the expected horizon in slots or None for a stream without end — and predicts,
for each mode, the noise standard deviation per bin of the answer at the horizon, against the
mass 1/k of a bin of the uniform PDF:

* windowed / per-slot Laplace: window (slot) j is released with Laplace(Δ₁/ε_j) per bin, standard
  deviation √2·Δ₁/ε_j; the accumulative answer combines releases with inverse-variance weights,
  standard deviation √2·Δ₁/√(Σ_j ε_j²) (:mod:`blockbudget.streaming.histogram`). The ε_j are
  the windows a release really runs (:meth:`HistogramStream.window_budget`): the warm-up
  windows share the first term, so at short horizons the answer is noisier than 12 equal
  windows would suggest; the instantaneous answer is the latest window's release alone;
* DPI: slot t's draws are exponential mechanisms with parameter α = (ε_t/2)/(2·(2/μ)·Δ₁) over
  clipped scores in [−1, 1] (seed 002 Alg. 1, Thm 5.1), so the most and least likely candidates
  differ by a factor e^{2α} at most. When 2α is tiny every draw is almost uniform and DPI cannot
  move its release away from the uniform PDF — which is what it released on the flights and
  COVID streams at ε ≤ 10 (docs/results.md).

It never touches data and costs no privacy. The warnings say when a configuration can only
release (close to) the uniform PDF.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError
from blockbudget.streaming.config import DPIConfig, Horizon
from blockbudget.streaming.series import DPISeries

__all__ = ["ModeForecast", "Recommendation", "dpi_contrast_threshold", "recommend"]

FloatArray = npt.NDArray[np.float64]

#: Horizon assumed for a stream without end: the forecast is for its first year of daily slots.
OPEN_HORIZON = 365

#: DPI's draws are treated as uninformative when e^{2α} is below this …
_DPI_CONTRAST_FLOOR = 1.1
#: … and as too weak to be sure of beating the uniform PDF below 2 at 365 slots. Set from the
#: measurements of ``streams-compare`` (docs/results.md): DPI (either pool) was no better than, or
#: within 10% of, the uniform PDF wherever its contrast was below 1.9, and clearly better on
#: zipf-1e5 (2.2 and up) — over 365 slots. Fewer slots average fewer draws, so below 365 slots
#: the threshold is 1 + (2 − 1)·√(365/slots) (conservative: at 40 slots flights' contrast 2.3
#: gave an MSE 0.995× the uniform PDF's; the threshold there is 4.0).
_DPI_CONTRAST_COARSE = 2.0
_DPI_CONTRAST_SLOTS = 365


def dpi_contrast_threshold(slots: int) -> float:
    """The contrast below which DPI may do no better than the uniform PDF over ``slots``."""
    return 1.0 + (_DPI_CONTRAST_COARSE - 1.0) * math.sqrt(max(1.0, _DPI_CONTRAST_SLOTS / slots))


@dataclass(frozen=True)
class ModeForecast:
    """One mode's predicted resolution at the horizon.

    Attributes:
        mode: ``"windowed"``, ``"per-slot"`` or ``"dpi"``.
        accumulative_noise: std per bin of the accumulative answer at the horizon (DPI: nan).
        instantaneous_noise: std per bin of the latest release at the horizon (DPI: nan).
        resolution: the published answer's noise (accumulative or instantaneous, as asked) in
            units of the uniform bin mass (noise·k); DPI: the contrast e^{2α} of its draws.
        only_uniform: the mode can only release (close to) the uniform PDF here.
        coarse: the noise per bin exceeds the uniform bin mass 1/k (resolution > 1), so the
            answer may be no closer to the truth than the uniform PDF (whose squared error per
            bin is the PDF's spread around 1/k).
        note: one line on what to expect.
    """

    mode: str
    accumulative_noise: float
    instantaneous_noise: float
    resolution: float
    only_uniform: bool
    coarse: bool
    note: str

    @property
    def warned(self) -> bool:
        """Whether :func:`recommend` warns about this mode."""
        return self.only_uniform or self.coarse


@dataclass(frozen=True)
class Recommendation:
    """:func:`recommend`'s answer.

    Attributes:
        best: the mode to use (the smallest accumulative noise).
        forecasts: one :class:`ModeForecast` per mode.
        warnings: modes that can only release the uniform PDF, or may do no better than it,
            and why.
        horizon: the horizon the forecast is for (slots).
    """

    best: str
    forecasts: tuple[ModeForecast, ...]
    warnings: tuple[str, ...]
    horizon: int


def _histogram_forecast(
    mode: str,
    budgets: npt.NDArray[np.float64],
    *,
    sensitivity: float,
    k: int,
    scale: float,
    answer: Horizon,
) -> ModeForecast:
    positive = budgets[budgets > 0]
    if positive.size == 0:
        inst = acc = math.inf
    else:
        top = float(positive.max())  # scaled so that squares neither underflow nor overflow
        inst = scale * sensitivity / float(positive[-1])
        acc = scale * sensitivity / (top * math.sqrt(float(np.sum((positive / top) ** 2))))
    noise = inst if answer is Horizon.INSTANTANEOUS else acc  # the answer the release publishes
    only_uniform = noise >= 1.0
    what = f"{answer.value} noise per bin"
    if only_uniform:
        note = f"{what} exceeds the whole mass: the release is the uniform PDF"
    elif noise * k > 1.0:
        note = (
            f"coarse: with {what} {noise:.2g}, only bins that far above the uniform bin "
            f"{1 / k:.2g} stand out"
        )
    else:
        note = f"resolves bins of uniform mass 1/k = {1 / k:.2g} ({what} {noise:.2g})"
    return ModeForecast(mode, acc, inst, noise * k, only_uniform, noise * k > 1.0, note)


def _window_budgets(total: float, *, slots: int, window: int, warmup: bool) -> FloatArray:
    """The budgets of the windows a windowed release completes within ``slots``: the warm-up
    windows exactly as charged (:meth:`HistogramStream.window_budget`), then ε·6/(π²i²) for the
    i-th full window (i ≥ 2; floats, vectorised for long horizons)."""
    from blockbudget.streaming.compression import Compression
    from blockbudget.streaming.histogram import HistogramConfig, HistogramStream

    config = HistogramConfig(epsilon=total, window=window, warmup=warmup)
    stream = HistogramStream(config=config, compression=Compression(1, 1), seed=0)
    warm = config.warmup_lengths()
    budgets, covered = [], 0
    for j, length in enumerate(warm, start=1):
        if covered + length > slots:
            break
        covered += length
        budgets.append(stream.window_budget(j))
    full = (slots - covered) // window if covered == window else 0
    i = np.arange(2, full + 2, dtype=np.float64)
    return np.concatenate(
        [np.asarray(budgets, dtype=np.float64), total * 6.0 / (math.pi**2 * i * i)]
    )


def _check(
    domain_size: int, min_users: int, epsilon: float, horizon: int | None, window: int
) -> None:
    """Refuse parameters :func:`recommend` cannot forecast (InvalidRequestError)."""
    for name, value in (("domain_size", domain_size), ("min_users", min_users)):
        value = plain_number(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequestError(f"{name} must be an int >= 1, got {value!r}")
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise InvalidRequestError(f"epsilon must be finite and > 0, got {epsilon!r}")
    if horizon is not None and (not isinstance(horizon, int) or not 2 <= horizon <= 10**6):
        raise InvalidRequestError(f"horizon must be None or an int in [2, 1e6], got {horizon!r}")
    if not isinstance(window, int) or window < 1:
        raise InvalidRequestError(f"window must be an int >= 1, got {window!r}")


def recommend(
    *,
    domain_size: int,
    min_users: int,
    epsilon: float,
    horizon: int | None,
    window: int = 30,
    delta: float = 0.0,
    mu: float = 0.5,
    answer: Horizon = Horizon.ACCUMULATIVE,
    warmup: bool = True,
) -> Recommendation:
    """Forecast every mode's resolution from public parameters and pick the best.

    Args:
        domain_size: k.
        min_users: the public floor n_min.
        epsilon: the total user-level ε.
        horizon: expected slots, or None for a stream without end (forecast for 365 slots).
        window: the windowed mode's window length.
        delta: > 0 to forecast Gaussian (zCDP) noise instead of Laplace.
        mu: DPI's μ.
        answer: which answer is published — accumulative (combined releases) or
            instantaneous (the latest release alone); the warnings and the pick judge that one.
        warmup: whether the windowed release warms up (as :class:`HistogramConfig`).

    Raises:
        InvalidRequestError: a parameter out of range.

    Example:
        >>> r = recommend(domain_size=105, min_users=400, epsilon=10.0, horizon=365)
        >>> r.best, [f.only_uniform for f in r.forecasts if f.mode == "dpi"]
        ('windowed', [True])
    """
    from blockbudget.streaming.histogram import zcdp_rho

    _check(domain_size, min_users, epsilon, horizon, window)
    k, slots = domain_size, horizon or OPEN_HORIZON
    gaussian = delta > 0
    total = zcdp_rho(epsilon=epsilon, delta=delta) if gaussian else float(epsilon)
    # Gaussian: σ = Δ₂/√(2ρ) with Δ₂ = Δ₁/√2; Laplace: std √2·Δ₁/ε.
    sens = 2.0 / min_users
    # Forecasts in floats, vectorised (a horizon of 10⁶ slots takes a fraction of a second): the
    # windows' ε·6/(π²j²) and the per-slot series' terms (DPISeries.terms, lower bounds).
    if not isinstance(answer, Horizon):
        raise InvalidRequestError(f"answer must be a Horizon, got {answer!r}")
    window_budgets = _window_budgets(total, slots=slots, window=window, warmup=warmup)
    series = DPISeries(
        epsilon=total, mu=0.5, zeta=DPIConfig.for_horizon(epsilon=total, slots=slots).zeta
    )
    slot_budgets = series.terms(np.arange(1, slots + 1, dtype=np.int64))
    forecasts = []
    for mode, budgets in (("windowed", window_budgets), ("per-slot", slot_budgets)):
        if gaussian:
            f = _histogram_forecast(
                mode,
                np.sqrt(2.0 * budgets),
                sensitivity=sens / math.sqrt(2),
                k=k,
                scale=1.0,
                answer=answer,
            )
        else:
            f = _histogram_forecast(
                mode, budgets, sensitivity=sens, k=k, scale=math.sqrt(2), answer=answer
            )
        forecasts.append(f)
    # DPI at the horizon (pure ε-DP, so its own series over ε): α of one draw, ε_t halved
    # between the two directions, score sensitivity (2/μ)·Δ₁.
    dpi_series = DPISeries(
        epsilon=float(epsilon),
        mu=mu,
        zeta=DPIConfig.for_horizon(epsilon=float(epsilon), slots=slots, mu=mu).zeta,
    )
    alpha = (dpi_series.term(slots) / 2.0) / (2.0 * (2.0 / mu) * sens)
    contrast = math.exp(min(2.0 * alpha, 700.0))
    dpi_uniform = contrast < _DPI_CONTRAST_FLOOR
    forecasts.append(
        ModeForecast(
            "dpi",
            math.nan,
            math.nan,
            contrast,
            dpi_uniform,
            contrast < dpi_contrast_threshold(slots),
            f"draws at the horizon favour the best candidate by e^(2α) = {contrast:.3g}",
        )
    )
    warnings = []
    for f in forecasts:
        setting = f"{f.mode}: with k={k}, n_min={min_users}, epsilon={epsilon} over {slots} slots"
        if f.only_uniform:
            warnings.append(
                f"{setting} this mode can only release (close to) the uniform PDF — {f.note}"
            )
        elif f.coarse:
            warnings.append(
                f"{setting} the noise per bin exceeds the uniform bin mass 1/k, so the answer "
                f"may be no better than the uniform PDF — {f.note}"
            )
    best = min(forecasts[:2], key=lambda f: f.resolution)
    return Recommendation(best.mode, tuple(forecasts), tuple(warnings), slots)

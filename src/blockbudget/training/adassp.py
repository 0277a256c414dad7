"""AdaSSP: differentially private linear (ridge) regression by adaptive sufficient statistics
perturbation.

Yu-Xiang Wang, "Revisiting differentially private linear regression: optimal and adaptive
prediction & estimation in unbounded domain", UAI 2018, Algorithm 2 (AdaSSP); the linear model of
seed ``004_2b5d216070ae2ded.txt`` Tab. 1 and seed ``001_7d2967ad64403faa.txt`` Tab. 1 ("DP Alg.
AdaSSP from [48]"). Written here: diffprivlib's version adds no noise to the diagonal of XᵀX,
and OpenDP's handles one feature.

With rows clipped to ‖x‖ ≤ B_X and labels to |y| ≤ B_Y, and (ε, δ) split in three equal parts:

1. λ̃_min = max(λ_min(XᵀX) + σ₁·Z − σ₁·sqrt(ln(6/δ)), 0), Z ~ N(0, 1), L2 sensitivity B_X²
   (Weyl: adding a row moves every eigenvalue by at most ‖x‖²);
2. λ = max(0, σ₂·sqrt(d·ln(2d²/ρ)) − λ̃_min) (Wang's bound on the noise matrix's norm, ρ the
   failure probability);
3. XᵀX + σ₂·W with W symmetric, its upper triangle i.i.d. N(0, 1) (L2 sensitivity
   ‖xxᵀ‖_F = ‖x‖² ≤ B_X²);
4. Xᵀy + σ₃·z, z ~ N(0, I_d) (sensitivity B_X·B_Y);
5. θ = (XᵀX + σ₂W + λI)⁻¹ (Xᵀy + σ₃z).

Each σ is the core's analytic Gaussian (Balle & Wang 2018) for (ε/3, δ/3) — tighter than Wang's
``sqrt(ln(6/δ))/(ε/3)`` and valid for every ε — so the release is (ε, δ)-DP by basic composition.
On an RDP stream the three Gaussian curves at those σ are charged instead. The whole cost is drawn
from the source once, before any noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from blockbudget.budget import Cost, Number
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.calibration import (
    analytic_gaussian_sigma,
    exact_delta,
    exact_epsilon,
    fitted_gaussian_scales,
    split_epsilon,
)
from blockbudget.mechanisms.noise import NoiseKind, NoiseSource, resolve_noise
from blockbudget.mechanisms.results import Perturbation
from blockbudget.mechanisms.source import BudgetSource, draw_then_perturb, price, source_accounting
from blockbudget.training.checks import check_number

FloatMatrix = NDArray[np.float64]


def clip_rows(x: FloatMatrix, bound: float) -> FloatMatrix:
    """Scale each row down to L2 norm ≤ ``bound`` (rows already inside are unchanged)."""
    norms = np.linalg.norm(x, axis=1)
    factor = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    out: FloatMatrix = x * factor[:, None]
    return out


@dataclass
class AdaSSPRegressor:
    """DP linear regression with a scikit-learn-style ``fit``/``predict`` (Wang 2018, Alg. 2).

    Args:
        x_bound: B_X, the L2 norm bound of a feature row (the intercept's constant 1 included
            when ``fit_intercept``); rows are clipped to it.
        y_bound: B_Y, labels are clipped into [−B_Y, B_Y].
        rho: ρ, the failure probability of the adaptive ridge choice (Wang's default 0.05).
        fit_intercept: append a constant feature 1 (scaled so it fits within ``x_bound``).

    Attributes (after fit):
        coef_: the weights of the features; ``intercept_``: the intercept; ``ridge_``: λ used;
        ``cost_``: what was charged; ``secure_noise_``: whether the noise was secure.
    """

    x_bound: float = 1.0
    y_bound: float = 1.0
    rho: float = 0.05
    fit_intercept: bool = True
    coef_: FloatMatrix = field(init=False, repr=False)
    intercept_: float = field(init=False, default=0.0)
    ridge_: float = field(init=False, default=0.0)
    cost_: Cost | None = field(init=False, default=None)
    secure_noise_: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        check_number(self.x_bound, name="x_bound")
        check_number(self.y_bound, name="y_bound")
        check_number(self.rho, name="rho", high=1.0, high_open=True)
        if not isinstance(self.fit_intercept, bool):
            raise InvalidRequestError(f"fit_intercept must be a bool, got {self.fit_intercept!r}")

    def _design(self, x: Any) -> FloatMatrix:
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"X must be numeric: {exc}") from exc
        if arr.ndim != 2:
            raise DataError(f"X must be a 2-D array, got shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise DataError("X must be finite (impute or drop missing values first)")
        if self.fit_intercept:
            # The constant takes half of the squared norm budget: ‖(x, c)‖² ≤ B_X² with
            # ‖x‖ ≤ B_X/√2 and c = B_X/√2.
            half = self.x_bound / math.sqrt(2.0)
            arr = np.hstack([clip_rows(arr, half), np.full((arr.shape[0], 1), half)])
        return clip_rows(arr, self.x_bound)

    def fit(
        self,
        source: BudgetSource,
        x: Any,
        y: Any,
        *,
        epsilon: Number,
        delta: Number,
        noise: NoiseSource | None = None,
        label: str = "adassp",
    ) -> AdaSSPRegressor:
        """Fit on (x, y), drawing (ε, δ) from ``source`` before any noise.

        Raises:
            InvalidBudgetError: bad ε or δ (δ must be > 0).
            DataError: bad shapes or non-finite values.
            BudgetExceededError, ReservationError: from the source; nothing is fitted.
        """
        eps = exact_epsilon(epsilon)
        dl = exact_delta(delta, positive=True)
        design = self._design(x)
        labels = np.asarray(y, dtype=np.float64).ravel()
        if labels.size != design.shape[0]:
            raise DataError(f"X has {design.shape[0]} rows but y has {labels.size}")
        if not np.all(np.isfinite(labels)):
            raise DataError("y must be finite")
        labels = np.clip(labels, -self.y_bound, self.y_bound)
        d = design.shape[1]
        third_eps = split_epsilon(eps, 3)  # rounded down: 3 parts never exceed the charge
        third_delta = split_epsilon(dl, 3)
        bx2 = self.x_bound**2
        bxy = self.x_bound * self.y_bound
        # A rule that prices the noise calibrates the three parts together by its own filter;
        # an (ε, δ) rule splits (ε, δ) in three, each part by the analytic Gaussian.
        fitted = fitted_gaussian_scales(
            accounting=source_accounting(source),
            epsilon=eps,
            delta=dl,
            sensitivities=[bx2, bx2, bxy],
        )
        sig_min, sig_xx, sig_xy = fitted or (
            analytic_gaussian_sigma(epsilon=third_eps, delta=third_delta, sensitivity=bx2),
            analytic_gaussian_sigma(epsilon=third_eps, delta=third_delta, sensitivity=bx2),
            analytic_gaussian_sigma(epsilon=third_eps, delta=third_delta, sensitivity=bxy),
        )
        xtx = design.T @ design
        xty = design.T @ labels
        upper = np.triu_indices(d)
        lam_min = float(np.linalg.eigvalsh(xtx)[0])
        parts = [
            Perturbation("lambda_min", NoiseKind.GAUSSIAN, sig_min, bx2, 1, third_eps),
            Perturbation("xtx", NoiseKind.GAUSSIAN, sig_xx, bx2, len(upper[0]), third_eps),
            Perturbation(
                "xty", NoiseKind.GAUSSIAN, sig_xy, self.x_bound * self.y_bound, d, third_eps
            ),
        ]
        rng = resolve_noise(noise)
        cost = price(source_accounting(source), epsilon=eps, delta=dl, parts=parts)
        noisy_min, noisy_upper, noisy_xty = draw_then_perturb(
            source,
            cost=cost,
            label=label,
            noise=rng,
            jobs=[
                (parts[0], np.array([lam_min])),
                (parts[1], xtx[upper].astype(np.float64)),
                (parts[2], xty.astype(np.float64)),
            ],
        )
        log6 = math.log(6.0 / float(dl))
        lam_tilde = max(float(noisy_min[0]) - sig_min * math.sqrt(log6), 0.0)
        ridge = max(0.0, sig_xx * math.sqrt(d * math.log(2.0 * d * d / self.rho)) - lam_tilde)
        noisy_xtx = np.zeros((d, d))
        noisy_xtx[upper] = noisy_upper
        noisy_xtx = noisy_xtx + np.triu(noisy_xtx, 1).T
        theta = np.asarray(
            np.linalg.lstsq(noisy_xtx + ridge * np.eye(d), noisy_xty, rcond=None)[0],
            dtype=np.float64,
        )
        if self.fit_intercept:
            half = self.x_bound / math.sqrt(2.0)
            self.coef_ = theta[:-1]
            self.intercept_ = float(theta[-1] * half)
        else:
            self.coef_ = theta
            self.intercept_ = 0.0
        self.ridge_ = ridge
        self.cost_ = cost
        self.secure_noise_ = bool(rng.secure)
        return self

    def predict(self, x: Any) -> FloatMatrix:
        """Predictions X·coef + intercept (features clipped as in fit)."""
        if not hasattr(self, "coef_"):
            raise InvalidRequestError("fit the model before predict")
        arr = np.asarray(x, dtype=np.float64)
        width = self.coef_.size
        if arr.ndim != 2 or arr.shape[1] != width:
            raise DataError(f"X must be a 2-D array with {width} columns, got shape {arr.shape}")
        if self.fit_intercept:
            arr = clip_rows(arr, self.x_bound / math.sqrt(2.0))
        else:
            arr = clip_rows(arr, self.x_bound)
        out: FloatMatrix = arr @ self.coef_ + self.intercept_
        return out


def ols(x: FloatMatrix, y: FloatMatrix) -> FloatMatrix:
    """Exact least squares with an intercept (the non-private reference; last entry = intercept)."""
    design = np.hstack([x, np.ones((x.shape[0], 1))])
    out: FloatMatrix = np.asarray(np.linalg.lstsq(design, y, rcond=None)[0], dtype=np.float64)
    return out

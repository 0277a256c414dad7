"""DP-SGD for logistic regression in numpy: the fast path for linear classifiers.

The same algorithm and the same accounting as :class:`~blockbudget.training.dpsgd.DPSGDModel`
with ``hidden=()`` (Abadi et al. 2016; seed ``004_2b5d216070ae2ded.txt`` Tab. 1's LG): Poisson
sampling at rate q, per-example gradients clipped to norm C, their sum plus N(0, σ²C²), divided by
the expected batch size, momentum SGD. The plan (q, steps, σ) comes from
:func:`~blockbudget.training.dpsgd.plan_dpsgd` (Opacus' RDP accountant) and is charged to the
budget source before any noise, for a public or DP-counted size
(:mod:`blockbudget.training.sizing`), never the exact number of rows. A logistic model's
per-example gradient has a closed form, so no autograd is needed: thousands of models per minute
instead of a few, which is what the Tab. 2 and Fig. 6 experiments need.

Randomness: unseeded (the default), the Poisson sampler is numpy's generator on fresh OS entropy
and the noise is :class:`~blockbudget.mechanisms.noise.SecureNoise` (``secure_noise_ = True``);
a seed makes the fit reproducible for experiments
(:class:`~blockbudget.mechanisms.noise.SeededNoise`, ``secure_noise_ = False``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from blockbudget.budget import Cost, Number
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.calibration import exact_delta, exact_epsilon
from blockbudget.mechanisms.source import BudgetSource
from blockbudget.training.checks import check_int, check_number
from blockbudget.training.dpsgd import SgdPlan, pay_for_training, poisson_schedule
from blockbudget.training.sizing import COUNT_FRACTION, check_count_fraction


@dataclass
class LogisticDPSGD:
    """Binary logistic regression trained with DP-SGD (numpy).

    Args:
        epochs, batch_size, learning_rate, momentum, max_grad_norm: DP-SGD settings.
        seed: None (default): fresh OS entropy for the Poisson sampler and SecureNoise for
            the noise, per fit; an int seeds both (experiments only, ``secure_noise_ = False``).
        count_fraction: the share of ε spent on a DP count of the rows when ``fit`` is given
            no ``public_rows``.
    """

    epochs: int = 1
    batch_size: int = 256
    learning_rate: float = 0.5
    momentum: float = 0.9
    max_grad_norm: float = 1.0
    seed: int | None = None
    count_fraction: float = COUNT_FRACTION
    coef_: NDArray[np.float64] = field(init=False, repr=False)
    intercept_: float = field(init=False, default=0.0)
    plan_: SgdPlan | None = field(init=False, default=None)
    rows_: int | None = field(init=False, default=None)
    cost_: Cost | None = field(init=False, default=None)
    secure_noise_: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        check_int(self.epochs, name="epochs")
        check_int(self.batch_size, name="batch_size")
        if self.seed is not None:
            check_int(self.seed, name="seed", low=0)
        check_count_fraction(self.count_fraction)
        check_number(self.learning_rate, name="learning_rate")
        check_number(self.max_grad_norm, name="max_grad_norm")
        check_number(self.momentum, name="momentum", low_open=False, high=1.0, high_open=True)

    def fit(
        self,
        source: BudgetSource,
        x: Any,
        y: Any,
        *,
        epsilon: Number,
        delta: Number,
        public_rows: int | None = None,
        label: str = "logistic-dpsgd",
    ) -> LogisticDPSGD:
        """Train at (ε, δ), drawing the plan's cost from ``source`` first.

        The plan is computed for ``public_rows`` (declared without reading the rows) or, when
        it is None, for a DP count of the rows drawn first with ``count_fraction`` of ε.

        Raises:
            DataError: bad shapes, non-finite features, labels other than 0/1.
            InvalidRequestError: a bad ``public_rows``.
            InvalidBudgetError: bad ε or δ, or a target DP-SGD cannot meet (nothing drawn).
            BudgetExceededError, ReservationError: from the source; nothing is trained.
        """
        feats = np.asarray(x, dtype=np.float64)
        labels = np.asarray(y, dtype=np.float64).ravel()
        if feats.ndim != 2 or not np.all(np.isfinite(feats)):
            raise DataError(f"X must be a finite 2-D array, got shape {feats.shape}")
        if labels.size != feats.shape[0]:
            raise DataError(f"X has {feats.shape[0]} rows but y has {labels.size}")
        if not np.all((labels == 0) | (labels == 1)):
            raise DataError("labels must be 0 or 1")
        n, d = feats.shape
        eps, dl = exact_epsilon(epsilon), exact_delta(delta, positive=True)
        sized, noise, spent = pay_for_training(
            source, n, self, public_rows=public_rows, epsilon=eps, delta=dl, label=label
        )  # charged before any noise is drawn
        size, plan = sized.size, sized.plan
        # the sampler: fresh OS entropy unless seeded (then a stream apart from the noise's)
        rng = np.random.default_rng(None if self.seed is None else [self.seed, 1])
        design = np.hstack([feats, np.ones((n, 1))])
        theta = np.zeros(d + 1)
        velocity = np.zeros(d + 1)
        _, rate, expected = poisson_schedule(size.rows, sized.batch_size)
        clip = self.max_grad_norm
        sigma = plan.noise_multiplier * clip
        for _ in range(plan.steps):
            # Poisson sampling: a Binomial(n, q) batch size, then that many distinct rows
            # uniformly (the same distribution as n independent coin flips, without n draws);
            # an empty batch is the same step with a zero sum, divided by the same divisor
            size_b = int(rng.binomial(n, rate))
            batch = rng.choice(n, size=size_b, replace=False, shuffle=False)
            xb, yb = design[batch], labels[batch]
            p = 1.0 / (1.0 + np.exp(-(xb @ theta)))
            grads = (p - yb)[:, None] * xb
            norms = np.linalg.norm(grads, axis=1)
            grads *= np.minimum(1.0, clip / np.maximum(norms, 1e-12))[:, None]
            noisy = noise.add_gaussian(grads.sum(axis=0), sigma=sigma)
            velocity = self.momentum * velocity + noisy / expected
            theta = theta - self.learning_rate * velocity
        self.coef_, self.intercept_ = theta[:-1], float(theta[-1])
        self.plan_, self.rows_ = plan, size.rows
        self.cost_ = spent
        self.secure_noise_ = bool(noise.secure) and self.seed is None
        return self

    def predict_proba(self, x: Any) -> NDArray[np.float64]:
        """P(y = 1) per row."""
        if not hasattr(self, "coef_"):
            raise InvalidRequestError("fit the model before predict")
        z = np.asarray(x, dtype=np.float64) @ self.coef_ + self.intercept_
        out: NDArray[np.float64] = 1.0 / (1.0 + np.exp(-z))
        return out

    def predict(self, x: Any) -> NDArray[np.float64]:
        """0/1 predictions."""
        out: NDArray[np.float64] = (self.predict_proba(x) >= 0.5).astype(np.float64)
        return out

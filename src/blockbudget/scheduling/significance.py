"""Data-query significance p_ij: how much block i is worth to query j (seed 000 §IV-B).

Seed ``000_de3e86489c8646aa.txt`` §IV-B and §VII-A name three sources:

* **validation-loss reduction** — train the query's model on the block and measure how much the
  validation loss drops (§VII-A, CelebA/CIFAR-100): :func:`validation_loss_reduction` (any
  scikit-learn-style estimator factory, public validation data);
* **recency** — for time-sensitive data, blocks closer to the prediction time matter more
  (§VII-A, HousePrice): :func:`recency_significance`;
* **user-supplied** — prior knowledge given as a table: :func:`user_significance`.

Computing p_ij touches the block's private data; the seed's point (§VI-A, Thm. 3) is that only
the *comparison* against a threshold is released, through Alg. 1's AboveThreshold whose cost ε0
is charged to the block (:mod:`blockbudget.scheduling.threshold`). The values produced here are
therefore internal to the scheduler and must never be returned to a user. Callers must bound
the sensitivity of p_ij/ε (the seed takes 1): :func:`validation_loss_reduction` clips to
``[0, clip]`` for that reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from blockbudget.errors import InvalidRequestError

__all__ = [
    "Estimator",
    "recency_significance",
    "user_significance",
    "validation_loss_reduction",
]


class Estimator(Protocol):
    """The part of a scikit-learn estimator the loss provider uses."""

    def fit(self, x: Any, y: Any) -> Any: ...

    def predict_proba(self, x: Any) -> Any: ...


def _log_loss(proba: npt.NDArray[np.float64], y: npt.NDArray[np.int64], classes: Any) -> float:
    index = {c: k for k, c in enumerate(list(classes))}
    eps = 1e-12
    rows = np.arange(len(y))
    cols = np.array([index.get(v, -1) for v in y])
    p = np.where(cols >= 0, proba[rows, np.maximum(cols, 0)], eps)
    return float(-np.mean(np.log(np.clip(p, eps, 1.0))))


def validation_loss_reduction(
    make_model: Callable[[], Estimator],
    blocks: Mapping[str, tuple[npt.NDArray[Any], npt.NDArray[Any]]],
    x_val: npt.NDArray[Any],
    y_val: npt.NDArray[Any],
    *,
    baseline_loss: float | None = None,
    clip: float = 1.0,
) -> dict[str, float]:
    """p_ij = (validation log-loss before) − (after training on block i), clipped to [0, clip].

    Seed 000 §VII-A: "the data-query significance is defined by the reduced validation loss over
    the training datablock". "Before" is the loss of the uniform predictor over the validation
    classes (log K) unless ``baseline_loss`` is given (e.g. the query's current model).

    Args:
        make_model: builds a fresh classifier with ``fit`` / ``predict_proba`` / ``classes_``.
        blocks: block id → (features, labels) of that block.
        x_val: public validation features (seed 000 §IV-A: given in advance).
        y_val: public validation labels.
        baseline_loss: loss before training (default log of the number of classes).
        clip: upper clip of p_ij (bounds its sensitivity).

    Returns:
        block id → significance.

    Raises:
        InvalidRequestError: empty validation data or a non-positive clip.
    """
    if len(x_val) == 0 or len(x_val) != len(y_val):
        raise InvalidRequestError("validation data must be non-empty with one label per row")
    if not clip > 0:
        raise InvalidRequestError(f"clip must be > 0, got {clip!r}")
    y_val = np.asarray(y_val)
    before = (
        math.log(max(2, len(np.unique(y_val)))) if baseline_loss is None else float(baseline_loss)
    )
    out: dict[str, float] = {}
    for block_id, (x, y) in blocks.items():
        if len(np.unique(y)) < 2:
            out[block_id] = 0.0
            continue
        model = make_model()
        model.fit(x, y)
        after = _log_loss(np.asarray(model.predict_proba(x_val)), y_val, model.classes_)  # type: ignore[attr-defined]
        out[block_id] = float(min(clip, max(0.0, before - after)))
    return out


def recency_significance(
    block_times: Mapping[str, float], *, target_time: float, half_life: float, scale: float = 1.0
) -> dict[str, float]:
    """p_ij = scale · 2^(−|t_i − target| / half_life): blocks generated closer to the query's
    prediction time are worth more (seed 000 §VII-A, HousePrice). Uses only public block times.

    Raises:
        InvalidRequestError: a non-positive half-life or scale.
    """
    if not half_life > 0 or not scale > 0:
        raise InvalidRequestError(
            f"half_life and scale must be > 0, got {half_life!r} and {scale!r}"
        )
    return {
        b: scale * 2.0 ** (-abs(float(t) - target_time) / half_life) for b, t in block_times.items()
    }


def user_significance(
    table: Mapping[str, float], *, default: float = 0.0
) -> Callable[[str], float]:
    """p_ij from prior knowledge: a user table block id → value, ``default`` elsewhere.

    Raises:
        InvalidRequestError: a negative or non-finite value.
    """
    for b, v in table.items():
        if not (math.isfinite(v) and v >= 0):
            raise InvalidRequestError(f"significance of {b!r} must be finite and >= 0, got {v!r}")
    if not (math.isfinite(default) and default >= 0):
        raise InvalidRequestError(f"default significance must be finite and >= 0, got {default!r}")
    frozen = dict(table)
    return lambda block_id: frozen.get(block_id, default)

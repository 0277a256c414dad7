"""What Sage's experiments share: the two flights tasks, their held-out sets, the adaptive
schedule of (ε, n) configurations, and one trained-and-validated iteration.

Seed ``004_2b5d216070ae2ded.txt`` §5: Taxi (regression, MSE; naive model MSE 0.0069) and Criteo
(classification, accuracy; naive 74.3%) become flights air time (AdaSSP linear regression, the
loss validator) and flights delayed > 15 min (DP-SGD logistic regression, the accuracy
validator). Defaults as in §5: 90::10 train::test, δ = 1e-6, ε ≤ 1, a held-out set for
re-evaluation (50,000 rows here, 100K in the paper). This module registers no experiment.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from blockbudget.apps.flights.features import (
    REGRESSION_NORM,
    TaskArrays,
    classification_arrays,
    regression_arrays,
)
from blockbudget.mechanisms.noise import SeededNoise
from blockbudget.outcome import Outcome
from blockbudget.training.adassp import AdaSSPRegressor
from blockbudget.training.linear_dpsgd import LogisticDPSGD
from blockbudget.training.pipeline import split_rows
from blockbudget.training.pipelines import exact_least_squares_losses
from blockbudget.training.sources import MeteredSource
from blockbudget.training.validation import SlaMode, ValidationResult
from blockbudget.training.validators import (
    AccuracyEvidence,
    AccuracyValidator,
    LossEvidence,
    LossValidator,
)

#: Held-out rows for re-evaluation (drawn once, never part of the stream).
HOLDOUT = 50_000
DELTA = 1e-6
#: Sage's SLA columns in Tab. 2's order.
MODES = (SlaMode.NO_SLA, SlaMode.NON_PRIVATE, SlaMode.UNCORRECTED, SlaMode.SAGE)
MODE_LABELS = {
    SlaMode.NO_SLA: "No SLA",
    SlaMode.NON_PRIVATE: "NP SLA",
    SlaMode.UNCORRECTED: "UC DP SLA",
    SlaMode.SAGE: "Sage SLA",
}


class TaskKind(Enum):
    """The two analogs of seed 004 §5."""

    TAXI = "taxi"  # regression
    CRITEO = "criteo"  # classification


@dataclass(frozen=True)
class Split:
    """A task's stream (time-ordered rows) and held-out set.

    Attributes:
        kind: which task.
        stream_x, stream_y: the rows pipelines train and test on, in time order.
        stream_day: the day (0–364, the block key) of each stream row.
        holdout_x, holdout_y: the re-evaluation rows.
        naive: the naive model's held-out metric (mean label's MSE / majority accuracy).
        best: the non-private model's held-out metric on the whole stream.
    """

    kind: TaskKind
    stream_x: NDArray[np.float64]
    stream_y: NDArray[Any]
    holdout_x: NDArray[np.float64]
    holdout_y: NDArray[Any]
    naive: float
    best: float
    stream_day: NDArray[np.int64]

    @property
    def higher_is_better(self) -> bool:
        return self.kind is TaskKind.CRITEO


@lru_cache(maxsize=8)
def task_split(kind: TaskKind, seed: int = 0, *, shuffled: bool = False) -> Split:
    """The stream and the held-out set of a task (a seeded, fixed choice of held-out rows).

    ``shuffled`` puts the stream rows in a seeded random order, so that any window of it comes
    from the same distribution as the held-out set — the i.i.d. assumption under which the SLAed
    guarantees hold (seed 004 §3.3: "new data from the same distribution"). In time order a
    window is a season of flights, and delays drift with the season."""
    arrays: TaskArrays = regression_arrays() if kind is TaskKind.TAXI else classification_arrays()
    n = len(arrays.y)
    holdout = np.sort(np.random.default_rng(seed).choice(n, HOLDOUT, replace=False))
    keep = np.ones(n, dtype=bool)
    keep[holdout] = False
    sx, sy = arrays.x[keep], arrays.y[keep]
    hx, hy = arrays.x[holdout], arrays.y[holdout]
    if kind is TaskKind.TAXI:
        naive = float(np.mean((hy - sy.mean()) ** 2))
        design = np.hstack([sx, np.ones((len(sx), 1))])
        theta = np.linalg.lstsq(design, sy, rcond=None)[0]
        best = float(np.mean((np.hstack([hx, np.ones((len(hx), 1))]) @ theta - hy) ** 2))
    else:
        majority = float(sy.mean() >= 0.5)
        naive = float(np.mean(hy == majority))
        from sklearn.linear_model import LogisticRegression

        sub = np.random.default_rng(seed + 1).choice(len(sy), min(len(sy), 50_000), replace=False)
        clf = LogisticRegression(max_iter=500).fit(sx[sub], sy[sub])
        best = float(np.mean(clf.predict(hx) == hy))
    days = arrays.day[keep]
    if shuffled:
        order = np.random.default_rng(seed + 2).permutation(len(sy))
        sx, sy, days = sx[order], sy[order], days[order]
    return Split(kind, sx, sy, hx, hy, naive, best, days)


def schedule(
    *, epsilon0: float, max_epsilon: float, n0: int, n_max: int
) -> list[tuple[float, int]]:
    """Privacy-adaptive training's configurations when every iteration says RETRY (seed 004
    §3.3): ε doubles up to ``max_epsilon`` on the first window, then the data doubles."""
    out = []
    eps, n = epsilon0, n0
    while eps <= max_epsilon * (1 + 1e-12):
        out.append((eps, n))
        eps *= 2
    eps = out[-1][0]
    while 2 * n <= n_max:
        n *= 2
        out.append((eps, n))
    return out


@dataclass(frozen=True)
class Iteration:
    """One trained model, its held-out metric and its validation evidence.

    Attributes:
        epsilon: the iteration's ε (half trains, half validates).
        n: rows read (train + test).
        heldout: the model's held-out metric (MSE or accuracy).
        evidence: what the validators read.
    """

    epsilon: float
    n: int
    heldout: float
    evidence: LossEvidence | AccuracyEvidence


def train_iteration(
    split: Split, *, start: int, n: int, epsilon: float, seed: int, with_reject: bool = True
) -> Iteration:
    """Train on rows [start, start + n) of the stream (90::10 split) with ε/2 and δ."""
    x = split.stream_x[start : start + n]
    y = split.stream_y[start : start + n]
    train, test = split_rows(len(y), test_fraction=0.1, seed=seed)
    source = MeteredSource()
    if split.kind is TaskKind.TAXI:
        model: Any = AdaSSPRegressor(x_bound=REGRESSION_NORM * math.sqrt(2.0)).fit(
            source, x[train], y[train], epsilon=epsilon / 2, delta=DELTA, noise=SeededNoise(seed)
        )
        pred = np.clip(model.predict(x[test]), 0.0, 1.0)
        heldout = float(
            np.mean((np.clip(model.predict(split.holdout_x), 0, 1) - split.holdout_y) ** 2)
        )
        reject = (
            exact_least_squares_losses(x[train], y[train], x_bound=REGRESSION_NORM * math.sqrt(2))
            if with_reject
            else None
        )
        evidence: LossEvidence | AccuracyEvidence = LossEvidence((pred - y[test]) ** 2, reject)
    else:
        # The window is defined by its row count (rows [start, start + n)), so its size is public
        # and DP-SGD plans with it instead of paying for a DP count.
        model = LogisticDPSGD(batch_size=1024, learning_rate=1.0, seed=seed).fit(
            source, x[train], y[train], epsilon=epsilon / 2, delta=DELTA, public_rows=len(train)
        )
        heldout = float(np.mean(model.predict(split.holdout_x) == split.holdout_y))
        evidence = AccuracyEvidence((model.predict(x[test]) == y[test]).astype(np.float64))
    return Iteration(epsilon, n, heldout, evidence)


def validate(
    split: Split,
    iteration: Iteration,
    *,
    target: float,
    mode: SlaMode,
    eta: float,
    seed: int,
) -> ValidationResult:
    """Validate one iteration in one SLA mode with ε/2 (NP SLA: exact, no source)."""
    if split.kind is TaskKind.TAXI:
        validator: Any = LossValidator(target=target, bound=1.0, mode=mode)
    else:
        validator = AccuracyValidator(target=target, mode=mode)
    source = None if mode is SlaMode.NON_PRIVATE else MeteredSource()
    result: ValidationResult = validator.validate(
        source, iteration.evidence, epsilon=iteration.epsilon / 2, eta=eta, noise=SeededNoise(seed)
    )
    return result


def violates(split: Split, heldout: float, target: float) -> bool:
    """Whether a model's held-out metric misses its target."""
    return heldout < target if split.higher_is_better else heldout > target


def eta_at(eta: float, iteration: int) -> float:
    """η_i = η/(i(i+1)) (1-based), the adaptive search's confidence schedule."""
    return eta / (iteration * (iteration + 1))


def seeds(base: int, count: int) -> Iterator[int]:
    """``count`` distinct seeds derived from ``base``."""
    rng = np.random.default_rng(base)
    yield from (int(s) for s in rng.integers(0, 2**31 - 1, size=count))


def first_outcome(results: list[ValidationResult]) -> tuple[Outcome, int]:
    """The first decisive outcome of a run of validations and its index (RETRY, len if none)."""
    for k, r in enumerate(results):
        if r.outcome is not Outcome.RETRY:
            return r.outcome, k
    return Outcome.RETRY, len(results)

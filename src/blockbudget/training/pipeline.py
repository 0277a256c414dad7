"""The (ε, δ)-DP training pipeline: preprocess → train → validate (Sage's List. 1).

Seed ``004_2b5d216070ae2ded.txt`` §3.1 and List. 1 (seed ``001_7d2967ad64403faa.txt`` §3.3): a
developer writes the three TFX callbacks — ``preprocessing_fn``, ``trainer_fn``,
``validator_fn`` — with DP library calls, and *splits the (ε, δ) that Sage assigns at run time*
across them. Here a :class:`Pipeline` does the same: :meth:`Pipeline.run` receives a budget
source (a :class:`~blockbudget.grant.Grant`), the granted rows and the (ε, δ, η) of this
iteration, splits the budget with its :class:`BudgetSplit`, and calls the three stages, each of
which draws its share from the source before releasing anything. The validation is pure
(ε, 0)-DP (App. B); δ goes to preprocessing and training.

Rows are split into training and test sets (90::10 by default as in seed 004 §5) by
:func:`split_frame`: each row's side is a seeded hash of **that row alone**, so adding or removing
one row moves no other row between the splits. This is what makes the stages' guarantees hold on
the whole window: the model sees the training rows, the ACCEPT test the test rows, and a neighbor
of the window is a neighbor of each split (App. B.1 "DP Guarantee" runs ACCEPT and REJECT on
disjoint splits in parallel). A seeded permutation of ``range(n)`` (:func:`split_rows`) does not
have this property — one extra row reshuffles every assignment — so it is for simulations only.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from blockbudget.budget import Number
from blockbudget.decimals import plain_number, shortest_decimal
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.calibration import exact_delta, exact_epsilon
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.mechanisms.source import BudgetSource
from blockbudget.training.validation import SlaMode, ValidationResult


@dataclass(frozen=True)
class BudgetSplit:
    """Fractions of the iteration's ε for each stage (δ: preprocess and train, pro rata).

    Attributes:
        preprocess: share of ε for DP preprocessing (0 when the features are per-row and public).
        train: share of ε for training.
        validate: share of ε for the SLAed validation.

    Raises:
        InvalidRequestError: a negative share, a zero train or validate share, or shares summing
            to more than 1.
    """

    preprocess: float = 0.0
    train: float = 0.5
    validate: float = 0.5

    def __post_init__(self) -> None:
        shares = (self.preprocess, self.train, self.validate)
        if any((not isinstance(s, (int, float))) or not math.isfinite(s) or s < 0 for s in shares):
            raise InvalidRequestError(f"budget shares must be finite and >= 0, got {shares}")
        if self.train <= 0 or self.validate <= 0:
            raise InvalidRequestError("train and validate shares must be > 0")
        if sum(shares) > 1.0 + 1e-12:
            raise InvalidRequestError(f"budget shares must sum to at most 1, got {sum(shares)}")

    def parts(self, epsilon: Decimal, delta: Decimal) -> dict[str, tuple[Decimal, Decimal]]:
        """Per stage (ε, δ), rounded down so the parts never exceed the whole."""
        from decimal import ROUND_FLOOR, Context, localcontext

        with localcontext(Context(prec=40, rounding=ROUND_FLOOR)):
            dp_total = shortest_decimal(self.preprocess) + shortest_decimal(self.train)
            out = {}
            for name, share in (
                ("preprocess", self.preprocess),
                ("train", self.train),
                ("validate", self.validate),
            ):
                s = shortest_decimal(share)
                d = Decimal(0) if name == "validate" or dp_total == 0 else delta * s / dp_total
                out[name] = (epsilon * s, d)
        return out


@dataclass(frozen=True)
class Prepared:
    """What preprocessing hands to training and validation.

    Attributes:
        x_train, y_train: training features and labels.
        x_test, y_test: test features and labels.
        extra: anything else the pipeline computed (e.g. DP aggregate features).
    """

    x_train: NDArray[Any]
    y_train: NDArray[Any]
    x_test: NDArray[Any]
    y_test: NDArray[Any]
    extra: Any = None


@dataclass(frozen=True)
class PipelineRun:
    """One run of a pipeline.

    Attributes:
        model: the trained model or statistic.
        validation: the validator's result.
        epsilon, delta: the (ε, δ) the run was given.
        n_train, n_test: the rows in each split.
        secure_noise: (property) whether every release of the run used secure noise.
    """

    model: Any
    validation: ValidationResult
    epsilon: Decimal
    delta: Decimal
    n_train: int
    n_test: int

    @property
    def secure_noise(self) -> bool:
        """True iff both the model's and the validation's noise were secure (unseeded)."""
        model = getattr(self.model, "secure_noise_", getattr(self.model, "secure_noise", False))
        return bool(model) and bool(self.validation.secure_noise)


def split_rows(n: int, *, test_fraction: float, seed: int) -> tuple[NDArray[Any], NDArray[Any]]:
    """A seeded split of ``n`` row indices into train and test, for simulations only.

    The split depends on ``n``, so a neighboring dataset (one row more or less) is split
    differently everywhere: DP pipelines use :func:`split_frame` instead.
    """
    _check_fraction(test_fraction)
    order = np.random.default_rng(seed).permutation(n)
    n_test = round(n * test_fraction)
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def _check_fraction(test_fraction: float) -> None:
    test_fraction = plain_number(test_fraction)
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)):
        raise InvalidRequestError(
            f"test_fraction must be a number in (0, 1), got {test_fraction!r}"
        )
    if not (0.0 < test_fraction < 1.0):
        raise InvalidRequestError(f"test_fraction must be in (0, 1), got {test_fraction!r}")


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def row_uniforms(frame: pd.DataFrame, *, seed: int) -> NDArray[np.float64]:
    """A number in [0, 1) per row that depends only on that row's values and ``seed``.

    pandas' stable row hash (``hash_pandas_object``, no index) mixed with the seed by SplitMix64's
    finalizer; the top 53 bits give the uniform. Identical rows get identical numbers.
    """
    seed = plain_number(seed)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidRequestError(f"seed must be an int, got {seed!r}")
    hashed = pd.util.hash_pandas_object(frame, index=False).to_numpy(dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = hashed + np.uint64(seed % 2**64) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    out: NDArray[np.float64] = (z >> np.uint64(11)).astype(np.float64) / float(2**53)
    return out


def split_frame(
    frame: pd.DataFrame, *, test_fraction: float, seed: int
) -> tuple[NDArray[Any], NDArray[Any]]:
    """Positions of the train and test rows of ``frame``, each row placed by its own hash.

    A row is a test row when :func:`row_uniforms` gives it a number below ``test_fraction``, so
    the split of a neighboring frame (one row added or removed) differs only in that row: each
    split of a neighbor is a neighbor of the split (or the same), and the ACCEPT and REJECT
    tests run on disjoint rows in parallel (seed 004 App. B.1 "DP Guarantee").

    Raises:
        InvalidRequestError: ``test_fraction`` outside (0, 1) or a non-integer seed.
    """
    _check_fraction(test_fraction)
    is_test = row_uniforms(frame, seed=seed) < test_fraction
    positions = np.arange(len(frame))
    return positions[~is_test], positions[is_test]


class Pipeline(ABC):
    """A developer's (ε, δ)-DP training pipeline (Sage List. 1).

    Attributes:
        name: a label for charges and reports.
        split: how ε is shared between the stages.
        test_fraction: share of the rows held out for the ACCEPT test.
    """

    name: str = "pipeline"
    split: BudgetSplit = BudgetSplit()
    test_fraction: float = 0.1

    @abstractmethod
    def preprocess(
        self,
        source: BudgetSource,
        frame: pd.DataFrame,
        *,
        epsilon: Decimal,
        delta: Decimal,
        noise: NoiseSource | None,
        seed: int | None,
    ) -> Prepared:
        """Turn granted rows into features (``preprocessing_fn``).

        ``seed`` keys the per-row split (None: key 0, see :meth:`run`)."""

    @abstractmethod
    def train(
        self,
        source: BudgetSource,
        data: Prepared,
        *,
        epsilon: Decimal,
        delta: Decimal,
        noise: NoiseSource | None,
        seed: int | None,
    ) -> Any:
        """Fit the DP model (``trainer_fn``); ``seed`` None means fresh OS entropy."""

    @abstractmethod
    def validate(
        self,
        source: BudgetSource,
        model: Any,
        data: Prepared,
        *,
        epsilon: Decimal,
        eta: float,
        noise: NoiseSource | None,
    ) -> ValidationResult:
        """SLAed validation (``validator_fn``)."""

    def run(
        self,
        source: BudgetSource,
        frame: pd.DataFrame,
        *,
        epsilon: Number,
        delta: Number,
        eta: float,
        noise: NoiseSource | None = None,
        seed: int | None = None,
    ) -> PipelineRun:
        """Run the three stages on ``frame`` with this iteration's (ε, δ).

        Args:
            noise: the noise of the stages' releases; None: SecureNoise.
            seed: None (default): every randomized stage draws fresh OS entropy (DP-SGD's
                sampler and noise) and the per-row split is keyed 0. An int seeds the training
                randomness and keys the split — experiments and tests only; a seeded model says
                ``secure_noise_ = False``. The split key need not be secret: the split is a
                public function of each row, so a neighbour's splits are neighbours of the
                splits whatever the key is (see :func:`split_frame`).

        Raises:
            InvalidBudgetError: bad ε or δ. No error depends on the rows' values or number:
            the stages are total (rows with missing or unparseable fields are dropped).
            InvalidRequestError: the pipeline validates in NON_PRIVATE mode (nothing is drawn).
            BudgetExceededError, ReservationError: from the source (a stage refused).
        """
        if getattr(self, "mode", None) is SlaMode.NON_PRIVATE:
            # NP SLA releases a non-DP decision: refuse before any stage draws (a validator in
            # that mode refuses every source, so the run could only fail after training paid)
            raise InvalidRequestError(
                f"pipeline {self.name!r} validates in NON_PRIVATE (NP SLA) mode, which is for "
                "simulations without a budget source; use SlaMode.SAGE on a platform"
            )
        eps = exact_epsilon(epsilon)
        dl = exact_delta(delta, positive=False)
        # No check of the rows here: an empty window (or one whose rows are all dropped by
        # preprocessing's per-row filter) runs like any other and spends the same — refusing
        # it would be a free, non-DP bit about the one row that makes it non-empty.
        parts = self.split.parts(eps, dl)
        pre_eps, pre_delta = parts["preprocess"]
        data = self.preprocess(
            source, frame, epsilon=pre_eps, delta=pre_delta, noise=noise, seed=seed
        )
        tr_eps, tr_delta = parts["train"]
        model = self.train(source, data, epsilon=tr_eps, delta=tr_delta, noise=noise, seed=seed)
        va_eps, _ = parts["validate"]
        result = self.validate(source, model, data, epsilon=va_eps, eta=eta, noise=noise)
        return PipelineRun(model, result, eps, dl, len(data.y_train), len(data.y_test))

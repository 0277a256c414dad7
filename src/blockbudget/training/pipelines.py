"""Ready pipelines: AdaSSP regression, DP-SGD classification and regression, DP group means.

Each is a frozen dataclass implementing :class:`~blockbudget.training.pipeline.Pipeline`
(seed ``004_2b5d216070ae2ded.txt`` List. 1 and Tab. 1): a public per-row feature map, a DP
model drawing from the grant, and the SLAed validator of its metric (App. B) — the loss
validator for regressions, the accuracy validator for classifiers, the sum-statistic validator
for group means (:class:`GroupMeanPipeline`). The data's meaning — which rows count, the feature
map, the label, the keys — belongs to the application that builds the pipeline and is passed in
as module-level functions, so pipelines pickle (the Ray executor ships them to workers).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from blockbudget.decimals import plain_number, shortest_decimal
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.mechanisms.noise import NoiseSource
from blockbudget.mechanisms.source import BudgetSource
from blockbudget.mechanisms.statistics import dp_group_by_mean
from blockbudget.training.adassp import AdaSSPRegressor, clip_rows
from blockbudget.training.dpsgd import DPSGDModel, Task
from blockbudget.training.pipeline import BudgetSplit, Pipeline, Prepared, split_frame
from blockbudget.training.validation import Inequality, SlaMode, ValidationResult
from blockbudget.training.validators import (
    AccuracyEvidence,
    AccuracyValidator,
    LossEvidence,
    LossValidator,
    SumStatisticEvidence,
    SumStatisticValidator,
)

Featurize = Callable[[pd.DataFrame], NDArray[np.float64]]
Label = Callable[[pd.DataFrame], NDArray[Any]]
#: A public per-row filter: which rows a pipeline reads (whether a row is kept depends on that
#: row alone, so the filter is 1-stable and never fails on a row's values).
RowFilter = Callable[[pd.DataFrame], pd.DataFrame]


def every_row(frame: pd.DataFrame) -> pd.DataFrame:
    """The row filter that keeps every row (the default of :class:`FeaturePipeline`)."""
    return frame


def usable_rows(*parts: NDArray[Any]) -> NDArray[np.bool_]:
    """Per row: True when every feature and label of the row is finite (a 1-stable filter).

    Example:
        >>> usable_rows(np.array([[1.0, 2.0], [np.nan, 0.0]]), np.array([0.5, 1.0])).tolist()
        [True, False]

    Raises:
        DataError: no array given.
    """
    if not parts:
        raise DataError("usable_rows needs at least one array")
    keep = np.ones(len(parts[0]), dtype=bool)
    for part in parts:
        values = np.asarray(part, dtype=np.float64)
        finite = np.isfinite(values)
        if len(values):
            keep &= finite.reshape(len(values), -1).all(axis=1)
    return keep


def _prepare(
    frame: pd.DataFrame,
    rows_of: RowFilter,
    featurize: Featurize,
    label: Label,
    test_fraction: float,
    seed: int | None,
) -> Prepared:
    rows = rows_of(frame)
    x, y = featurize(rows), label(rows)
    # a per-row filter (1-stable): rows whose features or label read as missing are dropped,
    # never an error — a failure would tell the analyst something about one row for free
    keep = usable_rows(x, y)
    rows, x, y = rows.loc[keep], x[keep], y[keep]
    # the split key is public (a per-row hash): an unseeded run keys it 0
    key = 0 if seed is None else seed
    train, test = split_frame(rows, test_fraction=test_fraction, seed=key)
    return Prepared(x[train], y[train], x[test], y[test])


def exact_least_squares_losses(
    x: NDArray[np.float64], y: NDArray[np.float64], *, x_bound: float
) -> NDArray[np.float64]:
    """Training losses (clipped into [0, 1]) of the exact least-squares fit on the same clipped
    design as AdaSSP: a stand-in for the REJECT test's f̂ (App. B.1).

    Caveat: Prop. B.4's sensitivity argument (and Prop. B.2's L_tr(f̂) ≤ L_tr(f*)) needs f̂ to be
    the exact minimizer of the *same* [0, B]-bounded loss that is summed. Least squares minimizes
    the unclipped squared error, not this clipped loss, so one added row can move the fit and
    with it every summed loss: the sum's sensitivity is not provably B. That is why
    :class:`AdaSSPPipeline` runs REJECT only when asked (``with_reject=True``).
    """
    half = x_bound / math.sqrt(2.0)
    design = np.hstack([clip_rows(x, half), np.full((len(x), 1), half)])
    theta = np.linalg.lstsq(design, y, rcond=None)[0]
    pred = np.clip(design @ theta, 0.0, 1.0)
    out: NDArray[np.float64] = np.clip((pred - y) ** 2, 0.0, 1.0)
    return out


class FeaturePipeline(Pipeline):
    """A pipeline whose preprocessing is a public feature map and label plus the per-row split.

    Preprocessing spends no budget: ``rows`` (a public per-row filter), ``featurize`` and
    ``label`` are public functions of one row, and the train/test split places each row by its
    own seeded hash. Rows whose features or label are not finite (a missing or unparseable
    field) are dropped by a per-row filter (:func:`usable_rows`), so preprocessing is total on
    any row values when the maps are (docs/training.md, "Total preprocessing").
    """

    featurize: Featurize
    label: Label
    rows: RowFilter

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
        return _prepare(frame, self.rows, self.featurize, self.label, self.test_fraction, seed)


@dataclass(frozen=True)
class AdaSSPPipeline(FeaturePipeline):
    """Linear regression of a [0, 1] label with AdaSSP and the loss (MSE) validator.

    Attributes:
        target: τ_loss, the MSE to reach.
        featurize, label: the public feature map and the label (in [0, 1]).
        feature_norm: the L2 bound of a feature row (a public fact of ``featurize``).
        rows: the public per-row filter applied first (default: every row).
        mode: the validator's SLA mode.
        with_reject: also run the REJECT test on the training split with the exact
            least-squares fit as f̂ (App. B.1). Off by default: least squares is not the exact
            minimizer of the clipped [0, 1] loss, so the REJECT release's ε-DP (Prop. B.4) is
            not proven for it (see :func:`exact_least_squares_losses`); turn it on only where
            that approximation is acceptable (simulations, experiments).
        split, test_fraction, name: see :class:`Pipeline`.
    """

    target: float
    featurize: Featurize
    label: Label
    feature_norm: float
    rows: RowFilter = every_row
    mode: SlaMode = SlaMode.SAGE
    with_reject: bool = False
    split: BudgetSplit = field(default_factory=BudgetSplit)
    test_fraction: float = 0.1
    name: str = "adassp-regression"

    @property
    def x_bound(self) -> float:
        """B_X for AdaSSP: features fit within B_X/√2, the intercept takes the rest."""
        return self.feature_norm * math.sqrt(2.0)

    def train(
        self,
        source: BudgetSource,
        data: Prepared,
        *,
        epsilon: Decimal,
        delta: Decimal,
        noise: NoiseSource | None,
        seed: int | None,
    ) -> AdaSSPRegressor:
        model = AdaSSPRegressor(x_bound=self.x_bound, y_bound=1.0)
        return model.fit(
            source,
            data.x_train,
            data.y_train,
            epsilon=epsilon,
            delta=delta,
            noise=noise,
            label=f"{self.name}/train",
        )

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
        pred = np.clip(model.predict(data.x_test), 0.0, 1.0)
        test_losses = (pred - data.y_test) ** 2
        train_losses = (
            exact_least_squares_losses(data.x_train, data.y_train, x_bound=self.x_bound)
            if self.with_reject and len(data.y_train)
            else None
        )
        validator = LossValidator(target=self.target, bound=1.0, mode=self.mode)
        return validator.validate(
            source,
            LossEvidence(test_losses, train_losses),
            epsilon=epsilon,
            eta=eta,
            noise=noise,
            label=f"{self.name}/validate",
        )


@dataclass(frozen=True)
class DPSGDPipeline(FeaturePipeline):
    """A DP-SGD model (logistic regression when ``hidden`` is empty, else a small NN).

    Classification is validated with the accuracy validator, regression with the loss
    validator (MSE of predictions clipped into [0, 1]); no REJECT test (finding the empirical
    risk minimizer of a NN or of the 0-1 loss is intractable, App. B.2).

    Attributes:
        target: τ_acc (classification) or τ_loss (regression).
        task: classification or regression.
        hidden: hidden layer widths.
        epochs, batch_size, learning_rate: DP-SGD settings.
        featurize, label: the public feature map and label.
        rows: the public per-row filter applied first (default: every row).
        mode: the validator's SLA mode.
        rows_per_block: a declared (public, not read from the data) number of rows per block.
            When set, DP-SGD plans for ``rows_per_block × blocks × (1 − test_fraction)`` rows,
            the blocks being the grant's (public), and spends no ε on counting; None (default)
            sizes the plan with a DP count (:mod:`blockbudget.training.sizing`).
    """

    target: float
    featurize: Featurize
    label: Label
    rows: RowFilter = every_row
    task: Task = Task.CLASSIFICATION
    hidden: tuple[int, ...] = ()
    epochs: int = 1
    batch_size: int = 256
    learning_rate: float = 0.1
    mode: SlaMode = SlaMode.SAGE
    split: BudgetSplit = field(default_factory=BudgetSplit)
    test_fraction: float = 0.1
    name: str = "dpsgd"
    rows_per_block: int | None = None

    def public_rows(self, source: BudgetSource) -> int | None:
        """The declared training size on ``source``'s blocks, or None without a declaration.

        Raises:
            InvalidRequestError: a declaration that is not an int >= 1, or a source that does
                not say which blocks it grants (nothing is drawn).
        """
        if self.rows_per_block is None:
            return None
        per = self.rows_per_block
        per = plain_number(per)
        if isinstance(per, bool) or not isinstance(per, int) or per < 1:
            raise InvalidRequestError(f"rows_per_block must be an int >= 1, got {per!r}")
        blocks = getattr(source, "blocks", None)
        if not isinstance(blocks, tuple):
            raise InvalidRequestError(
                "rows_per_block needs a grant that names its blocks; got a source without them"
            )
        return max(1, math.floor(per * len(blocks) * (1.0 - self.test_fraction)))

    def train(
        self,
        source: BudgetSource,
        data: Prepared,
        *,
        epsilon: Decimal,
        delta: Decimal,
        noise: NoiseSource | None,
        seed: int | None,
    ) -> DPSGDModel:
        model = DPSGDModel(
            task=self.task,
            hidden=self.hidden,
            epochs=self.epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            seed=seed,
        )
        return model.fit(
            source,
            data.x_train,
            data.y_train,
            epsilon=epsilon,
            delta=delta,
            public_rows=self.public_rows(source),
            label=f"{self.name}/train",
        )

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
        pred = model.predict(data.x_test)
        if self.task is Task.CLASSIFICATION:
            acc = AccuracyValidator(target=self.target, mode=self.mode)
            return acc.validate(
                source,
                AccuracyEvidence((pred == data.y_test).astype(np.float64)),
                epsilon=epsilon,
                eta=eta,
                noise=noise,
                label=f"{self.name}/validate",
            )
        losses = (np.clip(pred, 0.0, 1.0) - data.y_test) ** 2
        loss = LossValidator(target=self.target, bound=1.0, mode=self.mode)
        return loss.validate(
            source,
            LossEvidence(losses),
            epsilon=epsilon,
            eta=eta,
            noise=noise,
            label=f"{self.name}/validate",
        )


class GroupMeanPipeline(Pipeline):
    """The mean of a bounded value per public key with the core's ``dp_group_by_mean`` (Sage
    List. 1) and the sum-statistic validator (App. B.3); all rows train (the statistic needs no
    test split). A subclass says which keys and values its rows have (:meth:`group_rows`), how
    many keys there are and the values' range — all public.

    Attributes:
        target: τ_err, the largest acceptable absolute error of any key's mean.
        mode: the validator's SLA mode (SAGE, UNCORRECTED or NON_PRIVATE).
        inequality: the validator's concentration inequality. With SEED the validation only
            post-processes the release's counts and sums and costs nothing, so the release gets
            the validation's share too; EMPIRICAL_BERNSTEIN spends that share on the groups'
            second moments.
    """

    target: float
    mode: SlaMode
    inequality: Inequality

    @property
    @abstractmethod
    def nkeys(self) -> int:
        """The number of public keys (keys are 0 … nkeys − 1)."""

    @property
    @abstractmethod
    def value_range(self) -> float:
        """Values are clipped into [0, value_range]."""

    @abstractmethod
    def group_rows(self, frame: pd.DataFrame) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """Each row's key and value, by public per-row maps; a key outside 0 … nkeys − 1 or a
        value that is not finite drops the row (a per-row filter, never an error)."""

    @property
    def release_label(self) -> str:
        """The label of the release's charge."""
        return f"{self.name}/release"

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
        keys, values = self.group_rows(frame)
        # a per-row filter: a missing field or a key outside the public ones drops the row
        keep = (keys >= 0) & (keys < self.nkeys) & np.isfinite(values)
        empty = np.zeros(0)
        return Prepared(keys[keep], values[keep], empty, empty)

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
        return dp_group_by_mean(
            source,
            data.x_train,
            data.y_train,
            epsilon=self._release_epsilon(epsilon),
            value_range=self.value_range,
            nkeys=self.nkeys,
            noise=noise,
            label=self.release_label,
        )

    def _release_epsilon(self, epsilon: Decimal) -> Decimal:
        """The train share, plus the validation's when the validation is free (SEED: it only
        post-processes the release's counts and sums), so the run still spends its whole ε on
        the statistic. Rounded down: train + validate never exceeds what ``BudgetSplit`` gave."""
        if self.inequality is not Inequality.SEED:
            return epsilon
        from decimal import ROUND_FLOOR, Context, localcontext

        with localcontext(Context(prec=40, rounding=ROUND_FLOOR)):
            ratio = shortest_decimal(self.split.validate) / shortest_decimal(self.split.train)
            return epsilon + epsilon * ratio

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
        # Reuse the counts and sums the release already published: no second payment.
        evidence = SumStatisticEvidence.from_release(model, data.x_train, data.y_train)
        validator = SumStatisticValidator(
            target=self.target, mode=self.mode, inequality=self.inequality
        )
        return validator.validate(
            source, evidence, epsilon=epsilon, eta=eta, noise=noise, label=f"{self.name}/validate"
        )

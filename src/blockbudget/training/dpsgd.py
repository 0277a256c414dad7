"""DP-SGD models through Opacus: logistic regression and small neural networks.

DP-SGD (Abadi et al. 2016) is the training algorithm of Sage's neural network and logistic
regression pipelines (seed ``004_2b5d216070ae2ded.txt`` Tab. 1, §3.1 "a simple wrapper around
TensorFlow's DP SGD-based optimizer"; seed ``001_7d2967ad64403faa.txt`` Tab. 1). Here it runs on
Opacus 1.6 with ``torch==2.13.0`` on the CPU, imported lazily (importing torch costs seconds).

Sizes (see :mod:`blockbudget.training.sizing`): the plan is computed for a size that is public
(``public_rows``, declared without reading the rows) or paid for (a DP count drawn from the same
source first, with a share of ε), never for the exact number of private rows — otherwise
neighbouring datasets would run different mechanisms (q, steps, σ, normalisation) that the
charged plan does not cover.

Accounting, before any noise: the plan — Poisson sampling rate q = 1/⌈size/B⌉ for ⌈size/B⌉
steps per epoch, and the smallest noise multiplier σ that meets the target (ε, δ) *as the
stream's rule will price it* — is priced and drawn from the budget source *before* training.
A DP-SGD plan is a fixed, non-adaptive composition, so on streams whose rule charges (ε, δ)
(basic, strong, whitehouse) σ is found with dp_accounting's privacy-loss-distribution
accountant (pessimistic PLD of the Poisson-subsampled Gaussian composed ``steps`` times; Koskela,
Jälkö & Honkela 2020; Doroshenko et al., PETS 2022), which is tight where the RDP conversion
wastes 15–21% of ε, and the stream is charged (ε, δ). On RDP streams σ is the smallest whose
subsampled-Gaussian RDP curve on the platform's order grid (Mironov, Talwar & Zhang 2019;
:mod:`blockbudget.training.sgd_curve`) fits an empty (ε, δ) block of the stream's rule — the
filter's own conversion, so a plan made for a block's whole budget fits that block — and the
stream is charged that curve. After training,
Opacus' accountant history must equal the plan [(σ, q, steps)]; anything else raises
:class:`~blockbudget.errors.InternalError` (the training would have spent more than was charged).
Every step, an empty Poisson batch included, is the same DP-SGD update: the clipped gradient
sum (zero for an empty batch) plus N(0, σ²C²), divided by the expected batch size.

Randomness: unseeded (the default), the noise is OpenDP's floating-point-safe Gaussian
(:class:`~blockbudget.mechanisms.noise.SecureNoise`, through
:class:`~blockbudget.training.dpsgd_noise.NoiseSourceOptimizer`) and the Poisson sampler and
initialization are seeded per fit from OS entropy; the model says ``secure_noise_ = True``. A
seed makes a fit reproducible for experiments and says ``secure_noise_ = False``.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from blockbudget.accounting import get_rule
from blockbudget.accounting.rule import Release
from blockbudget.budget import Cost, Number, RdpCurve
from blockbudget.decimals import plain_number
from blockbudget.errors import DataError, InternalError, InvalidBudgetError, InvalidRequestError
from blockbudget.mechanisms.calibration import (
    analytic_gaussian_sigma,
    empty_block_filter,
    exact_delta,
    exact_epsilon,
    float_down,
    smallest_noise,
)
from blockbudget.mechanisms.noise import NoiseSource, SeededNoise, resolve_noise
from blockbudget.mechanisms.source import BudgetSource, source_accounting
from blockbudget.training.checks import check_int, check_number
from blockbudget.training.sgd_curve import subsampled_gaussian_curve
from blockbudget.training.sizing import (
    COUNT_FRACTION,
    TrainingSize,
    add_costs,
    check_count_fraction,
    count_share,
    training_size,
)

#: The PLD accountant's grid of privacy-loss values, at most this and at most ε/50 of the
#: target: pessimistic discretisation is an upper bound at any interval (Doroshenko et al.,
#: PETS 2022, §4), and 1e-3 keeps one evaluation under ~0.1 s at 10,000 steps for a loss ≤ 2%
#: above the 1e-4 grid's; a grid coarser than the target ε would inflate it.
PLD_DISCRETIZATION = 1e-3
#: The finest PLD grid a plan is searched on (so ε ≥ 5e-5): finer grids cost memory
#: proportional to the privacy-loss range over the interval.
MIN_PLD_DISCRETIZATION = 1e-6
#: The most PLD work a plan is searched with, in steps × grid points per unit of loss (10,000
#: steps on the 1e-3 grid), and the largest target ε priced by PLD: beyond either, one PLD
#: evaluation takes minutes or gigabytes, and the plan is priced by its RDP curve instead.
MAX_PLD_WORK = 1e7
MAX_PLD_EPSILON = 50.0
#: Relative precision of the σ search (from above: the returned σ always meets the target).
SIGMA_PRECISION = 1e-3


class Task(Enum):
    """What a DP-SGD model predicts."""

    CLASSIFICATION = "classification"
    REGRESSION = "regression"


@dataclass(frozen=True)
class SgdPlan:
    """The privacy-relevant parameters of one DP-SGD run (Opacus' accountant history entry).

    Attributes:
        noise_multiplier: σ (noise std / clipping norm).
        sample_rate: q, the Poisson sampling rate.
        steps: the number of noisy steps.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int

    def rdp_curve(self) -> RdpCurve:
        """The subsampled-Gaussian RDP curve of this plan on the platform's order grid, never
        below the exact curve (:func:`~blockbudget.training.sgd_curve.subsampled_gaussian_curve`;
        Mironov, Talwar & Zhang 2019)."""
        return subsampled_gaussian_curve(
            sample_rate=self.sample_rate, noise_multiplier=self.noise_multiplier, steps=self.steps
        )


def plan_dpsgd(
    *,
    n: int,
    batch_size: int,
    epochs: int,
    epsilon: Number,
    delta: Number,
    accounting: str = "basic",
) -> SgdPlan:
    """The DP-SGD plan for ``n`` rows meeting (ε, δ) as rule ``accounting`` prices it (cached):
    by its PLD under a rule that charges (ε, δ), by the rule's own filter at capacity (ε, δ)
    under a rule that charges the plan's RDP curve (see the module docstring).

    ``n`` must be public or a DP release (:func:`~blockbudget.training.sizing.training_size`),
    never the exact count of private rows: the plan is part of the mechanism.

    Raises:
        InvalidRequestError: n < 1, batch_size < 1, or epochs < 1; an unknown rule.
        InvalidBudgetError: bad ε or δ, or a target no σ meets.
    """
    for name, value in (("n", n), ("batch_size", batch_size), ("epochs", epochs)):
        value = plain_number(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequestError(f"{name} must be an int >= 1, got {value!r}")
    rule = get_rule(accounting)
    by_curve = rule.name if rule.cost_kind in PLAN_COSTS else None
    return _plan(
        n, batch_size, epochs, exact_epsilon(epsilon), exact_delta(delta, positive=True), by_curve
    )


def poisson_schedule(rows: int, batch_size: int) -> tuple[int, float, float]:
    """(batches per epoch, q, expected batch size) for a size of ``rows``: ⌈rows/B⌉ Poisson
    batches per epoch at rate q = 1/⌈rows/B⌉, whose expected size q·rows is the divisor of the
    noisy gradient sum (Opacus' convention, computed here in exact integers)."""
    batches = math.ceil(rows / batch_size)
    q = 1.0 / batches
    return batches, q, rows * q


@dataclass(frozen=True)
class SizedPlan:
    """What a DP-SGD fit runs: its size, its charged plan and the batch size of its schedule.

    Attributes:
        size: the public or DP size (and the count's cost when it was counted).
        plan: the charged (σ, q, steps).
        batch_size: the batch size the Poisson schedule uses with ``size.rows`` — the model's,
            or ``size.rows`` itself for the full-batch fallback (q = 1, one step per epoch).
    """

    size: TrainingSize
    plan: SgdPlan
    batch_size: int

    def cost(self, source: BudgetSource, *, delta: Decimal) -> Cost:
        """What training charges ``source``: the plan's own cost where the rule's cost kind
        has one (the subsampled-Gaussian curve under RDP), else the rule's price of the
        (ε, δ) the plan was calibrated to (:func:`plan_cost`)."""
        return plan_cost(source, self.plan, epsilon=self.size.epsilon, delta=delta)


#: A DP-SGD plan priced by its noise, by the cost kind of the stream's rule: an RDP curve is
#: the plan's subsampled-Gaussian curve (Mironov, Talwar & Zhang 2019). A kind not listed is
#: charged the rule's price of the (ε, δ) the plan was calibrated to — which a rule that
#: prices only noise (GDP: subsampling has no exact μ) refuses before anything is drawn.
PLAN_COSTS: dict[type[Cost], Callable[[SgdPlan], Cost]] = {RdpCurve: SgdPlan.rdp_curve}


def plan_cost(
    source: BudgetSource, plan: SgdPlan | None, *, epsilon: Decimal, delta: Decimal
) -> Cost:
    """The cost of ``plan`` (calibrated to (``epsilon``, ``delta``)) under the source's rule;
    with ``plan=None``, only checks that the rule can price a plan (raises as it would).

    Raises:
        InvalidBudgetError: the rule cannot price a DP-SGD plan (e.g. GDP, with δ > 0).
    """
    rule = get_rule(source_accounting(source))
    by_plan = PLAN_COSTS.get(rule.cost_kind)
    if by_plan is None:
        return rule.price(Release.of(epsilon=epsilon, delta=delta))
    return rule.pure(0) if plan is None else by_plan(plan)


def size_and_plan(
    source: BudgetSource,
    n: int,
    *,
    public_rows: int | None,
    count_fraction: float,
    epsilon: Decimal,
    delta: Decimal,
    batch_size: int,
    epochs: int,
    noise: NoiseSource,
    label: str,
) -> SizedPlan:
    """The size (public, or a DP count drawn first) and the DP-SGD plan for it.

    Nothing is drawn unless the fit can then run: a counted fit first checks that the rest of
    ε is reachable at the most favourable schedule, full batch (q = 1, ``epochs`` steps), and
    refuses otherwise. After the count, the plan is for the counted size (floored at the batch
    size); when that size's schedule cannot meet the target, the fit falls back to the
    full-batch schedule with the counted size as its divisor — a post-processing of the count,
    already known to be reachable — so a fit never fails after its count was charged.

    Raises:
        InvalidBudgetError: a target no schedule meets (nothing drawn), bad count shares.
        InvalidRequestError: a bad ``public_rows``.
        BudgetExceededError, ReservationError: from the source.
    """
    plan_for = functools.partial(
        plan_dpsgd,
        batch_size=batch_size,
        epochs=epochs,
        delta=delta,
        accounting=source_accounting(source),
    )
    if public_rows is not None:
        size = training_size(
            source,
            n,
            public_rows=public_rows,
            count_fraction=count_fraction,
            epsilon=epsilon,
            noise=noise,
            label=label,
        )
        return SizedPlan(size, plan_for(n=size.rows, epsilon=epsilon), batch_size)
    _, rest = count_share(epsilon, count_fraction)
    # raises before any draw when even full-batch DP-SGD cannot meet the rest of ε
    full_batch = plan_for(n=batch_size, epsilon=rest)
    size = training_size(
        source,
        n,
        public_rows=None,
        count_fraction=count_fraction,
        epsilon=epsilon,
        noise=noise,
        label=label,
        min_rows=batch_size,
    )
    try:
        plan = plan_for(n=size.rows, epsilon=size.epsilon)
    except InvalidBudgetError:
        return SizedPlan(size, full_batch, size.rows)
    return SizedPlan(size, plan, batch_size)


class DpSgdSettings(Protocol):
    """What :func:`pay_for_training` reads of a DP-SGD model (both models have these)."""

    seed: int | None
    count_fraction: float
    batch_size: int
    epochs: int


def pay_for_training(
    source: BudgetSource,
    n: int,
    model: DpSgdSettings,
    *,
    public_rows: int | None,
    epsilon: Decimal,
    delta: Decimal,
    label: str,
) -> tuple[SizedPlan, NoiseSource, Cost]:
    """The one path by which a DP-SGD model pays before it trains: its noise source
    (:class:`SecureNoise` unless the model is seeded), its size and plan
    (:func:`size_and_plan`, which may draw a DP count first), then the plan's cost drawn from
    ``source`` — before any noise is drawn.

    Returns:
        The size and plan, the noise source, and everything drawn (the count's cost, if any,
        plus the plan's).

    Raises:
        As :func:`size_and_plan`.
    """
    plan_cost(source, None, epsilon=epsilon, delta=delta)  # a rule that cannot price it: refused
    noise = resolve_noise(None if model.seed is None else SeededNoise(model.seed))
    sized = size_and_plan(
        source,
        n,
        public_rows=public_rows,
        count_fraction=model.count_fraction,
        epsilon=epsilon,
        delta=delta,
        batch_size=model.batch_size,
        epochs=model.epochs,
        noise=noise,
        label=label,
    )
    cost = sized.cost(source, delta=delta)
    source.draw(cost, label=label)
    count = sized.size.count_cost
    return sized, noise, cost if count is None else add_costs(count, cost)


@lru_cache(maxsize=1024)
def _plan(
    n: int, batch_size: int, epochs: int, eps: Decimal, dl: Decimal, by_curve: str | None
) -> SgdPlan:
    batches, q, _ = poisson_schedule(n, batch_size)
    steps = epochs * batches
    target, at = float_down(eps), float_down(dl)  # toward refusing: less ε, less δ
    if by_curve is None:
        grid = min(PLD_DISCRETIZATION, float(eps) / 50)
        if grid < MIN_PLD_DISCRETIZATION:
            raise InvalidBudgetError(
                f"DP-SGD targets below ε = {MIN_PLD_DISCRETIZATION * 50:g} are refused (got "
                f"{eps}): the noise would swamp any model, and the PLD accountant cannot "
                "resolve them"
            )
        if steps / grid > MAX_PLD_WORK or target > MAX_PLD_EPSILON:
            # a PLD this large costs minutes and gigabytes: the plan's RDP curve, converted
            # by Canonne, Kamath & Steinke 2020, Prop. 12 at its best order (valid for one
            # fixed, non-adaptive plan), is sound and cheap, if looser

            def meets(sigma: float) -> bool:
                curve = SgdPlan(sigma, q, steps).rdp_curve()
                try:
                    return curve.to_dp(delta=at).epsilon <= eps
                except InvalidBudgetError:  # infinite at every order
                    return False

        else:

            def meets(sigma: float) -> bool:
                return pld_epsilon(sigma, q, steps, at, discretization=grid) <= target

        precision = SIGMA_PRECISION
    else:
        rule = get_rule(by_curve)
        filt = empty_block_filter(by_curve, eps, dl, what="DP-SGD plan")
        by_plan = PLAN_COSTS[rule.cost_kind]

        def meets(sigma: float) -> bool:
            return filt.fits(filt.features(by_plan(SgdPlan(sigma, q, steps))))

        precision = 1e-9
    # start near where the answer is: the full-batch analytic σ scaled by √q (amplification)
    start = max(0.25, 0.1 * math.sqrt(q) * analytic_gaussian_sigma(epsilon=eps, delta=dl))
    try:
        sigma = smallest_noise(meets, start=start, precision=precision, limit=1e7)
    except InvalidBudgetError as exc:
        raise InvalidBudgetError(
            f"DP-SGD cannot meet (ε={eps}, δ={dl}) with q={q:.4g} over {steps} steps: {exc}"
        ) from exc
    return SgdPlan(noise_multiplier=sigma, sample_rate=q, steps=steps)


def pld_epsilon(
    sigma: float,
    sample_rate: float,
    steps: int,
    delta: float,
    *,
    discretization: float = PLD_DISCRETIZATION,
) -> float:
    """The ε at ``delta`` of ``steps`` Poisson-subsampled Gaussian steps of noise multiplier
    ``sigma``, by dp_accounting's pessimistic PLD accountant (add-or-remove-one neighbours, as
    Opacus), an upper bound on the exact ε (Doroshenko et al., PETS 2022, Thm 5 for the
    pessimistic discretisation; composition of PLDs is exact, Koskela et al. 2020).

    Example:
        >>> 0.9 < pld_epsilon(1.5, 0.01, 1000, 1e-5) < 0.95
        True
    """
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=discretization,
    )
    event = dp_accounting.PoissonSampledDpEvent(sample_rate, dp_accounting.GaussianDpEvent(sigma))
    accountant.compose(event, steps)
    return float(accountant.get_epsilon(delta))


@dataclass
class DPSGDModel:
    """A multilayer perceptron (no hidden layer: a linear/logistic model) trained with DP-SGD.

    Args:
        task: classification (cross-entropy over ``n_classes``) or regression (squared error).
        hidden: hidden layer widths, ReLU between them; ``()`` is logistic/linear regression.
        n_classes: number of classes (public; classification only).
        epochs, batch_size, learning_rate, momentum: SGD settings (Sage Tab. 1: lr 0.01,
            3 epochs, batch 1024, momentum 0.9 for its NN).
        max_grad_norm: per-example gradient clipping norm C.
        seed: None (default) draws the initialization and the Poisson sampler from fresh OS
            entropy and the noise from :class:`~blockbudget.mechanisms.noise.SecureNoise`, per
            fit. An int makes the fit reproducible — experiments and tests only: the noise is
            then :class:`~blockbudget.mechanisms.noise.SeededNoise` and the model says
            ``secure_noise_ = False``.
        count_fraction: the share of ε spent on a DP count of the training rows when ``fit`` is
            given no ``public_rows`` (see :mod:`blockbudget.training.sizing`).

    Attributes (after fit):
        plan_: the charged (σ, q, steps); ``rows_``: the public or DP size it was planned for;
        ``expected_batch_``: the divisor of the noisy gradient sum; ``cost_``: everything drawn
        (the count included); ``secure_noise_``: True iff the fit was unseeded.
    """

    task: Task = Task.CLASSIFICATION
    hidden: tuple[int, ...] = ()
    n_classes: int = 2
    epochs: int = 1
    batch_size: int = 256
    learning_rate: float = 0.1
    momentum: float = 0.9
    max_grad_norm: float = 1.0
    seed: int | None = None
    count_fraction: float = COUNT_FRACTION
    plan_: SgdPlan | None = field(init=False, default=None)
    rows_: int | None = field(init=False, default=None)
    expected_batch_: float | None = field(init=False, default=None)
    cost_: Cost | None = field(init=False, default=None)
    secure_noise_: bool = field(init=False, default=False)
    _module: Any = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.task, Task):
            raise InvalidRequestError(f"task must be a Task, got {self.task!r}")
        if not isinstance(self.hidden, tuple):
            raise InvalidRequestError(f"hidden must be a tuple of widths, got {self.hidden!r}")
        for width in self.hidden:
            check_int(width, name="hidden width")
        check_int(self.n_classes, name="n_classes", low=2)
        check_int(self.epochs, name="epochs")
        check_int(self.batch_size, name="batch_size")
        if self.seed is not None:
            check_int(self.seed, name="seed", low=0)
        check_count_fraction(self.count_fraction)
        check_number(self.learning_rate, name="learning_rate")
        check_number(self.max_grad_norm, name="max_grad_norm")
        check_number(self.momentum, name="momentum", low_open=False, high=1.0, high_open=True)

    def _build(self, d: int) -> Any:
        from torch import nn

        layers: list[Any] = []
        width = d
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        out = self.n_classes if self.task is Task.CLASSIFICATION else 1
        layers.append(nn.Linear(width, out))
        return nn.Sequential(*layers)

    def _tensors(self, x: Any, y: Any) -> tuple[Any, Any]:
        import torch

        features = np.asarray(x, dtype=np.float32)
        if features.ndim != 2 or not np.all(np.isfinite(features)):
            raise DataError(f"X must be a finite 2-D array, got shape {features.shape}")
        targets = np.asarray(y).ravel()
        if targets.size != features.shape[0]:
            raise DataError(f"X has {features.shape[0]} rows but y has {targets.size}")
        if self.task is Task.CLASSIFICATION:
            if not np.all((targets >= 0) & (targets < self.n_classes) & (targets % 1 == 0)):
                raise DataError(f"class labels must be integers in [0, {self.n_classes})")
            return torch.as_tensor(features), torch.as_tensor(targets.astype(np.int64))
        if not np.all(np.isfinite(targets.astype(np.float64))):
            raise DataError("regression labels must be finite")
        labels = torch.as_tensor(targets.astype(np.float32)).reshape(-1, 1)
        return torch.as_tensor(features), labels

    def fit(
        self,
        source: BudgetSource,
        x: Any,
        y: Any,
        *,
        epsilon: Number,
        delta: Number,
        public_rows: int | None = None,
        label: str = "dpsgd",
    ) -> DPSGDModel:
        """Train with DP-SGD at (ε, δ), drawing the cost from ``source`` first.

        The plan (q, steps, σ, normalisation) comes from ``public_rows`` — a size declared
        without reading the rows — or, when it is None, from a DP count of the rows drawn first
        with ``count_fraction`` of ε; never from the exact number of rows.

        Raises:
            DataError: bad shapes, non-finite values, labels outside 0..n_classes−1.
            InvalidRequestError: a bad ``public_rows``.
            InvalidBudgetError: bad ε or δ, or a target no schedule meets (nothing drawn; see
                :func:`size_and_plan`).
            BudgetExceededError, ReservationError: from the source; nothing is trained.
            InternalError: Opacus' accountant history differs from the charged plan.
        """
        features, labels = self._tensors(x, y)
        eps = exact_epsilon(epsilon)
        dl = exact_delta(delta, positive=True)
        sized, noise, spent = pay_for_training(
            source,
            int(features.shape[0]),
            self,
            public_rows=public_rows,
            epsilon=eps,
            delta=dl,
            label=label,
        )  # charged before any noise is drawn
        size, plan = sized.size, sized.plan
        module, history, expected = self._train(
            features, labels, size.rows, sized.batch_size, plan, noise
        )
        steps = sum(k for _, _, k in history)
        same = all(
            math.isclose(s, plan.noise_multiplier) and math.isclose(q, plan.sample_rate)
            for s, q, _ in history
        )
        if not same or steps != plan.steps:
            raise InternalError(
                f"Opacus' accountant history {history} differs from the charged plan {plan}"
            )
        module.eval()
        self._module = module
        self.plan_, self.rows_, self.expected_batch_ = plan, size.rows, expected
        self.cost_ = spent
        self.secure_noise_ = bool(noise.secure) and self.seed is None
        return self

    def _train(
        self, features: Any, labels: Any, rows: int, batch: int, plan: SgdPlan, noise: NoiseSource
    ) -> tuple[Any, list[tuple[float, float, int]], float]:
        """Run DP-SGD: Poisson batches at the schedule of ``rows``, each step (an empty batch
        too) one clipped sum + Gaussian noise / expected batch size; returns the module,
        Opacus' accountant history and the expected batch size."""
        import torch
        from opacus import GradSampleModule
        from opacus.accountants import RDPAccountant

        from blockbudget.training.dpsgd_noise import NoiseSourceOptimizer

        batches, q, expected = poisson_schedule(rows, batch)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(secrets.randbits(63) if self.seed is None else self.seed)
            module = GradSampleModule(
                self._build(int(features.shape[1])), batch_first=True, loss_reduction="sum"
            )
        optimizer = NoiseSourceOptimizer(
            torch.optim.SGD(module.parameters(), lr=self.learning_rate, momentum=self.momentum),
            noise=noise,
            noise_multiplier=plan.noise_multiplier,
            max_grad_norm=self.max_grad_norm,
            expected_batch_size=expected,
            loss_reduction="mean",
        )
        accountant = RDPAccountant()
        optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=q))
        # fresh OS entropy unless seeded; its own stream, apart from the seeded noise's
        sampler = np.random.default_rng(None if self.seed is None else [self.seed, 1])
        loss_fn: Any = (
            torch.nn.CrossEntropyLoss(reduction="sum")
            if self.task is Task.CLASSIFICATION
            else torch.nn.MSELoss(reduction="sum")
        )
        n = int(features.shape[0])
        module.train()
        for _ in range(self.epochs * batches):
            # Poisson sampling: each row independently with probability q. An empty batch runs
            # the same step: a zero clipped sum (Opacus handles zero-length per-sample grads)
            # plus the same noise, divided by the same expected batch size.
            index = torch.as_tensor(np.flatnonzero(sampler.random(n) < q))
            optimizer.zero_grad()
            loss_fn(module(features[index]), labels[index]).backward()
            optimizer.step()
        history = [(float(s), float(r), int(k)) for s, r, k in accountant.history]
        return module.to_standard_module(), history, expected

    def _forward(self, x: Any) -> NDArray[np.float64]:
        import torch

        if self._module is None:
            raise InvalidRequestError("fit the model before predict")
        with torch.no_grad():
            out = self._module(torch.as_tensor(np.asarray(x, dtype=np.float32)))
        return np.asarray(out.numpy(), dtype=np.float64)

    def predict_proba(self, x: Any) -> NDArray[np.float64]:
        """Class probabilities (classification only)."""
        if self.task is not Task.CLASSIFICATION:
            raise InvalidRequestError("predict_proba is for classifiers")
        logits = self._forward(x)
        logits = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        out: NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
        return out

    def predict(self, x: Any) -> NDArray[np.float64]:
        """Predicted classes (classification) or values (regression)."""
        out = self._forward(x)
        if self.task is Task.CLASSIFICATION:
            classes: NDArray[np.float64] = out.argmax(axis=1).astype(np.float64)
            return classes
        values: NDArray[np.float64] = out[:, 0]
        return values

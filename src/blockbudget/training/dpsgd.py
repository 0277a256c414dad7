"""DP-SGD models through Opacus: logistic regression and small neural networks.

DP-SGD (Abadi et al. 2016) is the training algorithm of Sage's neural network and logistic
regression pipelines (seed ``004_2b5d216070ae2ded.txt`` Tab. 1, §3.1 "a simple wrapper around
TensorFlow's DP SGD-based optimizer"; seed ``001_7d2967ad64403faa.txt`` Tab. 1). Here it runs on
Opacus 1.6 with ``torch==2.13.0`` on the CPU, imported lazily (importing torch costs seconds).

Accounting, before any noise: the plan — Poisson sampling rate q as Opacus' accountant
records it (see :func:`plan_dpsgd`), the number of steps, and the noise multiplier σ found by
Opacus' RDP accountant for the target (ε, δ) — is priced and drawn from the budget source *before*
training: an (ε, δ) Budget on BASIC/STRONG streams, or, on RDP streams, the subsampled-Gaussian
RDP curve of that plan on the platform's order grid (Opacus' ``compute_rdp``, Mironov, Talwar &
Zhang 2019). After training, Opacus' accountant history must equal the plan [(σ, q, steps)];
anything else raises :class:`~blockbudget.errors.InternalError` (the training would have spent
more than was charged). Opacus' noise is not floating-point safe (``secure_mode`` needs
torchcsprng), so models report ``secure_noise_ = False``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, Cost, Number, RdpCurve
from blockbudget.errors import DataError, InternalError, InvalidBudgetError, InvalidRequestError
from blockbudget.mechanisms.calibration import exact_delta, exact_epsilon
from blockbudget.mechanisms.source import BudgetSource, source_accounting
from blockbudget.training.checks import check_int, check_number

#: RDP orders for planning σ: Opacus' default grid stops at 63, where ln(1/δ)/62 already
#: exceeds small targets (ε < 0.22 at δ = 1e-6 is unreachable); this one goes to 8192.
PLAN_ALPHAS: list[float] = [
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0,
    48.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
]  # fmt: skip


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
        """The subsampled-Gaussian RDP curve of this plan on the platform's order grid."""
        from opacus.accountants.analysis.rdp import compute_rdp

        def at(alpha: float) -> float:
            value = compute_rdp(
                q=self.sample_rate,
                noise_multiplier=self.noise_multiplier,
                steps=self.steps,
                orders=[alpha],
            )
            return float(np.asarray(value).ravel()[0])

        return RdpCurve.from_function(at)


def plan_dpsgd(*, n: int, batch_size: int, epochs: int, epsilon: Number, delta: Number) -> SgdPlan:
    """The DP-SGD plan for ``n`` rows meeting (ε, δ) under Opacus' RDP accountant (cached).

    Raises:
        InvalidRequestError: n < 1, batch_size < 1, or epochs < 1.
        InvalidBudgetError: bad ε or δ, or a target no σ meets.
    """
    for name, value in (("n", n), ("batch_size", batch_size), ("epochs", epochs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequestError(f"{name} must be an int >= 1, got {value!r}")
    return _plan(n, batch_size, epochs, exact_epsilon(epsilon), exact_delta(delta, positive=True))


@lru_cache(maxsize=1024)
def _plan(n: int, batch_size: int, epochs: int, eps: Decimal, dl: Decimal) -> SgdPlan:
    from opacus.accountants.utils import get_noise_multiplier

    # Opacus' rule (PrivacyEngine.make_private + DPDataLoader): the loader samples with rate
    # 1/⌈n/batch⌉ for int(1/rate) batches per epoch, and the accountant records the rate as
    # 1/len(loader) — one batch fewer when the float division rounds down (Opacus #813), a
    # rate at least the true one, so accounting with it is conservative.
    batches = int(1.0 / (1.0 / math.ceil(n / batch_size)))
    q = 1.0 / batches
    steps = epochs * batches
    try:
        sigma = float(
            get_noise_multiplier(
                target_epsilon=float(eps),
                target_delta=float(dl),
                sample_rate=q,
                steps=steps,
                accountant="rdp",
                epsilon_tolerance=0.01,
                alphas=PLAN_ALPHAS,
            )
        )
    except ValueError as exc:
        raise InvalidBudgetError(
            f"DP-SGD cannot meet (ε={eps}, δ={dl}) with q={q:.4g} over {steps} steps: {exc}"
        ) from exc
    return SgdPlan(noise_multiplier=sigma, sample_rate=q, steps=steps)


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
        seed: seeds the initialization, the Poisson sampler and the noise.
    """

    task: Task = Task.CLASSIFICATION
    hidden: tuple[int, ...] = ()
    n_classes: int = 2
    epochs: int = 1
    batch_size: int = 256
    learning_rate: float = 0.1
    momentum: float = 0.9
    max_grad_norm: float = 1.0
    seed: int = 0
    plan_: SgdPlan | None = field(init=False, default=None)
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
        check_int(self.seed, name="seed", low=0)
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

    def fit(
        self,
        source: BudgetSource,
        x: Any,
        y: Any,
        *,
        epsilon: Number,
        delta: Number,
        label: str = "dpsgd",
    ) -> DPSGDModel:
        """Train with DP-SGD at (ε, δ), drawing the cost from ``source`` first.

        Raises:
            DataError: bad shapes, non-finite values, labels outside 0..n_classes−1.
            InvalidBudgetError: bad ε or δ.
            BudgetExceededError, ReservationError: from the source; nothing is trained.
            InternalError: Opacus' accountant history differs from the charged plan.
        """
        import torch
        from opacus import PrivacyEngine
        from torch.utils.data import DataLoader, TensorDataset

        features = np.asarray(x, dtype=np.float32)
        if features.ndim != 2 or not np.all(np.isfinite(features)):
            raise DataError(f"X must be a finite 2-D array, got shape {features.shape}")
        targets = np.asarray(y).ravel()
        if targets.size != features.shape[0]:
            raise DataError(f"X has {features.shape[0]} rows but y has {targets.size}")
        if self.task is Task.CLASSIFICATION:
            if not np.all((targets >= 0) & (targets < self.n_classes) & (targets % 1 == 0)):
                raise DataError(f"class labels must be integers in [0, {self.n_classes})")
            label_tensor = torch.as_tensor(targets.astype(np.int64))
        else:
            if not np.all(np.isfinite(targets.astype(np.float64))):
                raise DataError("regression labels must be finite")
            label_tensor = torch.as_tensor(targets.astype(np.float32)).reshape(-1, 1)
        n = int(features.shape[0])
        plan = plan_dpsgd(
            n=n, batch_size=self.batch_size, epochs=self.epochs, epsilon=epsilon, delta=delta
        )
        accounting = source_accounting(source)
        cost: Cost = (
            plan.rdp_curve()
            if accounting is Accounting.RDP
            else Budget(epsilon=exact_epsilon(epsilon), delta=exact_delta(delta, positive=True))
        )
        source.draw(cost, label=label)  # charged before any noise is drawn

        torch.manual_seed(self.seed)
        module = self._build(features.shape[1])
        optimizer = torch.optim.SGD(
            module.parameters(), lr=self.learning_rate, momentum=self.momentum
        )
        loader_gen = torch.Generator().manual_seed(self.seed + 1)
        noise_gen = torch.Generator().manual_seed(self.seed + 2)
        loader = DataLoader(
            TensorDataset(torch.as_tensor(features), label_tensor),
            batch_size=self.batch_size,
            generator=loader_gen,
        )
        engine = PrivacyEngine(accountant="rdp")
        module, optimizer, loader = engine.make_private(
            module=module,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=plan.noise_multiplier,
            max_grad_norm=self.max_grad_norm,
            noise_generator=noise_gen,
            poisson_sampling=True,
        )
        loss_fn: Any = (
            torch.nn.CrossEntropyLoss() if self.task is Task.CLASSIFICATION else torch.nn.MSELoss()
        )
        module.train()
        for _ in range(self.epochs):
            for xb, yb in loader:
                optimizer.zero_grad()
                if len(xb) == 0:  # an empty Poisson batch still counts as a (noise-only) step
                    optimizer.step()
                    continue
                loss = loss_fn(module(xb), yb)
                loss.backward()
                optimizer.step()
        history = [(float(s), float(q), int(k)) for s, q, k in engine.accountant.history]
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
        self.plan_ = plan
        self.cost_ = cost
        self.secure_noise_ = False
        return self

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

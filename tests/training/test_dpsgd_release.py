"""DP-SGD releases: unseeded noise is fresh (not a public function of the data), an empty
Poisson batch is a noise-only step that runs to a release, and the mechanism's parameters come
from a public or paid-for size, never from the exact number of private rows."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from blockbudget.accounting import Accounting
from blockbudget.apps.flights.features import arrived, classification_features
from blockbudget.apps.flights.pipelines import classification_pipeline
from blockbudget.budget import Budget, RdpCurve
from blockbudget.mechanisms import SeededNoise
from blockbudget.training import (
    AdaptiveConfig,
    AdaptiveTrainer,
    AdaSSPRegressor,
    DPSGDModel,
    LogisticDPSGD,
    MeteredSource,
)
from blockbudget.training.dpsgd import plan_dpsgd

from .conftest import CONTEXT, STREAM, flight_days, make_platform


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def separable(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, 3))
    return x, (x[:, 0] - x[:, 1] > 0).astype(int)


PROBE = np.random.default_rng(99).normal(0, 1, (5, 3))


def outputs(model: DPSGDModel | LogisticDPSGD) -> np.ndarray:
    return np.asarray(model.predict_proba(PROBE))


# --- defect 1: no seed means fresh entropy; a seed is reproducible and says so -----------------


def test_unseeded_dpsgd_fits_differ_and_say_secure_noise() -> None:
    x, y = separable(300, 1)
    fits = [
        DPSGDModel(batch_size=50).fit(
            MeteredSource(), x, y, epsilon=1.0, delta=1e-5, public_rows=300
        )
        for _ in range(2)
    ]
    assert not np.array_equal(outputs(fits[0]), outputs(fits[1]))
    assert all(m.secure_noise_ for m in fits)


def test_seeded_dpsgd_is_reproducible_and_says_insecure_noise() -> None:
    x, y = separable(300, 2)
    fits = [
        DPSGDModel(batch_size=50, seed=4).fit(
            MeteredSource(), x, y, epsilon=1.0, delta=1e-5, public_rows=300
        )
        for _ in range(2)
    ]
    np.testing.assert_array_equal(outputs(fits[0]), outputs(fits[1]))
    assert not any(m.secure_noise_ for m in fits)


def test_logistic_dpsgd_unseeded_differs_seeded_repeats() -> None:
    x, y = separable(400, 3)

    def fit(seed: int | None) -> LogisticDPSGD:
        return LogisticDPSGD(batch_size=50, seed=seed).fit(
            MeteredSource(), x, y, epsilon=1.0, delta=1e-5, public_rows=400
        )

    a, b = fit(None), fit(None)
    assert not np.array_equal(a.coef_, b.coef_) and a.secure_noise_ and b.secure_noise_
    c, d = fit(5), fit(5)
    np.testing.assert_array_equal(c.coef_, d.coef_)
    assert not c.secure_noise_


def test_adaptive_trainer_without_seed_releases_different_models(tmp_path: Path) -> None:
    """Two platforms holding the same day of flights, each running AdaptiveTrainer(seed=None)
    on the same DP-SGD pipeline: the released models differ (the noise is not a public
    function of the data) and say secure_noise."""
    runs = []
    for k in range(2):
        platform = make_platform(tmp_path / f"p{k}", 1)
        try:
            trainer = AdaptiveTrainer(
                platform,
                STREAM,
                classification_pipeline(target=0.5, batch_size=64),
                context=CONTEXT,
                config=AdaptiveConfig(epsilon0=1.0, max_epsilon=1.0, delta=1e-6, max_iterations=1),
            )
            trainer.step()
            runs.append(trainer.runs[0])
        finally:
            platform.close()
    models = [run.model for run in runs]
    probe = classification_features(arrived(flight_days(1)[0]))[:20]
    assert not np.array_equal(models[0].predict_proba(probe), models[1].predict_proba(probe))
    assert all(run.model.secure_noise_ and run.secure_noise for run in runs)


def test_a_seeded_pipeline_run_repeats_and_says_insecure_noise() -> None:
    frame = flight_days(1)[0]
    runs = [
        classification_pipeline(target=0.5, batch_size=64).run(
            MeteredSource(), frame, epsilon=1.0, delta=1e-6, eta=0.05, noise=SeededNoise(2), seed=3
        )
        for _ in range(2)
    ]
    probe = classification_features(arrived(frame))[:20]
    np.testing.assert_array_equal(
        runs[0].model.predict_proba(probe), runs[1].model.predict_proba(probe)
    )
    assert not runs[0].secure_noise and not runs[0].model.secure_noise_


# --- defect 2: an empty Poisson batch is a noise-only step, and the run completes --------------


def test_empty_poisson_batches_take_noise_only_steps_and_every_seed_completes() -> None:
    x, y = separable(4, 5)
    plan = plan_dpsgd(n=4, batch_size=2, epochs=3, epsilon=1.0, delta=1e-5)
    assert plan.sample_rate == 0.5 and plan.steps == 6
    empties = 0
    for seed in range(12):
        src = MeteredSource()
        model = DPSGDModel(batch_size=2, epochs=3, seed=seed).fit(
            src, x, y, epsilon=1.0, delta=1e-5, public_rows=4
        )
        # the fit checks Opacus' accountant history against the plan it charged
        assert model.plan_ == plan and src.spent == Budget(epsilon=1.0, delta=1e-5)
        sampler = np.random.default_rng([seed, 1])  # the model's seeded Poisson sampler
        empties += sum(not np.any(sampler.random(4) < 0.5) for _ in range(plan.steps))
    assert empties > 0  # the empty-batch step was exercised


def test_a_noise_only_step_is_the_dp_sgd_update_with_a_zero_sum() -> None:
    """Empty batch: grad = (0 + N(0, σ²C²)) / expected batch, exactly what a non-empty step
    adds to its clipped sum; and the accountant records the step."""
    import torch
    from opacus import GradSampleModule
    from opacus.accountants import RDPAccountant

    from blockbudget.training.dpsgd_noise import NoiseSourceOptimizer

    def one_step(rows: int) -> tuple[list[torch.Tensor], list[torch.Tensor], object]:
        torch.manual_seed(0)
        module = GradSampleModule(torch.nn.Linear(3, 2), loss_reduction="sum")
        opt = NoiseSourceOptimizer(
            torch.optim.SGD(module.parameters(), lr=1.0),
            noise=SeededNoise(7),
            noise_multiplier=1.5,
            max_grad_norm=0.5,
            expected_batch_size=2.5,
            loss_reduction="mean",
        )
        accountant = RDPAccountant()
        opt.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=0.25))
        xb = torch.as_tensor(np.random.default_rng(1).normal(0, 1, (rows, 3)), dtype=torch.float32)
        yb = torch.zeros(rows, dtype=torch.int64)
        opt.zero_grad()
        torch.nn.CrossEntropyLoss(reduction="sum")(module(xb), yb).backward()
        opt.pre_step()
        sums = [p.summed_grad.clone() for p in module.parameters()]
        return [p.grad.clone() for p in module.parameters()], sums, accountant.history

    grads, sums, history = one_step(0)
    assert history == [(1.5, 0.25, 1)]
    noise = SeededNoise(7).gaussian_samples(8, sigma=0.75)  # σ·C, all parameters in one call
    flat = torch.cat([g.reshape(-1) for g in grads]).double().numpy()
    np.testing.assert_allclose(flat, noise / 2.5, rtol=1e-6)
    assert all(float(s.abs().sum()) == 0.0 for s in sums)
    full, full_sums, _ = one_step(3)
    summed = torch.cat([s.reshape(-1) for s in full_sums]).double().numpy()
    got = torch.cat([g.reshape(-1) for g in full]).double().numpy()
    np.testing.assert_allclose(got, (summed + noise) / 2.5, rtol=1e-5, atol=1e-7)


# --- defect 3: the mechanism comes from a public or paid-for size, not the private n ------------


@pytest.mark.parametrize("n", [400, 401])
def test_neighbouring_datasets_run_the_same_mechanism(n: int) -> None:
    """400 and 401 rows straddle a batch boundary (⌈n/100⌉ = 4 or 5): with the same public size
    both run q = 1/4, 4 steps per epoch, the same σ and the same normalisation."""
    x, y = separable(n, 6)
    plan = plan_dpsgd(n=400, batch_size=100, epochs=2, epsilon=1.0, delta=1e-5)
    model = DPSGDModel(batch_size=100, epochs=2, seed=1).fit(
        MeteredSource(), x, y, epsilon=1.0, delta=1e-5, public_rows=400
    )
    assert (model.plan_, model.rows_, model.expected_batch_) == (plan, 400, 100.0)
    assert plan.sample_rate == 0.25 and plan.steps == 8
    linear = LogisticDPSGD(batch_size=100, epochs=2, seed=1).fit(
        MeteredSource(), x, y, epsilon=1.0, delta=1e-5, public_rows=400
    )
    assert linear.plan_ == plan


@pytest.mark.parametrize("accounting", [Accounting.BASIC, Accounting.RDP])
def test_without_a_public_size_the_plan_follows_a_dp_count_paid_from_the_budget(
    accounting: Accounting,
) -> None:
    x, y = separable(500, 7)
    src = MeteredSource(accounting)
    model = DPSGDModel(batch_size=100, seed=3).fit(src, x, y, epsilon=1.0, delta=1e-5)
    assert [label for label, _ in src.draws] == ["dpsgd/count", "dpsgd"]
    count_eps, sgd_eps = Decimal("0.1"), Decimal("0.9")  # COUNT_FRACTION = 0.1
    assert model.rows_ is not None and model.rows_ != 500  # a noisy count, not n
    assert model.plan_ == plan_dpsgd(
        n=model.rows_,
        batch_size=100,
        epochs=1,
        epsilon=sgd_eps,
        delta=1e-5,
        accounting=accounting,
    )
    assert model.cost_ == src.spent
    if accounting is Accounting.BASIC:
        assert src.draws[0][1] == Budget(epsilon=count_eps)
        assert src.spent == Budget(epsilon=1.0, delta=1e-5)
    else:
        assert model.plan_ is not None
        want = RdpCurve.laplace(scale=float(1 / count_eps)) + model.plan_.rdp_curve()
        assert isinstance(src.spent, RdpCurve)
        for got, exp in zip(src.spent.as_floats(), want.as_floats(), strict=True):
            assert got == pytest.approx(exp, rel=1e-9)


def test_adassp_noise_scales_do_not_depend_on_n() -> None:
    """AdaSSP's σs come from (ε/3, δ/3) and the public bounds B_X, B_Y only: neighbours are
    charged the same curve (its ridge uses the noisy λ_min, a DP release)."""
    rng = np.random.default_rng(8)
    x, y = rng.uniform(-0.3, 0.3, (301, 2)), rng.uniform(0, 1, 301)
    costs = [
        AdaSSPRegressor()
        .fit(
            MeteredSource(Accounting.RDP), x[:n], y[:n], epsilon=1, delta=1e-6, noise=SeededNoise(1)
        )
        .cost_
        for n in (300, 301)
    ]
    assert costs[0] == costs[1]

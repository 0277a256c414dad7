"""DP models: AdaSSP in layers (exact at huge ε, noise parameters, charge before noise) and
DP-SGD through Opacus (the charged plan equals Opacus' accountant history)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve
from blockbudget.errors import DataError, InvalidRequestError, ReservationError
from blockbudget.mechanisms import SeededNoise, analytic_gaussian_sigma
from blockbudget.mechanisms.calibration import fitted_gaussian_scales
from blockbudget.training import AdaSSPRegressor, DPSGDModel, LogisticDPSGD, MeteredSource, Task
from blockbudget.training.adassp import ols
from blockbudget.training.dpsgd import plan_dpsgd


def linear_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.3, 0.3, (n, 4))
    w = np.array([0.5, -0.2, 0.1, 0.3])
    return x, x @ w + 0.1 + rng.normal(0, 0.05, n), w


def test_adassp_matches_exact_least_squares_at_huge_epsilon() -> None:
    x, y, _ = linear_data(5000, 0)
    model = AdaSSPRegressor(x_bound=1.0, y_bound=1.0).fit(
        MeteredSource(), x, y, epsilon=1e6, delta=1e-6, noise=SeededNoise(1)
    )
    exact = ols(x, y)
    assert model.ridge_ == 0.0
    np.testing.assert_allclose(model.coef_, exact[:-1], atol=2e-4)
    assert model.intercept_ == pytest.approx(exact[-1], abs=2e-4)
    np.testing.assert_allclose(
        model.predict(x), np.hstack([x, np.ones((5000, 1))]) @ exact, atol=2e-4
    )


def test_adassp_is_noisier_at_small_epsilon_and_charges_its_budget() -> None:
    x, y, w = linear_data(5000, 2)
    errors = []
    for eps in (0.05, 1.0, 100.0):
        src = MeteredSource()
        m = AdaSSPRegressor().fit(src, x, y, epsilon=eps, delta=1e-6, noise=SeededNoise(3))
        assert src.spent == Budget(epsilon=eps, delta=1e-6) == m.cost_
        assert len(src.draws) == 1 and not m.secure_noise_
        errors.append(float(np.linalg.norm(m.coef_ - w)))
    assert errors[0] > errors[1] > errors[2]


def test_adassp_rdp_cost_is_the_three_gaussian_curves() -> None:
    x, y, _ = linear_data(1000, 4)
    src = MeteredSource(Accounting.RDP)
    model = AdaSSPRegressor(x_bound=2.0, y_bound=0.5).fit(
        src, x, y, epsilon=0.9, delta=3e-6, noise=SeededNoise(5)
    )
    # λ_min(XᵀX) and XᵀX move by at most B_X² = 4 when a row is added, Xᵀy by B_X·B_Y = 1
    # (Wang 2018 Alg. 2); on a stream whose rule prices the noise the three releases share one
    # multiplier, the smallest whose summed curve fits an empty (ε, δ) block of the rule
    sig_min, sig_xx, sig_xy = fitted_gaussian_scales(  # type: ignore[misc]
        accounting="rdp", epsilon=0.9, delta=3e-6, sensitivities=[4.0, 4.0, 1.0]
    )
    assert sig_min == sig_xx == pytest.approx(4 * sig_xy)
    expected = (
        RdpCurve.gaussian(sigma=sig_xx, sensitivity=4.0)
        + RdpCurve.gaussian(sigma=sig_xx, sensitivity=4.0)
        + RdpCurve.gaussian(sigma=sig_xy)
    )
    block = Accounting.RDP.rule.filter(capacity=Budget(epsilon="0.9", delta="3e-6"))
    assert block.fits(block.features(src.spent))  # type: ignore[arg-type]
    # calibrated together, the three releases need less noise than a three-way split of
    # (ε, δ) with each by the analytic Gaussian (what an (ε, δ) stream does)
    assert sig_xy < analytic_gaussian_sigma(epsilon=0.3, delta=1e-6, sensitivity=1.0)
    assert model.cost_ == src.spent
    assert isinstance(src.spent, RdpCurve)
    for got, want in zip(src.spent.as_floats(), expected.as_floats(), strict=True):
        assert got == pytest.approx(want, rel=1e-6)


def test_adassp_refusal_fits_nothing_and_bad_input_is_refused() -> None:
    x, y, _ = linear_data(100, 6)
    model = AdaSSPRegressor()
    with pytest.raises(ReservationError):
        model.fit(MeteredSource(cap=Budget(epsilon=0.1, delta=1e-6)), x, y, epsilon=1, delta=1e-6)
    with pytest.raises(InvalidRequestError, match="fit the model"):
        model.predict(x)
    with pytest.raises(DataError, match="rows"):
        model.fit(MeteredSource(), x, y[:-1], epsilon=1, delta=1e-6)
    with pytest.raises(DataError, match="finite"):
        model.fit(MeteredSource(), np.full((3, 2), np.nan), y[:3], epsilon=1, delta=1e-6)
    with pytest.raises(InvalidRequestError, match="x_bound"):
        AdaSSPRegressor(x_bound=-1)


def separable(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, 3))
    return x, (x[:, 0] - x[:, 1] > 0).astype(int)


def test_dpsgd_charges_its_plan_before_training_and_opacus_agrees() -> None:
    x, y = separable(3000, 7)
    plan = plan_dpsgd(n=3000, batch_size=300, epochs=2, epsilon=2.0, delta=1e-5)
    assert plan.steps == 20 and plan.sample_rate == pytest.approx(0.1)
    src = MeteredSource()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPSGDModel(epochs=2, batch_size=300, learning_rate=0.5, seed=1).fit(
            src, x, y, epsilon=2.0, delta=1e-5, public_rows=3000
        )
    assert src.spent == Budget(epsilon=2.0, delta=1e-5) and model.plan_ == plan
    accuracy = float(np.mean(model.predict(x) == y))
    assert accuracy > 0.85  # the logistic model learned the separable rule
    probs = model.predict_proba(x)
    assert probs.shape == (3000, 2) and np.allclose(probs.sum(axis=1), 1.0)
    # the plan on a basic stream is priced by its PLD: tight at (2, 1e-5)
    from blockbudget.training.dpsgd import pld_epsilon

    assert pld_epsilon(plan.noise_multiplier, plan.sample_rate, plan.steps, 1e-5) <= 2.0
    assert pld_epsilon(plan.noise_multiplier * 0.99, plan.sample_rate, plan.steps, 1e-5) > 2.0
    # an RDP source is charged the plan's subsampled-Gaussian curve, calibrated so that it
    # fits an empty (2, 1e-5) block of the stream's rule
    rdp_plan = plan_dpsgd(
        n=3000, batch_size=300, epochs=2, epsilon=2.0, delta=1e-5, accounting="rdp2"
    )
    assert rdp_plan.noise_multiplier > plan.noise_multiplier  # RDP's conversion is looser
    rdp = MeteredSource(Accounting("rdp2"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DPSGDModel(epochs=2, batch_size=300, seed=1).fit(
            rdp, x, y, epsilon=2.0, delta=1e-5, public_rows=3000
        )
    assert isinstance(rdp.spent, RdpCurve) and rdp.spent == rdp_plan.rdp_curve()
    block = Accounting("rdp2").rule.filter(capacity=Budget(epsilon=2, delta="1e-5"))
    assert block.fits(block.features(rdp.spent))
    eps = float(rdp.spent.to_dp(delta=1e-5).epsilon)
    assert 1.5 <= eps <= 2.0  # dp-accounting's conversion (no union bound) agrees, with room


def test_dpsgd_refusal_trains_nothing() -> None:
    x, y = separable(500, 8)
    model = DPSGDModel(batch_size=100)
    with pytest.raises(ReservationError):
        model.fit(MeteredSource(cap=Budget(epsilon=0.5, delta=1e-5)), x, y, epsilon=1, delta=1e-5)
    with pytest.raises(InvalidRequestError, match="fit the model"):
        model.predict(x)
    with pytest.raises(DataError, match="class labels"):
        model.fit(MeteredSource(), x, y + 5, epsilon=1, delta=1e-5)


def test_dpsgd_regressor_predicts_values() -> None:
    rng = np.random.default_rng(9)
    x = rng.uniform(0, 1, (2000, 2))
    y = 0.3 * x[:, 0] + 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = DPSGDModel(
            task=Task.REGRESSION, hidden=(8,), epochs=3, batch_size=200, learning_rate=0.05, seed=2
        ).fit(MeteredSource(), x, y, epsilon=8, delta=1e-5)
    mse = float(np.mean((m.predict(x) - y) ** 2))
    assert mse < float(np.var(y)) and math.isfinite(mse)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: AdaSSPRegressor(rho="x"), "rho"),
        (lambda: AdaSSPRegressor(x_bound=True), "x_bound"),
        (lambda: AdaSSPRegressor(y_bound=math.inf), "y_bound"),
        (lambda: DPSGDModel(batch_size=0), "batch_size"),
        (lambda: DPSGDModel(epochs=0), "epochs"),
        (lambda: DPSGDModel(hidden=(True,)), "hidden"),
        (lambda: DPSGDModel(hidden=[8]), "hidden"),  # type: ignore[arg-type]
        (lambda: DPSGDModel(momentum=1.0), "momentum"),
        (lambda: DPSGDModel(learning_rate="fast"), "learning_rate"),
        (lambda: DPSGDModel(n_classes=1), "n_classes"),
        (lambda: LogisticDPSGD(batch_size="a"), "batch_size"),
        (lambda: LogisticDPSGD(max_grad_norm=0.0), "max_grad_norm"),
    ],
)
def test_bad_model_settings_are_refused_on_construction(make: object, match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match):
        make()  # type: ignore[operator]


def test_predict_refuses_a_design_of_the_wrong_width() -> None:
    x, y, _ = linear_data(200, 10)
    model = AdaSSPRegressor().fit(MeteredSource(), x, y, epsilon=1, delta=1e-6)
    with pytest.raises(DataError, match="4 columns"):
        model.predict(x[:, :2])


def test_dpsgd_refuses_a_run_that_differs_from_the_charged_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The history check can fail: charge a plan with one step more than Opacus will run (a
    stand-in for any drift between what is charged and what runs) and the fit raises."""
    from blockbudget.errors import InternalError
    from blockbudget.training import dpsgd

    x, y = separable(400, 11)
    real = dpsgd.plan_dpsgd(n=400, batch_size=100, epochs=1, epsilon=4.0, delta=1e-5)
    drifted = dpsgd.SgdPlan(real.noise_multiplier, real.sample_rate, real.steps + 1)
    monkeypatch.setattr(dpsgd, "plan_dpsgd", lambda **_: drifted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InternalError, match="differs from the charged plan"):
            DPSGDModel(batch_size=100).fit(
                MeteredSource(), x, y, epsilon=4.0, delta=1e-5, public_rows=400
            )

"""The contract every SLAed validator runs (one suite over loss, accuracy, sum statistics)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve
from blockbudget.errors import InvalidBudgetError, InvalidRequestError, ReservationError
from blockbudget.mechanisms import SeededNoise
from blockbudget.training import (
    AccuracyEvidence,
    AccuracyValidator,
    LossEvidence,
    LossValidator,
    MeteredSource,
    Outcome,
    SlaMode,
    SumStatisticEvidence,
    SumStatisticValidator,
    Validator,
)


@dataclass(frozen=True)
class Case:
    """How to build one validator and clearly good / clearly bad evidence for it."""

    name: str
    make: Callable[[SlaMode], Validator[Any]]
    good: Callable[[np.random.Generator], Any]
    bad: Callable[[np.random.Generator], Any]


N = 200_000


def loss_good(rng: np.random.Generator) -> LossEvidence:
    return LossEvidence(rng.uniform(0, 0.02, N), rng.uniform(0, 0.02, N))


def loss_bad(rng: np.random.Generator) -> LossEvidence:
    return LossEvidence(rng.uniform(0.2, 0.4, N), rng.uniform(0.2, 0.4, N))


def acc_good(rng: np.random.Generator) -> AccuracyEvidence:
    return AccuracyEvidence(rng.random(N) < 0.95, rng.random(N) < 0.95)


def acc_bad(rng: np.random.Generator) -> AccuracyEvidence:
    return AccuracyEvidence(rng.random(N) < 0.6, rng.random(N) < 0.6)


def sum_good(rng: np.random.Generator) -> SumStatisticEvidence:
    return SumStatisticEvidence([N, N // 2], value_range=1.0, sum_scale=4.0, count_scale=4.0)


def sum_bad(rng: np.random.Generator) -> SumStatisticEvidence:
    return SumStatisticEvidence([30, 20], value_range=1.0, sum_scale=4.0, count_scale=4.0)


CASES = [
    Case("loss", lambda m: LossValidator(target=0.1, mode=m), loss_good, loss_bad),
    Case("accuracy", lambda m: AccuracyValidator(target=0.8, mode=m), acc_good, acc_bad),
    Case("sum", lambda m: SumStatisticValidator(target=0.05, mode=m), sum_good, sum_bad),
]
IDS = [c.name for c in CASES]


def dp_modes(case: Case) -> list[SlaMode]:
    cls = type(case.make(SlaMode.SAGE))
    return [m for m in cls.modes if m is not SlaMode.NON_PRIVATE]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_accepts_good_and_never_accepts_bad(case: Case) -> None:
    rng = np.random.default_rng(1)
    for mode in type(case.make(SlaMode.SAGE)).modes:
        v = case.make(mode)
        source = None if mode is SlaMode.NON_PRIVATE else MeteredSource()
        good = v.validate(source, case.good(rng), epsilon=1.0, eta=0.05, noise=SeededNoise(2))
        assert good.outcome is Outcome.ACCEPT, (mode, good)
        bad = v.validate(source, case.bad(rng), epsilon=1.0, eta=0.05, noise=SeededNoise(3))
        assert bad.outcome is not Outcome.ACCEPT, (mode, bad)
        if v.has_reject and mode is not SlaMode.NO_SLA:
            assert bad.outcome is Outcome.REJECT, (mode, bad)
            assert bad.reject_bound is not None
            if v.higher_is_better:
                assert bad.reject_bound < v.target <= good.accept_bound
            else:
                assert bad.reject_bound > v.target >= good.accept_bound


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_charges_exactly_epsilon_once_before_noise(case: Case) -> None:
    rng = np.random.default_rng(4)
    for mode in dp_modes(case):
        source = MeteredSource()
        result = case.make(mode).validate(
            source, case.good(rng), epsilon=0.3, eta=0.05, noise=SeededNoise(5)
        )
        assert len(source.draws) == 1
        assert source.spent == Budget(epsilon=0.3) == result.cost
        assert result.epsilon == Budget(epsilon=0.3).epsilon and not result.secure_noise


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rdp_sources_are_charged_the_laplace_curves(case: Case) -> None:
    source = MeteredSource(Accounting.RDP)
    result = case.make(SlaMode.SAGE).validate(
        source, case.good(np.random.default_rng(6)), epsilon=0.5, eta=0.05, noise=SeededNoise(7)
    )
    assert isinstance(source.spent, RdpCurve) and source.spent == result.cost
    # (ε, 0)-DP overall: every order at most ε, and strictly cheaper than pure ε at low orders
    assert all(float(v) <= 0.5 + 1e-9 for v in source.spent.epsilons)
    assert float(source.spent.epsilons[0]) < 0.5


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_refused_draw_releases_nothing(case: Case) -> None:
    source = MeteredSource(cap=Budget(epsilon=0.1))
    with pytest.raises(ReservationError):
        case.make(SlaMode.SAGE).validate(
            source, case.good(np.random.default_rng(8)), epsilon=0.2, eta=0.05
        )
    assert source.draws == [] and source.spent == Budget.zero()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bad_inputs_are_refused_before_charging(case: Case) -> None:
    ev = case.good(np.random.default_rng(9))
    source = MeteredSource()
    v = case.make(SlaMode.SAGE)
    for eta in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(InvalidRequestError, match="eta"):
            v.validate(source, ev, epsilon=1.0, eta=eta)
    with pytest.raises(InvalidBudgetError):
        v.validate(source, ev, epsilon=-1.0, eta=0.05)
    with pytest.raises(InvalidRequestError, match="needs a budget source"):
        v.validate(None, ev, epsilon=1.0, eta=0.05)
    with pytest.raises(InvalidRequestError, match="non-DP"):
        case.make(SlaMode.NON_PRIVATE).validate(source, ev, epsilon=1.0, eta=0.05)
    with pytest.raises(InvalidRequestError, match="evidence"):
        v.validate(source, object(), epsilon=1.0, eta=0.05)
    assert source.draws == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_seeded_runs_repeat_and_the_bound_is_reported(case: Case) -> None:
    ev = case.good(np.random.default_rng(10))
    runs = [
        case.make(SlaMode.SAGE).validate(
            MeteredSource(), ev, epsilon=0.2, eta=0.05, noise=SeededNoise(11)
        )
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    assert np.isfinite(runs[0].accept_bound)


def test_unsupported_mode_and_bad_targets_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="does not support"):
        SumStatisticValidator(target=1.0, mode=SlaMode.NO_SLA).validate(
            MeteredSource(), sum_good(np.random.default_rng(0)), epsilon=1.0, eta=0.05
        )
    with pytest.raises(InvalidRequestError, match="target"):
        AccuracyValidator(target=1.5)
    with pytest.raises(InvalidRequestError, match="bound"):
        LossValidator(target=0.1, bound=0.0)

"""The dpi-… experiments' parts at small sizes: the budget trace against a hand count, the
user-level loss curves' shapes, the moving averages and per-slot extras exact at zero noise, and
the synthetic streams' sums."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from experiment_support import QuickRun

from blockbudget.apps.flights.streams import flights_stream
from blockbudget.experiments.dpi_apps import _released
from blockbudget.experiments.dpi_budget import _horizon_allocator, _trace
from blockbudget.experiments.dpi_horizon import _configs
from blockbudget.experiments.dpi_synthetic import _median_extra, _moving
from blockbudget.experiments.dpi_utility import _config, _stat_extra, _zipf_extra, _zipf_slots
from blockbudget.streaming.release import AllocationKind, DPIConfig, Horizon
from blockbudget.streaming.streams import CategoricalStream


@dataclass(frozen=True)
class _Term:
    epsilon: float


class _Fixed:
    """An allocator that hands out the same ε every slot (a stand-in for Alg. 3/4's draws)."""

    def __init__(self, epsilon: float) -> None:
        self.term = _Term(epsilon)
        self.handed = 0

    def next(self) -> _Term:
        self.handed += 1
        return self.term


def test_budget_trace_against_a_hand_count() -> None:
    # ε = 1, 0.3 a slot: 0.7, 0.4, 0.1 remain after slots 1–3; the 4th charge would pass ε and
    # is refused, so 0.1 stays for ever
    fixed = _Fixed(0.3)
    got = _trace(fixed, 1.0, 6, {1, 2, 3, 4, 6})  # type: ignore[arg-type]
    assert got == [0.7, 0.4, 0.1, 0.1, 0.1]  # the accountant is exact (1e-18 units)
    assert fixed.handed == 6  # one term per slot, charged or not


def test_horizon_allocator_spends_most_of_epsilon_by_the_horizon_and_never_more() -> None:
    marks = {10, 100, 500, 2000}
    remaining = _trace(_horizon_allocator(2.0, 500, seed=0), 2.0, 2000, marks)
    assert remaining == sorted(remaining, reverse=True)  # spending never goes back
    assert all(0.0 <= r <= 2.0 for r in remaining)
    assert 2.0 - remaining[2] > 0.5 * 2.0  # more than half of ε by T = 500
    again = _trace(_horizon_allocator(2.0, 500, seed=0), 2.0, 2000, marks)
    assert again == remaining  # seeded: the same trace


def test_privacy_loss_rows(quick_run: Callable[[str], QuickRun]) -> None:
    rows = quick_run("dpi-privacy-loss").result.rows
    assert [r["t"] for r in rows] == [5, 50, 500]
    for r in rows:
        assert r["event_sensitivity_user_level"] == r["t"]  # one record a slot, every slot
        assert 0.0 <= r["dpi_epsilon_spent"] <= r["dpi_epsilon_cap"] == 0.5
    by = {r["t"]: r for r in rows}
    # RDP composition of the Laplace mechanism beats t·ε once t is large (not for 5 slots,
    # where the conversion at δ = 1e-5 costs more than it saves), and still grows without bound
    assert by[5]["event_rdp_epsilon_at_1e-5"] > by[5]["event_basic_epsilon"]
    assert by[50]["event_rdp_epsilon_at_1e-5"] < by[50]["event_basic_epsilon"]
    assert by[500]["event_rdp_epsilon_at_1e-5"] < by[500]["event_basic_epsilon"] / 2
    assert by[500]["event_rdp_epsilon_at_1e-5"] > 10 * by[5]["event_rdp_epsilon_at_1e-5"]


def test_horizon_configs_are_the_papers_and_for_horizon() -> None:
    (paper_label, paper), (aware_label, aware) = _configs(2.0, 100)
    assert paper.rate == 2.0 * 100 / 2.0 and paper.zeta == 0.2
    assert aware == DPIConfig.for_horizon(epsilon=2.0, slots=100, horizon=Horizon.ACCUMULATIVE)
    assert paper.horizon is aware.horizon is Horizon.ACCUMULATIVE
    assert "2T/ε" in paper_label and "for_horizon" in aware_label
    assert _config(2.0, 100, Horizon.INSTANTANEOUS, AllocationKind.EXPONENTIAL, mu=0.3) == (
        DPIConfig.for_horizon(
            epsilon=2.0,
            slots=100,
            horizon=Horizon.INSTANTANEOUS,
            allocation=AllocationKind.EXPONENTIAL,
            mu=0.3,
        )
    )


def test_moving_average_by_hand() -> None:
    assert _moving([1.0, 2.0, 3.0, 4.0], 2).tolist() == [1.5, 2.5, 3.5]
    assert _moving([1.0, 2.0, 6.0], 3).tolist() == [3.0]
    assert _moving([1.0, 2.0], 5).tolist() == [1.0, 2.0]  # shorter than the window: as is


def test_median_extra_is_exact_when_the_release_is_the_true_pdf() -> None:
    data = [np.array([1.0, 5.0, 2.0, 8.0]), np.array([4.0, 4.0, 0.0, 12.0])]
    extra = _median_extra(data)
    for t, counts in enumerate(data, start=1):
        pdf = counts / counts.sum()
        got = extra(t, pdf, pdf)
        assert got["released_median"] == pytest.approx(got["true_median"])
        assert got["true_median"] == float(np.median(counts))
        assert got["released_lq"] <= got["released_median"] <= got["released_uq"]
    uniform = np.full(4, 0.25)  # released uniform: every item gets total/4
    assert extra(1, data[0] / 16, uniform)["released_median"] == pytest.approx(16 / 4)


def test_statistical_query_error_by_hand() -> None:
    values = np.array([0.0, 10.0, 20.0])
    stream = CategoricalStream(name="toy", domain=("a", "b", "c"), slots=(), values=values)
    extra = _stat_extra(stream)
    target = np.array([0.5, 0.5, 0.0])  # mean value 5
    release = np.array([0.0, 0.5, 0.5])  # mean value 15
    assert extra(1, target, target) == {"stat_mse": 0.0}
    assert extra(1, target, release)["stat_mse"] == pytest.approx(((5 - 15) / 20) ** 2)
    # the Zipf stream's items are valued 0 … 1 evenly
    assert _zipf_extra(1, target, release)["stat_mse"] == pytest.approx((0.25 - 0.75) ** 2)


def test_zipf_slots_have_every_user_once_and_are_seeded() -> None:
    slots = _zipf_slots(5, 4, 1000, seed=3)
    assert len(slots) == 4 and all(s.shape == (5,) and s.sum() == 1000 for s in slots)
    assert all(s[0] > s[-1] for s in slots)  # Zipf(1.5): the first item is 5^1.5 ≈ 11× the last
    again = _zipf_slots(5, 4, 1000, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(slots, again, strict=True))


def test_released_pdfs_are_pdfs_one_per_slot() -> None:
    flights = flights_stream()
    slots = list(flights.slots[:5])
    released = _released(slots, flights.domain_size, 1.0, 400, seed=0)
    assert released.shape == (5, flights.domain_size)
    assert np.all(released >= 0) and np.allclose(released.sum(axis=1), 1.0)
    assert np.array_equal(released, _released(slots, flights.domain_size, 1.0, 400, seed=0))

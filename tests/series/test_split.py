"""A grant split over iterations: each ε_i charged through the grant, capped per iteration."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from blockbudget import Accounting, Budget, RdpCurve
from blockbudget.errors import InvalidRequestError, ReservationError
from blockbudget.ledger.types import EventKind
from blockbudget.mechanisms import SeededNoise, dp_count, dp_sum
from blockbudget.platform import Last, Platform
from blockbudget.series import geometric, parse_strategy
from blockbudget.series.split import SplitSource
from blockbudget.store import Blocking, Unit

DAY = Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1))


def _frame(day: int, n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(day)
    start = pd.Timestamp("2024-03-01") + pd.Timedelta(days=day)
    return pd.DataFrame(
        {
            "ts": start + pd.to_timedelta(rng.integers(0, 86_400, n), unit="s"),
            "value": rng.uniform(0.0, 1.0, n),
        }
    )


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    p = Platform(tmp_path / "home")
    p.add_context("analytics")
    p.create_stream("events", policy=Budget(epsilon=1.0), blocking=DAY)
    p.create_stream(
        "events_rdp",
        policy=Budget(epsilon=4.0, delta=1e-6),
        blocking=DAY,
        accounting=Accounting.RDP,
    )
    for d in range(3):
        p.ingest("events", _frame(d))
        p.ingest("events_rdp", _frame(d))
    yield p
    p.close()


def test_each_iteration_is_charged_its_term_through_the_grant(platform: Platform) -> None:
    plan = parse_strategy("Flip-Geo").build(6, epsilon="0.6")
    with platform.request(
        "events", blocks=Last(2), budget=Budget(epsilon="0.6"), context="analytics"
    ) as grant:
        split = SplitSource(grant, plan, label="loop")
        seen = []
        for eps_i in split.iterations():
            frame = grant.frame()
            half, _ = split.shares(2)
            assert 2 * half <= eps_i < 2 * half + Decimal("2e-18")
            dp_count(split, frame, epsilon=half, noise=SeededNoise(1))
            dp_sum(
                split, frame["value"], lower=0, upper=1, epsilon=eps_i - half, noise=SeededNoise(2)
            )
            seen.append(eps_i)
        assert tuple(seen) == plan.terms
        assert split.index == 6 and not split.has_next()
        assert grant.spent == Budget(epsilon=plan.total)
        assert [label.split(":")[0] for label, _ in grant.draws][:2] == ["loop 1/6", "loop 1/6"]
        blocks = grant.blocks
        with pytest.raises(InvalidRequestError, match="only 6"):
            split.next_iteration()
    f = platform.filter("events")
    for block in blocks:
        state = platform.ledger.state(block, "analytics")
        assert state.charged == f.features(Budget(epsilon=plan.total))  # exact: terms on the grid
        assert state.reserved == f.zero()
    charges = [e for e in platform.ledger.events() if e.kind is EventKind.CHARGED]
    assert len(charges) == 12
    assert platform.verify().ok


def test_a_draw_beyond_the_iteration_budget_is_refused_and_not_charged(
    platform: Platform,
) -> None:
    plan = parse_strategy("Geo").build(3, epsilon="0.3")
    with platform.request(
        "events", blocks=Last(1), budget=Budget(epsilon="0.3"), context="analytics"
    ) as grant:
        split = SplitSource(grant, plan)
        with pytest.raises(InvalidRequestError, match="next_iteration"):
            split.draw(Budget(epsilon="0.01"), label="early")
        eps_1 = split.next_iteration()
        with pytest.raises(ReservationError, match="exceeds the iteration's budget"):
            dp_count(split, grant.frame(), epsilon=eps_1 + Decimal("1e-18"))
        assert grant.draws == ()
        split.draw(Budget(epsilon=eps_1), label="exact fit")
        assert split.remaining == 0
        with pytest.raises(ReservationError):
            split.draw(Budget(epsilon="1e-18"), label="one unit more")
        assert grant.spent == Budget(epsilon=eps_1)


def test_infinite_series_serves_a_stream_of_slots(platform: Platform) -> None:
    series = geometric(epsilon="0.5", ratio="0.5")
    with platform.request(
        "events", blocks=Last(1), budget=Budget(epsilon="0.5"), context="analytics"
    ) as grant:
        split = SplitSource(grant, series)
        for eps_i in split.iterations(limit=40):
            split.draw(Budget(epsilon=eps_i), label="slot")
        assert split.has_next()
        assert grant.spent == Budget(epsilon=sum(series.prefix(40), Decimal(0)))
        assert grant.spent <= Budget(epsilon="0.5")


def test_rdp_streams_cap_by_the_pure_dp_curve(platform: Platform) -> None:
    plan = parse_strategy("AVG").build(2, epsilon="0.4")
    with platform.request(
        "events_rdp", blocks=Last(1), budget=RdpCurve.from_pure_dp("0.4"), context="analytics"
    ) as grant:
        split = SplitSource(grant, plan)
        split.next_iteration()
        half, _ = split.shares(2)
        dp_count(split, grant.frame(), epsilon=half, noise=SeededNoise(3))
        dp_count(split, grant.frame(), epsilon=half, noise=SeededNoise(4))
        assert len(grant.draws) == 2
        with pytest.raises(ReservationError, match="RDP curve"):
            dp_count(split, grant.frame(), epsilon=half, noise=SeededNoise(5))
        assert len(grant.draws) == 2


def test_named_strategy_split(platform: Platform) -> None:
    with platform.request(
        "events", blocks=Last(1), budget=Budget(epsilon="0.3"), context="analytics"
    ) as grant:
        split = SplitSource.named(grant, "AC-Flip-Geo", 5, epsilon="0.3", noise_bound=40)
        want = parse_strategy("AC-Flip-Geo", noise_bound=40).build(5, epsilon="0.3")
        assert split.sequence == want
        for eps_i in split.iterations():
            split.draw(Budget(epsilon=eps_i), label="step")
        assert grant.spent == Budget(epsilon=want.total)
        assert [label for label, _ in grant.draws][-1] == "iteration 5/5: step"


def test_bad_arguments() -> None:
    with pytest.raises(InvalidRequestError, match="BudgetSource"):
        SplitSource(object(), parse_strategy("AVG").build(2, epsilon=1))  # type: ignore[arg-type]


def test_a_draw_of_exactly_a_huge_epsilon_i_fits() -> None:
    # ε_i = 2e12/3 on the 1e-18 grid has 30 digits: summed in Decimal's default 28-digit
    # context it rounds up past ε_i and an exact draw was refused.
    from blockbudget.training.sources import MeteredSource

    split = SplitSource(MeteredSource(), parse_strategy("AVG").build(3, epsilon="2e12"))
    eps_1 = split.next_iteration()
    assert eps_1 == Decimal("666666666666.666666666666666666")
    split.draw(Budget(epsilon=eps_1), label="exact fit")
    assert split.remaining == 0
    with pytest.raises(ReservationError, match="exceeds the iteration's budget"):
        split.draw(Budget(epsilon="1e-18"), label="one unit more")


def test_a_pure_budget_and_a_curve_share_one_iteration_total(platform: Platform) -> None:
    """On an RDP grant, a pure (ε_i, 0) budget drawn after the iteration's whole curve is
    refused: both count in one running total of the rule's kind (they used to be counted apart,
    letting one iteration spend twice its term)."""
    plan = parse_strategy("AVG").build(2, epsilon="0.4")
    with platform.request(
        "events_rdp", blocks=Last(1), budget=RdpCurve.from_pure_dp("0.4"), context="analytics"
    ) as grant:
        split = SplitSource(grant, plan)
        split.next_iteration()
        eps_i = split.epsilon
        split.draw(grant.accounting.rule.pure(eps_i), label="curve")
        with pytest.raises(ReservationError, match="RDP curve"):
            split.draw(Budget(epsilon=eps_i), label="budget")
        assert len(grant.draws) == 1
        # the grant's own sum reads the pure draw in the rule's kind, and never fails on mixing
        assert grant.spent == RdpCurve.from_pure_dp(eps_i)


def test_a_grant_reserved_as_a_pure_budget_sums_draws_of_the_rules_kind(
    platform: Platform,
) -> None:
    with platform.request(
        "events_rdp", blocks=Last(1), budget=Budget(epsilon="0.5"), context="analytics"
    ) as grant:
        curve = RdpCurve.laplace(scale=10.0)
        grant.draw(curve, label="one")
        grant.draw(Budget(epsilon="0.01"), label="two")
        assert grant.spent == curve.add_up(RdpCurve.from_pure_dp("0.01"))

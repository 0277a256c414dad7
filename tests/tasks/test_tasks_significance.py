"""Live significance providers (seed 000 §IV-B, §VII-A): recency and user tables are free and
public (Δ = 0); loss-reduction pays exactly ε_s per block it scores, through one grant, before
its DP value is used, and is exact against a hand computation at zero noise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from blockbudget import Accounting, Budget
from blockbudget.errors import (
    BlockBudgetError,
    InvalidRequestError,
    UnknownBlockError,
    UnknownContextError,
)
from blockbudget.ledger import EventKind
from blockbudget.mechanisms import statistics as stats
from blockbudget.mechanisms.noise import FloatArray, NoiseSource
from blockbudget.platform import Platform
from blockbudget.store import Blocking, Unit
from blockbudget.tasks.significance import (
    Disclosure,
    RecencySignificance,
    UserSignificance,
    provider_from_json,
    provider_names,
    significance_from_json,
)
from blockbudget.tasks.significance_loss import LossReduction

DAY = Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1))
START = datetime(2024, 1, 1, tzinfo=UTC)
# Day 0 mean 2, day 1 mean 9, day 2 clipped to [0, 10] → mean 10.
ROWS = {0: [1.0, 2.0, 3.0], 1: [8.0, 9.0, 10.0], 2: [20.0, 30.0]}
B = [f"events/2024-01-0{d + 1}" for d in range(3)]
VALIDATION = (8.0, 9.0, 10.0)  # v̄ = 9; prior m0 = (0 + 10)/2 = 5; (v̄ − m0)² = 16


class ZeroNoise(NoiseSource):
    """Adds nothing (tests only; ``secure`` False like every non-OpenDP source)."""

    def _laplace(self, values: FloatArray, scale: float) -> FloatArray:
        return values.copy()

    def _gaussian(self, values: FloatArray, sigma: float) -> FloatArray:
        return values.copy()


def _platform(
    home: Path, accounting: Accounting = Accounting.BASIC, epsilon_g: float = 1.0
) -> Platform:
    p = Platform(home)
    p.add_context("team")
    policy = Budget(epsilon=epsilon_g, delta=1e-6)
    p.create_stream("events", policy=policy, blocking=DAY, accounting=accounting)
    for day, values in ROWS.items():
        stamps = [START + timedelta(days=day, hours=h) for h in range(len(values))]
        p.ingest(
            "events",
            pd.DataFrame({"ts": pd.to_datetime(stamps), "value": values, "kind": "a"}),
        )
    return p


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    p = _platform(tmp_path / "home")
    yield p
    p.close()


def _loss(**overrides: Any) -> LossReduction:
    params: dict[str, Any] = {
        "column": "value",
        "lower": 0.0,
        "upper": 10.0,
        "validation": VALIDATION,
        "epsilon": 0.1,
    }
    params.update(overrides)
    return LossReduction(**params)


def _ledger(p: Platform) -> tuple[object, ...]:
    states = tuple((s.block, s.context, s.charged, s.reserved) for s in p.ledger.states())
    return states, len(p.ledger.events())


def _events(p: Platform, kind: EventKind, task: str) -> list[tuple[list[str], dict[str, str]]]:
    """(blocks, cost) of each ``kind`` event on the reservations of a scoring for ``task``."""
    events = [(e, json.loads(e.payload_json)) for e in p.ledger.events()]
    mine = {
        payload["reservation_id"]
        for e, payload in events
        if e.kind is EventKind.RESERVED
        and (e.request_id or "").startswith(f"ana:significance:{task}:")
    }
    return [
        (sorted(payload["blocks"]), payload["cost"])
        for e, payload in events
        if e.kind is kind and payload.get("reservation_id") in mine
    ]


def test_loss_reduction_is_exact_at_zero_noise(platform: Platform) -> None:
    scores = _loss().score(
        platform, "events", B, context="team", task="t1", holder="ana", noise=ZeroNoise()
    )
    # by hand: 16 − (9 − μ)², clipped to [0, 16]: μ = 2 → 0; μ = 9 → 16; μ = 10 → 15
    assert scores.values == {B[0]: 0.0, B[1]: 16.0, B[2]: 15.0}
    assert scores.secure_noise is False  # a non-secure source says so
    clipped = _loss(clip=10.0).values(
        platform, "events", B, context="team", task="t2", holder="ana", noise=ZeroNoise()
    )
    assert clipped == {B[0]: 0.0, B[1]: 10.0, B[2]: 10.0}
    prior = _loss(prior=9.5).values(  # (9 − 9.5)² − (9 − μ)²: only μ = 9 gains (0.25)
        platform, "events", B, context="team", task="t3", holder="ana", noise=ZeroNoise()
    )
    assert prior == {B[0]: 0.0, B[1]: 0.25, B[2]: 0.0}


def test_loss_reduction_at_huge_epsilon_with_secure_noise(tmp_path: Path) -> None:
    p = _platform(tmp_path / "home", epsilon_g=1e7)
    try:
        scores = _loss(epsilon=1e6).score(p, "events", B, context="team", task="t")
    finally:
        p.close()
    assert scores.secure_noise is True  # OpenDP's sampler by default
    assert not scores.unscored
    assert scores.values[B[0]] == 0.0
    assert scores.values[B[1]] == pytest.approx(16.0, abs=1e-3)
    assert scores.values[B[2]] == pytest.approx(15.0, abs=1e-3)


def test_each_scored_block_is_charged_eps_once_per_scoring(platform: Platform) -> None:
    f = platform.filter("events")
    provider = _loss(epsilon=0.125)
    scores = provider.score(
        platform, "events", B[:2], context="team", task="t1", holder="ana", noise=ZeroNoise()
    )
    assert scores.charged == ((B[0], Budget(epsilon=0.125)), (B[1], Budget(epsilon=0.125)))
    assert len(scores.reservations) == 2
    # one reservation and one charge per block, each on that block alone
    cost = {"epsilon": "0.125", "delta": "0"}
    assert _events(platform, EventKind.RESERVED, "t1") == [([B[0]], cost), ([B[1]], cost)]
    assert _events(platform, EventKind.CHARGED, "t1") == [([B[0]], cost), ([B[1]], cost)]
    for block in B[:2]:
        state = platform.ledger.state(block, "team")
        assert state.charged == f.features(Budget(epsilon=0.125))
        assert state.reserved == f.zero()
    assert platform.ledger.state(B[2], "team").charged == f.zero()  # not scored, not charged
    # a second scoring is a second measurement: charged again, exactly once more
    provider.score(platform, "events", [B[0]], context="team", task="t2", holder="ana")
    assert platform.ledger.state(B[0], "team").charged == f.features(Budget(epsilon=0.25))
    assert platform.verify().ok


def test_blocks_that_cannot_pay_are_unscored_and_uncharged(platform: Platform) -> None:
    with platform.request(
        "events", blocks=[B[1]], budget=Budget(epsilon=0.95), context="team"
    ) as g:
        stats.dp_count(g, g.frame(), epsilon=0.95)
    charged_before = platform.ledger.state(B[1], "team").charged
    scores = _loss().score(platform, "events", B, context="team", task="t", noise=ZeroNoise())
    assert scores.unscored == (B[1],)
    assert set(scores.values) == {B[0], B[2]}
    assert platform.ledger.state(B[1], "team").charged == charged_before


def test_rdp_stream_draws_the_laplace_curve_it_reserved(tmp_path: Path) -> None:
    p = _platform(tmp_path / "rdp", Accounting.RDP)
    try:
        provider = _loss(epsilon=0.1)
        scores = provider.score(p, "events", [B[1]], context="team", task="t", noise=ZeroNoise())
        assert scores.values == {B[1]: 16.0}
        assert scores.charged == ((B[1], provider.block_cost(Accounting.RDP)),)
        f = p.filter("events")
        state = p.ledger.state(B[1], "team")
        assert state.charged == f.features(provider.block_cost(Accounting.RDP))
        assert state.reserved == f.zero()
    finally:
        p.close()


def test_seeded_scoring_is_reproducible_and_says_not_secure(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        p = _platform(tmp_path / name)
        try:
            runs.append(_loss(epsilon=0.5, seed=7).score(p, "events", B, context="team", task="t"))
        finally:
            p.close()
    assert runs[0].values == runs[1].values
    assert runs[0].secure_noise is False and runs[1].secure_noise is False


def test_sensitivities() -> None:
    recency = RecencySignificance(half_life_seconds=60.0)
    assert (recency.sensitivity, recency.assumed, recency.cost_per_block) == (0.0, False, None)
    assert recency.disclosure is Disclosure.PUBLIC
    public = UserSignificance.of({"events/2024-01-01": 1.0})
    assert (public.sensitivity, public.assumed, public.comparison_sensitivity) == (0.0, False, 0.0)
    stated = UserSignificance.of({"a": 1.0}, sensitivity=0.5)
    assert (stated.sensitivity, stated.assumed, stated.comparison_sensitivity) == (0.5, True, 0.5)
    assert stated.ratio_sensitivity(demand_epsilon=0.2, comparison_epsilon=0.05) == 0.5 / 0.25
    loss = _loss()
    assert (loss.sensitivity, loss.assumed) == (16.0, False)  # (v̄ − m0)², v̄ inside the range
    assert _loss(clip=3.0).sensitivity == 3.0
    # v̄ = 12 is out of reach: the best prediction, 10, gains (12 − 5)² − (12 − 10)² = 45
    assert _loss(validation=(12.0,)).sensitivity == 45.0
    assert loss.disclosure is Disclosure.DP_RELEASE and loss.comparison_sensitivity == 0.0
    assert loss.cost_per_block == Budget(epsilon=0.1)


def test_recency_and_user_values(platform: Platform) -> None:
    target = START + timedelta(days=1)
    recency = RecencySignificance(half_life_seconds=86400.0, target=target, scale=2.0)
    before = _ledger(platform)
    assert recency.values(platform, "events", B, context="team", task="t") == {
        B[0]: 1.0,
        B[1]: 2.0,
        B[2]: 1.0,
    }
    user = UserSignificance.of({B[0]: 3.0, "2024-01-02": 4.0}, default=0.5)
    assert user.values(platform, "events", B, context="team", task="t") == {
        B[0]: 3.0,
        B[1]: 4.0,
        B[2]: 0.5,
    }
    assert user.lookup("events", "events/2024-01-02#2") == 4.0  # a key covers its late blocks
    assert _ledger(platform) == before  # free: nothing charged, nothing logged
    with pytest.raises(UnknownBlockError):
        recency.values(platform, "events", ["events/2030-01-01"], context="team", task="t")


@pytest.mark.parametrize(
    "spec",
    [
        {"provider": "recency", "half_life_seconds": 3600.0, "scale": 1.0},
        {
            "provider": "recency",
            "half_life_seconds": 60.0,
            "target": "2024-01-02T00:00:00+00:00",
            "scale": 2.5,
        },
        {"provider": "user", "values": {"events/2024-01-01": 1.5, "k": 0.0}, "default": 0.25},
        {"provider": "user", "values": {"a": 1.0}, "default": 0.0, "sensitivity": 0.5},
        {
            "provider": "loss-reduction",
            "column": "value",
            "lower": 0.0,
            "upper": 10.0,
            "validation": [8.0, 9.0, 10.0],
            "epsilon": 0.1,
        },
        {
            "provider": "loss-reduction",
            "column": "value",
            "lower": -1.0,
            "upper": 1.0,
            "validation": [0.5],
            "epsilon": 0.25,
            "clip": 0.1,
            "prior": -0.5,
            "seed": 3,
        },
    ],
)
def test_json_round_trip(spec: dict[str, Any]) -> None:
    provider = provider_from_json(spec)
    assert provider.to_json() == spec
    again = provider_from_json(json.loads(json.dumps(provider.to_json())))
    assert again == provider
    assert significance_from_json(spec) == provider


def test_registry_and_plain_tables() -> None:
    assert provider_names() == ("loss-reduction", "recency", "user")
    assert significance_from_json(None) is None
    table = significance_from_json({"events/2024-01-01": 2.0})
    assert table == UserSignificance.of({"events/2024-01-01": 2.0})


LOSS = {
    "provider": "loss-reduction",
    "column": "value",
    "lower": 0.0,
    "upper": 10.0,
    "validation": [8.0],
    "epsilon": 0.1,
}


@pytest.mark.parametrize(
    "spec",
    [
        [],
        {"half_life_seconds": 1.0},
        {"provider": "nope"},
        {"provider": "recency"},
        {"provider": "recency", "half_life_seconds": 0},
        {"provider": "recency", "half_life_seconds": True},
        {"provider": "recency", "half_life_seconds": 1.0, "target": "yesterday"},
        {"provider": "recency", "half_life_seconds": 1.0, "extra": 1},
        {"provider": "user", "values": [1.0]},
        {"provider": "user", "values": {"a": -1.0}},
        {"provider": "user", "values": {"a": float("nan")}},
        {"provider": "user", "values": {"a": 1.0}, "sensitivity": 0},
        {**LOSS, "epsilon": 0},
        {**LOSS, "epsilon": "0.1"},
        {**LOSS, "lower": 10.0, "upper": 0.0},
        {**LOSS, "validation": []},
        {**LOSS, "validation": [float("inf")]},
        {**LOSS, "clip": -1.0},
        {**LOSS, "prior": 11.0},
        {**LOSS, "seed": 1.5},
        {**LOSS, "column": ""},
        {**LOSS, "validation": [5.0]},  # v̄ = m0: no block can gain; would pay for nothing
        {k: v for k, v in LOSS.items() if k != "epsilon"},
    ],
)
def test_bad_specs_are_refused(spec: Any) -> None:
    with pytest.raises(InvalidRequestError):
        provider_from_json(spec)
    if isinstance(spec, dict) and "provider" in spec:
        with pytest.raises(InvalidRequestError):
            significance_from_json(spec)


@pytest.mark.parametrize("stored", [[], "recency", 1.0, {"a": "high"}, {"a": -1}])
def test_bad_stored_significance_is_refused(stored: Any) -> None:
    with pytest.raises(InvalidRequestError):
        significance_from_json(stored)


@pytest.mark.parametrize(
    ("provider", "blocks", "context", "error"),
    [
        (_loss(column="missing"), B, "team", InvalidRequestError),
        (_loss(column="kind"), B, "team", InvalidRequestError),  # not numeric
        (_loss(), [B[0], "events/2030-01-01"], "team", UnknownBlockError),
        (_loss(), [B[0], B[0]], "team", InvalidRequestError),
        (_loss(), B, "nobody", UnknownContextError),
    ],
)
def test_bad_requests_charge_nothing(
    platform: Platform,
    provider: LossReduction,
    blocks: list[str],
    context: str,
    error: type[BlockBudgetError],
) -> None:
    before = _ledger(platform)
    with pytest.raises(error):
        provider.score(platform, "events", blocks, context=context, task="t", noise=ZeroNoise())
    assert _ledger(platform) == before


def test_values_match_scores_and_numpy_mean(platform: Platform) -> None:
    """The DP mean at zero noise is the clipped mean of the block's rows."""
    values = _loss(prior=0.0).values(
        platform, "events", [B[0]], context="team", task="t", noise=ZeroNoise()
    )
    mean = float(np.clip(ROWS[0], 0.0, 10.0).mean())
    assert values == {B[0]: 81.0 - (9.0 - mean) ** 2}

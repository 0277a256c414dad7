"""Privacy-adaptive training: the §3.3 budget bound, the confidence schedule, and concurrent
pipelines on a real platform that never overspend a block."""

from __future__ import annotations

import threading
from decimal import Decimal

import numpy as np
import pytest

from blockbudget.accounting import make_filter
from blockbudget.apps.flights.features import Granularity
from blockbudget.apps.flights.pipelines import AverageSpeedPipeline, regression_pipeline
from blockbudget.budget import Budget
from blockbudget.errors import InternalError, InvalidRequestError
from blockbudget.platform import Platform
from blockbudget.training import (
    AdaptiveConfig,
    AdaptiveSearch,
    AdaptiveTrainer,
    Attempt,
    Outcome,
    Status,
)
from blockbudget.training.adaptive import total_over_accepted

from .conftest import CONTEXT, POLICY, STREAM


def drive(search: AdaptiveSearch, outcomes: list[Outcome], allow: list[bool]) -> None:
    """Feed a scripted sequence of outcomes (and allocation answers) to a search."""
    for i, (outcome, ok) in enumerate(zip(outcomes, allow, strict=True)):
        blocks = tuple(f"b{k}" for k in range(search.window))
        attempt = Attempt(
            i + 1, search.epsilon, search.delta, blocks, search.next_eta(), outcome, 0.0
        )
        if search.record(attempt, epsilon_allowed=ok) is not Status.RUNNING:
            return


def test_total_spent_is_below_four_times_the_accepted_iteration() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        k = int(rng.integers(1, 12))
        outcomes = [Outcome.RETRY] * (k - 1) + [Outcome.ACCEPT]
        allow = [bool(b) for b in rng.random(k) < 0.5]
        search = AdaptiveSearch(AdaptiveConfig(epsilon0=0.01, max_epsilon=1.0, max_iterations=50))
        drive(search, outcomes, allow)
        assert search.status is Status.ACCEPTED
        res = search.resources()
        assert sum(res) <= 4 * res[-1]  # §3.3: at most 4× the accepted iteration's budget
        assert sum(res) < 2 * res[-1]  # doubling gives the sharper 2×
        assert total_over_accepted(search) < 2
        if all(len(a.blocks) == 1 for a in search.attempts):  # only ε doubled: per block too
            per_block = search.spent_per_block()
            assert max(per_block.values()) < 2 * search.attempts[-1].epsilon


def test_the_bound_check_fails_on_a_search_that_did_not_double() -> None:
    """check_bound is not vacuous: three RETRYs at the accepted iteration's own ε and window
    (no doubling) use 4× its resources, which it refuses."""
    search = AdaptiveSearch(AdaptiveConfig(epsilon0=0.25))
    eps, delta = search.epsilon, search.delta
    for i, outcome in enumerate([Outcome.RETRY] * 3 + [Outcome.ACCEPT], start=1):
        search.attempts.append(Attempt(i, eps, delta, ("b0",), 0.01, outcome, 0.0))
    with pytest.raises(InternalError, match="privacy-adaptive training used"):
        search.check_bound()
    search.attempts[:] = search.attempts[-1:]  # the accepted run alone is within the bound
    search.check_bound()


def test_retry_doubles_epsilon_when_allowed_else_the_window() -> None:
    search = AdaptiveSearch(AdaptiveConfig(epsilon0=0.25, max_epsilon=1.0, min_window=2))
    drive(search, [Outcome.RETRY] * 3, [True, True, True])
    eps = [a.epsilon for a in search.attempts]
    windows = [len(a.blocks) for a in search.attempts]
    # 0.25 → 0.5 → 1.0 (allowed); then 2.0 would pass max_epsilon: the window doubles
    assert eps == [Decimal("0.25"), Decimal("0.5"), Decimal("1.0")] and windows == [2, 2, 2]
    assert search.epsilon == Decimal("1.0") and search.window == 4
    # confidence schedule: η/(i(i+1)) sums below η
    etas = [a.eta for a in search.attempts]
    assert etas == pytest.approx([0.05 / 2, 0.05 / 6, 0.05 / 12])
    assert sum(0.05 / (i * (i + 1)) for i in range(1, 10_000)) < 0.05


def test_reject_and_timeout_end_the_search() -> None:
    search = AdaptiveSearch(AdaptiveConfig())
    drive(search, [Outcome.RETRY, Outcome.REJECT], [True, True])
    assert search.status is Status.REJECTED
    with pytest.raises(InternalError, match="already"):
        drive(search, [Outcome.RETRY], [True])
    timed = AdaptiveSearch(AdaptiveConfig(max_iterations=3))
    drive(timed, [Outcome.RETRY] * 3, [False] * 3)
    assert timed.status is Status.TIMED_OUT and len(timed.attempts) == 3
    capped = AdaptiveSearch(AdaptiveConfig(max_window=2))
    drive(capped, [Outcome.RETRY] * 3, [False] * 3)
    assert capped.status is Status.TIMED_OUT and capped.window == 2
    with pytest.raises(InvalidRequestError, match="epsilon0"):
        AdaptiveConfig(epsilon0=2.0, max_epsilon=1.0)
    for bad in (True, "3", 1):  # not an int, or below min_window
        with pytest.raises(InvalidRequestError, match="max_window"):
            AdaptiveConfig(min_window=2, max_window=bad)  # type: ignore[arg-type]


def test_a_pipeline_is_accepted_on_the_platform_and_charged_per_block(platform: Platform) -> None:
    trainer = AdaptiveTrainer(
        platform,
        STREAM,
        AverageSpeedPipeline(target=250.0, granularity=Granularity.DAY_OF_WEEK),
        context=CONTEXT,
        config=AdaptiveConfig(epsilon0=0.125, delta=0, min_window=7, max_iterations=10),
        seed=3,
    )
    status = trainer.step()
    assert status is Status.ACCEPTED, [
        (a.epsilon, len(a.blocks), a.outcome) for a in trainer.search.attempts
    ]
    assert trainer.model is trainer.runs[-1].model
    assert total_over_accepted(trainer.search) < 2
    # the ledger holds exactly what the search says it charged, block by block
    charged = {s.block: s.charged for s in platform.ledger.states(stream=STREAM, context=CONTEXT)}
    filt = platform.filter(STREAM)
    for block, eps in trainer.search.spent_per_block().items():
        assert tuple(charged[block]) == filt.features(Budget(epsilon=eps))
    assert platform.verify().ok


def test_a_search_waits_for_blocks_then_resumes(tmp_path: object) -> None:
    from .conftest import flight_days, make_platform

    p = make_platform(tmp_path / "p", 1)  # type: ignore[operator]
    try:
        trainer = AdaptiveTrainer(
            p,
            STREAM,
            regression_pipeline(target=1e-6),
            context=CONTEXT,
            config=AdaptiveConfig(epsilon0=1.0, max_epsilon=1.0, delta=1e-6, max_iterations=3),
            seed=1,
        )
        assert trainer.step() is Status.WAITING  # ε cannot double: it needs 2 blocks
        assert len(trainer.search.attempts) == 1 and trainer.search.window == 2
        p.ingest(STREAM, flight_days(1, first=1)[0])
        assert trainer.step() is Status.WAITING  # block 0 is spent: only block 1 can pay
        assert len(trainer.search.attempts) == 1
        p.ingest(STREAM, flight_days(1, first=2)[0])
        assert trainer.step() is Status.WAITING  # two fresh blocks: one run, RETRY, needs 4
        assert [len(a.blocks) for a in trainer.search.attempts] == [1, 2]
        assert trainer.search.attempts[1].blocks == ("flights/2013-01-02", "flights/2013-01-03")
        with pytest.raises(InvalidRequestError, match="no model"):
            _ = trainer.model
    finally:
        p.close()


def test_concurrent_pipelines_never_overspend(platform: Platform) -> None:
    """Four pipelines with unreachable targets race for the same 8 blocks from threads until
    the budget runs out; every block's charges still fit its filter and the log verifies."""
    pipelines = [
        regression_pipeline(target=1e-9, with_reject=False, name="lr-a"),
        regression_pipeline(target=1e-9, with_reject=False, name="lr-b"),
        AverageSpeedPipeline(target=1e-6, granularity=Granularity.HOUR_OF_DAY, name="speed-h"),
        AverageSpeedPipeline(target=1e-6, granularity=Granularity.WEEK_OF_MONTH, name="speed-w"),
    ]
    trainers = [
        AdaptiveTrainer(
            platform,
            STREAM,
            pipe,
            context=CONTEXT,
            config=AdaptiveConfig(
                epsilon0=0.125, delta=1e-7 if "lr" in pipe.name else 0, max_iterations=12
            ),
            seed=k,
        )
        for k, pipe in enumerate(pipelines)
    ]
    errors: list[BaseException] = []

    def work(t: AdaptiveTrainer) -> None:
        try:
            t.step()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in trainers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert all(t.status in (Status.WAITING, Status.TIMED_OUT) for t in trainers)
    filt = make_filter(platform.stream(STREAM).accounting, capacity=POLICY)
    states = platform.ledger.states(stream=STREAM, context=CONTEXT)
    assert states and all(filt.fits(s.charged) and not any(s.reserved) for s in states)
    # the budget really was contended: some block is nearly exhausted
    assert min(filt.remaining_fraction(s.charged) for s in states) < 0.25
    assert platform.verify().ok


def test_run_iteration_spends_the_grant_it_is_given(platform: Platform) -> None:
    from blockbudget.errors import ReservationError
    from blockbudget.training.adaptive import run_iteration

    blocks = [b.block_id for b in platform.blocks(STREAM)][:7]
    pipeline = AverageSpeedPipeline(target=250.0, granularity=Granularity.DAY_OF_WEEK)
    small = platform.ledger.reserve(blocks, Budget(epsilon="0.25"), context=CONTEXT)
    events = len(platform.ledger.events())
    with platform.grant(small.id) as g, pytest.raises(ReservationError, match="nothing was read"):
        run_iteration(g, pipeline, epsilon=0.5, delta=0, eta=0.025, iteration=1, seed=3)
    assert len(platform.ledger.events()) == events + 1  # the release only: nothing charged
    res = platform.ledger.reserve(blocks, Budget(epsilon="0.5"), context=CONTEXT, holder="p")
    with platform.grant(res.id, holder="p") as g:
        run = run_iteration(g, pipeline, epsilon=0.5, delta=0, eta=0.025, iteration=1, seed=3)
        drawn = g.spent
    assert isinstance(drawn, Budget) and 0 < drawn.epsilon <= Decimal("0.5")
    assert run.validation.outcome in set(Outcome)
    assert len(platform.ledger.reservations()) == 2  # no reservation of its own
    filt = platform.filter(STREAM)
    for s in platform.ledger.states(stream=STREAM, context=CONTEXT, blocks=blocks):
        assert tuple(s.charged) == filt.features(drawn) and not any(s.reserved)
    extra = platform.ledger.reserve(blocks, Budget(epsilon="0.1"), context=CONTEXT)
    with platform.grant(extra.id) as g, pytest.raises(InvalidRequestError, match="iteration"):
        run_iteration(g, pipeline, epsilon=0.1, delta=0, eta=0.025, iteration=0)


def test_the_window_reads_only_the_blocks_it_walks_past(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pandas as pd

    from blockbudget.store import Blocking

    p = Platform(tmp_path / "w", engine="arrow")  # type: ignore[operator]
    try:
        p.add_context(CONTEXT)
        p.create_stream(STREAM, policy=POLICY, blocking=Blocking.by_time("t"))
        days = pd.date_range("2024-01-01", periods=60, freq="D")
        p.ingest(STREAM, pd.DataFrame({"t": days, "v": range(60)}))
        ids = [b.block_id for b in p.blocks(STREAM)]
        p.ledger.charge(ids[2:4], Budget(epsilon=1), context=CONTEXT)  # spent: skipped
        looked: list[str] = []
        real = p.can_afford

        def spy(blocks: list[str], *args: object, **kwargs: object) -> list[bool]:
            looked.extend(blocks)
            return real(blocks, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(p, "can_afford", spy)
        monkeypatch.setattr(p, "blocks", lambda *a, **k: pytest.fail("lists every block"))
        pipeline = AverageSpeedPipeline(target=250.0)
        config = AdaptiveConfig(epsilon0=0.5, delta=0, min_window=4)
        trainer = AdaptiveTrainer(p, STREAM, pipeline, context=CONTEXT, config=config, start=1)
        assert trainer._window(Decimal("0.5")) == (ids[1], ids[4], ids[5], ids[6])
        assert looked == ids[1:17]  # one page of 16 from block 1, not the 60 of the stream
        trainer.search.window = 59
        assert trainer._window(Decimal("0.5")) is None  # 57 live blocks from block 1
    finally:
        p.close()

"""The platform facade: streams, ingest, grants, sealing, retirement and crash expiry."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pg_support import BACKENDS, postgres_database
from userids_support import make_known

from blockbudget import Accounting, Budget, RdpCurve
from blockbudget.errors import (
    BudgetExceededError,
    DataError,
    InvalidBudgetError,
    InvalidRequestError,
    ReservationError,
    RetiredBlockError,
    UnknownBlockError,
    UnknownContextError,
)
from blockbudget.grant import group_cost
from blockbudget.mechanisms import statistics as stats
from blockbudget.platform import Last, Platform
from blockbudget.store import Blocking, LatePolicy, Unit

DAY = Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1))


def _frame(day: int, n: int = 50, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed + day)
    start = pd.Timestamp("2024-01-01") + pd.Timedelta(days=day)
    return pd.DataFrame(
        {
            "ts": start + pd.to_timedelta(rng.integers(0, 86_400, n), unit="s"),
            "value": rng.normal(10.0, 2.0, n),
            "kind": rng.choice(["a", "b", "c"], n),
        }
    )


MakePlatform = Callable[[str], Platform]
CONTEXTS = ("a", "b", "c", "team-a")


@pytest.fixture(params=BACKENDS)
def make_platform(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakePlatform]:
    """Platforms on SQLite (the default) and, when a server is configured, on PostgreSQL —
    the same code, unchanged."""
    with ExitStack() as stack:
        made: list[Platform] = []

        def make(name: str) -> Platform:
            url = None
            if request.param == "postgres":
                url = stack.enter_context(postgres_database())
            p = Platform(tmp_path / name, database_url=url)
            for context in CONTEXTS:
                p.add_context(context)
            made.append(p)
            return p

        yield make
        for p in made:
            p.close()


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    p = make_platform("home")
    p.create_stream("events", policy=Budget(epsilon=1.0, delta=1e-6), blocking=DAY)
    for d in range(5):
        p.ingest("events", _frame(d))
    return p


def _snapshot(p: Platform) -> tuple[object, ...]:
    return tuple(
        (s.block, s.context, s.charged, s.reserved) for s in p.ledger.states(stream="events")
    ), len(p.ledger.events())


def test_ingest_creates_one_funded_block_per_day(platform: Platform) -> None:
    views = platform.blocks("events", contexts=["a"])
    assert [v.key for v in views] == [f"2024-01-0{d + 1}" for d in range(5)]
    assert all(v.rows == 50 for v in views)
    assert all(v.remaining_fraction["a"] == 1.0 for v in views)


def test_grant_charges_what_was_drawn_and_releases_the_rest(platform: Platform) -> None:
    with platform.request(
        "events", blocks=Last(3), budget=Budget(epsilon=0.5), context="team-a"
    ) as grant:
        assert grant.num_rows == 150
        result = stats.dp_count(grant, grant.frame(), epsilon=0.2)
        assert result.cost == Budget(epsilon=0.2)
        assert grant.spent == Budget(epsilon=0.2)
        blocks = grant.blocks
    assert grant.closed
    f = platform.filter("events")
    for block in blocks:
        state = platform.ledger.state(block, "team-a")
        assert state.charged == f.features(Budget(epsilon=0.2))
        assert state.reserved == f.zero()
    # The other two blocks and the other context were not touched.
    untouched = platform.ledger.state("events/2024-01-01", "team-a")
    assert untouched.charged == f.zero()
    assert platform.verify().ok


def test_refusal_names_blocks_and_charges_nothing(platform: Platform) -> None:
    with platform.request(
        "events", blocks=["2024-01-05"], budget=Budget(epsilon=0.9), context="a"
    ) as g:
        stats.dp_count(g, g.frame(), epsilon=0.9)
    before = _snapshot(platform)
    with pytest.raises(BudgetExceededError) as info:
        platform.request(
            "events", blocks=["2024-01-04", "2024-01-05"], budget=Budget(epsilon=0.2), context="a"
        )
    assert info.value.blocks == ("events/2024-01-05",)
    assert "0.1" in str(info.value)  # remaining ε on the refusing block
    assert _snapshot(platform) == before


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"blocks": [], "budget": Budget(epsilon=0.1), "context": "a"}, InvalidRequestError),
        (
            {"blocks": ["2030-01-01"], "budget": Budget(epsilon=0.1), "context": "a"},
            UnknownBlockError,
        ),
        ({"blocks": Last(2), "budget": Budget(epsilon=0.1), "context": ""}, InvalidRequestError),
        ({"blocks": Last(2), "budget": Budget(epsilon=0.1), "context": "a b"}, InvalidRequestError),
        (
            {"blocks": Last(2), "budget": RdpCurve.gaussian(sigma=1.0), "context": "a"},
            InvalidBudgetError,
        ),
    ],
)
def test_bad_requests_change_nothing(
    platform: Platform, kwargs: dict[str, object], error: type[Exception]
) -> None:
    before = _snapshot(platform)
    with pytest.raises(error):
        platform.request("events", **kwargs)  # type: ignore[arg-type]
    assert _snapshot(platform) == before


def test_drawing_past_the_reservation_is_refused(platform: Platform) -> None:
    with platform.request("events", blocks=Last(1), budget=Budget(epsilon=0.1), context="a") as g:
        with pytest.raises(ReservationError):
            stats.dp_count(g, g.frame(), epsilon=0.2)
        stats.dp_count(g, g.frame(), epsilon=0.1)
    with pytest.raises(ReservationError):
        g.draw(Budget(epsilon=0.01), label="after close")
    assert platform.verify().ok


def test_grant_is_released_when_the_pipeline_raises(platform: Platform) -> None:
    with (
        pytest.raises(RuntimeError),
        platform.request("events", blocks=Last(2), budget=Budget(epsilon=0.4), context="a") as g,
    ):
        stats.dp_count(g, g.frame(), epsilon=0.1)
        raise RuntimeError("pipeline crashed")
    f = platform.filter("events")
    for block in g.blocks:
        state = platform.ledger.state(block, "a")
        assert state.reserved == f.zero()
        assert state.charged == f.features(Budget(epsilon=0.1))


def test_reservation_of_a_dead_holder_expires_uncharged(platform: Platform) -> None:
    g = platform.request(
        "events", blocks=Last(2), budget=Budget(epsilon=0.6), context="a", ttl_seconds=60
    )
    stats.dp_count(g, g.frame(), epsilon=0.1)
    # The holder "dies": nobody closes the grant. An hour later the ledger expires it.
    assert platform.ledger.expire_reservations(now=time.time() + 3600) == [g.reservation.id]
    f = platform.filter("events")
    for block in g.blocks:
        state = platform.ledger.state(block, "a")
        assert state.reserved == f.zero()
        assert state.charged == f.features(Budget(epsilon=0.1))
    # The holder comes back late: nothing more can be drawn, and closing is harmless.
    with pytest.raises(ReservationError):
        stats.dp_count(g, g.frame(), epsilon=0.1)
    g.close()
    assert g.closed
    assert platform.verify().ok


def test_contexts_have_separate_budgets(platform: Platform) -> None:
    for context in ("a", "b"):
        with platform.request(
            "events", blocks=["2024-01-01"], budget=Budget(epsilon=1.0), context=context
        ) as g:
            stats.dp_count(g, g.frame(), epsilon=1.0)
    with pytest.raises(BudgetExceededError):
        platform.request("events", blocks=["2024-01-01"], budget=Budget(epsilon=0.01), context="a")


def test_exhausted_blocks_retire_and_new_blocks_keep_serving(platform: Platform) -> None:
    for context in ("a", "b"):
        with platform.request(
            "events",
            blocks=["2024-01-01", "2024-01-02"],
            budget=Budget(epsilon=1.0),
            context=context,
        ) as g:
            stats.dp_count(g, g.frame(), epsilon=1.0)
    retired = platform.retire_exhausted("events", contexts=["a", "b"])
    assert retired == ["events/2024-01-01", "events/2024-01-02"]
    with pytest.raises(RetiredBlockError):
        platform.request("events", blocks=["2024-01-01"], budget=Budget(epsilon=0.1), context="c")
    with platform.request("events", blocks=Last(5), budget=Budget(epsilon=0.1), context="a") as g:
        assert g.blocks == ("events/2024-01-03", "events/2024-01-04", "events/2024-01-05")
    platform.ingest("events", _frame(10))
    with platform.request("events", blocks=Last(1), budget=Budget(epsilon=1.0), context="a") as g:
        assert g.blocks == ("events/2024-01-11",)
    assert platform.verify().ok


def test_late_rows_never_enter_a_charged_block(make_platform: MakePlatform) -> None:
    p = make_platform("h")
    p.create_stream("s", policy=Budget(epsilon=1.0, delta=1e-6), blocking=DAY)
    p.create_stream(
        "strict",
        policy=Budget(epsilon=1.0, delta=1e-6),
        blocking=DAY,
        late_policy=LatePolicy.REJECT,
    )
    for name in ("s", "strict"):
        p.ingest(name, _frame(0))
        with p.request(name, blocks=Last(1), budget=Budget(epsilon=0.1), context="a") as g:
            stats.dp_count(g, g.frame(), epsilon=0.1)
    report = p.ingest("s", _frame(0, n=7, seed=99))
    assert report.new_blocks == ("s/2024-01-01#2",) or list(report.new_blocks) == ["s/2024-01-01#2"]
    assert [v.rows for v in p.blocks("s")] == [50, 7]
    with pytest.raises(DataError):
        p.ingest("strict", _frame(0, n=7, seed=99))
    assert [v.rows for v in p.blocks("strict")] == [50]


def test_rdp_stream_charges_gaussian_curves(make_platform: MakePlatform) -> None:
    p = make_platform("h")
    p.create_stream(
        "r", policy=Budget(epsilon=1.0, delta=1e-6), blocking=DAY, accounting=Accounting.RDP
    )
    p.ingest("r", _frame(0))
    reserve = RdpCurve.gaussian(sigma=10.0)
    with p.request("r", blocks=Last(1), budget=reserve, context="a") as g:
        g.draw(RdpCurve.gaussian(sigma=20.0), label="gaussian")
    f = p.filter("r")
    assert p.ledger.state("r/2024-01-01", "a").charged == f.features(RdpCurve.gaussian(sigma=20.0))
    with pytest.raises(InvalidBudgetError):
        p.request("r", blocks=Last(1), budget=Budget(epsilon=0.1, delta=1e-7), context="a")
    assert p.verify().ok


def test_unregistered_contexts_cannot_mint_budget(platform: Platform) -> None:
    before = _snapshot(platform)
    with pytest.raises(UnknownContextError, match="add_context"):
        platform.request("events", blocks=Last(1), budget=Budget(epsilon=0.1), context="fresh")
    assert _snapshot(platform) == before
    platform.add_context("fresh", description="a new team")
    assert "fresh" in platform.contexts()
    with platform.request("events", blocks=Last(1), budget=Budget(epsilon=0.1), context="fresh"):
        pass


def test_concurrent_draws_on_one_grant_are_each_charged(platform: Platform) -> None:
    """Four threads each draw 0.25 from a 0.5 reservation: exactly two answers come out, and
    exactly two are charged (a shared draw id once let all four out for one charge)."""
    answers: list[float] = []
    refusals: list[Exception] = []
    with platform.request(
        "events", blocks=["2024-01-01"], budget=Budget(epsilon=0.5), context="a"
    ) as g:
        frame = g.frame()

        def work() -> None:
            try:
                answers.append(stats.dp_count(g, frame, epsilon=0.25).value)
            except ReservationError as exc:
                refusals.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(answers) == 2 and len(refusals) == 2
    f = platform.filter("events")
    assert platform.ledger.state("events/2024-01-01", "a").charged == f.features(
        Budget(epsilon=0.5)
    )


def test_a_replayed_request_id_never_hands_out_data_twice(platform: Platform) -> None:
    with platform.request(
        "events", blocks=Last(1), budget=Budget(epsilon=0.5), context="a", request_id="nightly"
    ) as g:
        stats.dp_count(g, g.frame(), epsilon=0.5)
    for _ in range(3):
        with pytest.raises(ReservationError, match="used before"):
            platform.request(
                "events",
                blocks=Last(1),
                budget=Budget(epsilon=0.5),
                context="a",
                request_id="nightly",
            )
    f = platform.filter("events")
    assert platform.ledger.state(g.blocks[0], "a").charged == f.features(Budget(epsilon=0.5))


def test_misspelled_column_reserves_and_seals_nothing(platform: Platform) -> None:
    before = _snapshot(platform)
    with pytest.raises(InvalidRequestError, match="no column"):
        platform.request(
            "events", blocks=Last(1), budget=Budget(epsilon=0.1), context="a", columns=["valu"]
        )
    assert _snapshot(platform) == before
    assert not platform.store.block("events/2024-01-05").sealed


def test_a_running_grant_keeps_its_blocks_from_retiring(platform: Platform) -> None:
    with platform.request(
        "events", blocks=["2024-01-01"], budget=Budget(epsilon=1.0), context="a"
    ) as g:
        assert platform.retire_exhausted("events", contexts=["a"]) == []
        stats.dp_count(g, g.frame(), epsilon=0.5)
    assert platform.retire_exhausted("events", contexts=["a"]) == []
    with platform.request(
        "events", blocks=["2024-01-01"], budget=Budget(epsilon=0.5), context="a"
    ) as g:
        stats.dp_count(g, g.frame(), epsilon=0.5)
    assert platform.retire_exhausted("events", contexts=["a"]) == ["events/2024-01-01"]


def test_a_key_selects_its_late_blocks_too(platform: Platform) -> None:
    with platform.request("events", blocks=["2024-01-01"], budget=Budget(epsilon=0.1), context="a"):
        pass
    platform.ingest("events", _frame(0, n=5, seed=7))  # late rows: block 2024-01-01#2
    with platform.request(
        "events", blocks=["2024-01-01"], budget=Budget(epsilon=0.1), context="a"
    ) as g:
        assert g.blocks == ("events/2024-01-01", "events/2024-01-01#2")
        assert g.num_rows == 55


def test_user_level_streams_bound_contributions_and_charge_the_group(
    make_platform: MakePlatform,
) -> None:
    p = make_platform("users")
    p.create_stream(
        "visits",
        policy=Budget(epsilon=1.0, delta=1e-6),
        blocking=Blocking.by_user("uid", ids_per_block=100, rows_per_user=2),
        late_policy=LatePolicy.DROP,
    )
    uids = [7] * 200 + list(range(10, 60))
    p.ingest("visits", pd.DataFrame({"uid": uids, "v": np.arange(len(uids), dtype=float)}))
    make_known(p, "visits")  # a user stream is gated until its maximum id is released
    with p.request("visits", blocks=Last(1), budget=Budget(epsilon=0.5), context="a") as g:
        frame = g.frame()
        assert (frame["uid"] == 7).sum() == 2  # user 7 contributes at most k = 2 rows
        assert len(frame) == 2 + 50
        assert frame.loc[frame["uid"] == 7, "v"].tolist() == [0.0, 1.0]  # the first ones
        result = stats.dp_count(g, frame, epsilon=0.1)
        assert result.cost == Budget(epsilon=0.1)  # the mechanism's row-level ε …
        assert g.spent == Budget(epsilon=0.2)  # … charged for a group of 2 rows
    f = p.filter("visits")
    assert p.ledger.state("visits/u000000-000099", "a").charged == f.features(Budget(epsilon=0.2))


def test_group_cost_follows_group_privacy() -> None:
    b = "basic"
    assert group_cost(Budget(epsilon=0.1, delta=1e-8), 1, accounting=b) == Budget(
        epsilon=0.1, delta=1e-8
    )
    cost = group_cost(Budget(epsilon=0.1, delta=1e-8), 3, accounting=b)
    assert isinstance(cost, Budget)
    assert cost.epsilon == Budget(epsilon=0.3).epsilon
    assert float(cost.delta) >= 3 * math.exp(0.2) * 1e-8
    with pytest.raises(InvalidBudgetError):
        group_cost(RdpCurve.gaussian(sigma=1.0), 2, accounting="rdp")


def test_a_failed_replay_leaves_the_original_grant_working(
    make_platform: MakePlatform, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = make_platform("replay")
    p.create_stream("s", policy=Budget(epsilon=1.0, delta=1e-6), blocking=DAY)
    p.ingest("s", _frame(0))
    g = p.request("s", blocks=Last(1), budget=Budget(epsilon=0.5), context="a", request_id="R")

    def broken_source(*args: object, **kwargs: object) -> None:
        raise OSError("storage went away")

    monkeypatch.setattr(p.store, "source", broken_source)
    with pytest.raises(OSError):
        p.request("s", blocks=Last(1), budget=Budget(epsilon=0.5), context="a", request_id="R")
    monkeypatch.undo()
    # The replay failed after the ledger handed back the shared reservation; it must not have
    # released it under the original holder, who still draws.
    stats.dp_count(g, g.frame(), epsilon=0.2)
    g.close()
    assert p.verify().ok


def test_a_replay_racing_its_original_never_releases_it(
    make_platform: MakePlatform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls with one request id at once: the second looks for the id before the first
    committed, then gets the first's reservation back from the ledger. When listing its part
    files then fails, it must not release that reservation: the first still draws on it."""
    p = make_platform("race")
    p.create_stream("s", policy=Budget(epsilon=1.0, delta=1e-6), blocking=DAY)
    p.ingest("s", _frame(0))
    real_reserve = p.ledger.reserve
    grants: list[Any] = []

    def broken_source(*args: object, **kwargs: object) -> None:
        raise OSError("storage went away")

    def original_commits_first(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(p.ledger, "reserve", real_reserve)
        grants.append(
            p.request("s", blocks=Last(1), budget=Budget(epsilon=0.5), context="a", request_id="R")
        )
        monkeypatch.setattr(p.store, "source", broken_source)
        return real_reserve(*args, **kwargs)

    monkeypatch.setattr(p.ledger, "reserve", original_commits_first)
    with pytest.raises(OSError):
        p.request("s", blocks=Last(1), budget=Budget(epsilon=0.5), context="a", request_id="R")
    monkeypatch.undo()
    (g,) = grants
    stats.dp_count(g, g.frame(), epsilon=0.2)
    g.close()
    assert p.verify().ok


def test_user_streams_serve_a_column_subset_without_the_user_column(
    make_platform: MakePlatform,
) -> None:
    p = make_platform("subset")
    p.create_stream(
        "visits",
        policy=Budget(epsilon=1.0, delta=1e-6),
        blocking=Blocking.by_user("uid", ids_per_block=100, rows_per_user=1),
        late_policy=LatePolicy.DROP,
    )
    p.ingest("visits", pd.DataFrame({"uid": [1, 1, 1, 2], "v": [1.0, 2.0, 3.0, 4.0]}))
    make_known(p, "visits")
    with p.request(
        "visits", blocks=Last(1), budget=Budget(epsilon=0.1), context="a", columns=["v"]
    ) as g:
        assert g.data.column_names == ["v"]
        assert sorted(g.frame()["v"]) == [1.0, 4.0]  # one row per user, the first


def test_retire_keeps_a_block_while_any_grant_holds_budget_on_it(platform: Platform) -> None:
    with platform.request(
        "events", blocks=["2024-01-02"], budget=Budget(epsilon="0.9995"), context="a"
    ) as g:
        stats.dp_count(g, g.frame(), epsilon="0.9995")
    # 0.0005 left < the default minimum 0.001, but a grant holds it: the block stays.
    g = platform.request(
        "events", blocks=["2024-01-02"], budget=Budget(epsilon="0.0005"), context="a"
    )
    assert "events/2024-01-02" not in platform.retire_exhausted("events", contexts=["a"])
    stats.dp_count(g, g.frame(), epsilon="0.0005")
    g.close()
    assert platform.retire_exhausted("events", contexts=["a"]) == ["events/2024-01-02"]


def test_group_cost_edges() -> None:
    big = group_cost(Budget(epsilon=10), 100, accounting="basic")  # pure DP: no e^{(k-1)ε} overflow
    assert big == Budget(epsilon=1000)
    with pytest.raises(InvalidBudgetError, match="δ ≥ 1"):
        group_cost(Budget(epsilon=10, delta=1e-6), 100, accounting="basic")
    with pytest.raises(InvalidBudgetError):
        group_cost(Budget(epsilon=0.1), 0, accounting="basic")
    exact = group_cost(Budget(epsilon="0.5000000000000000000000000001"), 3, accounting="basic")
    assert isinstance(exact, Budget)
    assert exact.epsilon == Budget(epsilon="1.5000000000000000000000000003").epsilon

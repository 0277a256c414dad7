"""The DP maximum user id of a user stream (Sage §4.4) and the blocks it makes known."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from blockbudget import Budget
from blockbudget.errors import InvalidRequestError, UnknownBlockError, UnreleasedIdsError
from blockbudget.ledger import EventKind
from blockbudget.mechanisms.noise import NoiseSource, SeededNoise
from blockbudget.platform import Last, Platform
from blockbudget.store import Blocking, LatePolicy
from blockbudget.userids import known_bound, latest_release, release_max_id, visible_blocks

HUGE = 1e9  # ε of an (almost) exact count: the margin ln(1/(2β))/ε is ~2e-9


class ShiftNoise(NoiseSource):
    """Adds a fixed shift instead of noise (tests only; ``secure`` stays False), and records
    how many charges the ledger held when it was asked for noise."""

    def __init__(self, shift: float, platform: Platform) -> None:
        self.shift = shift
        self.platform = platform
        self.charges_seen: list[int] = []

    def _laplace(self, values: np.ndarray, scale: float) -> np.ndarray:  # type: ignore[type-arg]
        self.charges_seen.append(len(_charges(self.platform)))
        return values + self.shift

    def _gaussian(self, values: np.ndarray, sigma: float) -> np.ndarray:  # type: ignore[type-arg]
        raise AssertionError("not used")


def _charges(p: Platform) -> list[dict[str, object]]:
    return [e.payload for e in p.ledger.events() if e.kind is EventKind.CHARGED]


@pytest.fixture
def platform(tmp_path: Path) -> Platform:
    p = Platform(tmp_path, engine="arrow")
    p.create_stream(
        "u",
        policy=Budget(epsilon=1e12),
        blocking=Blocking.by_user("uid", 10),
        late_policy=LatePolicy.DROP,
    )
    p.add_context("c")
    # users 0..24, user 3 with two rows: 26 rows, 25 distinct ids, blocks 0-9, 10-19, 20-29
    uids = [*range(25), 3]
    p.ingest("u", pd.DataFrame({"uid": uids, "v": [1.0] * len(uids)}))
    yield p
    p.close()


def test_exact_at_huge_epsilon_and_charged_once_before_noise(platform: Platform) -> None:
    noise = ShiftNoise(0.0, platform)
    r = release_max_id(platform, "u", context="c", epsilon=HUGE, beta=0.05, noise=noise)
    assert r.floor == 0 and r.released_max == 24.0  # 0 + 25 distinct ids − 1
    assert r.safe_max == 23  # ⌊24 − ln(10)/1e9⌋
    assert r.secure_noise is False
    charges = _charges(platform)
    assert noise.charges_seen == [1]  # the charge was durable when the noise was drawn
    assert len(charges) == 1
    assert json.dumps(charges[0]).count("u/u0000") == 3  # the three blocks it read
    # Reused, not re-paid: reading it and selecting with it charge nothing.
    assert latest_release(platform, "u") == r and known_bound(platform, "u") == 23
    platform.select("u", Last(3), context="c", cost=Budget(epsilon=1))
    assert len(_charges(platform)) == 1


def test_a_later_release_reads_only_blocks_from_the_floor(platform: Platform) -> None:
    release_max_id(platform, "u", context="c", epsilon=HUGE, noise=ShiftNoise(0.0, platform))
    r = release_max_id(platform, "u", context="c", epsilon=HUGE, noise=ShiftNoise(0.0, platform))
    assert r.floor == 20  # the block holding safe_max + 1 = 24
    assert r.released_max == 24.0  # 20 + 5 distinct ids (20..24) − 1
    second = _charges(platform)[1]
    text = json.dumps(second)
    assert "u/u000020-000029" in text and "u/u000000-000009" not in text


def test_selection_hides_blocks_above_the_released_maximum(platform: Platform) -> None:
    cost = Budget(epsilon=1)
    # a noisy count 7 below the truth: released 17, safe 16 → only ids 0..9 are known
    r = release_max_id(platform, "u", context="c", epsilon=HUGE, noise=ShiftNoise(-7.0, platform))
    assert r.released_max == 17.0 and r.safe_max == 16
    assert platform.select("u", Last(3), context="c", cost=cost) == ("u/u000000-000009",)
    assert platform.select("u", ["u/u000000-000009"], context="c", cost=cost)
    for name in ("u/u000010-000019", "u000020-000029"):
        with pytest.raises(UnknownBlockError):
            platform.select("u", [name], context="c", cost=cost)
    with pytest.raises(UnknownBlockError):
        platform.request("u", blocks=["u/u000010-000019"], budget=cost, context="c")
    # a later release that comes out lower never hides a block already offered
    r2 = release_max_id(platform, "u", context="c", epsilon=HUGE, noise=ShiftNoise(-9, platform))
    assert r2.floor == 10 and r2.safe_max == 16


def test_seeded_release_says_insecure_and_default_is_secure(platform: Platform) -> None:
    r = release_max_id(platform, "u", context="c", epsilon=1.0, noise=SeededNoise(7))
    assert r.secure_noise is False and latest_release(platform, "u") == r
    r2 = release_max_id(platform, "u", context="c", epsilon=HUGE)
    assert r2.secure_noise is True


def test_refusals_charge_nothing(platform: Platform, tmp_path: Path) -> None:
    platform.create_stream(
        "t", policy=Budget(epsilon=1), blocking=Blocking.by_time("ts", timedelta(days=1))
    )
    with pytest.raises(InvalidRequestError, match="blocked by user id"):
        release_max_id(platform, "t", context="c", epsilon=1.0)
    with pytest.raises(Exception, match="beta"):
        release_max_id(platform, "u", context="c", epsilon=1.0, beta=0.5)
    with pytest.raises(Exception, match="budget exceeded"):
        release_max_id(platform, "u", context="c", epsilon=1e13)
    assert _charges(platform) == [] and latest_release(platform, "u") is None


def test_cli_releases_a_maximum_id(platform: Platform) -> None:
    from typer.testing import CliRunner

    from blockbudget.cli import app

    home = str(platform.home)
    platform.close()
    args = ["stream", "max-id", "u", "--epsilon", "1e9", "--context", "c", "--home", home]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # rich wraps lines
    assert "released maximum id 24.0" in text and "secure noise: True" in text
    again = Platform(home, engine="arrow")
    try:
        release = latest_release(again, "u")
        assert release is not None and release.secure_noise and round(release.released_max) == 24
    finally:
        again.close()


def test_task_selectors_bind_only_known_blocks(platform: Platform) -> None:
    from blockbudget.tasks.queue import TaskQueue
    from blockbudget.tasks.selectors import AnyBlocks, Newest

    release_max_id(platform, "u", context="c", epsilon=HUGE, noise=ShiftNoise(-7.0, platform))
    known = ("u/u000000-000009",)  # safe_max 16: ids 10..29 are not known
    eps = Budget(epsilon=0.1)
    q = TaskQueue(platform, scheduler="dpf-n:n=1", noise=SeededNoise(1), clock=lambda: 0.0)
    try:
        assert q.submit_budget("u", eps, selector=AnyBlocks(2), context="c").blocks == known
        assert q.submit_budget("u", eps, selector=Newest(2), context="c").blocks == known
    finally:
        q.close()
    q = TaskQueue(platform, scheduler="fcfs", noise=SeededNoise(1), clock=lambda: 0.0)
    try:
        t = q.submit_budget("u", eps, selector=AnyBlocks(3, min_k=1), context="c")
        q.pump()
        assert q.task(t.id).blocks == known
    finally:
        q.close()


def test_the_release_leaves_the_last_range_open_for_new_users(platform: Platform) -> None:
    release_max_id(platform, "u", context="c", epsilon=HUGE, noise=ShiftNoise(0.0, platform))
    assert not platform.store.block("u/u000020-000029").sealed
    report = platform.ingest("u", pd.DataFrame({"uid": list(range(25, 30)), "v": [2.0] * 5}))
    assert report.dropped_rows == 0
    r = release_max_id(platform, "u", context="c", epsilon=HUGE, noise=ShiftNoise(0.0, platform))
    assert r.floor == 20 and r.released_max == 29.0 and r.safe_max == 28
    # the reservations are closed: nothing stays held
    assert all(not any(s.reserved) for s in platform.ledger.states(stream="u"))


def test_a_fresh_user_stream_has_no_block_to_select_for_anyone(platform: Platform) -> None:
    from blockbudget.tasks.queue import TaskQueue
    from blockbudget.tasks.selectors import AnyBlocks, Named, Newest

    cost = Budget(epsilon=1)
    assert (
        known_bound(platform, "u") == -1
        and visible_blocks(platform, "u", ["u/u000000-000009"]) == []
    )
    tries: list[Callable[[], object]] = [
        lambda: platform.select("u", Last(1), context="c", cost=cost),
        lambda: platform.select("u", ["u000000-000009"], context="c", cost=cost),
        lambda: platform.select("u", ["u/u000000-000009"], context="c", cost=cost),
        lambda: platform.select("u", ["u/u999000-999999"], context="c", cost=cost),  # no such
        lambda: platform.request("u", blocks=Last(1), budget=cost, context="c"),
    ]
    q = TaskQueue(platform, scheduler="fcfs", noise=SeededNoise(1), clock=lambda: 0.0)
    try:
        for selector in (Newest(1), AnyBlocks(1), Named(("u/u000000-000009",))):
            tries.append(lambda s=selector: q.submit_budget("u", cost, selector=s, context="c"))
        for attempt in tries:
            with pytest.raises(UnreleasedIdsError) as caught:
                attempt()
            text = str(caught.value)
            assert "no DP maximum-id release" in text and "blockbudget stream max-id u " in text
        assert q.tasks() == []
    finally:
        q.close()
    assert _charges(platform) == [] and all(
        not any(s.reserved) for s in platform.ledger.states(stream="u")
    )
    # Released: exactly the blocks at or below the bound (noise 0: safe_max 23, ids 0..19).
    release_max_id(platform, "u", context="c", epsilon=HUGE, noise=ShiftNoise(0.0, platform))
    known = ("u/u000000-000009", "u/u000010-000019")
    assert platform.select("u", Last(3), context="c", cost=cost) == known
    assert platform.select("u", ["u000010-000019"], context="c", cost=cost) == known[1:]


def test_time_streams_are_not_gated(platform: Platform) -> None:
    platform.create_stream(
        "t", policy=Budget(epsilon=1), blocking=Blocking.by_time("ts", timedelta(days=1))
    )
    day = pd.Timestamp("2024-01-01", tz="UTC")
    platform.ingest("t", pd.DataFrame({"ts": [day, day + pd.Timedelta(days=1)], "v": [1.0, 2.0]}))
    assert known_bound(platform, "t") is None
    assert len(platform.select("t", Last(2), context="c", cost=Budget(epsilon=0.1))) == 2


def test_a_waiting_task_explains_itself_with_known_blocks_only(platform: Platform) -> None:
    from blockbudget.tasks.queue import TaskQueue
    from blockbudget.tasks.selectors import AnyBlocks

    release_max_id(platform, "u", context="c", epsilon=HUGE, noise=ShiftNoise(-7.0, platform))
    q = TaskQueue(platform, scheduler="fcfs", noise=SeededNoise(1), clock=lambda: 0.0)
    try:
        t = q.submit_budget("u", Budget(epsilon=0.1), selector=AnyBlocks(3, min_k=3), context="c")
        q.pump()
        why = q.why(t.id)
        assert why.affordable == 1 and "1 of the 1 block(s)" in why.reason, why
        assert all(row.block == "u/u000000-000009" for row in why.shortfall)
    finally:
        q.close()


def test_the_cli_names_the_release_command_and_works_after_it(platform: Platform) -> None:
    from typer.testing import CliRunner

    from blockbudget.cli import app

    home = str(platform.home)
    platform.close()
    runner = CliRunner()
    query = ["query", "count", "u", "--epsilon", "0.1", "--context", "c", "--last", "1"]
    r = runner.invoke(app, [*query, "--home", home])
    text = " ".join(r.output.split())  # rich wraps lines
    assert r.exit_code == 2 and "UnreleasedIdsError" in text, r.output
    assert "blockbudget stream max-id u --context CONTEXT --epsilon EPSILON" in text
    release = ["stream", "max-id", "u", "--epsilon", "1e9", "--context", "c", "--home", home]
    assert runner.invoke(app, release).exit_code == 0
    r = runner.invoke(app, [*query, "--home", home, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["blocks"] == ["u/u000010-000019"]  # the newest known block

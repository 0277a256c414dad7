"""Selecting blocks costs what the chosen blocks cost: ``Last(n)`` walks the stream from its
newest block in pages, named blocks are looked up by id or key; the answers are those of a scan
of the whole stream."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError, UnknownBlockError
from blockbudget.platform import Last, Platform
from blockbudget.store import Blocking, LatePolicy, OnOverlap, Unit

DAY = timedelta(days=1)
START = datetime(2024, 1, 1, 12, tzinfo=UTC)


def _days(n: int, first: int = 0) -> pa.Table:
    ts = [START + (first + i) * DAY for i in range(n)]
    return pa.table({"t": pa.array(ts, pa.timestamp("us", "UTC")), "x": list(range(n))})


@pytest.fixture
def platform(tmp_path: Path) -> Platform:
    p = Platform(tmp_path / "home")
    p.add_context("a")
    p.add_context("b")
    p.create_stream(
        "d",
        policy=Budget(epsilon=1),
        blocking=Blocking(unit=Unit.TIME, column="t", window=DAY),
        late_policy=LatePolicy.NEW_BLOCK,
    )
    p.ingest("d", _days(60))
    return p


def _ids(p: Platform) -> list[str]:
    return [m.block_id for m in p.store.blocks("d")]


def _scan(p: Platform, n: int, *, context: str, cost: Budget, affordable: bool) -> list[str]:
    """The definition: the newest n live (and affordable) blocks, by a scan of the stream."""
    ids = [b for b in _ids(p) if not p.ledger.state(b, context).retired]
    if affordable:
        ids = [b for b, ok in zip(ids, p.can_afford(ids, cost, context=context), strict=True) if ok]
    return ids[-n:]


def test_last_walks_past_many_pages_of_spent_blocks(platform: Platform) -> None:
    ids = _ids(platform)
    platform.ledger.charge(ids[5:], Budget(epsilon="0.95"), context="a")  # 55 newest spent in a
    cost = Budget(epsilon="0.1")
    got = platform.select("d", Last(3), context="a", cost=cost)
    assert list(got) == ids[2:5] == _scan(platform, 3, context="a", cost=cost, affordable=True)
    assert list(platform.select("d", Last(3), context="b", cost=cost)) == ids[-3:]
    spent = platform.select("d", Last(2, affordable=False), context="a", cost=cost)
    assert list(spent) == ids[-2:]
    with pytest.raises(InvalidRequestError, match="can afford"):
        platform.select("d", Last(1), context="a", cost=Budget(epsilon=2))


def test_last_skips_retired_blocks_even_when_not_asked_to_afford(platform: Platform) -> None:
    ids = _ids(platform)
    platform.ledger.retire(ids[-4:-1])
    cost = Budget(epsilon="0.1")
    for affordable in (True, False):
        got = platform.select("d", Last(3, affordable=affordable), context="a", cost=cost)
        assert list(got) == [ids[-6], ids[-5], ids[-1]]
        assert list(got) == _scan(platform, 3, context="a", cost=cost, affordable=affordable)


def test_named_blocks_by_id_and_by_key_with_late_blocks(platform: Platform) -> None:
    ids = _ids(platform)
    platform.store.seal(ids[:1])
    platform.ingest(
        "d", _days(1), on_overlap=OnOverlap.APPEND
    )  # a late row for the sealed first day: block #2 of its key
    first_key = platform.store.block(ids[0]).key
    late = [m.block_id for m in platform.store.blocks("d") if m.key == first_key]
    assert len(late) == 2 and late[0] == ids[0]
    got = platform.select("d", [ids[7], first_key], context="a", cost=Budget(epsilon=0.1))
    assert list(got) == [ids[7], *late]
    with pytest.raises(UnknownBlockError, match="has no block 'nope'"):
        platform.select("d", [ids[7], "nope"], context="a", cost=Budget(epsilon=0.1))
    platform.create_stream(
        "other", policy=Budget(epsilon=1), blocking=Blocking(unit=Unit.TIME, column="t", window=DAY)
    )
    with pytest.raises(UnknownBlockError):  # another stream's block is not this stream's
        platform.select("other", [ids[0]], context="a", cost=Budget(epsilon=0.1))


def test_blocks_last_lists_the_newest_blocks_only(platform: Platform) -> None:
    ids = _ids(platform)
    platform.ledger.charge(ids[-2:], Budget(epsilon="0.25"), context="a")
    views = platform.blocks("d", contexts=["a"], last=3)
    assert [v.block_id for v in views] == ids[-3:]
    assert [v.remaining_fraction["a"] for v in views] == [1.0, 0.75, 0.75]
    assert views == platform.blocks("d", contexts=["a"])[-3:]

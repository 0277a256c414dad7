"""The budget methods the service and the CLI use instead of ``platform.ledger``/``.store``:
reservations spent and released, direct charges, the audit log, block listings, the
user-stream gate and the group-commit counters — exact at every step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from userids_support import ShiftNoise

from blockbudget import Budget
from blockbudget.errors import (
    BudgetExceededError,
    ReservationError,
    UnknownBlockError,
    UnreleasedIdsError,
)
from blockbudget.ledger import ReservationState
from blockbudget.ledger.types import Vector
from blockbudget.platform import Last, Platform
from blockbudget.store import Blocking, LatePolicy
from blockbudget.userids import release_max_id

DAY1, DAY2 = "events/2024-01-01", "events/2024-01-02"


@pytest.fixture
def p(tmp_path: Path) -> Iterator[Platform]:
    """A time stream ``events`` at ε_g = 1 with two daily blocks; context ``a``."""
    platform = Platform(tmp_path / "h", engine="arrow")
    platform.add_context("a")
    platform.create_stream("events", policy=Budget(epsilon=1), blocking=Blocking.by_time("ts"))
    ts = pd.to_datetime(["2024-01-01 06:00", "2024-01-02 06:00"])
    platform.ingest("events", pd.DataFrame({"ts": ts, "v": [1.0, 2.0]}))
    yield platform
    platform.close()


def used(p: Platform, block: str) -> tuple[Vector, Vector]:
    """(charged, reserved) of ``block`` in context ``a``, as ledger features."""
    state = p.ledger.state(block, "a")
    return state.charged, state.reserved


def eps(p: Platform, value: str) -> Vector:
    """The ledger features of an ε-only budget on ``events``."""
    return p.filter("events").features(Budget(epsilon=value))


def test_reserve_charge_release(p: Platform) -> None:
    res = p.reserve("events", Last(1), Budget(epsilon="0.5"), context="a", holder="ann")
    assert res.blocks == (DAY2,) and res.holder == "ann"
    assert p.reservation(res.id) == res and p.reservations(context="a") == [res]
    assert p.open_reservation(res.id, holder="ann").id == res.id
    assert p.reservation_stream(res) == "events"
    receipt = p.charge_reservation(res, Budget(epsilon="0.2"), request_id="c1")
    assert receipt.blocks == (DAY2,) and receipt.reservation_id == res.id
    assert used(p, DAY2) == (eps(p, "0.2"), eps(p, "0.3"))
    closed = p.release(res.id, request_id=f"{res.id}/release")
    assert closed.state is ReservationState.CLOSED
    assert used(p, DAY2) == (eps(p, "0.2"), eps(p, "0"))
    with pytest.raises(ReservationError, match="closed"):  # refused before the ledger
        p.charge_reservation(closed, Budget(epsilon="0.1"))
    assert used(p, DAY2) == (eps(p, "0.2"), eps(p, "0"))


def test_direct_charges_and_the_audit_log(p: Platform) -> None:
    tip = p.audit_seq()
    receipt = p.charge([DAY1, DAY2], Budget(epsilon="0.25"), context="a", request_id="d1")
    assert receipt.seq == p.audit_seq() == tip + 1
    assert [e.seq for e in p.events(after_seq=tip)] == [tip + 1]
    assert len(p.events(limit=2)) == 2
    assert used(p, DAY1) == used(p, DAY2) == (eps(p, "0.25"), eps(p, "0"))
    with pytest.raises(BudgetExceededError):  # 0.25 + 0.8 > 1: nothing charged anywhere
        p.charge([DAY1, DAY2], Budget(epsilon="0.8"), context="a")
    assert used(p, DAY1) == (eps(p, "0.25"), eps(p, "0"))
    assert p.verify(full=True).ok


def test_block_listings_agree(p: Platform) -> None:
    ids = [m.block_id for m in p.block_metas("events")]
    assert ids == [DAY1, DAY2]
    assert [b.block_id for b in p.registered_blocks("events")] == ids
    seq = p.audit_seq()
    p.ingest("events", pd.DataFrame({"ts": pd.to_datetime(["2024-01-03 06:00"]), "v": [3.0]}))
    added, now = p.added_blocks(seq)
    assert added == [("events/2024-01-03", "events")] and now == p.audit_seq()
    assert p.contexts() == ["a"] and [c.name for c in p.context_infos()] == ["a"]
    assert p.close_context("a").closed is not None
    assert p.contexts() == [] and p.contexts(include_closed=True) == ["a"]


def test_the_user_stream_gate(p: Platform) -> None:
    assert p.require_selectable("events", [DAY1]) is False  # not a user stream: never gated
    p.create_stream(
        "u",
        policy=Budget(epsilon=1e12),
        blocking=Blocking.by_user("uid", 10),
        late_policy=LatePolicy.DROP,
    )
    p.ingest("u", pd.DataFrame({"uid": list(range(15)), "v": [1.0] * 15}))
    first, second = "u/u000000-000009", "u/u000010-000019"
    with pytest.raises(UnreleasedIdsError):
        p.require_selectable("u", [first])
    # 15 distinct ids, the count shifted by −3: released maximum 11, safe maximum 10
    r = release_max_id(p, "u", context="a", epsilon=1e9, noise=ShiftNoise(-3.0))
    assert (r.released_max, r.safe_max) == (11.0, 10)
    assert p.require_selectable("u", [first]) is True
    with pytest.raises(UnknownBlockError, match="u000010-000019"):  # ids 10..19 exceed 10
        p.require_selectable("u", [first, second])


def test_group_commit_stats(tmp_path: Path, p: Platform) -> None:
    assert p.group_commit_stats() is None
    q = Platform(tmp_path / "g", engine="arrow", group_commit=True)
    try:
        q.add_context("a")
        before = q.group_commit_stats()
        assert before is not None
        q.create_stream("s", policy=Budget(epsilon=1), blocking=Blocking.by_time("ts"))
        q.ingest("s", pd.DataFrame({"ts": pd.to_datetime(["2024-01-01"]), "v": [1.0]}))
        after = q.group_commit_stats()
        assert after is not None and after.requests == before.requests + 1
    finally:
        q.close()

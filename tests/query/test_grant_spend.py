"""A grant is what the work spends: :meth:`Platform.grant` over an existing reservation,
:func:`run_query_on` / ``run(..., reservation=...)`` drawing from it and from nothing else —
exact at zero noise, one reservation per grant, refusals before any row is read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from mechanisms.fakes import NoNoise

from blockbudget.budget import Budget
from blockbudget.errors import (
    InvalidRequestError,
    ReservationError,
    UnknownColumnError,
    UnknownReservationError,
)
from blockbudget.ledger import ReservationState
from blockbudget.platform import Last, Platform
from blockbudget.query import Query, run
from blockbudget.store import Blocking, LatePolicy
from blockbudget.tasks.work import run_query_on
from query.support import frame, platform, state


@pytest.fixture
def p(tmp_path: Path) -> Iterator[Platform]:
    plat = platform(tmp_path / "h", epsilon=1)
    yield plat
    plat.close()


def _blocks(p: Platform, stream: str = "s") -> list[str]:
    return [b.block_id for b in p.blocks(stream)]


def _used(p: Platform, block: str, context: str = "a") -> tuple[int, ...]:
    """charged + reserved on ``block`` (the filter's features)."""
    return p.ledger.state(block, context).used


def _eps(p: Platform, eps: str, stream: str = "s") -> tuple[int, ...]:
    return p.filter(stream).features(Budget(epsilon=eps))


def _delete_part_files(p: Platform) -> None:
    """Remove every stored part file: a query that read a row now fails with DataError."""
    for path in (p.home / "blocks").rglob("*.parquet"):
        path.unlink()


# --- Platform.grant ----------------------------------------------------------------------------


def test_grant_spends_an_existing_reservation_and_never_reserves(p: Platform) -> None:
    blocks = _blocks(p)
    res = p.ledger.reserve(blocks, Budget(epsilon="0.5"), context="a", holder="ann")
    assert not any(m.sealed for m in p.store.blocks("s"))
    with p.grant(res.id, holder="ann") as g:
        assert all(m.sealed for m in p.store.blocks("s"))  # sealed before any data leaves
        assert g.blocks == tuple(blocks) and g.context == "a" and g.stream == "s"
        assert g.num_rows == 48
        g.draw(Budget(epsilon="0.2"), label="x")
        assert g.shortfall(Budget(epsilon="0.3")) == ()
        assert [b for b, _, _ in g.shortfall(Budget(epsilon="0.31"))] == blocks
    assert len(p.ledger.reservations()) == 1  # the grant made none of its own
    assert p.ledger.reservation(res.id).state is ReservationState.CLOSED
    assert _used(p, blocks[0]) == _eps(p, "0.2")  # closing released the other 0.3
    assert p.verify().ok


def test_grant_refusals(p: Platform) -> None:
    blocks = _blocks(p)
    res = p.ledger.reserve(blocks, Budget(epsilon="0.1"), context="a", holder="ann")
    with pytest.raises(UnknownReservationError, match="unknown reservation 'nope'"):
        p.grant("nope")
    with pytest.raises(UnknownReservationError, match="is held by 'bob'") as info:
        p.grant(res.id, holder="bob")
    assert "ann" not in str(info.value)  # the holder does not leak
    with pytest.raises(InvalidRequestError, match="stream 's', not of 'other'"):
        p.grant(res.id, stream="other")
    p.add_context("b")
    with pytest.raises(InvalidRequestError, match="context 'a', not in 'b'"):
        p.grant(res.id, context="b")
    with pytest.raises(UnknownColumnError):
        p.grant(res.id, columns=["nope"])
    assert not any(m.sealed for m in p.store.blocks("s"))  # the refusals sealed nothing
    p.ledger.release(res.id)
    with pytest.raises(ReservationError, match="is closed"):
        p.grant(res.id, holder="ann")
    assert len(p.ledger.reservations()) == 1


def test_an_expired_reservation_backs_no_grant(tmp_path: Path) -> None:
    p = platform(tmp_path / "h", epsilon=1)
    try:
        res = p.ledger.reserve(_blocks(p), Budget(epsilon="0.1"), context="a", ttl_seconds=1e-3)
        import time

        time.sleep(0.01)
        with pytest.raises(ReservationError, match="time-to-live"):
            p.grant(res.id)
    finally:
        p.close()


# --- run_query_on ------------------------------------------------------------------------------


def test_a_granted_query_spends_its_grant_not_fresh_budget(p: Platform) -> None:
    """The regression of the issue: a query on a 0.1 grant keeps usage per block at 0.3."""
    blocks = _blocks(p)
    p.ledger.charge(blocks, Budget(epsilon="0.2"), context="a")  # earlier work
    res = p.ledger.reserve(blocks, Budget(epsilon="0.1"), context="a", holder="ann")
    assert [_used(p, b) for b in blocks] == [_eps(p, "0.3")] * 2
    with p.grant(res.id, holder="ann") as g:
        out = run_query_on(g, Query.count(epsilon=0.1), noise=NoNoise())
    assert out.value == 48.0 and out.cost == Budget(epsilon="0.1")  # exact at zero noise
    assert [_used(p, b) for b in blocks] == [_eps(p, "0.3")] * 2  # 0.3, not 0.4
    assert [p.ledger.state(b, "a").reserved for b in blocks] == [_eps(p, "0")] * 2
    assert len(p.ledger.reservations()) == 1  # no second reservation
    assert p.verify().ok


def test_a_query_bigger_than_its_grant_is_refused_before_reading(p: Platform) -> None:
    blocks = _blocks(p)
    res = p.ledger.reserve(blocks, Budget(epsilon="0.1"), context="a")
    g = p.grant(res.id)
    _delete_part_files(p)  # a read would now raise DataError: the refusal must come first
    events = len(p.ledger.events())
    with pytest.raises(ReservationError, match=r"holds .* nothing was read or charged"):
        run_query_on(g, Query.count(epsilon=0.2), noise=NoNoise())
    assert len(p.ledger.events()) == events  # nothing charged
    assert g.shortfall(Budget(epsilon="0.1")) == ()  # the grant still holds all of it
    g.close()
    assert [_used(p, b) for b in blocks] == [_eps(p, "0")] * 2


def test_a_grant_covers_several_queries_then_refuses(p: Platform) -> None:
    res = p.ledger.reserve(_blocks(p), Budget(epsilon="0.3"), context="a")
    with p.grant(res.id) as g:
        for _ in range(3):
            assert run_query_on(g, Query.count(epsilon=0.1), noise=NoNoise()).value == 48.0
        with pytest.raises(ReservationError, match="nothing was read or charged"):
            run_query_on(g, Query.count(epsilon=0.1), noise=NoNoise())
        assert len(g.draws) == 3
    assert [_used(p, b) for b in _blocks(p)] == [_eps(p, "0.3")] * 2


def test_a_query_outside_the_grants_projection_is_refused(p: Platform) -> None:
    res = p.ledger.reserve(_blocks(p), Budget(epsilon="0.3"), context="a")
    with p.grant(res.id, columns=["c"]) as g:
        with pytest.raises(UnknownColumnError):
            run_query_on(g, Query.sum("v", epsilon=0.1, lower=0, upper=1))
        hist = run_query_on(g, Query.histogram("c", ["a"], epsilon=0.1), noise=NoNoise())
        assert hist.value == {"a": 12.0}
        assert len(g.draws) == 1


def test_group_privacy_is_paid_from_the_grant(tmp_path: Path) -> None:
    p = Platform(tmp_path / "h", engine="arrow")
    try:
        blocking = Blocking.by_user("uid", ids_per_block=10, rows_per_user=2)
        p.create_stream(
            "u", policy=Budget(epsilon=10), blocking=blocking, late_policy=LatePolicy.DROP
        )
        p.add_context("a")
        p.ingest("u", pd.DataFrame({"uid": [1, 1, 2, 1, 3], "v": [1.0, 2.0, 3.0, 4.0, 5.0]}))
        blocks = _blocks(p, "u")
        small = p.ledger.reserve(blocks, Budget(epsilon="0.5"), context="a")
        q = Query.sum("v", epsilon=0.5, lower=0, upper=10)  # k = 2: draws ε = 1
        with p.grant(small.id) as g, pytest.raises(ReservationError):
            run_query_on(g, q, noise=NoNoise())
        enough = p.ledger.reserve(blocks, Budget(epsilon=1), context="a")
        with p.grant(enough.id) as g:
            out = run_query_on(g, q, noise=NoNoise())
        assert out.value == pytest.approx(1.0 + 2.0 + 3.0 + 5.0) and out.cost == Budget(epsilon=1)
        assert _used(p, blocks[0]) == _eps(p, "1", "u")
    finally:
        p.close()


# --- run(..., reservation=...) ------------------------------------------------------------------


def test_run_on_a_reservation_keeps_it_open_until_spent(p: Platform) -> None:
    blocks = _blocks(p)
    res = p.ledger.reserve(blocks, Budget(epsilon="0.2"), context="a", holder="ann")
    q = Query.count(epsilon=0.1)
    first = run(p, "s", q, reservation=res.id, holder="ann", context="a", noise=NoNoise())
    assert first.value == 48.0 and first.blocks == tuple(blocks)
    assert p.ledger.reservation(res.id).state is ReservationState.OPEN  # more to draw
    run(p, "s", q, reservation=res.id, noise=NoNoise())
    assert p.ledger.reservation(res.id).state is ReservationState.CLOSED  # spent: closed
    assert [_used(p, b) for b in blocks] == [_eps(p, "0.2")] * 2
    assert len(p.ledger.reservations()) == 1


def test_run_on_a_reservation_refuses_before_sealing(p: Platform) -> None:
    res = p.ledger.reserve(_blocks(p), Budget(epsilon="0.2"), context="a", holder="ann")
    before = state(p)
    with pytest.raises(UnknownColumnError):
        run(p, "s", Query.sum("zz", epsilon=0.1, lower=0, upper=1), reservation=res.id)
    with pytest.raises(UnknownReservationError):
        run(p, "s", Query.count(epsilon=0.1), reservation=res.id, holder="bob")
    with pytest.raises(InvalidRequestError, match="do not name 'blocks'"):
        run(p, "s", Query.count(epsilon=0.1), reservation=res.id, blocks=Last(1))
    with pytest.raises(InvalidRequestError, match="'blocks' in a 'context'"):
        run(p, "s", Query.count(epsilon=0.1))
    assert state(p) == before
    assert frame().shape[0] == 48

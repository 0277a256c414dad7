"""Ledger.retire_exhausted: the check and the retirement are one write transaction, so a block
some grant holds a reservation on is never retired under it."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from ledger_support import FakeClock

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import RetiredBlockError, UnknownContextError
from blockbudget.ledger import EventKind, Ledger, ReservationState
from blockbudget.platform import Last, Platform
from blockbudget.store import Blocking, Unit

MIN = Budget(epsilon="0.001")


def _spent(ledger: Ledger) -> None:
    ledger.add_blocks(
        ["b", "c"], stream="s", capacity=Budget(epsilon=1), accounting=Accounting.BASIC
    )
    for ctx in ("default", "ml", "ops"):
        ledger.charge(["b"], Budget(epsilon="0.9995"), context=ctx)  # 5e-4 left < MIN
        ledger.charge(["c"], Budget(epsilon="0.5"), context=ctx)


def test_a_reserved_block_is_kept_until_released_then_retired(ledger: Ledger) -> None:
    _spent(ledger)
    res = ledger.reserve(["b"], Budget(epsilon="0.0002"), context="ml")
    assert ledger.retire_exhausted("s", min_cost=MIN) == ()
    ledger.charge(["b"], Budget(epsilon="0.0001"), reservation_id=res.id)  # the grant draws
    assert ledger.retire_exhausted("s", min_cost=MIN) == ()  # it still holds 0.0001
    ledger.charge(["b"], Budget(epsilon="0.0001"), reservation_id=res.id)
    ledger.release(res.id)
    retired = ledger.retire_exhausted("s", min_cost=MIN, request_id="R")
    assert [i.block_id for i in retired] == ["b"] and retired[0].retired
    assert ledger.events()[-1].kind is EventKind.RETIRED
    assert ledger.retire_exhausted("s", min_cost=MIN, request_id="R") == retired  # replay
    assert ledger.retire_exhausted("s", min_cost=MIN) == ()
    assert ledger.verify().ok


def test_a_reservation_past_its_ttl_does_not_keep_the_block(
    ledger: Ledger, clock: FakeClock
) -> None:
    """A review's reproduction: a holder that crashed leaves a reservation past its TTL, which
    holds nothing; retire_exhausted expires it (audited) in its own transaction and retires."""
    _spent(ledger)
    res = ledger.reserve(["b"], Budget(epsilon="0.0002"), context="ml", ttl_seconds=10)
    clock.now += 3600
    retired = ledger.retire_exhausted("s", min_cost=MIN)
    assert [i.block_id for i in retired] == ["b"]
    assert ledger.reservation(res.id).state is ReservationState.EXPIRED
    assert ledger.verify().ok


def test_a_reservation_in_an_unlisted_context_keeps_the_block(ledger: Ledger) -> None:
    _spent(ledger)
    res = ledger.reserve(["b"], Budget(epsilon="0.0001"), context="ops")
    assert ledger.retire_exhausted("s", min_cost=MIN, contexts=["ml"]) == ()
    ledger.release(res.id)
    assert [i.block_id for i in ledger.retire_exhausted("s", min_cost=MIN, contexts=["ml"])] == [
        "b"
    ]


def test_unknown_context_is_refused(ledger: Ledger) -> None:
    _spent(ledger)
    with pytest.raises(UnknownContextError):
        ledger.retire_exhausted("s", min_cost=MIN, contexts=["nobody"])
    assert not any(i.retired for i in ledger.blocks("s"))


def test_platform_retire_cannot_cut_off_a_grant_that_reserves_meanwhile(tmp_path: Path) -> None:
    """The reviewer's race: a grant reserving while retire_exhausted runs. Before the fix,
    retire_exhausted read the states in one transaction and retired in a later one."""
    home = tmp_path / "home"
    shutil.rmtree(home, ignore_errors=True)
    p = Platform(home)
    try:
        p.create_stream(
            "s",
            policy=Budget(epsilon=1),
            blocking=Blocking(unit=Unit.TIME, column="time", window=timedelta(days=1)),
        )
        p.add_context("a")
        p.ingest("s", pd.DataFrame({"time": pd.to_datetime(["2024-01-01T01:00"]), "v": [1.0]}))
        b = p.store.blocks("s")[0].block_id
        p.ledger.charge([b], Budget(epsilon="0.9995"), context="a")
        grant: dict[str, Any] = {}
        for name in ("states", "blocks"):  # the reads that used to precede the retirement
            real = getattr(p.ledger, name)

            def hooked(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
                out = _real(*args, **kwargs)
                if not grant:  # a grant reserves between any read and the retirement
                    grant["g"] = None
                    grant["g"] = p.request(
                        "s", blocks=Last(1), budget=Budget(epsilon="0.0002"), context="a"
                    )
                return out

            setattr(p.ledger, name, hooked)
        retired = p.retire_exhausted("s")
        if grant.get("g") is not None:  # it reserved first: it must be able to draw
            assert retired == []
            p.ledger.charge([b], Budget(epsilon="0.0002"), reservation_id=grant["g"].reservation.id)
        else:  # no read preceded the (atomic) retirement: a later grant is refused up front
            assert retired == [b]
            with pytest.raises(RetiredBlockError):
                p.request("s", blocks=[b], budget=Budget(epsilon="0.0002"), context="a")
    finally:
        p.close()

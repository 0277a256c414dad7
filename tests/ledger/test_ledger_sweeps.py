"""Incremental retirement sweeps: a sweep examines only the blocks touched since the stream's
previous sweep (same contexts, same minimum cost), and retires exactly what a full sweep
would."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from ledger_support import FakeClock

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import BlockBudgetError
from blockbudget.ledger import Ledger
from blockbudget.ledger.schema import sweeps
from blockbudget.ledger.txn import WriteTx

MIN = Budget(epsilon="0.1")


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many blocks each ``WriteTx.load`` call was asked for."""
    seen: list[int] = []
    original = WriteTx.load

    def spy(self: WriteTx, block_ids: object, context: str) -> None:
        ids = list(block_ids)  # type: ignore[call-overload]
        seen.append(len(ids))
        original(self, ids, context)

    monkeypatch.setattr(WriteTx, "load", spy)
    yield seen


def _blocks(ledger: Ledger, n: int) -> list[str]:
    ids = [f"s/{i:04d}" for i in range(n)]
    ledger.add_blocks(ids, stream="s", capacity=Budget(epsilon=1), accounting=Accounting.BASIC)
    return ids


def test_a_second_sweep_examines_only_the_blocks_charged_since(
    ledger: Ledger, loads: list[int]
) -> None:
    ids = _blocks(ledger, 300)
    assert ledger.retire_exhausted("s", min_cost=MIN) == ()  # the first sweep sees all
    assert max(loads) == 300
    for ctx in ("default", "ml", "ops"):
        ledger.charge([ids[7]], Budget(epsilon="0.95"), context=ctx)
    loads.clear()
    retired = ledger.retire_exhausted("s", min_cost=MIN)
    assert [i.block_id for i in retired] == [ids[7]]
    assert loads and max(loads) == 1  # one block, once per context
    loads.clear()
    assert ledger.retire_exhausted("s", min_cost=MIN) == ()
    assert max(loads, default=0) == 0
    assert ledger.verify().ok


def test_other_contexts_or_minimum_cost_sweep_everything(ledger: Ledger, loads: list[int]) -> None:
    ids = _blocks(ledger, 50)
    for ctx in ("default", "ml", "ops"):
        ledger.charge(ids[:5], Budget(epsilon="0.85"), context=ctx)
    assert ledger.retire_exhausted("s", min_cost=MIN) == ()  # 0.15 left fits 0.1
    loads.clear()
    bigger = ledger.retire_exhausted("s", min_cost=Budget(epsilon="0.2"))  # nothing touched
    assert [i.block_id for i in bigger] == ids[:5]
    assert max(loads) == 50
    ledger.charge(ids[5:6], Budget(epsilon="0.95"), context="ml")
    only_ml = ledger.retire_exhausted("s", min_cost=MIN, contexts=["ml"])
    assert [i.block_id for i in only_ml] == [ids[5]]


def test_a_reservation_that_goes_stale_after_a_sweep_is_expired_by_the_next(
    ledger: Ledger, clock: FakeClock
) -> None:
    ids = _blocks(ledger, 20)
    for ctx in ("default", "ml", "ops"):
        ledger.charge([ids[3]], Budget(epsilon="0.95"), context=ctx)
    res = ledger.reserve([ids[3]], Budget(epsilon="0.01"), context="ml", ttl_seconds=10)
    assert ledger.retire_exhausted("s", min_cost=MIN) == ()  # the grant holds it
    clock.advance(60)  # the holder crashed: nothing touches the block, the TTL passes
    assert [i.block_id for i in ledger.retire_exhausted("s", min_cost=MIN)] == [ids[3]]
    assert ledger.reservation(res.id).state.value == "expired"
    assert ledger.verify().ok


def test_a_block_released_after_a_sweep_is_examined_by_the_next(ledger: Ledger) -> None:
    ids = _blocks(ledger, 10)
    for ctx in ("default", "ml", "ops"):
        ledger.charge([ids[2]], Budget(epsilon="0.95"), context=ctx)
    res = ledger.reserve([ids[2]], Budget(epsilon="0.01"), context="ops")
    assert ledger.retire_exhausted("s", min_cost=MIN) == ()  # the grant holds it
    ledger.release(res.id)  # the only event that touches it since
    assert [i.block_id for i in ledger.retire_exhausted("s", min_cost=MIN)] == [ids[2]]


def test_a_stale_reservation_is_expired_even_when_nothing_retires(
    ledger: Ledger, clock: FakeClock
) -> None:
    ids = _blocks(ledger, 5)
    res = ledger.reserve([ids[0]], Budget(epsilon="0.05"), context="ml", ttl_seconds=10)
    clock.advance(60)
    assert ledger.retire_exhausted("s", min_cost=MIN) == ()
    assert ledger.reservation(res.id).state.value == "expired"
    assert ledger.verify().ok


def _forget_marks(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(sweeps.delete())


def test_incremental_sweeps_retire_what_full_sweeps_retire(tmp_path: Path) -> None:
    """Two ledgers get the same random operations; one forgets its sweep marks before every
    sweep (so each is a full sweep). Both retire the same blocks at every step."""
    rng = random.Random(1234)
    clocks = [FakeClock(), FakeClock()]
    ledgers = [Ledger(f"sqlite:///{tmp_path / f'{i}.db'}", clock=clocks[i]) for i in (0, 1)]
    for led in ledgers:
        for ctx in ("a", "b"):
            led.add_context(ctx)
        _blocks(led, 12)
    open_res: list[list[str]] = [[], []]
    last: list[str] = []
    for step in range(120):
        op = rng.random()
        blocks = [f"s/{i:04d}" for i in rng.sample(range(12), rng.randint(1, 4))]
        ctx = rng.choice(["a", "b"])
        eps = Budget(epsilon=rng.choice(["0.1", "0.2", "0.3", "0.45"]))
        ttl = rng.choice([5.0, 1000.0])
        for i, led in enumerate(ledgers):
            try:
                if op < 0.4:
                    led.charge(blocks, eps, context=ctx, request_id=f"c{step}")
                elif op < 0.6:
                    r = led.reserve(blocks, eps, context=ctx, ttl_seconds=ttl)
                    open_res[i].append(r.id)
                elif op < 0.7 and open_res[i]:
                    led.release(open_res[i].pop(0))
                elif op < 0.8:
                    clocks[i].advance(10)
                elif op < 0.85 and step > 100:
                    led.close_context("b")  # refused while b holds a live reservation
                else:
                    if i == 1:
                        _forget_marks(led)
                    got = led.retire_exhausted("s", min_cost=MIN, request_id=f"r{step}")
                    open_res[i] = [
                        r for r in open_res[i] if led.reservation(r).state.value == "open"
                    ]
                    assert i == 0 or [b.block_id for b in got] == last
                    last = [b.block_id for b in got]
            except BlockBudgetError:
                pass
        assert [b.retired for b in ledgers[0].blocks()] == [b.retired for b in ledgers[1].blocks()]
    retired = sum(b.retired for b in ledgers[0].blocks())
    assert 0 < retired < 12
    for led in ledgers:
        assert led.verify().ok
        led.dispose()

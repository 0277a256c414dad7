"""Group commit in the ledger (:mod:`blockbudget.ledger.group`): batched writes keep every
invariant of serial ones — no overspend, per-request all-or-nothing, idempotency, a valid audit
chain — and a request is acknowledged only after its batch committed durably."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa
from pg_support import BACKENDS, postgres_database

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import BudgetExceededError, InvalidRequestError
from blockbudget.ledger import Ledger


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        with postgres_database() as pg:
            yield pg


def _ledger(url: str) -> Ledger:
    led = Ledger(url, group_commit=True)
    led.add_context("default")  # a new ledger has no context
    led.add_blocks(
        ["b1", "b2"], stream="s", capacity=Budget(epsilon=1), accounting=Accounting.BASIC
    )
    return led


def test_one_batch_checks_requests_in_order_each_all_or_nothing(url: str) -> None:
    led = _ledger(url)
    led.charge(["b2"], Budget(epsilon="0.8"), request_id="pre")
    gc = led.group_committer
    assert gc is not None
    batches0 = gc.batches
    # Hold the writers' lock so that the committer's next transaction waits and every request
    # submitted meanwhile lands in one batch.
    blocker = led.engine.connect()
    tx = blocker.begin()
    if blocker.dialect.name != "sqlite":  # SQLite: BEGIN IMMEDIATE already holds the lock
        blocker.execute(sa.text("SELECT id FROM ledger_head WHERE id = 1 FOR UPDATE"))
    outcomes: dict[str, object] = {}

    def charge(name: str, blocks: list[str], eps: str) -> None:
        try:
            outcomes[name] = led.charge(blocks, Budget(epsilon=eps), request_id=name)
        except BudgetExceededError as exc:
            outcomes[name] = exc

    first = threading.Thread(target=charge, args=("first", ["b1"], "0.1"))
    first.start()
    deadline = time.monotonic() + 10
    while gc._queue.qsize() > 0 and time.monotonic() < deadline:  # the committer took it
        time.sleep(0.01)
    names = [f"r{i}" for i in range(9)]
    threads = []
    for name in names:
        # r0: both blocks — b2 has only 0.2 left, so it refuses and b1 must stay untouched.
        blocks = ["b1", "b2"] if name == "r0" else ["b1"]
        t = threading.Thread(target=charge, args=(name, blocks, "0.25"))
        t.start()
        threads.append(t)
        while gc._queue.qsize() < len(threads) and time.monotonic() < deadline:
            time.sleep(0.005)  # arrival order = submission order
    assert gc._queue.qsize() == 9
    tx.rollback()
    blocker.close()
    for t in [first, *threads]:
        t.join(timeout=30)
    assert gc.batches - batches0 == 2  # [first], then the nine together
    assert isinstance(outcomes["r0"], BudgetExceededError)
    accepted = [n for n in names if not isinstance(outcomes[n], Exception)]
    assert accepted == ["r1", "r2", "r3"]  # 0.1 + 3 × 0.25 = 0.85; a fourth would be 1.1
    assert all(isinstance(outcomes[n], BudgetExceededError) for n in names[4:])
    assert led.state("b1").remaining == "(ε=0.15, δ=0)"
    assert led.state("b2").remaining == "(ε=0.2, δ=0)"  # r0 charged nothing anywhere
    report = led.verify()
    assert report.ok, report.problems
    # The audit log holds exactly the acknowledged charges, in order.
    charged = [e.request_id for e in led.events() if e.kind.value == "charged"]
    assert charged == ["pre", "first", "r1", "r2", "r3"]
    led.dispose()


def test_concurrent_clients_never_overspend_and_acks_are_durable(url: str) -> None:
    led = _ledger(url)
    acked: list[str] = []
    refused = 0
    lock = threading.Lock()

    def work(i: int) -> None:
        nonlocal refused
        blocks = ["b1", "b2"] if i % 3 == 0 else ["b1"] if i % 3 == 1 else ["b2"]
        try:
            led.charge(blocks, Budget(epsilon="0.03"), request_id=f"c{i}")
        except BudgetExceededError:
            with lock:
                refused += 1
        else:
            with lock:
                acked.append(f"c{i}")

    with ThreadPoolExecutor(24) as pool:
        list(pool.map(work, range(120)))
    gc = led.group_committer
    assert gc is not None and gc.requests >= 120 + 1
    led.dispose()
    # A fresh ledger (new connections) sees exactly the acknowledged charges.
    again = Ledger(url)
    on_b1 = sum(1 for r in acked if int(r[1:]) % 3 in (0, 1))
    on_b2 = sum(1 for r in acked if int(r[1:]) % 3 in (0, 2))
    assert on_b1 <= 33 and on_b2 <= 33  # 33 × 0.03 = 0.99 ≤ 1: never more
    assert on_b1 == 33 or on_b2 == 33  # the budget was actually used up under contention
    assert again.state("b1").remaining == str(Budget(epsilon=1 - Decimal("0.03") * on_b1))
    assert again.state("b2").remaining == str(Budget(epsilon=1 - Decimal("0.03") * on_b2))
    assert len(acked) + refused == 120
    assert all(again.request(r) is not None for r in acked)
    assert again.verify().ok
    again.dispose()


def test_replays_in_one_batch_charge_once_and_reused_ids_are_refused(url: str) -> None:
    led = _ledger(url)
    with ThreadPoolExecutor(8) as pool:
        receipts = list(
            pool.map(
                lambda _: led.charge(["b1"], Budget(epsilon="0.1"), request_id="same"), range(8)
            )
        )
    assert len({r.seq for r in receipts}) == 1
    assert led.state("b1").remaining == "(ε=0.9, δ=0)"
    with pytest.raises(InvalidRequestError, match="other arguments"):
        led.charge(["b1"], Budget(epsilon="0.2"), request_id="same")
    # Reservations, draws and releases go through the committer too.
    res = led.reserve(["b1", "b2"], Budget(epsilon="0.5"), request_id="res")
    led.charge(["b1"], Budget(epsilon="0.2"), reservation_id=res.id, request_id="draw")
    led.release(res.id, request_id="rel")
    assert led.state("b1").remaining == "(ε=0.7, δ=0)"
    assert led.state("b2").remaining == "(ε=1, δ=0)"
    assert led.verify().ok
    led.dispose()


def test_charge_async_awaits_the_batch_commit(url: str) -> None:
    import asyncio

    led = _ledger(url)

    async def main() -> list[object]:
        async def one(i: int) -> object:
            try:
                return await led.charge_async(
                    ["b1", "b2"] if i % 2 else ["b1"], Budget(epsilon="0.125"), request_id=f"a{i}"
                )
            except BudgetExceededError as exc:
                return exc

        first = await asyncio.gather(*(one(i) for i in range(12)))
        again = await one(3)  # a replay of an acknowledged id returns its receipt
        return [*first, again]

    out = asyncio.run(main())
    ok = [o for o in out[:12] if not isinstance(o, Exception)]
    assert len(ok) == 8  # 8 × 0.125 = 1 on b1: exactly the budget, never more
    assert led.state("b1").remaining == "(ε=0, δ=0)"
    assert not isinstance(out[12], Exception) and out[12] == out[3]
    assert led.verify().ok
    led.dispose()
    plain = Ledger(url)  # without group commit the async form runs in a thread
    with pytest.raises(BudgetExceededError):
        asyncio.run(plain.charge_async(["b1"], Budget(epsilon="0.001")))
    plain.dispose()

"""Process caches change only after their transaction commits (the project's cache rule).

The ledger caches every block's filter per process (``BlockCatalog``). A write transaction that
rolls back — a refused ``add_blocks`` (its request id already used), a request rolled back to
its savepoint inside a group commit, or a whole group-commit batch that failed — must leave
nothing there: otherwise a later registration of the same block id under a smaller capacity
would be checked against the rolled-back, larger one, and the ledger would overspend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ledger_support import Backend, FakeClock

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import BudgetExceededError, InvalidRequestError
from blockbudget.ledger import Ledger
from blockbudget.ledger.group import GroupCommitter


@pytest.fixture(params=[False, True], ids=["plain", "group_commit"])
def fresh(request: pytest.FixtureRequest, backend: Backend, clock: FakeClock) -> Iterator[Ledger]:
    led = backend.open(clock=clock, group_commit=request.param)
    yield led
    led.dispose()


def add_x(led: Ledger, epsilon: float, **kwargs: Any) -> Any:
    return led.add_blocks(
        ["X"], stream="s", capacity=Budget(epsilon=epsilon), accounting=Accounting.BASIC, **kwargs
    )


def assert_capacity_one(led: Ledger) -> None:
    """X holds ε = 1: a charge of ε 5 is refused, nothing is charged; ε 1 fits exactly."""
    if "team" not in led.contexts():
        led.add_context("team")
    with pytest.raises(BudgetExceededError):
        led.charge(["X"], Budget(epsilon=5), context="team")
    assert not any(led.state("X", context="team").charged)
    led.charge(["X"], Budget(epsilon=1), context="team")
    with pytest.raises(BudgetExceededError):
        led.charge(["X"], Budget(epsilon="0.001"), context="team")
    led.verify_or_raise()


def test_refused_add_blocks_leaves_no_filter_behind(fresh: Ledger) -> None:
    """The reviewer's reproduction, plain and with group commit."""
    fresh.add_context("ml", request_id="used-id")
    with pytest.raises(InvalidRequestError, match="other arguments"):
        add_x(fresh, 10, request_id="used-id")
    assert fresh.blocks() == []
    add_x(fresh, 1)
    assert_capacity_one(fresh)


class Paused:
    """Holds the group committer inside a batch so that the next requests queue up and are
    committed together, in the order they were queued."""

    def __init__(self, committer: GroupCommitter) -> None:
        self.committer = committer
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: dict[str, BaseException] = {}

        def blocker(_conn: object) -> None:
            self.entered.set()
            assert self.gate.wait(30)

        self.first = committer.submit_nowait(blocker)
        assert self.entered.wait(30)

    def queue(self, name: str, call: Callable[[], object]) -> None:
        """Run ``call`` in a thread and wait until its write is queued."""
        queued = self.committer._queue.qsize()

        def run() -> None:
            try:
                call()
            except BaseException as exc:
                self.errors[name] = exc

        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)
        deadline = time.monotonic() + 30
        while self.committer._queue.qsize() == queued:
            assert time.monotonic() < deadline, "the write was never queued"
            time.sleep(0.001)

    def release(self) -> None:
        self.gate.set()
        self.first.result(30)
        for t in self.threads:
            t.join(30)


def test_savepoint_rollback_in_a_batch_leaves_no_filter_behind(
    backend: Backend, clock: FakeClock
) -> None:
    """A request rolled back to its savepoint (duplicate id) in the same batch as the request
    that then registers the block for real."""
    led = backend.open(clock=clock, group_commit=True)
    try:
        led.add_context("ml", request_id="used-id")
        committer = led.group_committer
        assert committer is not None
        batches = committer.batches
        paused = Paused(committer)
        paused.queue("refused", lambda: add_x(led, 10, request_id="used-id"))
        paused.queue("real", lambda: add_x(led, 1))
        paused.release()
        assert committer.batches == batches + 2  # the paused one, then both in one batch
        assert isinstance(paused.errors.pop("refused"), InvalidRequestError)
        assert paused.errors == {}
        assert_capacity_one(led)
    finally:
        led.dispose()


def test_failed_batch_leaves_no_filter_behind(backend: Backend, clock: FakeClock) -> None:
    """A batch whose transaction rolls back as a whole: the registration in it never
    happened, so a later one with another capacity is the one that counts."""
    led = backend.open(clock=clock, group_commit=True)
    try:
        committer = led.group_committer
        assert committer is not None
        paused = Paused(committer)
        paused.queue("first", lambda: add_x(led, 10))

        def poison(_conn: object) -> None:
            raise RuntimeError("the batch fails")

        poisoned = committer.submit_nowait(poison)
        paused.release()
        with pytest.raises(RuntimeError):
            poisoned.result(30)
        assert isinstance(paused.errors.pop("first"), RuntimeError)
        assert led.blocks() == []
        add_x(led, 1)
        assert_capacity_one(led)
    finally:
        led.dispose()


def test_a_block_read_in_a_failed_batch_is_not_cached_either(
    backend: Backend, clock: FakeClock
) -> None:
    """A request that only *reads* a block registered earlier in the same (failed) batch."""
    led = backend.open(clock=clock, group_commit=True)
    try:
        led.add_context("team")  # the charge must reach the block, not stop at its context
        committer = led.group_committer
        assert committer is not None
        paused = Paused(committer)
        paused.queue("add", lambda: add_x(led, 10))
        paused.queue("charge", lambda: led.charge(["X"], Budget(epsilon=2), context="team"))

        def poison(_conn: object) -> None:
            raise RuntimeError("the batch fails")

        poisoned = committer.submit_nowait(poison)
        paused.release()
        with pytest.raises(RuntimeError):
            poisoned.result(30)
        assert set(paused.errors) == {"add", "charge"}
        add_x(led, 1)
        assert_capacity_one(led)
    finally:
        led.dispose()

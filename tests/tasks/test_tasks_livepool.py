"""LivePool: a scheduler's pool kept in step with the ledger, incrementally."""

from __future__ import annotations

from typing import Any

import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.ledger import Ledger
from blockbudget.scheduling import BlockSpec, Pool, TaskSpec, get_scheduler
from blockbudget.scheduling.baselines import Fcfs
from blockbudget.tasks.livepool import LEDGER_TASK, LivePool


class CountingLedger(Ledger):
    """A ledger that counts the block rows its ``states`` reads return."""

    rows_read = 0
    full_reads = 0

    def states(self, stream: Any = None, context: Any = None, *, blocks: Any = None) -> Any:
        out = super().states(stream, context, blocks=blocks)
        self.rows_read += len(out)
        self.full_reads += blocks is None
        return out


class Watching(Fcfs):
    seen: list[str]

    def on_block(self, pool: Pool, block: BlockSpec) -> None:
        self.seen = [*getattr(self, "seen", []), block.block_id]


def _ledger(n: int) -> CountingLedger:
    ledger = CountingLedger("sqlite://")
    ledger.add_context("team")
    ids = [f"s/{i:05d}" for i in range(n)]
    ledger.add_blocks(ids, stream="s", capacity=Budget(epsilon=1), accounting=Accounting.BASIC)
    ledger.add_blocks(["t/1"], stream="t", capacity=Budget(epsilon=1), accounting=Accounting.BASIC)
    return ledger


def _eps(live: LivePool, block: str) -> float:
    i = live.pool.index(block)
    return float(live.pool.charged[i][0] + live.pool.reserved[i][0])


def test_existing_and_new_blocks_reach_the_pool_and_the_scheduler() -> None:
    ledger = _ledger(3)
    sched = Watching()
    live = LivePool(ledger, stream="s", context="team", scheduler=sched)
    assert sched.seen == ["s/00000", "s/00001", "s/00002"]
    ledger.add_blocks(
        ["s/00003"], stream="s", capacity=Budget(epsilon=2), accounting=Accounting.BASIC
    )
    ledger.add_blocks(["t/2"], stream="t", capacity=Budget(epsilon=1), accounting=Accounting.BASIC)
    report = live.sync()
    assert report.added == 1 and sched.seen[-1] == "s/00003"
    assert "t/2" not in live.pool.block_index
    assert live.pool.blocks[-1].capacity == Budget(epsilon=2)


def test_a_charge_made_outside_the_scheduler_is_seen() -> None:
    ledger = _ledger(3)
    live = LivePool(ledger, stream="s", context="team", scheduler=get_scheduler("fcfs"))
    ledger.charge(["s/00001"], Budget(epsilon="0.3"), context="team")
    res = ledger.reserve(["s/00002"], Budget(epsilon="0.2"), context="team")
    report = live.sync()
    assert report.charged == 2 and report.credited == 0
    assert _eps(live, "s/00001") == pytest.approx(0.3, abs=1e-12)
    assert _eps(live, "s/00002") == pytest.approx(0.2, abs=1e-12)
    assert _eps(live, "s/00000") == 0.0
    assert set(live.pool.charged_blocks[LEDGER_TASK]) == {"s/00001", "s/00002"}
    # releasing that reservation (nobody's grant in this pool) gives the budget back
    ledger.release(res.id)
    assert live.sync().credited == 1
    assert _eps(live, "s/00002") == pytest.approx(0.0, abs=1e-12)


def test_a_grant_spent_less_than_it_held_is_credited_back() -> None:
    ledger = _ledger(2)
    live = LivePool(ledger, stream="s", context="team", scheduler=get_scheduler("fcfs"))
    pool = live.pool
    pool.submit(TaskSpec("t1", arrival=0.0, demand=Budget(epsilon="0.5"), blocks=("s/00000",)))
    assert pool.grant("t1")
    # the grant becomes one ledger reservation of the same demand: nothing to reconcile
    res = ledger.reserve(["s/00000"], Budget(epsilon="0.5"), context="team")
    assert live.sync().credited == 0
    ledger.charge(["s/00000"], Budget(epsilon="0.2"), reservation_id=res.id)
    assert live.sync().credited == 0  # reserved → charged: the same used
    ledger.release(res.id)
    report = live.sync()
    assert report.credited == 1 and report.charged == 0
    assert _eps(live, "s/00000") == pytest.approx(0.2, abs=1e-12)
    assert pool.decisions[-1].kind.value == "credit"
    credit = pool.decisions[-1].cost
    assert isinstance(credit, Budget)
    assert Budget(epsilon="0.3") - Budget(epsilon="2e-12") <= credit <= Budget(epsilon="0.3")


def test_another_context_is_not_this_pools_usage() -> None:
    ledger = _ledger(1)
    ledger.add_context("other")
    live = LivePool(ledger, stream="s", context="team", scheduler=get_scheduler("fcfs"))
    ledger.charge(["s/00000"], Budget(epsilon="0.5"), context="other")
    assert live.sync().read == 0
    assert _eps(live, "s/00000") == 0.0


@pytest.mark.parametrize("n", [10, 1000])
def test_one_new_block_costs_the_same_at_any_stream_size(n: int) -> None:
    ledger = _ledger(n)
    live = LivePool(ledger, stream="s", context="team", scheduler=get_scheduler("fcfs"))
    assert live.pool.n_blocks == n
    ledger.rows_read = ledger.full_reads = 0
    ledger.add_blocks(
        ["s/new"], stream="s", capacity=Budget(epsilon=1), accounting=Accounting.BASIC
    )
    ledger.charge(["s/00003"], Budget(epsilon="0.1"), context="team")
    report = live.sync()
    assert report.added == 1 and report.charged == 1
    # the new block's row, then the two touched blocks' rows: never the stream's
    assert (ledger.full_reads, ledger.rows_read) == (0, 3)
    ledger.rows_read = 0
    assert live.sync().read == 0 and ledger.rows_read == 0  # nothing new: nothing read

"""The ledger side of ``/metrics`` (:mod:`blockbudget.service.metrics_db`): hand-computed budget
numbers, the incremental refresh equal to a fresh read after every kind of change, and a refresh
that reads only what is new."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_support import BACKENDS, postgres_database
from sqlalchemy import event

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.errors import BudgetExceededError, InvalidRequestError
from blockbudget.ledger import Ledger
from blockbudget.service.metrics_db import (
    BudgetTracker,
    LedgerSnapshot,
    live_tasks,
    low_budget_block_counts,
    open_reservations,
)

BASIC = Accounting.BASIC


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        with postgres_database() as pg:
            yield pg


def _ledger(url: str) -> Ledger:
    ledger = Ledger(url)
    for c in ("a", "b"):
        ledger.add_context(c)
    return ledger


def test_hand_computed_numbers(url: str) -> None:
    ledger = _ledger(url)
    ledger.add_blocks(
        ["s/1", "s/2", "s/3"], stream="s", capacity=Budget(epsilon=1), accounting=BASIC
    )
    ledger.add_blocks(["u/1"], stream="u", capacity=Budget(epsilon=2), accounting=BASIC)
    ledger.add_blocks(["t/1", "t/2"], stream="t", capacity=Budget(epsilon=1), accounting=BASIC)
    ledger.charge(["s/1"], Budget(epsilon=0.95), context="a")
    ledger.charge(["s/2"], Budget(epsilon=0.5), context="a")
    ledger.reserve(["s/3"], Budget(epsilon=0.2), context="b", ttl_seconds=600)
    for c in ("a", "b"):
        ledger.charge(["u/1"], Budget(epsilon=1.9), context=c)  # 0.05 left in both: retiring
    ledger.retire(["t/1"])

    snap = BudgetTracker(ledger.engine, alert_below=0.1).snapshot()

    sa, sb = snap.budgets[("s", "a")], snap.budgets[("s", "b")]
    assert sa.blocks == sb.blocks == 3
    assert sa.min_fraction == pytest.approx(0.05, rel=1e-12)
    assert sa.mean_fraction == pytest.approx((0.05 + 0.5 + 1.0) / 3, rel=1e-12)
    assert sa.min_epsilon == pytest.approx(0.05, rel=1e-12)
    # a reservation counts as spent: what can still be asked for
    assert sb.min_fraction == pytest.approx(0.8, rel=1e-12)
    assert sb.mean_fraction == pytest.approx((1.0 + 1.0 + 0.8) / 3, rel=1e-12)
    assert snap.budgets[("u", "b")].min_epsilon == pytest.approx(0.1, rel=1e-12)
    assert snap.budgets[("t", "a")].blocks == 1  # the retired block is not counted
    assert snap.low == {("s", "a"): 1, ("u", "a"): 1, ("u", "b"): 1}
    assert snap.blocks == {
        ("s", "live"): 3,
        ("u", "retiring"): 1,
        ("t", "live"): 1,
        ("t", "retired"): 1,
    }
    assert snap.events[("charged", "a")] == 3
    assert snap.events[("charged", "b")] == 1
    assert snap.events[("reserved", "b")] == 1
    assert snap.events[("block_added", "")] == 6
    assert snap.events[("retired", "")] == 1
    assert snap.seq == ledger.audit_seq()
    assert open_reservations(ledger.engine) == {"b": 1}
    assert live_tasks(ledger.engine) == {}  # no task table in a bare ledger
    assert low_budget_block_counts(ledger.engine, below=0.1) == snap.low
    assert low_budget_block_counts(ledger.engine, below=0.6) == {
        ("s", "a"): 2,
        ("u", "a"): 1,
        ("u", "b"): 1,
    }


def _same(a: LedgerSnapshot, b: LedgerSnapshot) -> None:
    assert (a.seq, a.blocks, a.events, a.low) == (b.seq, b.blocks, b.events, b.low)
    assert a.budgets.keys() == b.budgets.keys()
    for key, x in a.budgets.items():
        y = b.budgets[key]
        assert (x.blocks, x.min_fraction, x.min_epsilon) == (
            y.blocks,
            y.min_fraction,
            y.min_epsilon,
        )
        assert x.mean_fraction == pytest.approx(y.mean_fraction, rel=1e-12)  # summation order


def test_incremental_refresh_equals_a_fresh_read(url: str) -> None:
    rng = random.Random(14)
    ledger = _ledger(url)
    tracker = BudgetTracker(ledger.engine, alert_below=0.3)
    blocks: list[str] = []
    open_res: list[str] = []
    contexts = ["a", "b"]
    for step in range(60):
        op = rng.choice(["add", "charge", "charge", "reserve", "release", "retire", "context"])
        live = [b for b in blocks if not ledger.state(b, "a").retired]
        if op == "add" or not live:
            ids = [f"s{step % 2}/{step}-{i}" for i in range(rng.randint(1, 3))]
            ledger.add_blocks(
                ids, stream=ids[0].split("/")[0], capacity=Budget(epsilon=1), accounting=BASIC
            )
            blocks.extend(ids)
        elif op == "charge":
            chosen = rng.sample(live, k=min(len(live), 2))
            with contextlib.suppress(BudgetExceededError):  # refused: nothing changed
                ledger.charge(chosen, Budget(epsilon=0.15), context=rng.choice(contexts))
        elif op == "reserve":
            with contextlib.suppress(BudgetExceededError):
                r = ledger.reserve(
                    rng.sample(live, k=1),
                    Budget(epsilon=0.2),
                    context=rng.choice(contexts),
                    ttl_seconds=600,
                )
                open_res.append(r.id)
        elif op == "release" and open_res:
            ledger.release(open_res.pop(rng.randrange(len(open_res))))
        elif op == "retire":
            ledger.retire([rng.choice(live)])
        elif op == "context":
            if len(contexts) > 2 and rng.random() < 0.5:
                ledger.close_context(contexts.pop())
            else:
                contexts.append(f"c{step}")
                ledger.add_context(contexts[-1])
        if step % 3 == 0 or step > 50:  # several changes between two scrapes, and one each
            _same(tracker.snapshot(), BudgetTracker(ledger.engine, alert_below=0.3).snapshot())
    assert tracker.snapshot().budgets  # the sequence did spend


def test_a_refresh_reads_only_what_is_new(url: str) -> None:
    ledger = _ledger(url)
    ids = [f"s/{i}" for i in range(50)]
    ledger.add_blocks(ids, stream="s", capacity=Budget(epsilon=1), accounting=BASIC)
    tracker = BudgetTracker(ledger.engine)
    tracker.snapshot()
    seen: list[tuple[str, Any]] = []

    @event.listens_for(ledger.engine, "before_cursor_execute")
    def spy(_c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((" ".join(statement.split()), params))

    tracker.snapshot()  # nothing changed: the audit tip, nothing else
    assert [s for s, _ in seen if "ledger_" in s] == [
        "SELECT max(ledger_audit.seq) AS max_1 FROM ledger_audit"
    ]
    seen.clear()
    ledger.charge(["s/7"], Budget(epsilon=0.5), context="a")
    seen.clear()
    after = tracker.snapshot()
    statements = [s for s, _ in seen if "ledger_" in s]
    assert not any("GROUP BY" in s for s in statements)  # no count over the whole log
    assert not any("FROM ledger_blocks" in s for s in statements)  # no block was added
    budget_reads = [p for s, p in seen if "FROM ledger_budgets" in s]
    values = [list(p.values()) if isinstance(p, dict) else list(p) for p in budget_reads]
    assert values and all(v == ["s/7"] for v in values)  # the touched block only
    assert after.budgets[("s", "a")].min_fraction == pytest.approx(0.5, rel=1e-12)


def test_threshold_must_be_a_fraction(url: str) -> None:
    with pytest.raises(InvalidRequestError, match=r"must be in \[0, 1\], got 1.5"):
        BudgetTracker(_ledger(url).engine, alert_below=1.5)

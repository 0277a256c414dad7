"""The dashboard's heatmap, exactly: consumed fractions per (context, block, time bucket) from
the audit log, through the stream's own filter; the last column equals the ledger's state."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget.accounting import Accounting, make_filter
from blockbudget.budget import Budget
from blockbudget.ledger import Ledger
from blockbudget.service.dashboard import heatmap


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_heatmap_replays_charges_into_buckets(tmp_path: Path) -> None:
    clock = Clock()
    led = Ledger(f"sqlite:///{tmp_path / 'l.db'}", clock=clock)
    led.add_context("default")  # a new ledger has no context
    cap = Budget(epsilon=2)
    led.add_blocks(["a", "b", "c"], stream="s", capacity=cap, accounting=Accounting.BASIC)
    led.add_context("t", description="team t")
    led.add_blocks(["x"], stream="other", capacity=cap, accounting=Accounting.BASIC)
    clock.now = 1_010.0
    # The log starts at 1000 (the default context's event): 4 buckets of 10 s end at 1040.
    led.charge(["a", "b"], Budget(epsilon="0.5"), context="t")  # bucket 1: [1010, 1020)
    clock.now = 1_025.0
    led.charge(["a"], Budget(epsilon="1"), context="default")  # bucket 2
    led.charge(["x"], Budget(epsilon="1"), context="t")  # another stream: ignored
    clock.now = 1_039.0
    led.charge(["b"], Budget(epsilon="1.5"), context="t")  # bucket 3
    clock.now = 1_040.0
    led.retire(["b"])
    hm = heatmap(
        led.events(),
        blocks=["a", "b", "c"],
        contexts=["default", "t"],
        filter_=make_filter(Accounting.BASIC, capacity=cap),
        buckets=4,
    )
    assert hm.times == (1_010.0, 1_020.0, 1_030.0, 1_040.0)
    assert hm.cells["t"] == [
        [0.0, 0.25, 0.25, 0.25],  # a: 0.5 of 2 from bucket 1 on
        [0.0, 0.25, 0.25, 1.0],  # b: then 1.5 more in bucket 3
        [0.0, 0.0, 0.0, 0.0],
    ]
    assert hm.cells["default"] == [[0.0, 0.0, 0.5, 0.5], [0.0] * 4, [0.0] * 4]
    assert hm.retired == ("b",) and hm.retired_at == {"b": 3}
    for ctx in ("default", "t"):  # the last column is the ledger's present state
        for i, block in enumerate(["a", "b", "c"]):
            state = led.state(block, ctx)
            assert hm.cells[ctx][i][-1] == pytest.approx(1 - state.remaining_fraction)
    empty = heatmap(
        [], blocks=["a"], contexts=["t"], filter_=make_filter(Accounting.BASIC, capacity=cap)
    )
    assert empty.cells["t"] == [[0.0] * 24]
    with pytest.raises(ValueError):
        heatmap(
            [],
            blocks=[],
            contexts=[],
            filter_=make_filter(Accounting.BASIC, capacity=cap),
            buckets=0,
        )
    led.dispose()

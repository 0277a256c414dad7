"""Contexts exist only when an administrator registers them: a new platform has none, so a block
spent in every real context retires and the coalition bound counts the real contexts only."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pandas as pd

from blockbudget import Budget
from blockbudget.platform import Platform
from blockbudget.store import Blocking, Unit

DAY = Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1))


def _platform(home: Path) -> Platform:
    p = Platform(home)
    p.create_stream("events", policy=Budget(epsilon=1.0), blocking=DAY)
    for day in range(2):
        start = pd.Timestamp("2024-01-01") + pd.Timedelta(days=day)
        p.ingest(
            "events",
            pd.DataFrame({"ts": [start + pd.Timedelta(hours=h) for h in range(3)], "v": [1, 2, 3]}),
        )
    return p


def test_a_new_platform_has_no_context(tmp_path: Path) -> None:
    p = _platform(tmp_path / "h")
    try:
        assert p.contexts() == [] and p.ledger.context_infos() == []
        assert p.coalition_contexts() == [] and p.coalition_epsilon("events") == 0.0
    finally:
        p.close()


def test_a_block_spent_in_both_real_contexts_retires(tmp_path: Path) -> None:
    p = _platform(tmp_path / "h")
    try:
        for name in ("ops", "ml"):
            p.add_context(name, description=f"team {name}")
        first, second = (m.block_id for m in p.store.blocks("events"))
        for name in ("ops", "ml"):
            with p.request("events", blocks=[first], budget=Budget(epsilon=1), context=name) as g:
                g.draw(Budget(epsilon=1), label="all")
        assert p.retire_exhausted("events") == [first]  # no context nobody created keeps it
        assert [b.block_id for b in p.ledger.blocks("events") if not b.retired] == [second]
        assert p.verify().ok
    finally:
        p.close()


def test_the_coalition_bound_counts_the_registered_contexts(tmp_path: Path) -> None:
    p = _platform(tmp_path / "h")
    try:
        for name in ("ops", "ml"):
            p.add_context(name)
        assert p.contexts() == ["ml", "ops"]
        assert p.coalition_epsilon("events") == 2.0  # 2 × ε_g with two teams
        first = p.store.blocks("events")[0].block_id
        p.add_context("old")
        with p.request("events", blocks=[first], budget=Budget(epsilon=0.1), context="old") as g:
            g.draw(Budget(epsilon=0.1), label="q")
        p.add_context("unused")
        assert p.coalition_epsilon("events") == 4.0
        p.close_context("old")  # it charged: it still counts
        p.close_context("unused")  # it never charged: it no longer counts
        assert p.contexts() == ["ml", "ops"]
        assert p.coalition_contexts() == ["ml", "old", "ops"]
        assert p.coalition_epsilon("events") == 3.0
        assert p.verify().ok
    finally:
        p.close()

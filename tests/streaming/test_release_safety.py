"""A platform stream release's slots never move, are read once when closed, never stall, and
cannot be replayed by editing or deleting the saved state (the ledger is the source of truth)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from blockbudget.budget import Budget
from blockbudget.errors import InvalidRequestError
from blockbudget.platform import Platform
from blockbudget.store import Blocking, Unit
from blockbudget.streaming import (
    Compression,
    HistogramConfig,
    HistogramStream,
    Horizon,
    PlatformStreamRelease,
    SlotSource,
)

DAY = Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1))
SOURCE = SlotSource(item_column="page", user_column="user", domain=("a", "b"), min_users=10)
ONE = HistogramConfig(epsilon=1.0, window=1, warmup=False)


def _rows(days: list[int], *, users: int = 30, hour: int = 0, page: str = "") -> pd.DataFrame:
    out = []
    for d in days:
        for u in range(users):
            ts = pd.Timestamp("2024-01-10") + pd.Timedelta(days=d, hours=hour)
            out.append((ts, page or ("a" if u % 3 else "b"), f"u{u}"))
    return pd.DataFrame(out, columns=["ts", "page", "user"])


def _platform(tmp_path: Path, days: list[int]) -> Platform:
    p = Platform(tmp_path / "home")
    p.create_stream("v", policy=Budget(epsilon=10), blocking=DAY)
    p.add_context("dash")
    p.ingest("v", _rows(days))
    return p


def _charged(p: Platform) -> dict[str, int]:
    return {s.block: s.charged[0] for s in p.ledger.states(stream="v", context="dash")}


def test_an_earlier_block_arriving_later_does_not_renumber_the_slots(tmp_path: Path) -> None:
    p = _platform(tmp_path, [1, 2, 3])
    rel = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=ONE, seed=1)
    assert [r.slot.key[:10] for r in rel.run()] == ["2024-01-11", "2024-01-12", "2024-01-13"]
    p.ingest("v", _rows([0, 4, 5]))
    again = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=ONE, seed=1)
    out = again.run()
    assert [(r.slot.t, r.slot.key[:10]) for r in out] == [(4, "2024-01-14"), (5, "2024-01-15")]
    keys = [e["key"] for e in again.log]
    assert len(keys) == len(set(keys)) == 5  # no day read twice, none skipped
    assert _charged(p)["v/2024-01-10"] == 0  # before the origin: never read
    p.close()


def test_a_slot_is_released_once_its_window_has_ended(tmp_path: Path) -> None:
    p = _platform(tmp_path, [0])
    p.ingest("v", _rows([1], users=5))  # day 1 has only begun to arrive
    rel = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=ONE, seed=1)
    # default grace: one window after its end; at 2024-01-12 00:00 only day 0 has closed
    assert [r.slot.key[:10] for r in rel.run(now=datetime(2024, 1, 12))] == ["2024-01-10"]
    assert rel.run(now=datetime(2024, 1, 12, 23)) == []
    p.ingest("v", _rows([1], users=30, hour=12, page="b"))  # the rest of day 1
    assert not any(m.block_id.endswith("#2") for m in p.store.blocks("v"))  # nothing late
    out = rel.run(now=datetime(2024, 1, 13))
    assert [r.slot.key[:10] for r in out] == ["2024-01-11"]
    assert out[0].slot.blocks == ("v/2024-01-11",)
    p.close()


def test_a_late_slot_reads_every_row_of_its_day(tmp_path: Path) -> None:
    p = Platform(tmp_path / "home")
    p.create_stream("v", policy=Budget(epsilon=1e10), blocking=DAY)
    p.add_context("dash")
    p.ingest("v", _rows([0]))
    p.ingest("v", _rows([1], users=5))
    config = HistogramConfig(
        epsilon=1e9, window=1, warmup=False, horizon=Horizon.INSTANTANEOUS, smoothing=0.0
    )
    rel = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=config, seed=1)
    rel.run(now=datetime(2024, 1, 12))
    p.ingest("v", _rows([1], users=30, hour=12, page="b"))
    (out,) = rel.run(now=datetime(2024, 1, 13))
    # day 1: users u0–u4 saw their page and 'b'; u5–u29 only 'b' (30 users, ≥ n_min)
    users = np.array([*range(5), *range(30)])
    items = np.array([0 if u % 3 else 1 for u in range(5)] + [1] * 30)
    np.testing.assert_allclose(out.release.pdf, Compression(2, 10).pdf(users, items), atol=1e-6)
    p.close()


def test_a_block_that_cannot_pay_is_an_empty_slot_and_does_not_stall(tmp_path: Path) -> None:
    p = _platform(tmp_path, [0, 1, 2, 3])
    g = p.request("v", blocks=["v/2024-01-12"], budget=Budget(epsilon=10), context="dash")
    g.draw(Budget(epsilon=10), label="spends the whole block")
    g.close()
    rel = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=ONE, seed=1)
    out = rel.run()
    assert [r.release.released for r in out] == [True] * 4
    assert [bool(e["read"]) for e in rel.log] == [True, True, False, True]
    p.ingest("v", _rows([4]))
    assert [r.slot.key[:10] for r in rel.run()] == ["2024-01-14"]
    p.close()


def _tamper(path: Path, **state: int) -> None:
    data = json.loads(path.read_text())
    data["state"].update(state)
    if state.get("t") == 0:
        data["log"] = []
    path.write_text(json.dumps(data))


def test_an_edited_or_deleted_state_cannot_read_the_same_blocks_again(tmp_path: Path) -> None:
    p = _platform(tmp_path, [0, 1, 2, 3, 4, 5])
    config = HistogramConfig(epsilon=1.0, window=2)
    rel = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=config, seed=1)
    rel.run()
    charged, spent = _charged(p), rel.spent
    path = Path(p.home) / "releases" / "v" / "default.json"
    saved = path.read_text()

    def again() -> PlatformStreamRelease:
        r = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=config)
        out = r.run()
        # every window is one the ledger says was charged: skipped, nothing read or published
        assert out and not any(x.release.released for x in out)
        assert all(e["lost"] for e in r.log) and r.spent == spent
        return r

    _tamper(path, spent_units=0, t=0, window=1)  # a consistent fresh state
    again()
    path.unlink()  # a lost state: the same
    again()
    for edit in ({"spent_units": 0}, {"window": 10**9, "t": 0}, {"window": 2}):
        path.write_text(saved)
        _tamper(path, **edit)
        with pytest.raises(InvalidRequestError, match="does not match the ledger"):
            PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=config)
    assert _charged(p) == charged  # nothing read or charged again
    p.close()


def test_a_crash_between_the_draws_and_the_save_loses_that_window_only(tmp_path: Path) -> None:
    p = _platform(tmp_path, [0, 1, 2, 3])
    rel = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=ONE, seed=1)
    rel.run(max_windows=1)
    path = Path(p.home) / "releases" / "v" / "default.json"
    before_crash = path.read_text()
    rel.run(max_windows=1)  # window 2 charged and saved …
    path.write_text(before_crash)  # … but as if the save never happened
    charged = _charged(p)
    again = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=ONE, seed=2)
    out = again.run()
    assert [(r.slot.t, r.release.released) for r in out] == [(2, False), (3, True), (4, True)]
    assert again.log[1]["lost"] and again.log[1]["read"] == ["v/2024-01-11"]
    assert _charged(p)["v/2024-01-11"] == charged["v/2024-01-11"]  # not charged twice
    budgets = [Decimal(repr(again._hist.window_budget(j))) for j in (1, 2, 3, 4)]
    assert Decimal(again.spent) == sum(budgets)  # the lost window counts
    p.close()


def test_a_slot_pdf_is_validated_before_the_stream_moves() -> None:
    s = HistogramStream(config=ONE, compression=Compression(2, 10), seed=1)
    for bad in (np.array([1.0]), np.array([np.nan, 1.0]), np.array([0.7, 0.7])):
        with pytest.raises(InvalidRequestError, match="PDF"):
            s.step_pdf(bad)
    assert s.t == 0 and s.step_pdf(np.array([0.5, 0.5])).t == 1


def test_rows_without_a_user_id_are_dropped(tmp_path: Path) -> None:
    p = Platform(tmp_path / "home")
    p.create_stream("v", policy=Budget(epsilon=1e10), blocking=DAY)
    p.add_context("dash")
    rows = _rows([0], users=12, page="a")
    nulls = pd.DataFrame({"ts": rows["ts"][:20].to_numpy(), "page": "b", "user": None})
    p.ingest("v", pd.concat([rows, nulls], ignore_index=True))
    config = HistogramConfig(
        epsilon=1e9, window=1, warmup=False, horizon=Horizon.INSTANTANEOUS, smoothing=0.0
    )
    rel = PlatformStreamRelease(p, "v", context="dash", source=SOURCE, config=config, seed=1)
    (out,) = rel.run()
    np.testing.assert_allclose(out.release.pdf, [1.0, 0.0], atol=1e-6)  # not a "None" user
    p.close()

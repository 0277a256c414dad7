"""Stream releases read their slots from a platform stream's blocks and charge exactly those
blocks: from Python, the CLI and HTTP."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, units_up
from blockbudget.cli import app
from blockbudget.errors import InvalidRequestError
from blockbudget.mechanisms.noise import NoiseKind
from blockbudget.platform import Platform
from blockbudget.store import Blocking, Unit
from blockbudget.streaming import (
    Compression,
    HistogramConfig,
    Horizon,
    PlatformStreamRelease,
    SlotSource,
)

DOMAIN = ("a", "b", "c")
DAY = Blocking(unit=Unit.TIME, column="ts", window=timedelta(days=1))


def _rows(days: list[int], *, users: int = 40, seed: int = 0) -> pd.DataFrame:
    """Each user visits 1–3 pages a day; page 'a' is the heavy one. Day numbers may skip."""
    rng = np.random.default_rng(seed)
    out = []
    for d in days:
        for u in range(users):
            for _ in range(int(rng.integers(1, 4))):
                page = rng.choice(["a", "b", "c", "zzz"], p=[0.7, 0.2, 0.05, 0.05])
                out.append((pd.Timestamp("2024-01-01") + pd.Timedelta(days=d), page, f"u{u}"))
    return pd.DataFrame(out, columns=["ts", "page", "user"])


def _platform(
    tmp_path: Path, *, epsilon: float = 10.0, accounting: Accounting = Accounting.BASIC
) -> Platform:
    p = Platform(tmp_path / "home")
    p.create_stream("visits", policy=Budget(epsilon=epsilon), blocking=DAY, accounting=accounting)
    p.add_context("dash")
    p.ingest("visits", _rows([0, 1, 3, 4, 5]))  # day 2 has no block: an empty slot
    return p


SOURCE = SlotSource(item_column="page", user_column="user", domain=DOMAIN, min_users=20)


def _truth(frame: pd.DataFrame, day: int) -> np.ndarray:
    rows = frame[frame["ts"] == pd.Timestamp("2024-01-01") + pd.Timedelta(days=day)]
    rows = rows[rows["page"].isin(DOMAIN)]
    users = pd.factorize(rows["user"])[0]
    items = rows["page"].map({c: i for i, c in enumerate(DOMAIN)}).to_numpy()
    return Compression(3, 20).pdf(users, items)


def test_each_slot_is_read_and_charged_on_exactly_its_blocks(tmp_path: Path) -> None:
    p = _platform(tmp_path)
    config = HistogramConfig(epsilon=1.0, window=2, horizon=Horizon.INSTANTANEOUS, smoothing=0.0)
    rel = PlatformStreamRelease(p, "visits", context="dash", source=SOURCE, config=config, seed=1)
    slots = rel.slots()
    assert [s.key[:10] for s in slots] == [
        "2024-01-01",
        "2024-01-02",
        "2024-01-03",
        "2024-01-04",
        "2024-01-05",
        "2024-01-06",
    ]
    assert slots[2].blocks == ()  # the missing day
    out = rel.run()
    # warm-up windows of 1 and 1 slot, then windows of 2: all six slots answered
    assert [r.release.released for r in out] == [True, True, False, True, False, True]
    budgets = [rel._hist.window_budget(j) for j in (1, 2, 3, 4)]
    window_of = {s.slot.key: s.release.window for s in out}
    charged = {st.block: st.charged[0] for st in p.ledger.states(stream="visits", context="dash")}
    for s in slots:
        for block in s.blocks:
            assert charged[block] == units_up(Decimal(repr(budgets[window_of[s.key] - 1])))
    assert Decimal(rel.spent) == sum(Decimal(repr(b)) for b in budgets) <= Decimal(1)
    assert all(st.reserved == (0, 0) for st in p.ledger.states(stream="visits"))
    p.close()


def test_huge_budget_gives_the_true_window_mean(tmp_path: Path) -> None:
    p = _platform(tmp_path, epsilon=1e13)
    frame = _rows([0, 1, 3, 4, 5])
    config = HistogramConfig(epsilon=1e12, window=2, horizon=Horizon.INSTANTANEOUS, smoothing=0.0)
    rel = PlatformStreamRelease(p, "visits", context="dash", source=SOURCE, config=config, seed=1)
    out = rel.run()
    # the last window holds days 4 and 5 (2024-01-05, -06): the mean of their compressed PDFs
    expected = (_truth(frame, 4) + _truth(frame, 5)) / 2
    np.testing.assert_allclose(out[-1].release.pdf, expected, atol=1e-9)
    assert expected[0] > 0.6  # and it carries the data's heavy page
    p.close()


def test_a_later_call_continues_and_a_refusal_charges_nothing(tmp_path: Path) -> None:
    p = _platform(tmp_path, epsilon=0.5)
    config = HistogramConfig(epsilon=1.0, window=2)
    first = PlatformStreamRelease(p, "visits", context="dash", source=SOURCE, config=config, seed=1)
    # window 1's budget (ε·0.61/2 = 0.30) fits the blocks' 0.5; so does window 2's
    assert len(first.run(max_windows=2)) == 2
    before = [(s.block, s.charged, s.reserved) for s in p.ledger.states(stream="visits")]
    again = PlatformStreamRelease(p, "visits", context="dash", source=SOURCE, config=config, seed=1)
    assert again.slots_done == 2 and again.spent == first.spent
    greedy = _overspend(p)  # the spent blocks cannot pay: every slot is released as empty
    assert all(e["read"] == [] and e["blocks"] for e in greedy.log)
    after = [(s.block, s.charged, s.reserved) for s in p.ledger.states(stream="visits")]
    assert after == before
    # A window that not even a fresh block could pay is refused before anything runs.
    never = HistogramConfig(epsilon=1.0, window=1, warmup=False)  # window 1: ε·0.61 > 0.5
    with pytest.raises(InvalidRequestError, match="more than a fresh block"):
        PlatformStreamRelease(p, "visits", context="dash", source=SOURCE, config=never, name="n")
    with pytest.raises(InvalidRequestError, match="other parameters"):
        PlatformStreamRelease(
            p,
            "visits",
            context="dash",
            source=SOURCE,
            config=HistogramConfig(epsilon=2.0, window=2),
            seed=1,
        )
    p.close()


def _overspend(p: Platform) -> PlatformStreamRelease:
    """A release whose first window (ε·0.61/2 = 0.30 per block) the blocks that a first
    release already charged 0.30 of their 0.5 cannot pay."""
    config = HistogramConfig(epsilon=1.0, window=2)
    rel = PlatformStreamRelease(
        p, "visits", context="dash", source=SOURCE, config=config, seed=1, name="greedy"
    )
    rel.run(max_windows=1)
    return rel


def test_gaussian_needs_an_rdp_stream_and_is_charged_as_a_curve(tmp_path: Path) -> None:
    p = _platform(tmp_path)
    gauss = HistogramConfig(epsilon=1.0, delta=1e-6, noise=NoiseKind.GAUSSIAN, window=2)
    with pytest.raises(InvalidRequestError, match="RDP"):
        PlatformStreamRelease(p, "visits", context="dash", source=SOURCE, config=gauss, seed=1)
    p.close()
    q = Platform(tmp_path / "rdp")
    q.create_stream(
        "visits", policy=Budget(epsilon=10, delta=1e-6), blocking=DAY, accounting=Accounting.RDP
    )
    q.add_context("dash")
    q.ingest("visits", _rows([0, 1]))
    rel = PlatformStreamRelease(q, "visits", context="dash", source=SOURCE, config=gauss, seed=1)
    assert len(rel.run()) == 2
    assert all(any(x > 0 for x in s.charged) for s in q.ledger.states(stream="visits"))
    q.close()


def test_cli_runs_and_shows_a_release(tmp_path: Path) -> None:
    p = _platform(tmp_path)
    p.close()
    home = str(tmp_path / "home")
    runner = CliRunner()
    args = [
        "release",
        "run",
        "visits",
        "--item-column",
        "page",
        "--user-column",
        "user",
        "--domain",
        "a,b,c",
        "--min-users",
        "20",
        "--epsilon",
        "1",
        "--window",
        "2",
        "--context",
        "dash",
        "--home",
        home,
        "--name",
        "pages",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "6 slot(s) answered" in r.output and "4 window(s) released" in r.output
    r = runner.invoke(app, ["release", "show", "visits", "--name", "pages", "--home", home])
    assert r.exit_code == 0, r.output and "2024-01-06" in r.output
    saved = json.loads((Path(home) / "releases" / "visits" / "pages.json").read_text())
    assert all(e["secure_noise"] for e in saved["log"])  # the CLI uses OpenDP's samplers
    r = runner.invoke(app, [*args[:-2], "--name", "pages", "--epsilon", "2"])
    assert r.exit_code == 2 and "other parameters" in r.output


def test_one_run_at_a_time_and_a_stale_object_continues_from_the_saved_state(
    tmp_path: Path,
) -> None:
    import fcntl

    p = _platform(tmp_path)
    config = HistogramConfig(epsilon=1.0, window=2)
    a = PlatformStreamRelease(p, "visits", context="dash", source=SOURCE, config=config, seed=1)
    b = PlatformStreamRelease(p, "visits", context="dash", source=SOURCE, config=config, seed=1)
    lock_path = tmp_path / "home" / "releases" / "visits" / "default.json.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    before = [(s.block, s.charged) for s in p.ledger.states(stream="visits")]
    with open(lock_path, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(InvalidRequestError, match="running in another call"):
            a.run()
        fcntl.flock(held, fcntl.LOCK_UN)
    assert [(s.block, s.charged) for s in p.ledger.states(stream="visits")] == before
    assert len(a.run(max_windows=2)) == 2  # slots 1 and 2
    # b was made before a ran: it re-reads the saved state and goes on from slot 3
    out = b.run()
    assert [r.slot.t for r in out] == [3, 4, 5, 6] and b.spent != a.spent
    p.close()


def test_cli_run_warns_when_the_instantaneous_answer_is_noise(tmp_path: Path) -> None:
    p = _platform(tmp_path)
    p.close()
    home = str(tmp_path / "home")
    args = ["release", "run", "visits", "--item-column", "page", "--user-column", "user"]
    args += ["--domain", "a,b,c", "--min-users", "20", "--epsilon", "1", "--window", "2"]
    args += ["--context", "dash", "--home", home, "--max-windows", "1"]
    runner = CliRunner()
    r = runner.invoke(app, [*args, "--horizon", "instantaneous", "--name", "inst"])
    assert r.exit_code == 0, r.output
    assert "warning" in r.output and "instantaneous noise per bin" in r.output
    r = runner.invoke(app, [*args, "--name", "acc"])
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    r = runner.invoke(
        app,
        [
            "release",
            "recommend",
            "--domain-size",
            "3",
            "--min-users",
            "20",
            "--epsilon",
            "1",
            "--window",
            "2",
            "--answer",
            "instantaneous",
        ],
    )
    assert r.exit_code == 0 and "windowed: " in r.output, r.output

"""Shared helpers for the task queue tests: a small real platform and a fake clock."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from blockbudget import Budget
from blockbudget.platform import Platform
from blockbudget.store import Blocking

#: Noise seed of every test queue (results then say secure_noise=False).
SEED = 7


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_platform(home: Path, *, days: int = 6, epsilon: float = 1.0) -> Platform:
    """A platform with stream ``s`` (one block per day, ε_g = ``epsilon``), context ``team``,
    and ``days`` blocks of 3 rows each (v = 1, 2, 3)."""
    p = Platform(home, engine="arrow")
    p.create_stream("s", policy=Budget(epsilon=epsilon), blocking=Blocking.by_time("t"))
    p.add_context("team")
    add_days(p, "2024-01-01", days)
    return p


def add_days(p: Platform, start: str, days: int) -> None:
    """Ingest ``days`` more daily blocks of 3 rows each, from ``start``."""
    ts = pd.date_range(start, periods=days, freq="D").repeat(3)
    p.ingest("s", pd.DataFrame({"t": ts, "v": [1.0, 2.0, 3.0] * days}))


def grant_reservations(p: Platform, principal: str) -> list[str]:
    """Ids of the ledger reservations made as grants of ``principal``'s tasks."""
    prefix = f"{principal.replace(':', '%3A')}:queue:"
    return [r.id for r in p.ledger.reservations() if (r.request_id or "").startswith(prefix)]

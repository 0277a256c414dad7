"""A small platform for query tests: hourly rows over two days, exact answers by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget
from blockbudget.platform import Platform
from blockbudget.store import Blocking

#: 48 hourly rows over 2 days: v = 0..47 with every 7th value missing, c cycles a/b/c/d.
DAY = pd.Timestamp("2024-03-01")


def frame() -> pd.DataFrame:
    hours = np.arange(48)
    v = hours.astype(float)
    v[hours % 7 == 3] = np.nan
    return pd.DataFrame(
        {
            "time": [DAY + pd.Timedelta(hours=int(h)) for h in hours],
            "v": v,
            "n": hours % 5,
            "c": [["a", "b", "c", "d"][h % 4] for h in hours],
        }
    )


def platform(
    home: Path,
    *,
    accounting: Accounting = Accounting.BASIC,
    epsilon: float = 1e6,
    engine: str = "arrow",
) -> Platform:
    """A platform with stream ``s`` (two daily blocks of :func:`frame`) and context ``a``."""
    p = Platform(home, engine=engine)
    policy = Budget(epsilon=epsilon, delta=1e-6)
    p.create_stream("s", policy=policy, blocking=Blocking.by_time("time"), accounting=accounting)
    p.add_context("a")
    p.ingest("s", frame())
    return p


def state(p: Platform, stream: str = "s") -> tuple[int, tuple[bool, ...]]:
    """The audit log's length and every block's sealed flag."""
    return len(p.ledger.events()), tuple(m.sealed for m in p.store.blocks(stream))

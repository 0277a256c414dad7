"""A resampled stand-in of Sage's data scale for seed 004 Fig. 8, and a disk cache of profiles.

Seed ``004_2b5d216070ae2ded.txt`` §5.4 runs its workload on 37M taxi rides (16K an hour, one
block an hour); our 2013 flights stream has 0.28M rows after the held-out set. The workload
simulator (:mod:`blockbudget.experiments.sage_workload`) reads only *profiles* — the SLAed
validator's decision at each (ε, rows) — and, like Sage's own simulator, assumes that a window's
rows are i.i.d. draws from one distribution (seed 004 §3.3, "new data from the same
distribution"). Rows drawn with replacement from the (shuffled) stream are exactly i.i.d. draws
from its empirical distribution, so profiles measured on them are what our pipelines and
validators would decide on a stream of that size drawn from that distribution: a fair stand-in
for the simulator. They are **not** a stand-in for Tab. 2 or Fig. 6, whose claims are about a
model's quality on unseen rows: a resampled window repeats rows, so training and test sets share
rows and the held-out error is optimistic. This module is only used by ``sage-workload``.

The resampling is public and seeded (``numpy.random.default_rng(seed + RESAMPLE_SALT)``), so
anyone can regenerate the rows; it is a benchmark stand-in, never a release.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from blockbudget.apps.flights.features import Granularity, speed_keys, year_frame
from blockbudget.experiments.sage_common import Split

#: Weeks of flights per stand-in block (8 × ≈ 6,300 ≈ 50,400 rows, ~3 hours of Sage's taxi rides).
STANDIN_WEEKS_PER_BLOCK = 8
#: Offsets the resampling seed from the run's seed (so it is not the shuffle's seed).
RESAMPLE_SALT = 20_130_101
#: Bump when the measurement changes, so stale cached profiles are not reused.
PROFILE_VERSION = 1


class Scale(Enum):
    """Which data scale ``sage-workload`` runs at."""

    ORIGINAL = "original"  # the 2013 flights stream at its own size, 1 block = 1 week
    PAPER_STANDIN = "paper-standin"  # resampled rows at Sage's scale, 1 block = 8 weeks
    BOTH = "both"  # the two side by side
    #: Ablation: the stand-in's resampled rows and 256-week profiles, but 1 block = 1 week as in
    #: the original — separates "profiles flat beyond 32 weeks" from "rows per block".
    STANDIN_WEEKLY = "paper-standin-weekly"

    def scales(self) -> tuple[Scale, ...]:
        """The concrete scales this choice runs (BOTH → original, then the stand-in)."""
        return (Scale.ORIGINAL, Scale.PAPER_STANDIN) if self is Scale.BOTH else (self,)


def resampled_split(split: Split, rows: int, *, seed: int) -> Split:
    """``split`` with its stream replaced by ``rows`` rows drawn with replacement from it.

    The held-out set is kept as is (the workload simulator never reads it).

    Args:
        split: the stream to resample (shuffled or not: draws are uniform over its rows).
        rows: how many rows to draw.
        seed: the public resampling seed (``RESAMPLE_SALT`` is added).

    Returns:
        A :class:`Split` whose stream has ``rows`` rows.

    Example:
        >>> import numpy as np
        >>> from blockbudget.experiments.sage_common import Split, TaskKind
        >>> x = np.arange(10.0).reshape(5, 2)
        >>> s = Split(TaskKind.TAXI, x, x[:, 0], x, x[:, 0], 0.0, 0.0, np.zeros(5, np.int64))
        >>> big = resampled_split(s, 12, seed=0)
        >>> big.stream_x.shape, bool(np.all(big.stream_x[:, 1] == big.stream_x[:, 0] + 1))
        ((12, 2), True)
    """
    idx = np.random.default_rng(seed + RESAMPLE_SALT).integers(0, len(split.stream_y), rows)
    return replace(
        split,
        stream_x=split.stream_x[idx],
        stream_y=split.stream_y[idx],
        stream_day=split.stream_day[idx],
    )


def resampled_keys(granularity: Granularity, rows: int, *, seed: int) -> NDArray[np.int64]:
    """``rows`` public group keys (an average-speed statistic's hour / weekday / week of month)
    drawn with replacement from the 2013 flights whose key is known."""
    keys = speed_keys(year_frame(), granularity)
    keys = keys[keys >= 0]
    idx = np.random.default_rng(seed + RESAMPLE_SALT + 1).integers(0, len(keys), rows)
    return keys[idx]


def cache_path(out_dir: Path, kind: str, spec: dict[str, Any]) -> Path:
    """Where profiles measured with ``spec`` (every parameter that changes them) are kept."""
    digest = hashlib.sha256(
        json.dumps({"version": PROFILE_VERSION, **spec}, sort_keys=True).encode()
    ).hexdigest()[:16]
    return out_dir / "profile-cache" / f"{kind}-{digest}.json"


def load_tables(path: Path) -> dict[str, Any] | None:
    """The cached tables at ``path`` (None when absent or unreadable: they are re-measured)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def store_tables(path: Path, tables: dict[str, Any]) -> None:
    """Write tables atomically (a partial file is never read back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(tables))
    tmp.replace(path)

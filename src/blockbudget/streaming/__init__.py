"""DPI: user-level differentially private release of infinite streams (seed 002).

See ``docs/dpi.md``. Public API:

* :class:`DPIStream`, :class:`DPIConfig`, :class:`SlotRelease`, :class:`Horizon`,
  :class:`AllocationKind` — the release pipeline (Alg. 1).
* :class:`Compression` — per-slot user records → PDF with Δ_P = 2/n_min (§4.1).
* :class:`SynopsisPool`, :class:`PoolDesign` — the 0-DP synopsis pool (Alg. 2).
* :class:`QueryPool` — point, range and aggregate queries.
* :class:`DPISeries`, :func:`dilog`, :func:`dilog_inverse` — Thm 5.4's series and Li₂;
  :func:`zeta_for_horizon` and :meth:`DPIConfig.for_horizon` — ζ and Λ for a known horizon.
* :class:`RandomBudgetAllocation`, :class:`RangeBudgetAllocation` — Alg. 3 and Alg. 4;
  :class:`SequenceTerms` lets Alg. 3 draw from a seed-003 sequence (:mod:`blockbudget.series`).
* :class:`StreamAccountant`, :func:`charge_stream_total` — Thm 5.1 accounting, ledger path.
* :class:`HistogramStream`, :class:`HistogramConfig`, :class:`ReleaseMode`, :class:`Combine` —
  windowed and per-slot Laplace/Gaussian histogram releases (docs/streaming.md);
  :class:`PlatformStreamRelease`, :class:`SlotSource` — the same, reading and charging a
  platform stream's blocks; :func:`recommend` — which mode a configuration supports.
* :class:`SecureSelector` (default), :class:`SeededSelector` (tests/experiments only).
"""

from blockbudget.streaming.accountant import StreamAccountant, charge_stream_total
from blockbudget.streaming.allocation import (
    Allocation,
    BudgetAllocator,
    RandomBudgetAllocation,
    RangeBudgetAllocation,
    SequenceTerms,
)
from blockbudget.streaming.compression import Compression
from blockbudget.streaming.config import AllocationKind, DPIConfig, Estimator, Horizon
from blockbudget.streaming.histogram import (
    Combine,
    HistogramConfig,
    HistogramRelease,
    HistogramState,
    HistogramStream,
    ReleaseMode,
    project_to_simplex,
    zcdp_rho,
)
from blockbudget.streaming.platform_release import (
    PlatformStreamRelease,
    ReleasedSlot,
    SlotSource,
    StreamSlot,
)
from blockbudget.streaming.queries import QueryPool
from blockbudget.streaming.recommend import ModeForecast, Recommendation, recommend
from blockbudget.streaming.release import (
    DPIStream,
    SlotRelease,
    clipped_score,
    tilt_towards,
)
from blockbudget.streaming.selection import SecureSelector, SeededSelector, Selector
from blockbudget.streaming.series import (
    DPISeries,
    alpha_for_cost,
    alpha_from_eta,
    dilog,
    dilog_inverse,
    direction_cost,
    eta_from_alpha,
    zeta_for_horizon,
)
from blockbudget.streaming.synopses import PoolDesign, SynopsisPool

__all__ = [
    "Allocation",
    "AllocationKind",
    "BudgetAllocator",
    "Combine",
    "Compression",
    "DPIConfig",
    "DPISeries",
    "DPIStream",
    "Estimator",
    "HistogramConfig",
    "HistogramRelease",
    "HistogramState",
    "HistogramStream",
    "Horizon",
    "ModeForecast",
    "PlatformStreamRelease",
    "PoolDesign",
    "QueryPool",
    "RandomBudgetAllocation",
    "RangeBudgetAllocation",
    "Recommendation",
    "ReleaseMode",
    "ReleasedSlot",
    "SecureSelector",
    "SeededSelector",
    "Selector",
    "SequenceTerms",
    "SlotRelease",
    "SlotSource",
    "StreamAccountant",
    "StreamSlot",
    "SynopsisPool",
    "alpha_for_cost",
    "alpha_from_eta",
    "charge_stream_total",
    "clipped_score",
    "dilog",
    "dilog_inverse",
    "direction_cost",
    "eta_from_alpha",
    "project_to_simplex",
    "recommend",
    "tilt_towards",
    "zcdp_rho",
    "zeta_for_horizon",
]

"""DPI's query pool: point, range and aggregate (linear) queries over a PDF.

Seed ``002_e6d4c77f2abb3a16.txt`` §2.1, §4.2 ("Point Queries, Range Queries, Aggregation Queries"),
Alg. 1 (the pool Q, sampled per P_Q). Every query is linear in the PDF, ``q(P) = Σ_i w_i·P_i`` with
``|w_i| ≤ 1``, so it moves by at most ``max|w|·‖P − P'‖₁ ≤ Δ_P`` between neighbouring slots — the
sensitivity compression of §4.1 carried to the queries. Whether a query is asked of the slot's PDF
(instantaneous) or of the running mean of all slot PDFs (accumulative) is the stream's
:class:`~blockbudget.streaming.release.Horizon`; the running mean moves by at most Δ_P too.

Kinds: ``point i`` (w = e_i), ``range [lo, hi)`` (w = 1 on the range; answered through a prefix
sum, so any mix of ranges costs O(k + m)), ``linear w`` (e.g. the mean of a public per-item value
scaled into [0, 1]: an aggregate query).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from blockbudget.decimals import plain_fields
from blockbudget.errors import InvalidRequestError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class QueryPool:
    """Point, range and linear queries over a domain of size k (query ids: points, then ranges,
    then linear rows).

    Attributes:
        domain_size: k.
        points: item of each point query.
        range_lo / range_hi: bounds ``[lo, hi)`` of each range query.
        linear: an L × k matrix of linear weights in [−1, 1].
    """

    domain_size: int
    points: IntArray = field(repr=False)
    range_lo: IntArray = field(repr=False)
    range_hi: IntArray = field(repr=False)
    linear: FloatArray = field(repr=False)

    def __post_init__(self) -> None:
        plain_fields(self)  # NumPy scalars as Python numbers
        k = self.domain_size
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidRequestError(f"domain_size must be an int >= 1, got {k!r}")
        if self.points.ndim != 1 or (
            self.points.size and (self.points.min() < 0 or self.points.max() >= k)
        ):
            raise InvalidRequestError(f"point queries must name items in [0, {k})")
        if self.range_lo.shape != self.range_hi.shape or self.range_lo.ndim != 1:
            raise InvalidRequestError("range_lo and range_hi must be 1-d arrays of one length")
        if self.range_lo.size and (
            self.range_lo.min() < 0
            or self.range_hi.max() > k
            or np.any(self.range_lo >= self.range_hi)
        ):
            raise InvalidRequestError(f"ranges must satisfy 0 <= lo < hi <= {k}")
        if self.linear.ndim != 2 or self.linear.shape[1] != k:
            raise InvalidRequestError(f"linear weights must be an L x {k} matrix")
        if self.linear.size and (
            not np.all(np.isfinite(self.linear)) or np.abs(self.linear).max() > 1
        ):
            raise InvalidRequestError("linear weights must be finite and lie in [-1, 1]")
        if self.size == 0:
            raise InvalidRequestError("a query pool needs at least one query")

    @classmethod
    def standard(
        cls,
        domain_size: int,
        *,
        points: bool = True,
        dyadic_ranges: bool = True,
        values: FloatArray | None = None,
    ) -> QueryPool:
        """Every point query, the dyadic ranges (sizes k/2, k/4, … ≥ 2), and — when public per-item
        ``values`` are given — the aggregate query ``E[v]`` with v scaled into [0, 1]."""
        k = domain_size
        pts = np.arange(k, dtype=np.int64) if points else np.zeros(0, dtype=np.int64)
        los: list[int] = []
        his: list[int] = []
        if dyadic_ranges:
            width = k // 2
            while width >= 2:
                for lo in range(0, k - width + 1, width):
                    los.append(lo)
                    his.append(lo + width)
                width //= 2
        lin = np.zeros((0, k))
        if values is not None:
            v = np.asarray(values, dtype=np.float64)
            if v.shape != (k,) or not np.all(np.isfinite(v)):
                raise InvalidRequestError(f"values must be {k} finite numbers")
            span = float(v.max() - v.min())
            lin = ((v - v.min()) / span if span > 0 else np.zeros(k))[None, :]
        return cls(
            domain_size=k,
            points=pts,
            range_lo=np.asarray(los, dtype=np.int64),
            range_hi=np.asarray(his, dtype=np.int64),
            linear=lin,
        )

    @property
    def size(self) -> int:
        """m, the number of queries."""
        return int(self.points.size + self.range_lo.size + self.linear.shape[0])

    def max_weight(self) -> float:
        """``max_q max_i |w_qi|`` (1 for point and range queries)."""
        lin = float(np.abs(self.linear).max()) if self.linear.size else 0.0
        return max(1.0 if (self.points.size or self.range_lo.size) else 0.0, lin)

    def answers(self, pdf: FloatArray) -> FloatArray:
        """Every query's answer on one PDF, O(k + m)."""
        prefix = np.concatenate(([0.0], np.cumsum(pdf)))
        return np.concatenate(
            (pdf[self.points], prefix[self.range_hi] - prefix[self.range_lo], self.linear @ pdf)
        )

    def answers_at(self, pdf: FloatArray, ids: IntArray) -> FloatArray:
        """The answers of the queries ``ids`` on one PDF, O(k + len(ids))."""
        idx = np.asarray(ids, dtype=np.int64)
        n_points = self.points.size
        n_ranges = self.range_lo.size
        out = np.empty(idx.size)
        is_point = idx < n_points
        out[is_point] = pdf[self.points[idx[is_point]]]
        is_range = (idx >= n_points) & (idx < n_points + n_ranges)
        if np.any(is_range):
            prefix = np.concatenate(([0.0], np.cumsum(pdf)))
            j = idx[is_range] - n_points
            out[is_range] = prefix[self.range_hi[j]] - prefix[self.range_lo[j]]
        is_linear = idx >= n_points + n_ranges
        if np.any(is_linear):
            out[is_linear] = self.linear[idx[is_linear] - n_points - n_ranges] @ pdf
        return out

    def weights_at(self, query: int, positions: IntArray) -> FloatArray:
        """Query ``query``'s weight at each of ``positions`` (any shape)."""
        n_points = self.points.size
        n_ranges = self.range_lo.size
        if query < n_points:
            return np.asarray(positions == self.points[query], dtype=np.float64)
        if query < n_points + n_ranges:
            j = query - n_points
            inside = (positions >= self.range_lo[j]) & (positions < self.range_hi[j])
            return np.asarray(inside, dtype=np.float64)
        return np.asarray(self.linear[query - n_points - n_ranges][positions], dtype=np.float64)

    def pool_answers(self, query: int, units: IntArray) -> FloatArray:
        """The query's answer on every synopsis of a pool given as unit positions (N × n_u)."""
        if not 0 <= query < self.size:
            raise InvalidRequestError(f"query id must lie in [0, {self.size}), got {query!r}")
        return np.asarray(self.weights_at(query, units).mean(axis=1), dtype=np.float64)

    def describe(self, query: int) -> str:
        """A short label, e.g. ``point 3`` or ``range [0, 8)``."""
        n_points = self.points.size
        n_ranges = self.range_lo.size
        if query < n_points:
            return f"point {int(self.points[query])}"
        if query < n_points + n_ranges:
            j = query - n_points
            return f"range [{int(self.range_lo[j])}, {int(self.range_hi[j])})"
        return f"linear {query - n_points - n_ranges}"

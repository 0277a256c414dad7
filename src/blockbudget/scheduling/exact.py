"""Exact integer usage per block, beside the pool's conservative floats.

:class:`~blockbudget.scheduling.pool.Pool` decides most fit tests with float vectors that
round toward refusing (demands nudged up, capacities shrunk by :data:`CAPACITY_MARGIN`).
That fast path alone could never hand out a block's last budget: ten charges of 0.1 on a block
of ε_g = 1 sum, in float, to a hair above the shrunk capacity. :class:`ExactUsage` keeps what
the ledger keeps — per block, the filter's fixed-point features (integer units of
``1/UNIT``) of everything charged and reserved — so that a test the floats refuse by a hair
(within :data:`EXACT_WINDOW` of capacity) is decided by the filter's own integer test, the
same one :class:`~blockbudget.ledger.Ledger` makes.

Example:
    >>> usage = ExactUsage(2)
    >>> usage.add_block()
    0
    >>> for _ in range(10):
    ...     usage.charge(0, (10**17, 0))
    >>> usage.used(0)
    (1000000000000000000, 0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from blockbudget.accounting import Combine, Filter
from blockbudget.budget import UNIT
from blockbudget.errors import InternalError

__all__ = [
    "CAPACITY_MARGIN",
    "EXACT_WINDOW",
    "ExactUsage",
    "capacity_vector",
    "decide_rows",
    "nominal_vector",
    "to_units",
    "up_vector",
]

FloatArray = npt.NDArray[np.float64]
Vector = tuple[int, ...]

#: Relative shrink applied to every float capacity (toward refusing).
CAPACITY_MARGIN = 1e-9

#: A float test that refuses with every deciding feature within this relative distance of its
#: capacity is decided again, exactly, on integer features (the ledger's test).
EXACT_WINDOW = 1e-6


class ExactUsage:
    """Per-block charged and reserved usage in a filter's integer feature layout.

    Python ints (no overflow); each row is a tuple of ``dims`` units. Reserved usage never
    goes below zero (a release returns exactly what was reserved); a credit clamps charged
    usage at zero (the ledger is the truth).

    Args:
        dims: the length of a feature vector (the filter's ``dims``).
    """

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.charged: list[Vector] = []
        self.reserved: list[Vector] = []

    def add_block(self) -> int:
        """A new block with nothing used; returns its index."""
        self.charged.append((0,) * self.dims)
        self.reserved.append((0,) * self.dims)
        return len(self.charged) - 1

    def used(self, i: int) -> Vector:
        """Charged + reserved on block ``i``."""
        return tuple(c + r for c, r in zip(self.charged[i], self.reserved[i], strict=True))

    def charge(self, i: int, units: Sequence[int]) -> None:
        """Add ``units`` to what block ``i`` has charged."""
        self.charged[i] = tuple(c + u for c, u in zip(self.charged[i], units, strict=True))

    def credit(self, i: int, units: Sequence[int]) -> None:
        """Take ``units`` off what block ``i`` has charged, never below zero."""
        self.charged[i] = tuple(max(0, c - u) for c, u in zip(self.charged[i], units, strict=True))

    def reserve(self, i: int, units: Sequence[int]) -> None:
        """Add ``units`` to what block ``i`` holds reserved."""
        self.reserved[i] = tuple(r + u for r, u in zip(self.reserved[i], units, strict=True))

    def release(self, i: int, units: Sequence[int]) -> None:
        """Take ``units`` (a hold reserved earlier) off what block ``i`` holds reserved."""
        self.reserved[i] = tuple(
            max(0, r - u) for r, u in zip(self.reserved[i], units, strict=True)
        )

    def fits(
        self,
        filt: Filter,
        i: int,
        candidate: Sequence[int],
        hold: Sequence[int] | None = None,
    ) -> bool:
        """The filter's exact test on block ``i``: charged + reserved + ``candidate`` −
        ``hold`` (the asking task's own reservation there, available to it)."""
        used = [
            c + r + d for c, r, d in zip(self.charged[i], self.reserved[i], candidate, strict=True)
        ]
        if hold is not None:
            used = [u - h for u, h in zip(used, hold, strict=True)]
        return filt.fits(used)


def decide_rows(
    combine: Combine,
    used: FloatArray,
    caps: FloatArray,
    live: npt.NDArray[np.bool_],
    exact: Callable[[int], bool | None],
) -> npt.NDArray[np.bool_]:
    """The fit test of linear filters on float rows, exact near capacity.

    ``caps`` is (rows, 2, dims): the conservative capacity, and the capacity widened by
    :data:`EXACT_WINDOW`. Row k fits when its conservative float ``used`` is within the first
    on every feature (:attr:`Combine.ALL`: basic, GDP, advanced composition) or on some
    feature (:attr:`Combine.ANY`: some RDP order) and the block is ``live``. A live row
    refused but within the second on those deciding features is decided by ``exact(k)`` (the
    filter's integer test; None keeps the float refusal). Vectorised: one comparison for both
    tests; Python runs only for the rows near capacity.

    Raises:
        InternalError: ``combine`` is :attr:`Combine.FILTER` (no linear test: the filter
            decides, see :meth:`Pool.fits_many`).

    Example:
        >>> cap = 1.0 - 1e-9
        >>> caps = np.array([[[cap], [cap * (1 + EXACT_WINDOW)]]])
        >>> used = np.array([[1.0 + 2e-16]])
        >>> live = np.array([True])
        >>> decide_rows(Combine.ALL, used, caps, live, lambda k: True).tolist()
        [True]
        >>> decide_rows(Combine.ALL, used, caps, live, lambda k: None).tolist()
        [False]
    """
    if combine is Combine.FILTER:
        raise InternalError("a non-linear filter has no vectorised fit test: ask the filter")
    reduce = np.all if combine is Combine.ALL else np.any
    within = reduce(used[:, None, :] <= caps, axis=-1)
    ok: npt.NDArray[np.bool_] = within[:, 0] & live
    if ok.all():
        return ok
    near = within[:, 1] & live & ~ok
    if not near.any():
        return ok
    for k in np.flatnonzero(near).tolist():
        verdict = exact(k)
        if verdict is not None:
            ok[k] = verdict
    return ok


def add_units(a: Sequence[int], b: Sequence[int]) -> Vector:
    """Elementwise sum of two integer feature vectors."""
    return tuple(x + y for x, y in zip(a, b, strict=True))


def up_vector(units: Sequence[int]) -> FloatArray:
    """Float features of integer units, never below them (zero stays zero).

    ``u / UNIT`` is correctly rounded (Python's int true division); one ulp up makes it an
    upper bound.
    """
    return np.array([math.nextafter(u / UNIT, math.inf) if u else 0.0 for u in units])


def to_units(vec: Iterable[float]) -> Vector:
    """Float features back to fixed-point units, rounded up (for non-linear filter tests)."""
    return tuple(
        0 if v <= 0 else math.ceil(float(v) * (1 + CAPACITY_MARGIN) * UNIT) + 1 for v in vec
    )


def nominal_vector(filt: Filter) -> FloatArray:
    """The filter's capacity per feature as floats, unshrunk (inf where a non-linear test
    decides): a reference for fairness limits, not a safety bound."""
    units = filt.capacity_units()
    if units is None:
        return np.full(filt.dims, np.inf)
    return np.array([u / UNIT for u in units], dtype=np.float64)


def capacity_vector(filt: Filter) -> FloatArray:
    """Conservative float capacity per feature (inf where a non-linear test decides)."""
    vals = nominal_vector(filt)
    if filt.capacity_units() is None:
        return vals
    out: FloatArray = vals - np.abs(vals) * CAPACITY_MARGIN
    return out

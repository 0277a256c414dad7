"""Budget value types with exact, conservative arithmetic.

A :class:`Budget` is an (epsilon, delta) pair; an :class:`RdpCurve` is a Rényi-DP curve
epsilon(alpha) over the fixed order grid :data:`ALPHAS` (the grid PrivateKube and DPack use).

Exactness. Values are kept as :class:`decimal.Decimal`. A float argument is read as the shortest
decimal that round-trips to it (``0.1`` is the decimal 0.1, not the binary double just above it),
so sums are exact: ten charges of 0.1 compose to exactly 1.0 and fit a capacity of 1.0, and an
eleventh charge of 1e-9 does not. The mechanisms calibrate their noise to the same decimal value
and round the noise scale *up*, so the accounted epsilon is never below the one delivered.

Conservatism. Ledgers store budgets as integers in units of 10**-18 (:data:`UNIT`): a charge is
rounded *up* (:func:`units_up`) and a capacity *down* (:func:`units_down`), so no stored sum ever
rounds toward spending more than allowed. Values computed by floating-point formulas (RDP curves
of mechanisms) are bumped up by a relative 1e-12 before they are stored. The decimal machinery
(units, contexts, the canonical text) is :mod:`blockbudget.decimals`, re-exported here.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import (
    Context,
    Decimal,
    DecimalException,
    Inexact,
    InvalidOperation,
    localcontext,
)
from typing import Any, ClassVar

from blockbudget.decimals import DECIMAL_TEXT as DECIMAL_TEXT
from blockbudget.decimals import EXACT_CONTEXT as _EXACT
from blockbudget.decimals import FLOAT_SAFETY as FLOAT_SAFETY
from blockbudget.decimals import FLOOR_CONTEXT as _FLOOR
from blockbudget.decimals import INF_UNITS as INF_UNITS
from blockbudget.decimals import MAX_MAGNITUDE as MAX_MAGNITUDE
from blockbudget.decimals import MIN_MAGNITUDE as MIN_MAGNITUDE
from blockbudget.decimals import PRICE_CONTEXT as _PRICE
from blockbudget.decimals import UNIT as UNIT
from blockbudget.decimals import UNIT_EXPONENT as UNIT_EXPONENT
from blockbudget.decimals import Number as Number
from blockbudget.decimals import bump_up as bump_up
from blockbudget.decimals import canonical_decimal as canonical_decimal
from blockbudget.decimals import check_decimal_text as check_decimal_text
from blockbudget.decimals import clamp_decimal_up as _clamp_decimal_up
from blockbudget.decimals import clamp_up as _clamp_up
from blockbudget.decimals import diff_down as _diff_down
from blockbudget.decimals import fmt_decimal as _fmt
from blockbudget.decimals import from_units as from_units
from blockbudget.decimals import normalize_exactly as normalize_exactly
from blockbudget.decimals import plain_number, shortest_decimal
from blockbudget.decimals import shown as shown
from blockbudget.decimals import sum_up as _sum_up
from blockbudget.decimals import to_decimal as to_decimal
from blockbudget.decimals import units_down as units_down
from blockbudget.decimals import units_up as units_up
from blockbudget.errors import InvalidBudgetError

#: The fixed grid of Rényi orders (PrivateKube / DPack; the infinite order is not tracked).
ALPHAS: tuple[float, ...] = (1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 16.0, 32.0, 64.0)

#: The grid every version-1 stored RDP curve (no ``alphas`` in its JSON) was written on; frozen
#: forever, whatever :data:`ALPHAS` becomes.
ALPHAS_V1: tuple[Decimal, ...] = tuple(
    Decimal(a) for a in ("1.5", "1.75", "2", "2.5", "3", "4", "5", "6", "8", "16", "32", "64")
)
_ALPHAS_EXACT: tuple[Decimal, ...] = tuple(Decimal(repr(a)) for a in ALPHAS)


def _grid_text(grid: Sequence[Decimal]) -> list[str]:
    return [format(a.normalize(), "f") for a in grid]


#: Below this Δ/σ a Gaussian curve is priced in decimal (see :meth:`RdpCurve.gaussian`).
_TINY_RATIO = 1e-100


class Cost(ABC):
    """What one DP computation costs, in the currency of an accounting rule.

    Each kind of cost is a frozen value type that adds exactly (the composition its rule
    uses), knows whether it is zero, and has a versioned JSON form. Kinds register
    themselves by their ``kind`` name when their class is defined, so :func:`cost_from_json`
    reads every kind — including those an accounting rule brings in its own module (e.g. the
    μ of Gaussian DP) — without this module knowing them.

    Built in: :class:`Budget` (ε, δ) and :class:`RdpCurve` (Rényi DP on :data:`ALPHAS`).

    Example:
        >>> isinstance(Budget(epsilon=1), Cost), cost_from_json(Budget(epsilon=1).to_json())
        (True, Budget(epsilon='1', delta='0'))
    """

    #: The kind's stored name ("budget", "rdp", ...): unique, never reused for another layout.
    kind: ClassVar[str]

    _kinds: ClassVar[dict[str, type[Cost]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if kind is None:
            return
        known = Cost._kinds.get(kind)
        if known is not None and (known.__module__, known.__qualname__) != (
            cls.__module__,
            cls.__qualname__,
        ):
            raise TypeError(f"cost kind {kind!r} is already {known.__qualname__}")
        Cost._kinds[kind] = cls

    @abstractmethod
    def __add__(self, other: Any) -> Any:
        """Exact composition with another cost of the same kind."""

    @property
    @abstractmethod
    def is_zero(self) -> bool:
        """Whether this cost spends nothing."""

    @abstractmethod
    def scaled(self, factor: Number) -> Cost:
        """This cost times a non-negative exact factor in its own currency, never above the
        exact product (e.g. a share of a split)."""

    @classmethod
    @abstractmethod
    def zero(cls) -> Cost:
        """The cost of this kind that spends nothing."""

    @abstractmethod
    def __le__(self, other: Any) -> bool:
        """Whether this cost spends at most ``other`` in every feature of its kind."""

    @abstractmethod
    def meet(self, other: Cost) -> Cost:
        """The largest cost at most both ``self`` and ``other`` (of one kind).

        Raises:
            InvalidBudgetError: ``other`` is of another kind.
        """

    @abstractmethod
    def minus(self, other: Cost) -> Cost | None:
        """What is left of ``self`` after spending ``other`` from it, rounded down so that it
        never overstates what is left; None when ``other`` exceeds ``self``.

        Raises:
            InvalidBudgetError: ``other`` is of another kind.
        """

    @abstractmethod
    def add_up(self, other: Cost) -> Cost:
        """``self + other``, exact when the digits allow, else rounded up (never below the
        exact sum).

        Raises:
            InvalidBudgetError: ``other`` is of another kind, or the sum is no valid cost.
        """

    def same_kind(self, other: Cost) -> Any:
        """``other`` if it is of this cost's kind (for the binary operations above).

        Raises:
            InvalidBudgetError: it is not (the message names both kinds).
        """
        if type(other) is not type(self):
            raise InvalidBudgetError(
                f"cannot combine a cost of kind {self.kind} with one of kind "
                f"{getattr(other, 'kind', type(other).__name__)}"
            )
        return other

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The cost as exact decimal strings, one canonical form per value."""

    @classmethod
    @abstractmethod
    def from_json(cls, data: dict[str, Any]) -> Cost:
        """Inverse of :meth:`to_json` (every version this kind ever wrote)."""

    @classmethod
    def read_kind(cls, data: dict[str, Any]) -> type[Cost]:
        """The registered kind of a stored cost.

        Version 1 forms carry no ``kind``: ``{"rdp": [...]}`` is an RDP curve and
        ``{"epsilon", "delta"}`` a budget. Every later kind writes ``"kind"``.

        Raises:
            InvalidBudgetError: the kind is not registered (its module was never imported).
        """
        name = data.get("kind")
        if name is None:
            name = "rdp" if "rdp" in data else "budget"
        found = Cost._kinds.get(str(name))
        if found is None:
            raise InvalidBudgetError(
                f"unknown cost kind {shown(name)}; known: {', '.join(sorted(Cost._kinds))}"
            )
        return found


@dataclass(frozen=True, init=False, order=False)
class Budget(Cost):
    """An exact (epsilon, delta) budget.

    Args:
        epsilon: finite and >= 0.
        delta: in [0, 1).

    Raises:
        InvalidBudgetError: when a value is NaN, infinite, negative, or delta >= 1.

    Example:
        >>> sum([Budget(epsilon=0.1)] * 10, Budget.zero()) <= Budget(epsilon=1.0)
        True
    """

    kind: ClassVar[str] = "budget"

    epsilon: Decimal
    delta: Decimal

    def __init__(self, *, epsilon: Number, delta: Number = 0) -> None:
        eps = to_decimal(epsilon, name="epsilon")
        dl = to_decimal(delta, name="delta")
        if eps.is_infinite() or eps < 0:
            raise InvalidBudgetError(f"epsilon must be finite and >= 0, got {epsilon!r}")
        if dl.is_infinite() or dl < 0 or dl >= 1:
            raise InvalidBudgetError(f"delta must satisfy 0 <= delta < 1, got {delta!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", dl)

    @classmethod
    def zero(cls) -> Budget:
        """The empty budget (0, 0)."""
        return cls(epsilon=0, delta=0)

    def __add__(self, other: Budget) -> Budget:
        if not isinstance(other, Budget):
            return NotImplemented
        with localcontext(_EXACT):
            return Budget(epsilon=self.epsilon + other.epsilon, delta=self.delta + other.delta)

    def __radd__(self, other: object) -> Budget:
        if other == 0:
            return self
        if isinstance(other, Budget):
            return other + self
        return NotImplemented

    def __sub__(self, other: Budget) -> Budget:
        """Exact difference; raises InvalidBudgetError if it would be negative."""
        if not isinstance(other, Budget):
            return NotImplemented
        with localcontext(_EXACT):
            return Budget(epsilon=self.epsilon - other.epsilon, delta=self.delta - other.delta)

    def __le__(self, other: Budget) -> bool:
        """Componentwise: both epsilon and delta are at most the other's."""
        return self.epsilon <= other.epsilon and self.delta <= other.delta

    def __ge__(self, other: Budget) -> bool:
        return other <= self

    def meet(self, other: Cost) -> Budget:
        """Componentwise minimum.

        Example:
            >>> Budget(epsilon="0.5", delta="1e-6").meet(Budget(epsilon="0.2", delta="1e-5"))
            Budget(epsilon='0.2', delta='0.000001')
        """
        o: Budget = self.same_kind(other)
        return Budget(epsilon=min(self.epsilon, o.epsilon), delta=min(self.delta, o.delta))

    def minus(self, other: Cost) -> Budget | None:
        """The exact difference; None unless ``other <= self``.

        Example:
            >>> Budget(epsilon=1, delta="1e-6").minus(Budget(epsilon="0.25"))
            Budget(epsilon='0.75', delta='0.000001')
        """
        o: Budget = self.same_kind(other)
        return self - o if o <= self else None

    def add_up(self, other: Cost) -> Budget:
        """The exact sum; when it needs more than 200 digits, each value as the next double
        above the float sum (0 kept, tiny values lifted to 1e-90), raised further until it is
        at least the exact sum.

        Example:
            >>> long = Budget(epsilon="0." + "1" * 200)  # + 1 needs 201 digits
            >>> long.add_up(Budget(epsilon=1)).epsilon
            Decimal('1.1111111111111114')
        """
        o: Budget = self.same_kind(other)
        try:
            return self + o
        except (Inexact, InvalidOperation):
            return Budget(
                epsilon=_sum_up(self.epsilon, o.epsilon), delta=_sum_up(self.delta, o.delta)
            )

    def scaled(self, factor: Number) -> Budget:
        """This budget multiplied by a non-negative exact factor (e.g. a fraction of a split)."""
        f = to_decimal(factor, name="factor")
        with localcontext(_FLOOR):  # a share never exceeds the whole; charges are exact anyway
            return Budget(epsilon=self.epsilon * f, delta=self.delta * f)

    @property
    def is_zero(self) -> bool:
        return self.epsilon == 0 and self.delta == 0

    @property
    def is_pure(self) -> bool:
        """True for pure (epsilon, 0)-DP."""
        return self.delta == 0

    def as_floats(self) -> tuple[float, float]:
        """(epsilon, delta) as floats, for display and for formulas that need floats."""
        return float(self.epsilon), float(self.delta)

    def to_json(self) -> dict[str, str]:
        """The budget as exact decimal strings, in one canonical form per value.

        Equal budgets give equal JSON (``0.0`` and ``0`` are both ``"0"``, ``0.50`` is ``"0.5"``),
        so a stored answer and a fresh one, or two spellings of one request, never differ.
        """
        return {"epsilon": canonical_decimal(self.epsilon), "delta": canonical_decimal(self.delta)}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> Budget:
        return cls(epsilon=Decimal(data["epsilon"]), delta=Decimal(data["delta"]))

    def __str__(self) -> str:
        return f"(ε={_fmt(self.epsilon)}, δ={_fmt(self.delta)})"

    def __repr__(self) -> str:
        return f"Budget(epsilon={str(self.epsilon)!r}, delta={str(self.delta)!r})"


@dataclass(frozen=True, init=False)
class RdpCurve(Cost):
    """A Rényi-DP curve epsilon(alpha) on the fixed grid :data:`ALPHAS`.

    Values are non-negative decimals; ``inf`` marks an order at which the mechanism gives no
    guarantee. Addition is exact and per order (RDP composes additively at each order).

    Args:
        epsilons: one value per order of :data:`ALPHAS`, in that order.

    Raises:
        InvalidBudgetError: on the wrong length, NaN, or a negative value.
    """

    kind: ClassVar[str] = "rdp"

    epsilons: tuple[Decimal, ...]

    def __init__(self, epsilons: Iterable[Number]) -> None:
        values = tuple(to_decimal(v, name="RDP epsilon") for v in epsilons)
        if len(values) != len(ALPHAS):
            raise InvalidBudgetError(
                f"an RDP curve needs one value per order {ALPHAS}, got {len(values)} values"
            )
        for alpha, v in zip(ALPHAS, values, strict=True):
            if v < 0:
                raise InvalidBudgetError(f"RDP epsilon at alpha={alpha} must be >= 0, got {v}")
        object.__setattr__(self, "epsilons", values)

    @classmethod
    def zero(cls) -> RdpCurve:
        return cls([0] * len(ALPHAS))

    @classmethod
    def from_function(cls, fn: Callable[[float], float]) -> RdpCurve:
        """Evaluate a float formula at every order, rounding each value up (see bump_up)."""
        out: list[Number] = []
        for alpha in ALPHAS:
            value = float(fn(alpha))
            if math.isnan(value):
                raise InvalidBudgetError(f"RDP formula gave NaN at alpha={alpha}")
            out.append(_clamp_up(bump_up(value)))
        return cls(out)

    @classmethod
    def gaussian(cls, *, sigma: float, sensitivity: float = 1.0) -> RdpCurve:
        """Gaussian mechanism with noise std ``sigma`` and L2 sensitivity: alpha·Δ²/(2σ²)
        (Mironov 2017, Prop. 7)."""
        sigma, sensitivity = plain_number(sigma), plain_number(sensitivity)  # float32: float64
        if not (sigma > 0 and math.isfinite(sigma)):
            raise InvalidBudgetError(f"sigma must be finite and > 0, got {sigma!r}")
        if not (sensitivity >= 0 and math.isfinite(sensitivity)):
            raise InvalidBudgetError(f"sensitivity must be finite and >= 0, got {sensitivity!r}")
        if sensitivity == 0:
            return cls.zero()
        ratio = sensitivity / sigma  # avoids overflow of σ² for tiny charges
        if ratio < _TINY_RATIO:
            # α·ratio²/2 < 1e-198, under the smallest stored magnitude; in floats ratio² would
            # underflow to 0 (σ/Δ > ~1e162) and make the charge free. Price it exactly, rounded
            # up, and clamp up to MIN_MAGNITUDE.
            with localcontext(_PRICE):
                r = shortest_decimal(sensitivity) / shortest_decimal(sigma)
                return cls(_clamp_decimal_up(Decimal(repr(a)) * r * r / 2) for a in ALPHAS)
        return cls.from_function(lambda a: a * ratio * ratio / 2.0)

    @classmethod
    def laplace(cls, *, scale: float, sensitivity: float = 1.0) -> RdpCurve:
        """Laplace mechanism with scale b and L1 sensitivity Δ, exact RDP (Mironov 2017, Prop. 6):
        1/(α−1)·log(α/(2α−1)·e^{(α−1)/λ} + (α−1)/(2α−1)·e^{−α/λ}) with λ = b/Δ.

        Evaluated in log space, t + log(α/(2α−1) + (α−1)/(2α−1)·e^{−(2α−1)t})/(α−1) with
        t = Δ/b, so no exponential overflows however large t is; each order is capped at the
        pure-DP bound t (RDP of an ε-DP mechanism is at most ε at every order).

        Never below the exact curve at any scale: t is the larger of the quotients of the
        doubles' binary values and of their shortest decimals, rounded up; float values are
        bumped up (:meth:`from_function`); below t = 1e-40 the pure-DP bound min(t, α·t²/2)
        is priced in decimal, rounded up (the exact curve is α·t²/2·(1 − t/3 + O(t²))).

        Raises:
            InvalidBudgetError: for a non-positive or non-finite scale, a negative or non-finite
                sensitivity, or a price that cannot be computed.
        """
        scale, sensitivity = plain_number(scale), plain_number(sensitivity)
        if not (scale > 0 and math.isfinite(scale)):
            raise InvalidBudgetError(f"scale must be finite and > 0, got {scale!r}")
        if not (sensitivity >= 0 and math.isfinite(sensitivity)):
            raise InvalidBudgetError(f"sensitivity must be finite and >= 0, got {sensitivity!r}")
        if sensitivity == 0:
            return cls.zero()
        try:
            # 1/λ, the pure-DP ε, rounded up: the larger of Δ/b read from the exact binary
            # values of the doubles (what the mechanism draws with; a shortest decimal can be
            # below them) and from their shortest decimals (what the caller wrote: the binary
            # quotient can be half an ulp below it, and the tiny-t branch's α·t²/2, which has
            # no float margin, was then up to an ulp below the exact curve, e.g. 6e-17
            # relative at scale=1e40). The curve increases with t, so it is never below the
            # exact one under either reading.
            with localcontext(_PRICE):
                t = max(
                    Decimal(float(sensitivity)) / Decimal(float(scale)),
                    Decimal(repr(float(sensitivity))) / Decimal(repr(float(scale))),
                )
            if t.adjusted() < -40:
                # Below ~1e-40 the exact curve needs hundreds of digits; pure DP's bound
                # min(ε, α·ε²/2) (Bun & Steinke 2016, Prop. 1.4) is an upper bound on it. An ε
                # under the smallest stored magnitude is priced as that magnitude (never as 0).
                return cls.from_pure_dp(max(t, MIN_MAGNITUDE))
            curve = cls.from_function(lambda a: _laplace_rdp(a, t))
            bound = _clamp_decimal_up(t)
            return cls(min(v, bound) for v in curve.epsilons)
        except DecimalException as exc:
            raise InvalidBudgetError(
                f"the Laplace RDP price of scale={scale!r}, sensitivity={sensitivity!r} "
                "cannot be computed"
            ) from exc

    @classmethod
    def from_pure_dp(cls, epsilon: Number) -> RdpCurve:
        """A curve valid for *any* (ε, 0)-DP mechanism: min(ε, α·ε²/2) — pure DP implies
        ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4) and RDP(α) <= ε at every order.

        α·ε²/2 is rounded up, and a positive value under :data:`MIN_MAGNITUDE` (ε below ~1e-50)
        is clamped up to it, so a positive ε never gives a free curve."""
        return cls._pure(epsilon, 2)

    @classmethod
    def bounded_range(cls, epsilon: Number) -> RdpCurve:
        """A curve valid for an ε-bounded-range mechanism (the exponential mechanism, one peel
        of a Gumbel top-k): min(ε, α·ε²/8) — ε-BR implies ε²/8-zCDP (Cesar & Rogers,
        "Bounding, Concentrating, and Truncating: Unifying Privacy Loss Composition for Data
        Analytics", ALT 2021, Lemma 3.2) and ε-DP, so RDP(α) <= ε at every order.

        Rounded as :meth:`from_pure_dp`.

        Example:
            >>> RdpCurve.bounded_range(1).epsilons[0] * 4 == RdpCurve.from_pure_dp(1).epsilons[0]
            True
        """
        return cls._pure(epsilon, 8)

    @classmethod
    def _pure(cls, epsilon: Number, divisor: int) -> RdpCurve:
        """min(ε, α·ε²/divisor) per order, rounded up (see :meth:`from_pure_dp`)."""
        eps = to_decimal(epsilon, name="epsilon")
        if eps < 0 or eps.is_infinite():
            raise InvalidBudgetError(f"epsilon must be finite and >= 0, got {epsilon!r}")
        with localcontext(_PRICE):
            return cls(
                [
                    min(eps, _clamp_decimal_up(Decimal(repr(a)) * eps * eps / divisor))
                    for a in ALPHAS
                ]
            )

    def __add__(self, other: RdpCurve) -> RdpCurve:
        if not isinstance(other, RdpCurve):
            return NotImplemented
        with localcontext(_EXACT):
            return RdpCurve(a + b for a, b in zip(self.epsilons, other.epsilons, strict=True))

    def __radd__(self, other: object) -> RdpCurve:
        if other == 0:
            return self
        if isinstance(other, RdpCurve):
            return other + self
        return NotImplemented

    def __le__(self, other: RdpCurve) -> bool:
        """Every order at most the other's."""
        return all(a <= b for a, b in zip(self.epsilons, other.epsilons, strict=True))

    def meet(self, other: Cost) -> RdpCurve:
        """The minimum at every order.

        Example:
            >>> RdpCurve([1] * 6 + [3] * 6).meet(RdpCurve([2] * 12)).epsilons[::6]
            (Decimal('1'), Decimal('2'))
        """
        o: RdpCurve = self.same_kind(other)
        return RdpCurve(min(a, b) for a, b in zip(self.epsilons, o.epsilons, strict=True))

    def minus(self, other: Cost) -> RdpCurve | None:
        """The difference at every order, as the double just below the float difference and
        never above the exact one; an order where ``other`` exceeds ``self`` (or where less
        than 1e-90 is left) keeps 0, since RDP's fit test needs only some order; None when
        ``other`` exceeds ``self`` at every order.

        Example:
            >>> RdpCurve([1] * 12).minus(RdpCurve([2] * 12)) is None
            True
        """
        o: RdpCurve = self.same_kind(other)
        if all(b > a for a, b in zip(self.epsilons, o.epsilons, strict=True)):
            return None
        return RdpCurve(_diff_down(a, b) for a, b in zip(self.epsilons, o.epsilons, strict=True))

    def add_up(self, other: Cost) -> RdpCurve:
        """The exact sum at every order; past 200 digits, rounded up as :meth:`Budget.add_up`."""
        o: RdpCurve = self.same_kind(other)
        try:
            return self + o
        except (Inexact, InvalidOperation):
            return RdpCurve(_sum_up(a, b) for a, b in zip(self.epsilons, o.epsilons, strict=True))

    def scaled(self, factor: Number) -> RdpCurve:
        f = to_decimal(factor, name="factor")
        with localcontext(_FLOOR):
            return RdpCurve(v * f for v in self.epsilons)

    @property
    def is_zero(self) -> bool:
        return all(v == 0 for v in self.epsilons)

    def as_floats(self) -> tuple[float, ...]:
        return tuple(float(v) for v in self.epsilons)

    def to_dp(self, *, delta: float) -> Budget:
        """The (ε, δ) guarantee implied by this curve, through dp-accounting's conversion
        (Canonne, Kamath & Steinke 2020), rounded up."""
        return rdp_to_dp(self, delta=delta)

    def to_json(self) -> dict[str, Any]:
        """The curve as exact decimal strings, one canonical form per value (see Budget),
        with the order grid it is on (``alphas``), so a stored curve reads the same whatever
        grid the code runs on later.

        Example:
            >>> doc = RdpCurve.from_pure_dp(1).to_json()
            >>> doc["v"], doc["kind"], doc["alphas"][:3], len(doc["rdp"]) == len(ALPHAS)
            (2, 'rdp', ['1.5', '1.75', '2'], True)
        """
        return {
            "v": 2,
            "kind": "rdp",
            "alphas": [canonical_decimal(Decimal(repr(a))) for a in ALPHAS],
            "rdp": [canonical_decimal(v) for v in self.epsilons],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RdpCurve:
        """Read a stored curve: version 2 names its grid, version 1 (``{"rdp": [...]}``) was
        written on :data:`ALPHAS_V1`.

        Raises:
            InvalidBudgetError: the curve is on another grid than :data:`ALPHAS` (it is never
                re-indexed silently), or a value is malformed.

        Example:
            >>> RdpCurve.from_json({"rdp": ["0"] * 12}) == RdpCurve.zero()
            True
            >>> RdpCurve.from_json({"v": 2, "kind": "rdp", "alphas": ["2"], "rdp": ["0"]})
            ... # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            blockbudget.errors.InvalidBudgetError: an RDP curve stored on the order grid [2] ...
        """
        grid = data.get("alphas")
        stored = ALPHAS_V1 if grid is None else tuple(Decimal(str(a)) for a in grid)
        if stored != _ALPHAS_EXACT:
            raise InvalidBudgetError(
                f"an RDP curve stored on the order grid [{', '.join(_grid_text(stored))}] cannot "
                f"be read on the grid [{', '.join(_grid_text(_ALPHAS_EXACT))}]"
            )
        return cls(Decimal(v) for v in data["rdp"])

    def __str__(self) -> str:
        inner = ", ".join(f"{a:g}:{_fmt(v)}" for a, v in zip(ALPHAS, self.epsilons, strict=True))
        return f"RDP[{inner}]"


def _laplace_rdp(alpha: float, t: Decimal) -> float:
    """Laplace RDP at order ``alpha`` for Δ/b = ``t``, in log space (see RdpCurve.laplace).

    High precision: the float log-sum-exp loses all precision when t is tiny (its log argument
    is 1 + O(t²)), so twice the digits that costs are carried. The caller bumps the result up.
    """
    # An explicit context: the caller's (which may trap Inexact, say) must not matter.
    with localcontext(Context(prec=60 + 2 * max(0, -t.adjusted()), traps=[InvalidOperation])):
        al = shortest_decimal(alpha)
        # e^{−(2α−1)t} may underflow to 0 for a huge t; the term it drops is far below the
        # relative bump the caller applies.
        tail = (al - 1) / (2 * al - 1) * (-(2 * al - 1) * t).exp()
        value = t + (al / (2 * al - 1) + tail).ln() / (al - 1)
        return float(min(value, t))


def cost_from_json(data: dict[str, Any]) -> Cost:
    """Inverse of ``to_json`` for every registered cost kind and every version it wrote.

    Raises:
        InvalidBudgetError: an unknown kind, or a form its kind refuses (e.g. an RDP curve
            stored on another order grid).
    """
    return Cost.read_kind(data).from_json(data)


def rdp_to_dp(curve: RdpCurve, *, delta: float) -> Budget:
    """Convert an RDP curve to (ε, δ)-DP with dp-accounting's ``compute_epsilon``.

    Raises:
        InvalidBudgetError: if delta is not in (0, 1).
    """
    if not (0 < delta < 1):
        raise InvalidBudgetError(f"conversion needs 0 < delta < 1, got {delta!r}")
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    finite = [(a, float(v)) for a, v in zip(ALPHAS, curve.epsilons, strict=True) if v.is_finite()]
    if not finite:
        raise InvalidBudgetError("the RDP curve is infinite at every order")
    eps, _ = rdp.compute_epsilon([a for a, _ in finite], [v for _, v in finite], delta)
    if math.isinf(eps):
        raise InvalidBudgetError("the RDP curve gives no finite epsilon at this delta")
    return Budget(epsilon=bump_up(float(eps)), delta=delta)


def sum_costs(costs: Sequence[Cost]) -> Cost:
    """Exact sum of costs of one kind."""
    if not costs:
        raise InvalidBudgetError("cannot sum an empty list of costs")
    total: Cost = costs[0]
    for c in costs[1:]:
        if type(c) is not type(total):
            raise InvalidBudgetError("cannot add an (ε, δ) budget and an RDP curve")
        total = total + c
    return total

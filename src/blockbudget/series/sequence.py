"""Budget sequences: ε split into ε_1, ε_2, … with every prefix sum at most ε.

Seed 003 (seed ``003_a7fa9cb9080a05af.txt``) §4.1, Eq. 5 and Theorem 4: if a
positive series Σ p_i converges to c, the terms ε_i = (p_i / c)·ε of any prefix sum to at most
ε, so n sequentially composed ε_i-DP mechanisms are ε-DP for every n — an infinite series can
serve an unbounded number of queries (a stream slot each, forever).

Two value types implement :class:`BudgetSequence`:

* :class:`FiniteBudgetSequence` — n explicit terms (average, calibrated, flipped, compounded,
  protected sequences);
* :class:`InfiniteBudgetSequence` — ε times a convergent :class:`ProportionSeries`
  (:class:`GeometricSeries`, Eq. 6–7; :class:`TaylorSeries`, Eq. 11–12;
  :class:`InverseSquareSeries`, p_i = 1/i² in Theorem 4), computed term by term.

Exactness (the guarantee every caller relies on). Terms are :class:`~decimal.Decimal` multiples
of 10**-18 (the ledger's unit), rounded **down**. For an infinite series the proportion k_i is a
rigorous *lower* bound of the i-th term of a series whose infinite sum is at most 1 (see each
series), so for every n, Σ_{i≤n} term(i) ≤ ε·Σ k_i ≤ ε — exactly, in decimal, as the ledger adds
them. A consequence of the finite grid: the terms of an infinite series are eventually 0 (once
ε·k_i < 10**-18); :meth:`InfiniteBudgetSequence.positive_length` says how many are positive.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

from blockbudget.budget import Budget, Number, to_decimal
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidBudgetError, InvalidRequestError
from blockbudget.series._exact import CEIL, FLOOR, GRID, exact_sum, grid_floor

#: Digits kept of a series parameter (r, t): the parameter actually used is this decimal.
PARAMETER_DIGITS = 40


def check_epsilon(epsilon: Number) -> Decimal:
    """The total budget ε as an exact decimal, checked to be finite and > 0.

    Raises:
        InvalidBudgetError: if ε is not a finite positive number.
    """
    eps = to_decimal(epsilon, name="epsilon")
    if eps.is_infinite() or eps <= 0:
        raise InvalidBudgetError(f"epsilon must be finite and > 0, got {epsilon!r}")
    return eps


def check_count(n: int, *, name: str = "n", minimum: int = 1) -> int:
    """A number of terms, checked to be an int ≥ ``minimum``.

    Raises:
        InvalidRequestError: otherwise.
    """
    n = plain_number(n)
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidRequestError(f"{name} must be an integer, got {n!r}")
    if n < minimum:
        raise InvalidRequestError(f"{name} must be >= {minimum}, got {n}")
    return n


def check_index(i: int) -> int:
    """A 1-based term index.

    Raises:
        InvalidRequestError: if ``i`` is not an integer ≥ 1.
    """
    return check_count(i, name="term index i (1-based)")


def parameter(value: Number, *, name: str) -> Decimal:
    """A series parameter (r, t) as a decimal: any finite number, floats read exactly as their
    shortest round-trip decimal. Unlike budgets it may be tiny (t = e^{−400} is legitimate).

    Raises:
        InvalidBudgetError: for booleans, NaN, infinities or non-numbers.
    """
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise InvalidBudgetError(f"{name} must be a number, got {value!r}")
    try:
        dec = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as exc:
        raise InvalidBudgetError(f"{name} must be a number, got {value!r}") from exc
    if not dec.is_finite():
        raise InvalidBudgetError(f"{name} must be finite, got {value!r}")
    return dec


def _round_digits(value: Decimal) -> Decimal:
    """``value`` rounded down to :data:`PARAMETER_DIGITS` significant digits."""
    if value == 0:
        return value
    exponent = value.adjusted() - PARAMETER_DIGITS + 1
    return value.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_FLOOR, context=FLOOR)


class BudgetSequence(ABC):
    """A budget split ε_1, ε_2, … (1-based) whose every prefix sums to at most ``epsilon``.

    Attributes:
        epsilon: the total budget ε the sequence splits.
        name: a short label (``"Flip-Geo"``, ``"AC-bl-Ty"``...) used in tables and charge labels.
    """

    epsilon: Decimal
    name: str

    @property
    @abstractmethod
    def is_infinite(self) -> bool:
        """Whether the sequence has a term for every i ≥ 1."""

    @property
    @abstractmethod
    def length(self) -> int | None:
        """The number of terms n, or None for an infinite sequence."""

    @property
    @abstractmethod
    def total(self) -> Decimal:
        """An upper bound (≤ ε) of the sum of all terms: the exact sum for a finite sequence."""

    @abstractmethod
    def term(self, i: int) -> Decimal:
        """The budget ε_i of the i-th query (1-based): a multiple of 10**-18, ≥ 0.

        Raises:
            InvalidRequestError: if ``i`` < 1 or beyond a finite sequence.
        """

    def prefix(self, n: int) -> tuple[Decimal, ...]:
        """The first ``n`` terms (n ≤ length for a finite sequence); they sum to at most ε.

        Raises:
            InvalidRequestError: if ``n`` < 0 or beyond a finite sequence.
        """
        n = check_count(n, name="n", minimum=0)
        if self.length is not None and n > self.length:
            raise InvalidRequestError(f"n must be <= the sequence length {self.length}, got {n}")
        return tuple(self.term(i) for i in range(1, n + 1))

    def budget(self, i: int) -> Budget:
        """The i-th term as a pure-DP :class:`~blockbudget.budget.Budget`."""
        return Budget(epsilon=self.term(i))

    def __iter__(self) -> Iterator[Decimal]:
        """The terms in order (forever for an infinite sequence)."""
        i = 1
        while self.length is None or i <= self.length:
            yield self.term(i)
            i += 1


@dataclass(frozen=True)
class FiniteBudgetSequence(BudgetSequence):
    """n explicit budget terms on the 10**-18 grid whose exact sum is at most ε.

    Args:
        epsilon: the total budget ε (finite, > 0).
        terms: the budgets ε_1 … ε_n (each ≥ 0 and a multiple of 10**-18).
        name: a label for tables and charge labels.

    Raises:
        InvalidBudgetError: if a term is negative, off the grid, or the terms sum to more than ε.
        InvalidRequestError: if there are no terms.
    """

    epsilon: Decimal
    terms: tuple[Decimal, ...]
    name: str = "sequence"

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon)
        object.__setattr__(self, "epsilon", eps)
        if len(self.terms) == 0:
            raise InvalidRequestError("a budget sequence needs at least one term")
        terms = tuple(to_decimal(t, name="term") for t in self.terms)
        for i, t in enumerate(terms, start=1):
            if t.is_infinite() or t < 0:
                raise InvalidBudgetError(f"term {i} must be finite and >= 0, got {t}")
            if t != grid_floor(t):
                raise InvalidBudgetError(f"term {i} must be a multiple of {GRID}, got {t}")
        object.__setattr__(self, "terms", terms)
        total = exact_sum(terms)
        if total > eps:
            raise InvalidBudgetError(f"the terms sum to {total}, more than epsilon = {eps}")

    @property
    def is_infinite(self) -> bool:
        return False

    @property
    def length(self) -> int:
        return len(self.terms)

    @property
    def total(self) -> Decimal:
        """The exact sum of the terms (≤ ε)."""
        return exact_sum(self.terms)

    @property
    def minimum(self) -> Decimal:
        """The smallest term ε_min."""
        return min(self.terms)

    def term(self, i: int) -> Decimal:
        check_index(i)
        if i > len(self.terms):
            raise InvalidRequestError(f"term index must be <= {len(self.terms)}, got {i}")
        return self.terms[i - 1]

    def prefix(self, n: int) -> tuple[Decimal, ...]:
        n = check_count(n, name="n", minimum=0)
        if n > len(self.terms):
            raise InvalidRequestError(
                f"n must be <= the sequence length {len(self.terms)}, got {n}"
            )
        return self.terms[:n]

    def floats(self) -> list[float]:
        """The terms as floats (for plotting and noise sampling; the decimals stay the truth)."""
        return [float(t) for t in self.terms]

    def renamed(self, name: str) -> FiniteBudgetSequence:
        """The same terms under another label."""
        return FiniteBudgetSequence(epsilon=self.epsilon, terms=self.terms, name=name)


class ProportionSeries(ABC):
    """A convergent positive series k_1, k_2, … with Σ k_i ≤ 1 (seed 003 §4.1, Eq. 5).

    :meth:`proportion` returns a rigorous lower bound of k_i, computed with every rounding
    toward −∞, so that any prefix of the returned values also sums to at most 1.
    """

    @abstractmethod
    def proportion(self, i: int) -> Decimal:
        """A lower bound of k_i (1-based)."""

    @abstractmethod
    def label(self) -> str:
        """A short name ("Geo", "Ty")."""


@dataclass(frozen=True)
class GeometricSeries(ProportionSeries):
    """k_i = (1 − r)·r^{i−1}, 0 < r < 1, which sums to exactly 1 (seed 003 §4.2, Eq. 6–7).

    The ratio is kept as a decimal of at most :data:`PARAMETER_DIGITS` digits (rounded down);
    Σ (1 − r)r^{i−1} = 1 holds exactly for that decimal r. r^{i−1} is computed by squaring with
    every product rounded down, so each k_i returned is ≤ the exact term.

    Args:
        ratio: r in (0, 1). Bisection is r = 1/2; Cormode et al.'s allocation is r = 2^{−1/3}.

    Raises:
        InvalidBudgetError: if r is not in (0, 1).
    """

    ratio: Decimal

    def __post_init__(self) -> None:
        r = parameter(self.ratio, name="ratio r")
        if not (0 < r < 1):
            raise InvalidBudgetError(f"the geometric ratio r must satisfy 0 < r < 1, got {r}")
        r = _round_digits(r)
        if r <= 0:
            raise InvalidBudgetError(f"the geometric ratio r is too small, got {self.ratio!r}")
        object.__setattr__(self, "ratio", r)

    def proportion(self, i: int) -> Decimal:
        check_index(i)
        power = Decimal(1)
        base = self.ratio
        e = i - 1
        while e:
            if e & 1:
                power = FLOOR.multiply(power, base)
            e >>= 1
            if e:
                base = FLOOR.multiply(base, base)
        return FLOOR.multiply(FLOOR.subtract(Decimal(1), self.ratio), power)

    def label(self) -> str:
        return "Geo"


@dataclass(frozen=True)
class TaylorSeries(ProportionSeries):
    """k_i = t·(ln 1/t)^{i−1} / (i−1)!, 0 < t < 1 (seed 003 §4.3, Eq. 11–12).

    The exact series sums to t·e^{ln(1/t)} = 1. We use L ≤ ln(1/t) (a correctly rounded
    logarithm lowered by one unit in its last place) and the recurrence
    k_{i+1} = k_i·L / i with every operation rounded down, so the values returned are lower
    bounds of the terms of t·e^{L} ≤ 1. Terms are cached (the recurrence is sequential).

    Args:
        initial: t = k_1 in (0, 1).

    Raises:
        InvalidBudgetError: if t is not in (0, 1).
    """

    initial: Decimal
    _log_inverse: Decimal = field(init=False, repr=False, compare=False)
    _cache: list[Decimal] = field(init=False, repr=False, compare=False)
    _lock: threading.Lock = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        t = parameter(self.initial, name="initial term t")
        if not (0 < t < 1):
            raise InvalidBudgetError(f"the Taylor initial term t must satisfy 0 < t < 1, got {t}")
        t = _round_digits(t)
        object.__setattr__(self, "initial", t)
        exact_ln = FLOOR.divide(Decimal(1), t).ln(context=FLOOR)  # ±½ ulp (half-even)
        ulp = Decimal(1).scaleb(exact_ln.adjusted() - FLOOR.prec + 1)
        object.__setattr__(self, "_log_inverse", FLOOR.subtract(exact_ln, ulp))
        object.__setattr__(self, "_cache", [t])
        object.__setattr__(self, "_lock", threading.Lock())

    @property
    def log_inverse(self) -> Decimal:
        """The value L ≤ ln(1/t) the terms are computed with."""
        return self._log_inverse

    def proportion(self, i: int) -> Decimal:
        check_index(i)
        with self._lock:
            cache = self._cache
            while len(cache) < i:
                j = len(cache)  # cache[j-1] = k_j; k_{j+1} = k_j·L / j
                cache.append(FLOOR.divide(FLOOR.multiply(cache[-1], self._log_inverse), j))
            return cache[i - 1]

    def label(self) -> str:
        return "Ty"


#: π truncated to 80 decimals (a lower bound) and that plus 1e-80 (an upper bound).
_PI_LOW = Decimal(
    "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899"
)
_PI_HIGH = CEIL.add(_PI_LOW, Decimal("1e-80"))
_SIX_OVER_PI2 = FLOOR.divide(Decimal(6), CEIL.multiply(_PI_HIGH, _PI_HIGH))


@dataclass(frozen=True)
class InverseSquareSeries(ProportionSeries):
    """k_i = 6/(π²·i²): Theorem 4 of seed 003 (§4.1, Eq. 5) with p_i = 1/i² and c = π²/6.

    Its terms decay polynomially, not geometrically, so window j of a stream that never ends
    still gets a useful share ε·0.61/j² (the geometric series' share vanishes exponentially).
    π² is bounded from above (π < 3.14159…899 + 10⁻⁸⁰) and every operation rounds down, so each
    k_i returned is ≤ 6/(π²i²) and any prefix sums to at most 1.
    """

    def proportion(self, i: int) -> Decimal:
        check_index(i)
        return FLOOR.divide(_SIX_OVER_PI2, i * i)

    def label(self) -> str:
        return "InvSq"


@dataclass(frozen=True)
class InfiniteBudgetSequence(BudgetSequence):
    """ε_i = ε·k_i for every i ≥ 1 (seed 003 Theorem 4): a budget for every query, forever.

    ``term(i)`` is ε·k_i rounded down to the 10**-18 grid, so every prefix sums to at most ε
    (:attr:`total` = ε is the bound). Terms eventually round to 0; see :meth:`positive_length`.

    Args:
        epsilon: the total ε (finite, > 0).
        series: the convergent proportion series.
        name: a label (defaults to the series' label).
    """

    epsilon: Decimal
    series: ProportionSeries
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        if not isinstance(self.series, ProportionSeries):
            raise InvalidRequestError(
                f"series must be a ProportionSeries, got {type(self.series).__name__}"
            )
        if not self.name:
            object.__setattr__(self, "name", self.series.label())

    @property
    def is_infinite(self) -> bool:
        return True

    @property
    def length(self) -> None:
        return None

    @property
    def total(self) -> Decimal:
        """The bound ε of every prefix sum (the series' limit)."""
        return self.epsilon

    def term(self, i: int) -> Decimal:
        return grid_floor(FLOOR.multiply(self.epsilon, self.series.proportion(i)))

    def positive_length(self, *, limit: int = 10_000_000) -> int:
        """The index of the last positive term: every later term is 0 on the grid.

        Both series are unimodal (geometric: decreasing; Taylor: increasing up to its peak at
        i ≈ ln(1/t) + 1, then decreasing), so the first zero term after the peak ends the
        positive terms; 0 if no term is positive. (Raw Taylor terms *before* the peak may also
        be 0 when ε·t < 10**-18.)

        Raises:
            InvalidRequestError: if the last positive term lies beyond ``limit``.
        """
        if isinstance(self.series, GeometricSeries):
            lo, hi = 0, 1
            while self.term(hi) > 0:
                lo, hi = hi, hi * 2
                if hi > 2 * limit:
                    raise InvalidRequestError(f"more than {limit} positive terms")
            while hi - lo > 1:  # term(lo) > 0 (or lo = 0), term(hi) == 0
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if self.term(mid) > 0 else (lo, mid)
            return lo
        peak = 1
        if isinstance(self.series, TaylorSeries):
            peak = int(self.series.log_inverse) + 1
        if self.term(peak) == 0:
            return 0
        i = peak
        while self.term(i) > 0:
            i += 1
            if i > limit:
                raise InvalidRequestError(f"more than {limit} positive terms")
        return i - 1

    def first(self, n: int, *, name: str | None = None) -> FiniteBudgetSequence:
        """The first n terms as a finite sequence (not calibrated: they sum to less than ε)."""
        n = check_count(n)
        return FiniteBudgetSequence(
            epsilon=self.epsilon, terms=self.prefix(n), name=name or self.name
        )
